//! [`Loader`]: the neighbour loader's Rust half, on the training workloads' batch stream
//! (`graphloom_nn::batches`): a producer thread per epoch samples each batch's blocks with
//! GraphLoom's sampler, gathers its input rows from a store table and builds the arrays PyG
//! expects, into a bounded queue ahead of the consumer; [`Loader::drain`] consumes an epoch
//! without Python, the baseline the Python loop is measured against.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use graphloom_graph::sample::{Block, Fanouts, Sampler};
use graphloom_graph::{MappedDataset, NodeId};
use graphloom_nn::batches::{
    epoch_batches, producer_pool, rank_slice, sample_batch, BatchStream, StreamSettings,
};
use graphloom_store::{DlpackView, Layout};
use graphloom_tensor::{DType, Tensor};
use pyo3::prelude::*;

use crate::buffers::Held;
use crate::dataset::Dataset;
use crate::errors::{self, invalid};
use crate::process::{check_signals, Owner};
use crate::table::{open_table, parse_dtype, Shared, Table};
use crate::view::View;

/// The most batches a loader makes ahead of its consumer.
const MAX_QUEUE_DEPTH: usize = 1024;

/// The most ranks a loader's batches are sliced for.
const MAX_RANKS: usize = 1 << 20;

/// The most threads of a loader's own pool.
const MAX_WORKERS: usize = 1024;

/// What every batch of a loader is made with.
pub(crate) struct Settings {
    dataset: Arc<MappedDataset>,
    table: Shared,
    fanouts: Fanouts,
    batch_size: usize,
    input_nodes: Vec<usize>,
    /// `(node, its position in input_nodes)`, sorted by node: a batch's `input_id`.
    positions: Vec<(NodeId, u32)>,
    shuffle: bool,
    drop_last: bool,
    seed: u64,
    x_dtype: DType,
    rank: usize,
    ranks: usize,
}

/// One batch, built by the producer.
pub(crate) struct BatchData {
    x: Tensor,
    y: Tensor,
    n_id: Tensor,
    edge_index: Tensor,
    batch_size: usize,
    blocks: Vec<(Tensor, usize, usize)>,
    /// PyG's fields: each seed's position in `input_nodes`, each edge's id in the dataset's
    /// CSR, and the nodes and edges each hop added (the seeds first).
    input_id: Tensor,
    e_id: Tensor,
    num_sampled_nodes: Vec<usize>,
    num_sampled_edges: Vec<usize>,
    /// GraphSAINT's normalisation of the batch's nodes and edges, when estimated.
    pub(crate) norms: Option<(Tensor, Tensor)>,
}

impl BatchData {
    /// A batch of whole subgraph: input rows `x`, labels `y`, node ids `n_id`, its edges
    /// `edge_index` (`[2, E]` over positions in `n_id`) and their ids `e_id` in the CSR.
    pub(crate) fn subgraph(
        x: Tensor,
        y: Tensor,
        n_id: Tensor,
        edge_index: Tensor,
        e_id: Tensor,
    ) -> BatchData {
        let n = n_id.shape()[0];
        BatchData {
            x,
            y,
            n_id,
            edge_index,
            batch_size: n,
            blocks: Vec::new(),
            input_id: i64_tensor(Vec::new(), &[0]),
            e_id,
            num_sampled_nodes: Vec::new(),
            num_sampled_edges: Vec::new(),
            norms: None,
        }
    }
}

/// Where a loader's batches come from: sampled neighbourhoods, or whole subgraphs.
pub(crate) enum Source {
    Neighbors(Arc<Settings>),
    Subgraphs(Arc<crate::subgraph_loader::SubgraphSource>),
}

/// One epoch in flight: the batch stream, which hands the sampler back when finished.
type Epoch = BatchStream<'static, BatchData, PyErr>;

/// The seeds of each batch of `epoch` for this rank (in an order drawn from `seed`).
fn batches(s: &Settings, seed: u64, epoch: u64) -> Vec<Vec<NodeId>> {
    let mut global: Vec<Vec<NodeId>> = if s.shuffle {
        epoch_batches(&s.input_nodes, seed, epoch, s.batch_size, 0, 1)
    } else {
        s.input_nodes
            .chunks(s.batch_size)
            .map(|c| c.iter().map(|&v| v as NodeId).collect())
            .collect()
    };
    if s.drop_last && global.last().is_some_and(|b| b.len() < s.batch_size) {
        global.pop();
    }
    global
        .iter()
        .map(|b| rank_slice(b, s.rank, s.ranks).to_vec())
        .collect()
}

