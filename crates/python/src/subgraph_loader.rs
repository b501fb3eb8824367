//! The subgraph loaders' Rust half: [`Clusters`] (PyG's `ClusterData`: METIS clusters of a
//! dataset, kept beside it and reused) and [`subgraph_loader`], a [`Loader`] whose batches
//! ([`SubgraphBatch`]) are the subgraphs that Cluster-GCN's clusters or GraphSAINT's samples
//! induce, each with its input rows, labels, edges over the batch's positions, their ids, and
//! GraphSAINT's normalisation.
//! The batches are drawn as training draws them (`graphloom_graph::subgraph::batching`).

use std::sync::Arc;

use graphloom_graph::subgraph::batching::{BatchDraw, SubgraphBatching};
use graphloom_graph::subgraph::clusters::{self, ClusterOrigin};
use graphloom_graph::subgraph::saint::{check_steps, Saint, SaintNorm, SaintSampler, MAX_COVERAGE};
use graphloom_graph::subgraph::NodeSet;
use graphloom_graph::MappedDataset;
use graphloom_nn::batches::DEFAULT_QUEUE_DEPTH;
use graphloom_tensor::{DType, Tensor};
use pyo3::prelude::*;

use crate::dataset::Dataset;
use crate::epochs::{EpochPlan, Epochs};
use crate::errors::{self, invalid};
use crate::loader::{Batches, IntoBatch, Loader, Made};
use crate::neighbourhood::{gather_rows, i64_tensor, stacked};
use crate::table::{parse_dtype, Shared, Table};
use crate::view::View;
use graphloom_store::DlpackView;

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

    /// The nodes of cluster `cluster`, in increasing order.
    fn members(&self, cluster: usize) -> PyResult<Vec<u32>> {
        if cluster >= self.inner.count() {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "cluster {cluster} of {}",
                self.inner.count()
            )));
        }
        Ok(self.inner.members(cluster).to_vec())
    }
}

/// What every batch of a subgraph loader is made with.
pub(crate) struct SubgraphSource {
    dataset: Arc<MappedDataset>,
    table: Shared,
    batching: SubgraphBatching,
    /// Cluster-GCN: draw the clusters' order anew each epoch (else in cluster order).
    shuffle: bool,
    seed: u64,
    x_dtype: DType,
}

impl SubgraphSource {
    /// Batches per epoch.
    fn batches(&self) -> usize {
        self.batching.batches_per_epoch()
    }

    /// What draws each batch of `epoch`.
    fn draws(&self, seed: u64, epoch: u64) -> Vec<BatchDraw> {
        match self.shuffle {
            true => self.batching.epoch(seed, epoch),
            false => self.batching.epoch_in_order(seed, epoch),
        }
    }

    /// The batch `draw` of `epoch`, its members marked in `set` (one table per epoch's
    /// producer).
    fn build(
        &self,
        set: &mut NodeSet,
        draw: &BatchDraw,
        seed: u64,
        epoch: u64,
    ) -> PyResult<SubgraphData> {
        let data = self.dataset.data();
        let nodes = self
            .batching
            .nodes(data, draw, seed, epoch)
            .map_err(errors::raise)?;
        let sub = set.members(&nodes).induced(data);
        let n_id: Vec<i64> = nodes.iter().map(|&v| i64::from(v)).collect();
        let (mut src, mut dst) = (Vec::new(), Vec::new());
        for p in 0..nodes.len() {
            let (lo, hi) = (sub.csr.row_ptr[p] as usize, sub.csr.row_ptr[p + 1] as usize);
            src.extend(sub.csr.col_idx[lo..hi].iter().map(|&u| i64::from(u)));
            dst.extend(std::iter::repeat_n(p as i64, hi - lo));
        }
        let x = gather_rows(&self.table, self.x_dtype, &n_id, "the subgraph loader")?;
        let (n, e) = (n_id.len(), sub.edge_ids.len());
        let y = crate::neighbourhood::node_y(data, &n_id);
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
        Ok(SubgraphData {
            x,
            y,
            n_id: i64_tensor(n_id, &[n]),
            edge_index: stacked(src, dst),
            e_id: i64_tensor(sub.edge_ids, &[e]),
            norms,
        })
    }
}

impl Batches for SubgraphSource {
    fn count(&self) -> usize {
        self.batches()
    }

