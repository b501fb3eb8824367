//! The subgraph loaders' Rust half: [`Clusters`] (PyG's `ClusterData`: METIS clusters of a
//! dataset, kept beside it and reused) and [`subgraph_loader`], a [`Loader`] whose batches are
//! the subgraphs that Cluster-GCN's clusters or GraphSAINT's samples induce, each with its input
//! rows, labels, edges over the batch's positions, their ids, and GraphSAINT's normalisation.
//! The batches are drawn as training draws them (`graphloom_nn::minibatch::SubgraphBatching`).

use std::sync::Arc;

use graphloom_graph::subgraph::clusters::{self, ClusterOrigin};
use graphloom_graph::subgraph::saint::{Saint, SaintNorm, SaintSampler, MAX_COVERAGE};
use graphloom_graph::subgraph::NodeSet;
use graphloom_graph::MappedDataset;
use graphloom_nn::minibatch::{BatchDraw, SubgraphBatching};
use graphloom_tensor::{DType, Tensor};
use pyo3::prelude::*;

use crate::dataset::Dataset;
use crate::errors::{self, invalid};
use crate::loader::{gather, i64_tensor, stacked, BatchData, Loader, Source};
use crate::table::{parse_dtype, Shared, Table};

/// The METIS clusters of a dataset (PyG's `ClusterData`).
#[pyclass(module = "graphloom._graphloom", frozen)]
pub(crate) struct Clusters {
    inner: Arc<clusters::Clusters>,
    origin: ClusterOrigin,
}

#[pymethods]
impl Clusters {
    /// `num_parts` METIS clusters of `dataset`: read back from its `clusters/` folder when an
    /// earlier run kept them, else computed and kept there.
    #[new]
    fn new(py: Python<'_>, dataset: &Dataset, num_parts: usize) -> PyResult<Clusters> {
        let ds = dataset.inner.clone();
        let n = ds.meta.num_nodes;
        if num_parts == 0 || num_parts > n {
            return Err(invalid(format!(
                "num_parts {num_parts}: cannot cut {n} nodes into {num_parts} clusters; give \
                 1 to {n}"
            )));
        }
        let (inner, origin) = py
            .detach(|| clusters::metis_clusters(Some(ds.dir()), ds.data(), num_parts))
            .map_err(errors::raise)?;
        Ok(Clusters {
            inner: Arc::new(inner),
            origin,
        })
    }

    /// The number of clusters.
    fn __len__(&self) -> usize {
        self.inner.count()
    }

    /// Where the clusters came from, in words.
    #[getter]
    fn origin(&self) -> String {
        self.origin.to_string()
    }

    /// The nodes of cluster `c`, in increasing order.
    fn members(&self, c: usize) -> PyResult<Vec<u32>> {
        if c >= self.inner.count() {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "cluster {c} of {}",
                self.inner.count()
            )));
        }
        Ok(self.inner.members(c).to_vec())
    }
}

/// What every batch of a subgraph loader is made with.
pub(crate) struct SubgraphSource {
    dataset: Arc<MappedDataset>,
    table: Shared,
    batching: SubgraphBatching,
    /// Cluster-GCN: draw the clusters' order anew each epoch (else in cluster order).
    shuffle: bool,
    pub(crate) seed: u64,
    x_dtype: DType,
}

impl SubgraphSource {
    /// Batches per epoch.
    pub(crate) fn batches(&self) -> usize {
        match &self.batching {
            SubgraphBatching::Cluster {
                clusters,
                per_batch,
            } => clusters.count().div_ceil(*per_batch),
            SubgraphBatching::Saint { steps, .. } => *steps,
        }
    }

    /// What draws each batch of `epoch`.
    pub(crate) fn draws(&self, seed: u64, epoch: u64) -> Vec<BatchDraw> {
        match &self.batching {
            SubgraphBatching::Cluster {
                clusters,
                per_batch,
            } if !self.shuffle => (0..clusters.count())
                .collect::<Vec<_>>()
                .chunks(*per_batch)
                .map(|g| BatchDraw::Clusters(g.to_vec()))
                .collect(),
            batching => batching.epoch(seed, epoch),
        }
    }

    /// A node table for one epoch's producer.
    pub(crate) fn node_set(&self) -> NodeSet {
        NodeSet::new(self.dataset.meta.num_nodes)
    }