pub(crate) fn i64_tensor(values: Vec<i64>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(values, shape).expect("shape matches the values")
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

pub(crate) fn stacked(mut src: Vec<i64>, dst: Vec<i64>) -> Tensor {
    let e = src.len();
    src.extend(dst);
    i64_tensor(src, &[2, e])
}

/// Rows `ids` of a loader's table, as `x_dtype`.
pub(crate) fn gather(table: &Shared, x_dtype: DType, ids: &[i64], op: &str) -> PyResult<Tensor> {
    let mut guard = open_table(table, op)?;
    let table = guard.as_mut().expect("open_table checked");
    table
        .gather(ids)
        .map_err(errors::raise)?
        .cast(x_dtype)
        .map_err(errors::raise)
}

/// Samples around `seeds` with the draws of (`seed`, `epoch`) and builds the batch (an empty
/// one for an empty slice of a global batch).
fn build(
    s: &Settings,
    sampler: &mut Sampler,
    seeds: &[NodeId],
    seed: u64,
    epoch: u64,
) -> PyResult<BatchData> {
    let data = s.dataset.data();
    let sampled = sample_batch(
        data, None, s.x_dtype, sampler, seeds, &s.fanouts, seed, epoch,
    )
    .map_err(errors::raise)?;
    let Some(sampled) = sampled else {
        let empty = || stacked(Vec::new(), Vec::new());
        return Ok(BatchData {
            x: gather(&s.table, s.x_dtype, &[], "NeighborLoader")?,
            y: i64_tensor(Vec::new(), &[0]),
            n_id: i64_tensor(Vec::new(), &[0]),
            edge_index: empty(),
            batch_size: 0,
            blocks: (0..s.fanouts.len()).map(|_| (empty(), 0, 0)).collect(),
            input_id: i64_tensor(Vec::new(), &[0]),
            e_id: i64_tensor(Vec::new(), &[0]),
            num_sampled_nodes: vec![0; s.fanouts.len() + 1],
            num_sampled_edges: vec![0; s.fanouts.len()],
            norms: None,
        });
    };
    let (blocks, n_id) = (sampled.blocks, sampled.input_ids);
    let x = gather(&s.table, s.x_dtype, &n_id, "NeighborLoader")?;
    let y: Vec<i64> = n_id.iter().map(|&v| data.labels[v as usize]).collect();
    let per_hop: Vec<(Vec<i64>, Vec<i64>)> = blocks.iter().map(block_edges).collect();
    // PyG's single edge_index: each node's in-edges are drawn once, at the hop that first
    // reached it. Hop h (blocks from the seeds outwards) redraws every earlier node too, so it
    // contributes only the rows that are new since hop h - 1: the tail of its edges, which
    // are in row order.
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
    let input_id = input_positions(s, seeds);
    let per_block = blocks
        .iter()
        .zip(per_hop)
        .map(|(b, (s_b, d_b))| (stacked(s_b, d_b), b.src_nodes.len(), b.num_dst))
        .collect();
    let (n, edges) = (n_id.len(), e_id.len());
    Ok(BatchData {
        x,
        y: i64_tensor(y, &[n]),
        n_id: i64_tensor(n_id, &[n]),
        edge_index: stacked(src, dst),
        batch_size: seeds.len(),
        blocks: per_block,
        input_id: i64_tensor(input_id, &[seeds.len()]),
        e_id: i64_tensor(e_id, &[edges]),
        num_sampled_nodes,
        num_sampled_edges,
        norms: None,
    })
}

/// Each seed's position in the loader's `input_nodes` (PyG's `input_id`).
fn input_positions(s: &Settings, seeds: &[NodeId]) -> Vec<i64> {
    seeds
        .iter()
        .map(|&v| {
            let at = s.positions.partition_point(|&(u, _)| u < v);
            i64::from(s.positions[at].1)
        })
        .collect()
}

/// The neighbour loader's producer and queue.
#[pyclass(module = "graphloom._graphloom", frozen)]
pub(crate) struct Loader {
    source: Source,
    queue_depth: usize,
    /// The producer's own thread pool (`None`: the global one).
    pool: Option<Arc<rayon::ThreadPool>>,
    state: Mutex<LoaderState>,
    owner: Owner,
}

impl Loader {
    /// A loader of the batches of `source`, made `queue_depth` ahead.
    pub(crate) fn of(source: Source, queue_depth: usize) -> PyResult<Loader> {
        check_queue_depth(queue_depth)?;
        Ok(Loader {
            source,
            queue_depth,
            pool: None,
            state: Mutex::new(LoaderState {
                epoch: 0,
                running: None,
                sampler: None,
            }),
            owner: Owner::here(),
        })
    }
}

/// Fails unless `queue_depth` batches ahead is within bounds.
fn check_queue_depth(queue_depth: usize) -> PyResult<()> {
    if !(1..=MAX_QUEUE_DEPTH).contains(&queue_depth) {
        return Err(invalid(format!(
            "queue_depth {queue_depth}: batches made ahead, 1 to {MAX_QUEUE_DEPTH}"
        )));
    }
    Ok(())
}

struct LoaderState {
    epoch: u64,
    running: Option<Epoch>,
    sampler: Option<Sampler>,
}

impl Loader {
    /// Stops the epoch in flight, if any, and takes its sampler back.
    fn stop(state: &mut LoaderState) -> PyResult<()> {
        if let Some(running) = state.running.take() {
            match running.finish() {
                Ok(sampler) => state.sampler = Some(sampler),
                Err(_) => {
                    return Err(errors::failure(
                        "NeighborLoader: the producer thread failed; the epoch is incomplete",
                    ))
                }
            }
        }
        Ok(())
    }
}

#[pymethods]
impl Loader {
    /// A loader over `dataset` whose batches gather input rows from `table` (its features);
    /// seeds are `input_nodes` (int64; default the training split), `batch_size` per global
    /// batch, of which this rank takes slice `rank` of `ranks`.
    #[new]
    #[pyo3(signature = (dataset, table, fanouts, batch_size, shuffle=true, seed=0,
                        input_nodes=None, drop_last=false, queue_depth=4, x_dtype="f32",
                        rank=0, ranks=1, workers=0))]
    fn new(
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
        let meta = &dataset.inner.meta;
        let fanouts = Fanouts::new(fanouts).map_err(errors::raise)?;
        if batch_size == 0 {
            return Err(invalid("batch_size must be positive"));
        }
        if ranks == 0 || rank >= ranks {
            return Err(invalid(format!("rank {rank} of {ranks} ranks")));
        }
        if ranks > MAX_RANKS {
            return Err(invalid(format!("ranks {ranks}: at most {MAX_RANKS}")));
        }
        py.detach(|| {
            let guard = table.open("NeighborLoader")?;
            let t = guard.as_ref().expect("open_table checked").table();
            if t.rows() != meta.num_nodes || t.shape().len() != 2 {
                return Err(invalid(format!(
                    "the feature table has shape {:?}; the dataset has {} nodes",
                    t.shape(),
                    meta.num_nodes
                )));
            }
            if t.spec().layout == Layout::Distributed && t.comm().size() > 1 {
                return Err(invalid(
                    "the loader gathers on its own thread: give it a continuous or chunked \
                     table (a distributed table's gathers are collective)",
                ));
            }
            Ok(())
        })?;
        let input_nodes: Vec<usize> = match input_nodes {
            None => dataset.inner.train_idx.clone(),
            Some(ids) => {
                let ids = Held::<i64>::new(ids, "input_nodes")?;
                let n = meta.num_nodes as i64;
                if let Some(&bad) = ids.slice().iter().find(|&&v| v < 0 || v >= n) {
                    return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                        "input_nodes: node {bad} is not in 0..{n}"
                    )));
                }
                let mut seen = vec![false; meta.num_nodes];
                for &v in ids.slice() {
                    if std::mem::replace(&mut seen[v as usize], true) {
                        return Err(invalid(format!("input_nodes: node {v} appears twice")));
                    }
                }
                ids.slice().iter().map(|&v| v as usize).collect()
            }
        };
        let x_dtype = parse_dtype(x_dtype)?;
        if !x_dtype.is_float() {
            return Err(invalid(format!(
                "x_dtype {x_dtype}: input rows are float32, float64 or bfloat16"
            )));
        }
        check_queue_depth(queue_depth)?;
        // Threads of the producer's own for its sampling and gathering loops.
        let pool = match workers {
            0 => None,
            w if w > MAX_WORKERS => {
                return Err(invalid(format!(
                    "num_workers {w}: at most {MAX_WORKERS} threads"
                )))
            }
            w => Some(producer_pool(w).map_err(errors::raise)?),
        };
        let mut positions: Vec<(NodeId, u32)> = input_nodes
            .iter()
            .enumerate()
            .map(|(i, &v)| (v as NodeId, i as u32))
            .collect();
        positions.sort_unstable();
        Ok(Loader {
            source: Source::Neighbors(Arc::new(Settings {
                dataset: dataset.inner.clone(),
                table: table.shared.clone(),
                fanouts,
                batch_size,
                input_nodes,
                positions,
                shuffle,
                drop_last,
                seed,
                x_dtype,
                rank,
                ranks,
            })),
            queue_depth,
            pool,
            state: Mutex::new(LoaderState {
                epoch: 0,
                running: None,
                sampler: None,
            }),
            owner: Owner::here(),
        })
    }

    /// The number of batches per epoch.
    fn __len__(&self) -> usize {
        let s = match &self.source {
            Source::Neighbors(s) => s,
            Source::Subgraphs(s) => return s.batches(),
        };
        let (full, rest) = (
            s.input_nodes.len() / s.batch_size,
            s.input_nodes.len() % s.batch_size,
        );
        full + usize::from(rest > 0 && !s.drop_last)
    }

    /// Starts the next epoch's producer (stopping one still running) and returns its number;
    /// its order and draws come from `seed` (default: the loader's).
    #[pyo3(signature = (seed=None))]
    fn start_epoch(&self, py: Python<'_>, seed: Option<u64>) -> PyResult<u64> {
        self.owner.check("this NeighborLoader")?;
        py.detach(|| self.start(seed))
    }

    /// The next batch of the running epoch, or None at its end.
    fn next_batch(&self, py: Python<'_>) -> PyResult<Option<Batch>> {
        self.owner.check("this NeighborLoader")?;
        py.detach(|| self.next()).map(|b| b.map(Batch::new))
    }

    /// Runs one epoch with the consumer in Rust (every batch received and dropped) and returns
    /// (batches, seconds): the loader's speed without Python. Ctrl-C stops it between batches.
    fn drain(&self, py: Python<'_>) -> PyResult<(usize, f64)> {
        self.owner.check("this NeighborLoader")?;
        py.detach(|| {
            let start = Instant::now();
            self.start(None)?;
            let mut count = 0;
            while self.next()?.is_some() {
                count += 1;
                self.stop_on_signal()?;
            }
            Ok((count, start.elapsed().as_secs_f64()))
        })
    }

    /// Stops the running epoch's producer (in a forked child, where it does not run, nothing).
    fn stop_running(&self, py: Python<'_>) -> PyResult<()> {
        if !self.owner.is_here() {
            return Ok(());
        }
        py.detach(|| Loader::stop(&mut self.lock_state()))
    }
}

