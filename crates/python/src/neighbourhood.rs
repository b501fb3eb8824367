//! A sampled neighbourhood as PyG and DGL read it, shared by the node and link loaders:
//! [`Source`] (the dataset, the table the input rows come from, the fanouts) samples around a
//! batch's seeds with GraphLoom's sampler and builds [`Sampled`]; [`Neighbourhood`] exports
//! its arrays to Python.

use std::sync::Arc;

use graphloom_graph::sample::{Block, Fanouts, Sampler};
use graphloom_graph::{MappedDataset, NodeId};
use graphloom_nn::batches::sample_batch;
use graphloom_store::{DlpackView, Layout};
use graphloom_tensor::{DType, Tensor};
use pyo3::prelude::*;

use crate::dataset::Dataset;
use crate::errors::{self, invalid};
use crate::table::{open_table, parse_dtype, Shared, Table};
use crate::view::View;

/// Where a loader's batches come from.
pub(crate) struct Source {
    /// The dataset whose graph is sampled.
    pub(crate) dataset: Arc<MappedDataset>,
    table: Shared,
    /// Neighbours drawn per hop, from the seeds outwards.
    pub(crate) fanouts: Fanouts,
    x_dtype: DType,
    /// The loader's Python name, for messages.
    name: &'static str,
}

impl Source {
    /// The source of loader `name`: `dataset`'s graph, input rows from `table` (a continuous
    /// or chunked table with a row per node) as `x_dtype`.
    pub(crate) fn new(
        py: Python<'_>,
        name: &'static str,
        dataset: &Dataset,
        table: &Table,
        fanouts: Vec<i64>,
        x_dtype: &str,
    ) -> PyResult<Source> {
        let meta = &dataset.inner.meta;
        let fanouts = Fanouts::new(fanouts).map_err(errors::raise)?;
        let x_dtype = parse_dtype(x_dtype)?;
        if !x_dtype.is_float() {
            return Err(invalid(format!(
                "x_dtype {x_dtype}: input rows are float32, float64 or bfloat16"
            )));
        }
        check_table(py, name, table, meta.num_nodes, "the dataset")?;
        Ok(Source {
            dataset: dataset.inner.clone(),
            table: table.shared.clone(),
            fanouts,
            x_dtype,
            name,
        })
    }

    /// Rows `ids` of the table, in the dtype for inputs.
    fn gather(&self, ids: &[i64]) -> PyResult<Tensor> {
        gather_rows(&self.table, self.x_dtype, ids, self.name)
    }

