//! The neighbour loader over a heterogeneous dataset ([`hetero_neighbor_loader`], PyG's
//! `NeighborLoader` given a `HeteroData`): `batch_size` seeds of one node type each, their
//! neighbourhood sampled per relation and hop (`graphloom_nn::hetero::sample_blocks`, as the
//! command line's relational training samples it), returned per type and per relation as
//! PyG's `HeteroData` holds a batch ([`HeteroBatch`]).

use std::sync::{Arc, Mutex};

use graphloom_graph::sample::{HeteroBlock, HeteroSampler};
use graphloom_graph::{HeteroGraph, NodeId};
use graphloom_nn::batches::DEFAULT_QUEUE_DEPTH;
use graphloom_nn::hetero::sample_blocks;
use graphloom_store::DlpackView;
use graphloom_tensor::{DType, Tensor};
use pyo3::prelude::*;

use crate::epochs::{check_rank, EpochPlan, Epochs};
use crate::errors::{self, invalid};
use crate::hetero_dataset::HeteroDataset;
use crate::loader::{Batches, Batching, IntoBatch, Loader, Made};
use crate::neighbourhood::{check_table, gather_rows, i64_tensor, stacked};
use crate::node_loader::{input_node_ids, input_positions};
use crate::table::{parse_dtype, Shared, Table};
use crate::view::View;

/// What every batch of a loader is made with.
struct Settings {
    graph: Arc<HeteroGraph>,
    /// Per type, the table its input rows come from (`None`: the batch has no `x` of it).
    tables: Vec<Option<Shared>>,
    x_dtype: DType,
    /// `fanouts[h][r]`: neighbours of relation `r` drawn at hop `h`, from the seeds outwards.
    fanouts: Vec<Vec<i64>>,
    input_type: usize,
    batching: Batching,
    input_nodes: Vec<usize>,
    /// `(node, its position in input_nodes)`, sorted by node: a batch's `input_id`.
    positions: Vec<(NodeId, u32)>,
    /// The relabelling tables of every type, kept between epochs. The producer's own
    /// (homogeneous) sampler is not used; one producer runs at a time, so this lock is never
    /// contended.
    sampler: Mutex<HeteroSampler>,
}

/// One batch, built by the producer: per type its nodes and input rows, per relation its
/// edges, PyG's fields of a sampled `HeteroData`.
struct BatchData {
    n_id: Vec<Tensor>,
    x: Vec<Option<Tensor>>,
    /// Labels of the target type's nodes of the batch.
    y: Tensor,
    edge_index: Vec<Tensor>,
    e_id: Vec<Tensor>,
    num_sampled_nodes: Vec<Vec<usize>>,
    num_sampled_edges: Vec<Vec<usize>>,
    batch_size: usize,
    input_id: Tensor,
}

/// The per-type nodes and per-relation edges of `blocks` (input layer first) around
/// `seeds` of `input_type`, as PyG's hetero loader returns them: each type's nodes in the
/// order they were reached (the seeds first), and each node's in-edges of every relation
/// from the hop that first reached it (hop `h` redraws every node reached before it too; only
/// its rows new since hop `h - 1` are kept), in hop order. Returns (n_id per type, (src, dst,
/// edge id) per relation, nodes per type and hop, edges per relation and hop).
#[allow(clippy::type_complexity)] // the fields of one batch, named in the doc
fn pyg_view(
    graph: &HeteroGraph,
    blocks: &[HeteroBlock],
    input_type: usize,
    seeds: &[NodeId],
) -> (
    Vec<Vec<i64>>,
    Vec<(Vec<i64>, Vec<i64>, Vec<i64>)>,
    Vec<Vec<usize>>,
    Vec<Vec<usize>>,
) {
    let types = graph.types.len();
    let n_id: Vec<Vec<i64>> = match blocks.first() {
        Some(input) => input
            .src_nodes
            .iter()
            .map(|nodes| nodes.iter().map(|&v| i64::from(v)).collect())
            .collect(),
        None => (0..types)
            .map(|t| match t == input_type {
                true => seeds.iter().map(|&v| i64::from(v)).collect(),
                false => Vec::new(),
            })
            .collect(),
    };
    let mut edges = vec![(Vec::new(), Vec::new(), Vec::new()); graph.relations.len()];
    let mut nodes: Vec<Vec<usize>> = (0..types)
        .map(|t| vec![if t == input_type { seeds.len() } else { 0 }])
        .collect();
    let mut hop_edges = vec![Vec::with_capacity(blocks.len()); graph.relations.len()];
    // Rows of each type already given their in-edges.
    let mut first_row = vec![0usize; types];
    for block in blocks.iter().rev() {
        for (r, (relation, sampled)) in graph.relations.iter().zip(&block.relations).enumerate() {
            let (src, dst, ids) = &mut edges[r];
            let before = src.len();
            let rows = first_row[relation.dst_type]..block.num_dst[relation.dst_type];
            for row in rows {
                let (a, b) = (
                    sampled.row_ptr[row] as usize,
                    sampled.row_ptr[row + 1] as usize,
                );
                src.extend(sampled.col_idx[a..b].iter().map(|&u| i64::from(u)));
                dst.extend(std::iter::repeat_n(row as i64, b - a));
                ids.extend_from_slice(&sampled.edge_ids[a..b]);
            }
            hop_edges[r].push(src.len() - before);
        }
        for (t, count) in nodes.iter_mut().enumerate() {
            count.push(block.src_nodes[t].len() - block.num_dst[t]);
        }
        first_row.clone_from(&block.num_dst);
    }
    (n_id, edges, nodes, hop_edges)
}