// Every lock of a loader's state is taken with the interpreter lock released (the methods
// above), so a thread never holds the state while it waits for the interpreter.
impl Loader {
    fn lock_state(&self) -> std::sync::MutexGuard<'_, LoaderState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops the running epoch when a signal handler raised (Ctrl-C), and raises that.
    fn stop_on_signal(&self) -> PyResult<()> {
        check_signals().inspect_err(|_| {
            let _ = Loader::stop(&mut self.lock_state());
        })
    }

    fn start(&self, seed: Option<u64>) -> PyResult<u64> {
        let mut state = self.lock_state();
        Loader::stop(&mut state)?;
        let number = state.epoch;
        state.epoch += 1;
        let (nodes, own_seed) = match &self.source {
            Source::Neighbors(s) => (s.dataset.meta.num_nodes, s.seed),
            Source::Subgraphs(s) => (0, s.seed),
        };
        let sampler = state.sampler.take().unwrap_or_else(|| Sampler::new(nodes));
        // A seed drawn for this epoch alone (from torch's generator) decides it whole, as
        // PyG's: the same draw gives the same batches, whichever epoch it is.
        let (seed, epoch) = match seed {
            Some(drawn) => (drawn, 0),
            None => (own_seed, number),
        };
        let stream = |batches| StreamSettings {
            batches,
            depth: self.queue_depth,
            sampler,
            pool: self.pool.clone(),
        };
        let running = match &self.source {
            Source::Neighbors(settings) => {
                let settings = settings.clone();
                let seeds = batches(&settings, seed, epoch);
                BatchStream::spawn(stream(seeds.len()), move |sampler, i| {
                    build(&settings, sampler, &seeds[i], seed, epoch)
                })
            }
            Source::Subgraphs(source) => {
                let source = source.clone();
                let draws = source.draws(seed, epoch);
                let mut set = source.node_set();
                BatchStream::spawn(stream(draws.len()), move |_, i| {
                    source.build(&mut set, &draws[i], seed, epoch)
                })
            }
        }
        .map_err(errors::raise)?;
        state.running = Some(running);
        Ok(number)
    }

