//! The neighbour loader's batches ([`neighbor_loader`]): `batch_size` seeds each, their
//! neighbourhood sampled ([`Source`]) and returned with the seeds' positions among the
//! loader's input nodes ([`Batch`]).

use std::sync::Arc;

use graphloom_graph::NodeId;
use graphloom_nn::batches::DEFAULT_QUEUE_DEPTH;
use graphloom_store::DlpackView;
use graphloom_tensor::Tensor;
use pyo3::prelude::*;

use crate::buffers::Held;
use crate::dataset::Dataset;
use crate::epochs::{check_rank, EpochPlan, Epochs};
use crate::errors::invalid;
use crate::loader::{Batches, Batching, IntoBatch, Loader, Made};
use crate::neighbourhood::{i64_tensor, Neighbourhood, Sampled, Source};
use crate::table::Table;
use crate::view::View;

/// What every batch of a loader is made with.
struct Settings {
    source: Source,
    batching: Batching,
    input_nodes: Vec<usize>,
    /// `(node, its position in input_nodes)`, sorted by node: a batch's `input_id`.
    positions: Vec<(NodeId, u32)>,
}

/// One batch, built by the producer.
struct BatchData {
    sampled: Sampled,
    batch_size: usize,
    /// PyG's `input_id`: each seed's position in `input_nodes`.
    input_id: Tensor,
}

/// The batch of `seeds` with the draws of (`seed`, `epoch`).
fn build(
    s: &Settings,
    sampler: &mut graphloom_graph::sample::Sampler,
    seeds: &[NodeId],
    seed: u64,
    epoch: u64,
) -> PyResult<BatchData> {
    let sampled = s.source.sample(sampler, seeds, seed, epoch, |_| ())?;
    Ok(BatchData {
        sampled,
        batch_size: seeds.len(),
        input_id: i64_tensor(input_positions(&s.positions, seeds), &[seeds.len()]),
    })
}

/// Each seed's position in a loader's `input_nodes` (PyG's `input_id`), from `positions`:
/// `(node, its position)` sorted by node.
pub(crate) fn input_positions(positions: &[(NodeId, u32)], seeds: &[NodeId]) -> Vec<i64> {
    seeds
        .iter()
        .map(|&v| {
            let at = positions.partition_point(|&(u, _)| u < v);
            i64::from(positions[at].1)
        })
        .collect()
}

/// PyG's `input_nodes` (int64 ids) of a graph of `num_nodes` nodes, checked: each in range,
/// none twice.
pub(crate) fn input_node_ids(ids: &Bound<'_, PyAny>, num_nodes: usize) -> PyResult<Vec<usize>> {
    let ids = Held::<i64>::new(ids, "input_nodes")?;
    let n = num_nodes as i64;
    if let Some(&bad) = ids.slice().iter().find(|&&v| v < 0 || v >= n) {
        return Err(pyo3::exceptions::PyIndexError::new_err(format!(
            "input_nodes: node {bad} is not in 0..{n}"
        )));
    }
    let mut seen = vec![false; num_nodes];
    for &v in ids.slice() {
        if std::mem::replace(&mut seen[v as usize], true) {
            return Err(invalid(format!("input_nodes: node {v} appears twice")));
        }
    }
    Ok(ids.slice().iter().map(|&v| v as usize).collect())
}

/// A neighbour loader over `dataset` whose batches gather input rows from `table` (its
/// features); seeds are `input_nodes` (int64; default the training split), `batch_size` per
/// global batch, of which this rank takes slice `rank` of `ranks`.
#[pyfunction]
#[pyo3(signature = (dataset, table, fanouts, batch_size, shuffle=true, seed=0,
                    input_nodes=None, drop_last=false, queue_depth=DEFAULT_QUEUE_DEPTH, x_dtype="f32",
                    rank=0, ranks=1, workers=0))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments
pub(crate) fn neighbor_loader(
    py: Python<'_>,
    dataset: &Dataset,
    table: &Table,
    fanouts: Vec<i64>,
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
    let num_nodes = dataset.inner.meta.num_nodes;
    if batch_size == 0 {
        return Err(invalid("batch_size must be positive"));
    }
    check_rank(rank, ranks)?;
    let source = Source::new(py, "NeighborLoader", dataset, table, fanouts, x_dtype)?;
    let input_nodes: Vec<usize> = match input_nodes {
        None => dataset.inner.train_idx.clone(),
        Some(ids) => input_node_ids(ids, num_nodes)?,
    };
    let epochs = Epochs::new("NeighborLoader", num_nodes, queue_depth, workers)?;
    let mut positions: Vec<(NodeId, u32)> = input_nodes
        .iter()
        .enumerate()
        .map(|(i, &v)| (v as NodeId, i as u32))
        .collect();
    positions.sort_unstable();
    let batching = Batching {
        items: input_nodes.len(),
        batch_size,
        shuffle,
        drop_last,
        seed,
        rank,
        ranks,
    };
    let settings = Settings {
        source,
        batching,
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
            make: Box::new(move |sampler, i| {
                Ok(Box::new(build(&self, sampler, &seeds[i], seed, epoch)?) as Made)
            }),
        }
    }
}

/// One batch: its sampled neighbourhood and its seeds' positions, exported through DLPack.
#[pyclass(module = "graphloom._graphloom", frozen)]
pub(crate) struct Batch {
    sampled: Py<Neighbourhood>,
    batch_size: usize,
    input_id: View,
}

impl IntoBatch for BatchData {
    fn into_py(self: Box<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let batch = Batch {
            sampled: Py::new(py, Neighbourhood::new(self.sampled))?,
            batch_size: self.batch_size,
            input_id: View::new(DlpackView::of_tensor(self.input_id)),
        };
        Ok(Py::new(py, batch)?.into_any())
    }
}

#[pymethods]
impl Batch {
    /// The sampled neighbourhood: input rows, labels, node and edge ids, edges and blocks.
    #[getter]
    fn sampled(&self, py: Python<'_>) -> Py<Neighbourhood> {
        self.sampled.clone_ref(py)
    }

    /// The number of seeds (the first rows).
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