    /// Samples around `seeds` with the draws of (`seed`, `epoch`), lets `edit` remove edges
    /// from the blocks, and builds the neighbourhood (an empty one for no seeds: an empty
    /// slice of a global batch).
    pub(crate) fn sample(
        &self,
        sampler: &mut Sampler,
        seeds: &[NodeId],
        seed: u64,
        epoch: u64,
        edit: impl FnOnce(&mut [Block]),
    ) -> PyResult<Sampled> {
        let data = self.dataset.data();
        let hops = self.fanouts.len();
        let sampled = sample_batch(
            data,
            None,
            self.x_dtype,
            sampler,
            seeds,
            &self.fanouts,
            seed,
            epoch,
        )
        .map_err(errors::raise)?;
        let Some(mut sampled) = sampled else {
            let empty = || stacked(Vec::new(), Vec::new());
            return Ok(Sampled {
                x: self.gather(&[])?,
                y: node_y(data, &[]),
                n_id: i64_tensor(Vec::new(), &[0]),
                edge_index: empty(),
                blocks: (0..hops).map(|_| (empty(), 0, 0)).collect(),
                e_id: i64_tensor(Vec::new(), &[0]),
                num_sampled_nodes: vec![0; hops + 1],
                num_sampled_edges: vec![0; hops],
            });
        };
        edit(&mut sampled.blocks);
        let (blocks, n_id) = (sampled.blocks, sampled.input_ids);
        let x = self.gather(&n_id)?;
        let y = node_y(data, &n_id);
        let per_hop: Vec<(Vec<i64>, Vec<i64>)> = blocks.iter().map(block_edges).collect();
        // PyG's single edge_index: each node's in-edges are drawn once, at the hop that first
        // reached it. Hop h (blocks from the seeds outwards) redraws every earlier node too, so
        // it contributes only the rows that are new since hop h - 1: the tail of its edges,
        // which are in row order.
        let (mut src, mut dst, mut e_id) = (Vec::new(), Vec::new(), Vec::new());
        let mut first_row = 0;
        let mut num_sampled_nodes = vec![seeds.len()];
        let mut num_sampled_edges = Vec::with_capacity(blocks.len());
        for (block, (s_b, d_b)) in blocks.iter().zip(&per_hop).rev() {
            let from = block.row_ptr[first_row] as usize;
            src.extend_from_slice(&s_b[from..]);
            dst.extend_from_slice(&d_b[from..]);
            e_id.extend_from_slice(&block.edge_ids[from..]);
            num_sampled_edges.push(s_b.len() - from);
            num_sampled_nodes.push(block.src_nodes.len() - block.num_dst);
            first_row = block.num_dst;
        }
        let per_block = blocks
            .iter()
            .zip(per_hop)
            .map(|(b, (s_b, d_b))| (stacked(s_b, d_b), b.src_nodes.len(), b.num_dst))
            .collect();
        let (n, edges) = (n_id.len(), e_id.len());
        Ok(Sampled {
            x,
            y,
            n_id: i64_tensor(n_id, &[n]),
            edge_index: stacked(src, dst),
            blocks: per_block,
            e_id: i64_tensor(e_id, &[edges]),
            num_sampled_nodes,
            num_sampled_edges,
        })
    }
}

/// Fails unless `table` can give the input rows of `loader`: a matrix of a row per node of `what`
/// (`rows` nodes) whose gathers are not collective (the loader gathers on its own thread).
pub(crate) fn check_table(
    py: Python<'_>,
    loader: &str,
    table: &Table,
    rows: usize,
    what: &str,
) -> PyResult<()> {
    py.detach(|| {
        let guard = table.open(loader)?;
        let t = guard.as_ref().expect("open_table checked").table();
        if t.rows() != rows || t.shape().len() != 2 {
            return Err(invalid(format!(
                "the feature table has shape {:?}; {what} has {rows} nodes",
                t.shape(),
            )));
        }
        if t.spec().layout == Layout::Distributed && t.comm().size() > 1 {
            return Err(invalid(
                "the loader gathers on its own thread: give it a continuous or chunked \
                 table (a distributed table's gathers are collective)",
            ));
        }
        Ok(())
    })
}

/// Rows `ids` of a loader's `table`, as `x_dtype`; `op` names the loader in errors.
pub(crate) fn gather_rows(
    table: &Shared,
    x_dtype: DType,
    ids: &[i64],
    op: &str,
) -> PyResult<Tensor> {
    let mut guard = open_table(table, op)?;
    let table = guard.as_mut().expect("open_table checked");
    table
        .gather(ids)
        .map_err(errors::raise)?
        .cast(x_dtype)
        .map_err(errors::raise)
}

/// `values` as an int64 tensor of `shape`.
pub(crate) fn i64_tensor(values: Vec<i64>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(values, shape).expect("shape matches the values")
}

/// What PyG's `y` holds for the nodes `ids` of `data`: their classes (int64 `[n]`, -1 for
/// none), or, for a dataset of targets, their rows (float32 `[n, T]`, NaN where missing: a
/// multi-label batch's `y` as `BCEWithLogitsLoss` takes it, after masking).
pub(crate) fn node_y(data: graphloom_graph::GraphData<'_>, ids: &[i64]) -> Tensor {
    match data.targets {
        Some(t) => {
            let rows = t.rows_of(ids.iter().map(|&v| v as usize));
            Tensor::from_vec(rows, &[ids.len(), t.width]).expect("shape matches the rows")
        }
        None => i64_tensor(
            ids.iter().map(|&v| data.labels[v as usize]).collect(),
            &[ids.len()],
        ),
    }
}