/// The batch of `seeds` with the draws of (`seed`, `epoch`).
fn build(s: &Settings, seeds: &[NodeId], seed: u64, epoch: u64) -> PyResult<BatchData> {
    let graph = &s.graph;
    let blocks = if seeds.is_empty() {
        Vec::new()
    } else {
        let mut sampler = s.sampler.lock().unwrap_or_else(|p| p.into_inner());
        sample_blocks(
            graph,
            &mut sampler,
            s.input_type,
            seeds,
            &s.fanouts,
            seed,
            epoch,
        )
        .map_err(errors::raise)?
    };
    let (n_id, edges, num_sampled_nodes, num_sampled_edges) =
        pyg_view(graph, &blocks, s.input_type, seeds);
    let x = s
        .tables
        .iter()
        .zip(&n_id)
        .map(|(table, ids)| {
            table
                .as_ref()
                .map(|t| gather_rows(t, s.x_dtype, ids, "NeighborLoader"))
                .transpose()
        })
        .collect::<PyResult<Vec<_>>>()?;
    let target = &n_id[graph.target];
    let y: Vec<i64> = target.iter().map(|&v| graph.labels[v as usize]).collect();
    let (mut edge_index, mut e_id) = (Vec::new(), Vec::new());
    for (src, dst, ids) in edges {
        let e = ids.len();
        edge_index.push(stacked(src, dst));
        e_id.push(i64_tensor(ids, &[e]));
    }
    let positions = input_positions(&s.positions, seeds);
    Ok(BatchData {
        y: i64_tensor(y, &[target.len()]),
        n_id: n_id
            .into_iter()
            .map(|ids| {
                let n = ids.len();
                i64_tensor(ids, &[n])
            })
            .collect(),
        x,
        edge_index,
        e_id,
        num_sampled_nodes,
        num_sampled_edges,
        batch_size: seeds.len(),
        input_id: i64_tensor(positions, &[seeds.len()]),
    })
}

/// A neighbour loader over the heterogeneous `dataset`: seeds of type `input_type` (its
/// `input_nodes`, int64; default the training split of the target type), `batch_size` per
/// global batch, of which this rank takes slice `rank` of `ranks`; `fanouts[h][r]` neighbours
/// of relation `r` at hop `h`; input rows of type `t` from `tables[t]` (`None`: no `x`).
#[pyfunction]
#[pyo3(signature = (dataset, tables, fanouts, input_type, batch_size, shuffle=true, seed=0,
                    input_nodes=None, drop_last=false, queue_depth=DEFAULT_QUEUE_DEPTH,
                    x_dtype="f32", rank=0, ranks=1, workers=0))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments
pub(crate) fn hetero_neighbor_loader(
    py: Python<'_>,
    dataset: &HeteroDataset,
    tables: Vec<Option<PyRef<'_, Table>>>,
    fanouts: Vec<Vec<i64>>,
    input_type: &str,
    batch_size: usize,
    shuffle: bool,
    seed: u64,
    input_nodes: Option<&Bound<'_, PyAny>>,
    drop_last: bool,
    queue_depth: usize,
    x_dtype: &str,
    rank: usize,
    ranks: usize,
    workers: usize,
) -> PyResult<Loader> {
    let graph = dataset.graph.clone();
    if batch_size == 0 {
        return Err(invalid("batch_size must be positive"));
    }
    check_rank(rank, ranks)?;
    let input_type = dataset.type_index(input_type)?;
    let x_dtype = parse_dtype(x_dtype)?;
    if !x_dtype.is_float() {
        return Err(invalid(format!(
            "x_dtype {x_dtype}: input rows are float32, float64 or bfloat16"
        )));
    }
    if tables.len() != graph.types.len() {
        return Err(invalid(format!(
            "{} feature tables for {} node types",
            tables.len(),
            graph.types.len()
        )));
    }
    let mut shared = Vec::with_capacity(tables.len());
    for (t, table) in tables.iter().enumerate() {
        shared.push(match table {
            Some(table) => {
                let rows = graph.type_sizes[t];
                let what = format!("node type {:?}", graph.types[t]);
                check_table(py, "NeighborLoader", table, rows, &what)?;
                Some(table.shared.clone())
            }
            None => None,
        });
    }
    for (h, hop) in fanouts.iter().enumerate() {
        if hop.len() != graph.relations.len() {
            return Err(invalid(format!(
                "num_neighbors: hop {h} has {} fanouts for {} relations",
                hop.len(),
                graph.relations.len()
            )));
        }
        if let Some(&bad) = hop.iter().find(|&&f| f < -1) {
            return Err(invalid(format!(
                "num_neighbors: {bad} is not a count of neighbours (0 draws none, -1 all)"
            )));
        }
    }
    let n = graph.type_sizes[input_type];
    let input_nodes: Vec<usize> = match input_nodes {
        None if input_type == graph.target => graph.splits[0].clone(),
        None => (0..n).collect(),
        Some(ids) => input_node_ids(ids, n)?,
    };
    let epochs = Epochs::new("NeighborLoader", 0, queue_depth, workers)?;
    let mut positions: Vec<(NodeId, u32)> = input_nodes
        .iter()
        .enumerate()
        .map(|(i, &v)| (v as NodeId, i as u32))
        .collect();
    positions.sort_unstable();
    let settings = Settings {
        sampler: Mutex::new(HeteroSampler::new(&graph.type_sizes)),
        graph,
        tables: shared,
        x_dtype,
        fanouts,
        input_type,
        batching: Batching {
            items: input_nodes.len(),
            batch_size,
            shuffle,
            drop_last,
            seed,
            rank,
            ranks,
        },
        input_nodes,
        positions,
    };
    Ok(Loader::new(Arc::new(settings), epochs))
}