    fn next(&self) -> PyResult<Option<BatchData>> {
        let mut state = self.lock_state();
        let Some(running) = state.running.as_mut() else {
            return Ok(None);
        };
        match running.next() {
            Some(Ok(batch)) => Ok(Some(batch)),
            Some(Err(e)) => {
                // The producer stopped after sending its error; its own is the one to tell.
                let _ = Loader::stop(&mut state);
                Err(e)
            }
            // The queue closed: the epoch ended, or the producer failed (then `stop` says so).
            None => Loader::stop(&mut state).map(|()| None),
        }
    }
}

/// One batch's arrays, each exported through DLPack.
#[pyclass(module = "graphloom._graphloom", frozen)]
pub(crate) struct Batch {
    x: View,
    y: View,
    n_id: View,
    edge_index: View,
    batch_size: usize,
    blocks: Vec<(DlpackView, usize, usize)>,
    input_id: View,
    e_id: View,
    num_sampled_nodes: Vec<usize>,
    num_sampled_edges: Vec<usize>,
    norms: Option<(View, View)>,
}

impl Batch {
    fn new(b: BatchData) -> Batch {
        let norms = b.norms.map(|(node, edge)| {
            (
                View::new(DlpackView::of_tensor(node)),
                View::new(DlpackView::of_tensor(edge)),
            )
        });
        Batch {
            x: View::new(DlpackView::of_tensor(b.x)),
            y: View::new(DlpackView::of_tensor(b.y)),
            n_id: View::new(DlpackView::of_tensor(b.n_id)),
            edge_index: View::new(DlpackView::of_tensor(b.edge_index)),
            batch_size: b.batch_size,
            blocks: b
                .blocks
                .into_iter()
                .map(|(e, s, d)| (DlpackView::of_tensor(e), s, d))
                .collect(),
            input_id: View::new(DlpackView::of_tensor(b.input_id)),
            e_id: View::new(DlpackView::of_tensor(b.e_id)),
            num_sampled_nodes: b.num_sampled_nodes,
            num_sampled_edges: b.num_sampled_edges,
            norms,
        }
    }
}

#[pymethods]
impl Batch {
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

    /// The number of seeds (the first rows).
    #[getter]
    fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Per layer, input layer first: (edge_index `[2, E]` over local ids, sources, destinations).
    #[getter]
    fn blocks(&self) -> Vec<(View, usize, usize)> {
        self.blocks
            .iter()
            .map(|(e, s, d)| (View::new(e.clone()), *s, *d))
            .collect()
    }

    /// Each seed's position in the loader's input nodes.
    #[getter]
    fn input_id(&self) -> View {
        self.input_id.clone_view()
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

    /// GraphSAINT: each node's `node_norm` (float32), when the loader estimated them.
    #[getter]
    fn node_norm(&self) -> Option<View> {
        self.norms.as_ref().map(|(node, _)| node.clone_view())
    }

    /// GraphSAINT: each edge's `edge_norm` (float32), when the loader estimated them.
    #[getter]
    fn edge_norm(&self) -> Option<View> {
        self.norms.as_ref().map(|(_, edge)| edge.clone_view())
    }
}