    fn plan(self: Arc<Self>, drawn: Option<u64>, number: u64) -> EpochPlan<Made> {
        let (seed, epoch) = match drawn {
            Some(drawn) => (drawn, 0),
            None => (self.seed, number),
        };
        let draws = self.draws(seed, epoch);
        let mut set = NodeSet::new(self.dataset.meta.num_nodes);
        EpochPlan {
            batches: draws.len(),
            make: Box::new(move |_sampler, i| {
                let batch = self.build(&mut set, &draws[i], seed, epoch)?;
                Ok(Box::new(batch) as Made)
            }),
        }
    }
}

/// One subgraph batch, built by the producer.
struct SubgraphData {
    x: Tensor,
    y: Tensor,
    n_id: Tensor,
    edge_index: Tensor,
    e_id: Tensor,
    /// GraphSAINT's normalisation of the batch's nodes and edges, when estimated.
    norms: Option<(Tensor, Tensor)>,
}

impl IntoBatch for SubgraphData {
    fn into_py(self: Box<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let view = |t| View::new(DlpackView::of_tensor(t));
        let b = *self;
        let (node_norm, edge_norm) = match b.norms {
            Some((node, edge)) => (Some(view(node)), Some(view(edge))),
            None => (None, None),
        };
        let batch = SubgraphBatch {
            x: view(b.x),
            y: view(b.y),
            n_id: view(b.n_id),
            edge_index: view(b.edge_index),
            e_id: view(b.e_id),
            node_norm,
            edge_norm,
        };
        Ok(Py::new(py, batch)?.into_any())
    }
}

/// A subgraph batch's arrays, each exported through DLPack.
#[pyclass(module = "graphloom._graphloom", frozen)]
pub(crate) struct SubgraphBatch {
    x: View,
    y: View,
    n_id: View,
    edge_index: View,
    e_id: View,
    node_norm: Option<View>,
    edge_norm: Option<View>,
}

#[pymethods]
impl SubgraphBatch {
    /// Input rows of `n_id`, `[len(n_id), feat_dim]`.
    #[getter]
    fn x(&self) -> View {
        self.x.clone_view()
    }

    /// Labels of `n_id`.
    #[getter]
    fn y(&self) -> View {
        self.y.clone_view()
    }

    /// The batch's nodes, in increasing id order.
    #[getter]
    fn n_id(&self) -> View {
        self.n_id.clone_view()
    }

    /// The induced subgraph's edges over positions in `n_id`, `[2, E]`.
    #[getter]
    fn edge_index(&self) -> View {
        self.edge_index.clone_view()
    }

    /// Each edge's position in the dataset's CSR.
    #[getter]
    fn e_id(&self) -> View {
        self.e_id.clone_view()
    }

    /// GraphSAINT's node normalisation of `n_id`, when estimated.
    #[getter]
    fn node_norm(&self) -> Option<View> {
        self.node_norm.as_ref().map(View::clone_view)
    }

    /// GraphSAINT's edge normalisation of `edge_index`, when estimated.
    #[getter]
    fn edge_norm(&self) -> Option<View> {
        self.edge_norm.as_ref().map(View::clone_view)
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
                    num_steps=1, sample_coverage=0, shuffle=true, seed=0, queue_depth=DEFAULT_QUEUE_DEPTH,
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
    let epochs = Epochs::new(
        "the subgraph loader",
        source.dataset.meta.num_nodes,
        queue_depth,
        0,
    )?;
    Ok(Loader::new(Arc::new(source), epochs))
}

/// An error of GraphSAINT's checks, its settings named as PyG's samplers name them
/// (`saint_budget` is `batch_size`, `batches_per_epoch` is `num_steps`).
fn saint_error(e: graphloom_graph::Error) -> PyErr {
    let spell = |setting: &str| {
        match setting {
            "saint_budget" => "batch_size",
            "batches_per_epoch" => "num_steps",
            other => other,
        }
        .to_string()
    };
    match e {
        graphloom_graph::Error::Argument { name, msg } => invalid(format!(
            "{}: {}",
            spell(name),
            graphloom_plan::render_settings(&msg, &spell)
        )),
        other => errors::raise(other),
    }
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
    if sample_coverage > MAX_COVERAGE {
        return Err(invalid(format!(
            "sample_coverage {sample_coverage}: at most {MAX_COVERAGE}"
        )));
    }
    let data = ds.data();
    let saint = Saint::new(sampler, data).map_err(saint_error)?;
    check_steps(data, num_steps).map_err(saint_error)?;
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