impl Batches for Settings {
    fn count(&self) -> usize {
        self.batching.count()
    }

    fn plan(self: Arc<Self>, drawn: Option<u64>, number: u64) -> EpochPlan<Made> {
        let (seed, epoch, seeds) = self
            .batching
            .node_seed_slices(&self.input_nodes, drawn, number);
        EpochPlan {
            batches: seeds.len(),
            make: Box::new(move |_, i| Ok(Box::new(build(&self, &seeds[i], seed, epoch)?) as Made)),
        }
    }
}

/// One batch of the heterogeneous loader, each array exported through DLPack; per-type lists
/// follow the dataset's node types, per-relation lists its edge types.
#[pyclass(module = "graphloom._graphloom", frozen)]
pub(crate) struct HeteroBatch {
    n_id: Vec<View>,
    x: Vec<Option<View>>,
    y: View,
    edge_index: Vec<View>,
    e_id: Vec<View>,
    num_sampled_nodes: Vec<Vec<usize>>,
    num_sampled_edges: Vec<Vec<usize>>,
    batch_size: usize,
    input_id: View,
}

impl IntoBatch for BatchData {
    fn into_py(self: Box<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let view = |t| View::new(DlpackView::of_tensor(t));
        let b = *self;
        let batch = HeteroBatch {
            n_id: b.n_id.into_iter().map(view).collect(),
            x: b.x.into_iter().map(|x| x.map(view)).collect(),
            y: view(b.y),
            edge_index: b.edge_index.into_iter().map(view).collect(),
            e_id: b.e_id.into_iter().map(view).collect(),
            num_sampled_nodes: b.num_sampled_nodes,
            num_sampled_edges: b.num_sampled_edges,
            batch_size: b.batch_size,
            input_id: view(b.input_id),
        };
        Ok(Py::new(py, batch)?.into_any())
    }
}

#[pymethods]
impl HeteroBatch {
    /// Per type, the original ids (within the type) of the batch's nodes, seeds first.
    #[getter]
    fn n_id(&self) -> Vec<View> {
        self.n_id.iter().map(View::clone_view).collect()
    }

    /// Per type, the input rows of `n_id` (None for a type without a table).
    #[getter]
    fn x(&self) -> Vec<Option<View>> {
        self.x
            .iter()
            .map(|x| x.as_ref().map(View::clone_view))
            .collect()
    }

    /// Labels of the target type's nodes of the batch.
    #[getter]
    fn y(&self) -> View {
        self.y.clone_view()
    }

    /// Per relation, its sampled edges `[2, E]` over positions in the source type's and the
    /// destination type's `n_id`.
    #[getter]
    fn edge_index(&self) -> Vec<View> {
        self.edge_index.iter().map(View::clone_view).collect()
    }

    /// Per relation, each edge's position in the relation's CSR (`csr_col_idx.npy`).
    #[getter]
    fn e_id(&self) -> Vec<View> {
        self.e_id.iter().map(View::clone_view).collect()
    }

    /// Per type, the nodes each hop added (the seeds first).
    #[getter]
    fn num_sampled_nodes(&self) -> Vec<Vec<usize>> {
        self.num_sampled_nodes.clone()
    }

    /// Per relation, the edges each hop added.
    #[getter]
    fn num_sampled_edges(&self) -> Vec<Vec<usize>> {
        self.num_sampled_edges.clone()
    }

    /// The number of seeds (the first rows of the input type).
    #[getter]
    fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Each seed's position in the loader's input nodes.
    #[getter]
    fn input_id(&self) -> View {
        self.input_id.clone_view()
    }
}