/// A block's edges over local ids: (sources, destinations), in row order.
fn block_edges(block: &Block) -> (Vec<i64>, Vec<i64>) {
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for r in 0..block.num_dst {
        let (a, b) = (block.row_ptr[r] as usize, block.row_ptr[r + 1] as usize);
        src.extend(block.col_idx[a..b].iter().map(|&u| i64::from(u)));
        dst.extend(std::iter::repeat_n(r as i64, b - a));
    }
    (src, dst)
}

/// Sources and destinations as one `[2, E]` tensor.
pub(crate) fn stacked(mut src: Vec<i64>, dst: Vec<i64>) -> Tensor {
    let e = src.len();
    src.extend(dst);
    i64_tensor(src, &[2, e])
}

/// A sampled neighbourhood, built by a loader's producer.
pub(crate) struct Sampled {
    x: Tensor,
    y: Tensor,
    n_id: Tensor,
    edge_index: Tensor,
    blocks: Vec<(Tensor, usize, usize)>,
    /// Each edge's id in the dataset's CSR.
    e_id: Tensor,
    /// The nodes and edges each hop added (the seeds first).
    num_sampled_nodes: Vec<usize>,
    num_sampled_edges: Vec<usize>,
}

/// A sampled neighbourhood's arrays, each exported through DLPack.
#[pyclass(module = "graphloom._graphloom", frozen)]
pub(crate) struct Neighbourhood {
    x: View,
    y: View,
    n_id: View,
    edge_index: View,
    blocks: Vec<(DlpackView, usize, usize)>,
    e_id: View,
    num_sampled_nodes: Vec<usize>,
    num_sampled_edges: Vec<usize>,
}

impl Neighbourhood {
    /// The arrays of `s`.
    pub(crate) fn new(s: Sampled) -> Neighbourhood {
        let view = |t| View::new(DlpackView::of_tensor(t));
        Neighbourhood {
            x: view(s.x),
            y: view(s.y),
            n_id: view(s.n_id),
            edge_index: view(s.edge_index),
            blocks: s
                .blocks
                .into_iter()
                .map(|(e, src, dst)| (DlpackView::of_tensor(e), src, dst))
                .collect(),
            e_id: view(s.e_id),
            num_sampled_nodes: s.num_sampled_nodes,
            num_sampled_edges: s.num_sampled_edges,
        }
    }
}

#[pymethods]
impl Neighbourhood {
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

    /// Original node ids of the batch's nodes, seeds first.
    #[getter]
    fn n_id(&self) -> View {
        self.n_id.clone_view()
    }

    /// The union of the sampled hops over local ids, `[2, E]`.
    #[getter]
    fn edge_index(&self) -> View {
        self.edge_index.clone_view()
    }

    /// Per layer, input layer first: (edge_index `[2, E]` over local ids, sources, destinations).
    #[getter]
    fn blocks(&self) -> Vec<(View, usize, usize)> {
        self.blocks
            .iter()
            .map(|(e, s, d)| (View::new(e.clone()), *s, *d))
            .collect()
    }

    /// Each edge of `edge_index`: its position in the dataset's CSR (`csr_col_idx.npy`).
    #[getter]
    fn e_id(&self) -> View {
        self.e_id.clone_view()
    }

    /// Nodes each hop added, the seeds first (`len(fanouts) + 1` counts).
    #[getter]
    fn num_sampled_nodes(&self) -> Vec<usize> {
        self.num_sampled_nodes.clone()
    }

    /// Edges each hop added to `edge_index`, in its order (`len(fanouts)` counts).
    #[getter]
    fn num_sampled_edges(&self) -> Vec<usize> {
        self.num_sampled_edges.clone()
    }
}