    /// The batch `draw` of `epoch`.
    pub(crate) fn build(
        &self,
        set: &mut NodeSet,
        draw: &BatchDraw,
        seed: u64,
        epoch: u64,
    ) -> PyResult<BatchData> {
        let data = self.dataset.data();
        let nodes = self.batching.nodes(data, draw, seed, epoch);
        let sub = set.members(&nodes).induced(data);
        let n_id: Vec<i64> = nodes.iter().map(|&v| i64::from(v)).collect();
        let (mut src, mut dst) = (Vec::new(), Vec::new());
        for p in 0..nodes.len() {
            let (lo, hi) = (sub.csr.row_ptr[p] as usize, sub.csr.row_ptr[p + 1] as usize);
            src.extend(sub.csr.col_idx[lo..hi].iter().map(|&u| i64::from(u)));
            dst.extend(std::iter::repeat_n(p as i64, hi - lo));
        }
        let x = gather(&self.table, self.x_dtype, &n_id, "the subgraph loader")?;
        let (n, e) = (n_id.len(), sub.edge_ids.len());
        let y = n_id.iter().map(|&v| data.labels[v as usize]).collect();
        let norms = self.batching.norm().map(|norm| {
            let node: Vec<f32> = nodes.iter().map(|&v| norm.node_norm(v) as f32).collect();
            let edge: Vec<f32> = sub
                .edge_ids
                .iter()
                .zip(&dst)
                .map(|(&id, &p)| norm.edge_norm(id as usize, nodes[p as usize]) as f32)
                .collect();
            (f32_tensor(node), f32_tensor(edge))
        });
        let mut batch = BatchData::subgraph(
            x,
            i64_tensor(y, &[n]),
            i64_tensor(n_id, &[n]),
            stacked(src, dst),
            i64_tensor(sub.edge_ids, &[e]),
        );
        batch.norms = norms;
        Ok(batch)
    }
}

fn f32_tensor(values: Vec<f32>) -> Tensor {
    let n = values.len();
    Tensor::from_vec(values, &[n]).expect("length matches")
}

/// A loader of subgraph batches over `dataset`, input rows from `table`: with `clusters`,
/// Cluster-GCN's (`batch_size` clusters per batch, shuffled or in order); else GraphSAINT's
/// `kind` sampler (`node`, `edge` or `walk`: `batch_size` draws or roots, walks of
/// `walk_length`), `num_steps` batches per epoch, normalised from `sample_coverage` rounds
/// drawn ahead (0: not normalised).
#[pyfunction]
#[pyo3(signature = (dataset, table, batch_size, clusters=None, kind="walk", walk_length=0,
                    num_steps=1, sample_coverage=0, shuffle=true, seed=0, queue_depth=4,
                    x_dtype="f32"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn subgraph_loader(
    py: Python<'_>,
    dataset: &Dataset,
    table: &Table,
    batch_size: usize,
    clusters: Option<&Clusters>,
    kind: &str,
    walk_length: usize,
    num_steps: usize,
    sample_coverage: usize,
    shuffle: bool,
    seed: u64,
    queue_depth: usize,
    x_dtype: &str,
) -> PyResult<Loader> {
    let ds = dataset.inner.clone();
    if batch_size == 0 {
        return Err(invalid("batch_size must be positive"));
    }
    {
        let guard = table.open("the subgraph loader")?;
        let rows = guard.as_ref().expect("open checked").table().rows();
        if rows != ds.meta.num_nodes {
            return Err(invalid(format!(
                "the feature table has {rows} rows; the dataset has {} nodes",
                ds.meta.num_nodes
            )));
        }
    }
    let x_dtype = parse_dtype(x_dtype)?;
    let batching = match clusters {
        Some(c) => {
            if batch_size > c.inner.count() {
                return Err(invalid(format!(
                    "batch_size {batch_size}: more than the {} clusters",
                    c.inner.count()
                )));
            }
            SubgraphBatching::Cluster {
                clusters: c.inner.clone(),
                per_batch: batch_size,
            }
        }
        None => saint(
            py,
            &ds,
            kind,
            batch_size,
            walk_length,
            num_steps,
            sample_coverage,
            seed,
        )?,
    };
    let source = SubgraphSource {
        dataset: ds,
        table: table.shared.clone(),
        batching,
        shuffle,
        seed,
        x_dtype,
    };
    Loader::of(Source::Subgraphs(Arc::new(source)), queue_depth)
}

/// GraphSAINT's batching of `kind` over `ds`, its normalisation estimated now.
#[allow(clippy::too_many_arguments)]
fn saint(
    py: Python<'_>,
    ds: &MappedDataset,
    kind: &str,
    budget: usize,
    walk_length: usize,
    num_steps: usize,
    sample_coverage: usize,
    seed: u64,
) -> PyResult<SubgraphBatching> {
    let sampler = match kind {
        "node" => SaintSampler::Node { budget },
        "edge" => SaintSampler::Edge { budget },
        "walk" if walk_length == 0 => return Err(invalid("walk_length must be positive")),
        "walk" => SaintSampler::RandomWalk {
            roots: budget,
            length: walk_length,
        },
        other => return Err(invalid(format!("sampler {other:?}: node, edge or walk"))),
    };
    if num_steps == 0 {
        return Err(invalid("num_steps must be positive"));
    }
    if sample_coverage > MAX_COVERAGE {
        return Err(invalid(format!(
            "sample_coverage {sample_coverage}: at most {MAX_COVERAGE}"
        )));
    }
    let data = ds.data();
    let saint = Saint::new(sampler, data).map_err(errors::raise)?;
    let norm = match sample_coverage {
        0 => None,
        c => Some(Arc::new(
            py.detach(|| SaintNorm::estimate(&saint, data, c, num_steps, seed))
                .map_err(errors::raise)?,
        )),
    };
    Ok(SubgraphBatching::Saint {
        saint: Arc::new(saint),
        norm,
        steps: num_steps,
    })
}
