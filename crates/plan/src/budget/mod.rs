//! The memory a run takes, part by part, and a budget (`memory_gib`) divided among the parts.
//!
//! The prediction is of the process's peak anonymous memory: what it holds for the whole run
//! (the process itself, the model with its gradients and optimizer state, the graph, the
//! features in memory, a sampler's relabelling table, a feature cache, the whole-graph
//! structures of exact evaluation) plus the step that holds the most (the activations of the
//! whole graph, or of the batches in flight). Memory-mapped files are not anonymous: features
//! or a CSR left in their files cost page cache only, which the kernel reclaims at will.
//!
//! Sizes follow what the crates allocate: a [`graphloom_graph::Csr`] is `i64` offsets and
//! `u32` sources; the in-memory graph view of a whole-graph pass keeps the CSR by destination
//! and its transpose with an edge map (16 bytes per node and per edge), GCN's normalisation
//! three floats per node. The activations and their gradients are measured rather than
//! derived: a probe trains one full-batch epoch of the run's model on a small generated graph
//! of the same widths and average degree, under a memory tracker of its own, and the bytes
//! per node it held at its peak scale to the run's nodes. What the tape keeps depends on the
//! model family, its widths, checkpointing, batch norm and the dtype, and the probe follows
//! every one of them as the training crate does.

use graphloom_graph::parts::PartitionMeta;
use graphloom_graph::Meta;
use graphloom_nn::layers::{Aggregation, ConvKind};
use graphloom_nn::{Architecture, Model, ModelConfig, OptimizerKind};
use graphloom_tensor::{DType, Tensor};

use crate::link::PAIR_BYTES;
use crate::{PlanError, Result};

mod hetero;
mod mini_batch;
mod probe;

pub(crate) use hetero::{hetero_plan, HeteroPlacement, HeteroShape};
pub(crate) use mini_batch::{
    mini_batch, probe_max_edges, rows_computed, MiniBatchShape, SampledBatch,
};
pub(crate) use probe::probe_rows;
use probe::{probe, probe_pairs, probe_step};

/// Bytes in a GiB.
pub(crate) const GIB: f64 = (1u64 << 30) as f64;

/// The process before it holds any data: the binary's own pages, the allocator's arenas and
/// the stacks of the kernel threads (measured: about 1 MiB at 2 threads).
const PROCESS_BYTES: u64 = 2 << 20;
/// What each further thread adds to [`PROCESS_BYTES`]: its touched stack and thread-local
/// state.
const THREAD_BYTES: u64 = 64 << 10;

/// One part of a run's memory.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryPart {
    /// What it is, in words (`"features in memory"`).
    pub name: &'static str,
    /// Its predicted peak bytes.
    pub bytes: u64,
    /// Held during one phase of the run only (a training step or batches in flight, an
    /// evaluation pass): of these parts only the largest counts towards the peak.
    pub transient: bool,
}

/// A run's predicted peak anonymous memory by part, with the budget it was divided from (when
/// `memory_gib` is given) and the decisions the division made.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryPlan {
    /// The budget in bytes (`memory_gib`).
    pub budget: Option<u64>,
    /// The parts, in the order they are given memory.
    pub parts: Vec<MemoryPart>,
    /// What the division decided (features host or mapped, cache size, evaluation chunked),
    /// in words.
    pub decisions: Vec<String>,
}

impl MemoryPlan {
    /// The predicted peak: the parts held for the whole run and the largest of the phases.
    pub fn peak(&self) -> u64 {
        let held: u64 = self
            .parts
            .iter()
            .filter(|p| !p.transient)
            .map(|p| p.bytes)
            .sum();
        held + self.largest_phase()
    }

    /// The bytes of the largest part held during one phase only (0 when there is none).
    fn largest_phase(&self) -> u64 {
        (self.parts.iter())
            .filter(|p| p.transient)
            .map(|p| p.bytes)
            .max()
            .unwrap_or(0)
    }

    /// How many bytes of freed tensor buffers to keep for reuse (`graphloom_tensor::alloc`):
    /// as many as the largest phase takes (a training step allocates the same buffers every
    /// epoch, and buffers it cannot reuse are faulted in and zeroed by the kernel again, which
    /// on a 400k-node graph costs a third of a GAT epoch), at least
    /// [`DEFAULT_CACHE_LIMIT`](graphloom_tensor::alloc::DEFAULT_CACHE_LIMIT) (the limit before
    /// there was a plan), and never more than a budget leaves beside the predicted peak: a
    /// cache fills with freed buffers of every size a run makes, and new buffers take the
    /// place of cached ones, so its limit is a floor of the process's memory (a link run under
    /// `--memory-gib 0.5` that held 160 MiB reached 1.1 GiB with the default kept).
    pub fn buffer_cache_bytes(&self) -> u64 {
        let floor = graphloom_tensor::alloc::DEFAULT_CACHE_LIMIT as u64;
        let wanted = floor.max(self.largest_phase());
        match self.planned() {
            Some(planned) => wanted.min(planned.saturating_sub(self.peak())),
            None => wanted,
        }
    }

    /// What the parts may take of the budget: nine tenths of it, a tenth kept for the
    /// prediction's error, so that the measured peak stays under the budget.
    pub fn planned(&self) -> Option<u64> {
        self.budget.map(|b| b - b / 10)
    }

    /// The bytes of the part named `name` (0 when there is none).
    pub fn part(&self, name: &str) -> u64 {
        self.parts
            .iter()
            .filter(|p| p.name == name)
            .map(|p| p.bytes)
            .sum()
    }

    /// The plan as log lines: a head line, one per part, and the decisions.
    pub fn lines(&self) -> Vec<String> {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let head = match self.budget {
            Some(b) => format!(
                "memory budget {:.3} GiB (a tenth kept for the prediction's error): predicted \
                 peak {:.1} MiB",
                b as f64 / GIB,
                mib(self.peak())
            ),
            None => format!("predicted peak memory {:.1} MiB", mib(self.peak())),
        };
        std::iter::once(head)
            .chain(self.parts.iter().map(|p| {
                let when = if p.transient {
                    " (one phase at a time)"
                } else {
                    ""
                };
                format!("  {:<26} {:>10.1} MiB{when}", p.name, mib(p.bytes))
            }))
            .chain(self.decisions.iter().map(|d| format!("  {d}")))
            .collect()
    }

    /// Adds a part, refusing it when the budget is exceeded with it: the error names the part
    /// and what it needs.
    fn add(&mut self, name: &'static str, bytes: u64) -> Result<()> {
        self.push(name, bytes, false)
    }

    /// Adds a part held during one phase of the run ([`MemoryPart::transient`]).
    fn add_phase(&mut self, name: &'static str, bytes: u64) -> Result<()> {
        self.push(name, bytes, true)
    }

    fn push(&mut self, name: &'static str, bytes: u64, transient: bool) -> Result<()> {
        self.parts.push(MemoryPart {
            name,
            bytes,
            transient,
        });
        self.check(name, bytes)
    }

    /// Adds `bytes` to the part named `name` (there must be one), refusing them as
    /// [`MemoryPlan::add`] does.
    fn grow(&mut self, name: &'static str, bytes: u64) -> Result<()> {
        if let Some(part) = self.parts.iter_mut().find(|p| p.name == name) {
            part.bytes += bytes;
        }
        self.check(name, bytes)
    }

    /// The error of the budget exceeded by `bytes` of part `name`, if it is.
    fn check(&self, name: &str, bytes: u64) -> Result<()> {
        match self.budget {
            Some(budget) if self.peak() > self.planned().unwrap_or(budget) => {
                Err(over_budget(name, bytes, self, budget))
            }
            _ => Ok(()),
        }
    }

    /// The budget left after the parts so far.
    fn left(&self) -> u64 {
        self.planned()
            .unwrap_or(u64::MAX)
            .saturating_sub(self.peak())
    }
}

/// The error of a budget that a part does not fit into.
fn over_budget(name: &str, bytes: u64, plan: &MemoryPlan, budget: u64) -> PlanError {
    let gib = |b: u64| b as f64 / GIB;
    PlanError::invalid(
        "memory_gib",
        format!(
            "of {:.3} GiB is too small: the part \"{name}\" needs {:.3} GiB, and the run {:.3} GiB \
             with the parts before it, {:.3} GiB with a tenth of the budget kept for the \
             prediction's error",
            gib(budget),
            gib(bytes),
            gib(plan.peak()),
            gib(plan.peak()) / 0.9
        ),
    )
}

/// The budget of `memory_gib` in bytes, checked.
pub(crate) fn budget_bytes(memory_gib: Option<f64>) -> Result<Option<u64>> {
    memory_gib.map(|g| gib_bytes("memory_gib", g)).transpose()
}

/// The most GiB a size in GiB may be (2^30 GiB, 1 EiB): above it, byte counts would
/// overflow.
pub(crate) const MAX_GIB: u64 = 1 << 30;

/// `gib` GiB, the value of `setting`, in bytes; fails unless it is a positive number of GiB
/// of at most [`MAX_GIB`].
pub fn gib_bytes(setting: &'static str, gib: f64) -> Result<u64> {
    if gib.is_finite() && gib > 0.0 && gib <= MAX_GIB as f64 {
        return Ok((gib * GIB) as u64);
    }
    Err(PlanError::invalid(
        setting,
        format!(
            "must be a positive number of GiB, at most {MAX_GIB} (1 EiB), not {}",
            short_number(gib)
        ),
    ))
}

/// `v` as written, or in exponent form when that is shorter (1e12, not 1000000000000; 1e300,
/// not 301 digits).
pub(crate) fn short_number(v: f64) -> String {
    let plain = v.to_string();
    let exponent = format!("{v:e}");
    if exponent.len() < plain.len() {
        exponent
    } else {
        plain
    }
}

/// The fixed cost of the process with `threads` kernel threads and `extra_threads` others
/// (a producer pool).
fn process_bytes(threads: usize, extra_threads: usize) -> u64 {
    PROCESS_BYTES + THREAD_BYTES * (threads + extra_threads) as u64
}

/// The parameters of `model` with their gradients and the optimizer's state.
fn model_bytes(model: &ModelConfig, optimizer: OptimizerKind) -> Result<u64> {
    let params: usize = Model::param_shapes(model)?
        .iter()
        .map(|(_, s)| s.iter().product::<usize>())
        .sum();
    let param_bytes = if model.dtype == DType::F64 { 8 } else { 4 };
    // Value, gradient and the best evaluation's values (kept for model selection; the next
    // update copies the values it shares), and Adam's two moments (SGD with momentum one
    // buffer). Without the best values the optimizer's memory measured 1.25 times this.
    let copies = match optimizer {
        OptimizerKind::Adam | OptimizerKind::AdamW => 5,
        OptimizerKind::Sgd { momentum } if momentum > 0.0 => 4,
        OptimizerKind::Sgd { .. } => 3,
    };
    Ok((params * param_bytes * copies) as u64)
}

/// A CSR of `nodes` rows and `edges` entries in memory (`i64` offsets, `u32` sources).
fn csr_bytes(nodes: u64, edges: u64) -> u64 {
    8 * (nodes + 1) + 4 * edges
}

/// The graph view of a whole-graph pass over `nodes` and `edges` (attention adds a self-loop
/// per node): the CSR by destination, its transpose and the edge map, and GCN's normalisation.
fn view_bytes(arch: Architecture, nodes: u64, edges: u64) -> u64 {
    let edges = match arch.aggregation().needs_self_loops() {
        true => edges + nodes,
        false => edges,
    };
    2 * csr_bytes(nodes, edges) + 8 * edges + 12 * nodes
}

/// What reading a CSR of `nodes` rows and `edges` entries holds besides the CSR itself: the
/// file's bytes and their `i64` values, before they become `u32` sources.
fn loading_bytes(nodes: u64, edges: u64) -> u64 {
    12 * edges + 8 * nodes
}

/// Bytes a phase of tensor buffers holds, `bytes` of them asked for: large buffers are
/// rounded up to size classes a quarter of a power of two apart and backed by huge pages
/// ([`graphloom_tensor::alloc`]), so what they hold is about an eighth more than asked.
fn rounded(bytes: u64) -> u64 {
    bytes + bytes / 8
}

/// Labels (`i64`) and the split ids (`usize`) of `nodes` nodes.
fn labels_bytes(nodes: u64) -> u64 {
    16 * nodes
}

/// The sizes the cost model reads off a dataset.
struct Sizes {
    nodes: u64,
    edges: u64,
    /// Bytes of one node's feature row in the compute dtype.
    row: u64,
    /// Bytes of one node's feature row as the file stores it.
    file_row: u64,
}

impl Sizes {
    fn of(meta: &Meta, dtype: DType) -> Sizes {
        let row = (meta.feat_dim * dtype.size_in_bytes()) as u64;
        Sizes {
            nodes: meta.num_nodes as u64,
            edges: meta.num_edges as u64,
            row,
            file_row: DType::parse(&meta.feat_dtype)
                .map_or(row, |d| (meta.feat_dim * d.size_in_bytes()) as u64),
        }
    }

    /// Bytes of `rows` feature rows read in the file's dtype and held beside their copy in
    /// the compute dtype while it is made (none when the dtypes agree: the rows are used as
    /// read). bf16 training over an f32 file held both: cora's features peaked at 15.5 + 7.8
    /// MB where the loading phase counted 0.15.
    fn cast_copy(&self, rows: u64) -> u64 {
        match self.file_row == self.row {
            true => 0,
            false => rows * self.file_row,
        }
    }

    fn avg_degree(&self) -> f64 {
        self.edges as f64 / self.nodes.max(1) as f64
    }
}

/// What the cost model needs of a run besides the dataset's sizes.
pub(crate) struct RunShape<'a> {
    pub(crate) model: &'a ModelConfig,
    pub(crate) optimizer: OptimizerKind,
    /// Kernel threads of the process.
    pub(crate) threads: usize,
    pub(crate) budget: Option<u64>,
}

/// The pairs a link-prediction run scores.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkPairs {
    /// Pairs one training step scores (a batch of positives and their negatives).
    pub(crate) step: u64,
    /// Pairs the evaluation of one held-out split scores at most: its positives, their
    /// negatives and each positive's negative destinations.
    pub(crate) eval: u64,
}

/// What a scored pair of evaluation holds outside tensors: its ends (i64) and its score
/// (f64), all kept until the split's metrics are computed, and the metrics' sorted copy.
const EVAL_PAIR_HOST_BYTES: u64 = 32;

impl LinkPairs {
    /// What scoring a step's pairs adds to the step: the decoder's tensors (measured by the
    /// pair probe) and the pairs' ids and labels.
    fn step_bytes(&self, train_per_pair: f64) -> u64 {
        (self.step as f64 * train_per_pair) as u64 + self.step * PAIR_BYTES
    }

    /// What evaluation holds besides the encoder's output: one chunk of pairs scored
    /// ([`graphloom_nn::link::eval_chunk`]) and every pair's ends and score.
    fn eval_bytes(&self, m: &ModelConfig, eval_per_pair: f64) -> u64 {
        let chunk = graphloom_nn::link::eval_chunk(m.out_dim, m.dtype) as u64;
        (chunk.min(self.eval) as f64 * eval_per_pair) as u64 + self.eval * EVAL_PAIR_HOST_BYTES
    }
}

/// A link-prediction run's parts beside the encoder's: each step's pairs join the training
/// step (`step` bytes, returned to be added there), and evaluation holds every node's
/// embedding with the scored pairs, a phase of its own.
pub(super) fn link_parts(
    plan: &mut MemoryPlan,
    m: &ModelConfig,
    nodes: u64,
    pairs: &LinkPairs,
) -> Result<u64> {
    let probe = probe_pairs(m)?;
    let embeddings = nodes * (m.out_dim * m.dtype.size_in_bytes()) as u64;
    plan.add_phase(
        "link evaluation",
        rounded(embeddings + pairs.eval_bytes(m, probe.eval)),
    )?;
    Ok(pairs.step_bytes(probe.train))
}

/// The bytes of the edge features a model reads (GINE's), held in memory: counted as f32
/// (a bf16 file takes half).
fn edge_feature_bytes(model: &ModelConfig, edges: u64) -> u64 {
    edges * model.edge_dim as u64 * 4
}

/// A full-batch run's memory: the whole graph, its features and every node's activations in
/// one process (and a link predictor's pairs); an error when it exceeds the budget. `rows`
/// are a sample of the features for the probe.
pub(crate) fn full_batch(
    run: &RunShape,
    meta: &Meta,
    learnt_input: bool,
    rows: Option<&Tensor>,
    link: Option<&LinkPairs>,
) -> Result<MemoryPlan> {
    let m = run.model;
    let z = Sizes::of(meta, m.dtype);
    let probe = probe(m, z.avg_degree(), rows)?;
    let mut plan = MemoryPlan {
        budget: run.budget,
        ..Default::default()
    };
    plan.add("process", process_bytes(run.threads, 0))?;
    plan.add("model and optimizer", model_bytes(m, run.optimizer)?)?;
    plan.add(
        "graph",
        csr_bytes(z.nodes, z.edges) + view_bytes(m.arch, z.nodes, z.edges) + labels_bytes(z.nodes),
    )?;
    // A learnt input table is f32 with LazyAdam's two moments, read whole at every step.
    let features = match learnt_input {
        true => z.nodes * m.in_dim as u64 * 4 * 4,
        false => z.nodes * z.row,
    };
    plan.add("features in memory", features)?;
    if m.edge_dim > 0 {
        plan.add("edge features", edge_feature_bytes(m, z.edges))?;
    }
    let cast = if learnt_input {
        0
    } else {
        z.cast_copy(z.nodes)
    };
    plan.add_phase("dataset loading", loading_bytes(z.nodes, z.edges) + cast)?;
    plan.add_phase("model probe", probe.peak)?;
    let pairs = match link {
        Some(pairs) => link_parts(&mut plan, m, z.nodes, pairs)?,
        None => 0,
    };
    // From the second epoch on, the step runs beside what evaluation keeps (the aggregation
    // of the features), when it aggregates dropped-out features of its own. Without input
    // dropout it reads evaluation's, which its own peak counts already: SGC, whose first hop
    // aggregates the features, was predicted at half as much again as it took.
    let held = match m.input_dropout.get() > 0.0 {
        true => probe.held_per_node,
        false => 0.0,
    };
    let per_node = probe.per_node + held;
    plan.add_phase(
        "training step",
        rounded((per_node * z.nodes as f64) as u64 + pairs),
    )?;
    Ok(plan)
}

/// A SAR run's memory: every worker's part (its features, graph and activations, and the
/// halo rows it receives); the whole job under the local backend (one process), the largest
/// part under MPI (one process per part).
pub(crate) fn sar(
    run: &RunShape,
    partition: &PartitionMeta,
    one_process: bool,
) -> Result<MemoryPlan> {
    let m = run.model;
    let z = Sizes::of(&partition.dataset, m.dtype);
    let probe = probe(m, z.avg_degree(), None)?;
    let part = |p: usize| -> [u64; 4] {
        let n = partition.nodes[p] as u64;
        let e = z.edges * n / z.nodes.max(1);
        let halo = partition.halo.get(p).copied().unwrap_or(0) as u64;
        // The backward pass groups the own shard's edges by source (an offset per row, a
        // destination and an edge index per edge, u32 each: at most all of the part's
        // edges), and a normalised linear aggregation (GCN's, the mean; not GIN's sum) keeps
        // each row's factor (f64).
        let by_source = 8 * (n + 1) + 8 * e;
        let factors = match m.arch.aggregation() {
            Aggregation::Gcn | Aggregation::Mean => 8 * n,
            Aggregation::Sum
            | Aggregation::EdgeSum
            | Aggregation::Attention
            | Aggregation::DynamicAttention => 0,
        };
        [
            // The part's CSR and its shards' local sources.
            csr_bytes(n, e) + 4 * e + labels_bytes(n) + by_source + factors,
            n * z.row,
            // The step's activations (as the single-graph model's, measured), what the ring
            // attention holds beyond them, and the halo rows it receives of the layer input.
            (probe.per_node * n as f64) as u64 + ring_attention_bytes(m, n, e) + halo * z.row,
            loading_bytes(n, e) + z.cast_copy(n),
        ]
    };
    let (workers, totals) = if one_process {
        let all = (0..partition.parts)
            .map(part)
            .fold([0u64; 4], |acc, p| std::array::from_fn(|i| acc[i] + p[i]));
        (partition.parts, all)
    } else {
        let largest = (0..partition.parts)
            .max_by_key(|&p| partition.nodes[p])
            .unwrap_or(0);
        (1, part(largest))
    };
    let mut plan = MemoryPlan {
        budget: run.budget,
        ..Default::default()
    };
    plan.add("process", process_bytes(run.threads, workers))?;
    plan.add(
        "model and optimizer",
        workers as u64 * model_bytes(m, run.optimizer)?,
    )?;
    plan.add("graph", totals[0])?;
    plan.add("features in memory", totals[1])?;
    plan.add_phase("dataset loading", totals[3])?;
    plan.add_phase("model probe", probe.peak)?;
    plan.add_phase("training step", rounded(totals[2]))?;
    Ok(plan)
}

/// What SAR's ring attention holds in a training step of a part of `nodes` rows and `edges`
/// own in-edges beyond what the probe measures of the single-graph model (0 but for GAT).
/// Its backward pass takes `g_v . out_v` from each layer's output, so the output of every
/// attention stays until then; the fused single-graph kernel recomputes it from the inputs,
/// which a worker cannot do without every halo again. And its backward pass keeps a score
/// gradient per own edge and head (an accumulator each) until it sums them by destination.
/// Without these the plan under-predicted SAR GAT's step by about a sixth (400,000 nodes,
/// 4 heads of 64: 3136 MiB against 3664 tracked), which also sized the buffer cache short.
fn ring_attention_bytes(m: &ModelConfig, nodes: u64, edges: u64) -> u64 {
    let dtype = m.dtype.size_in_bytes() as u64;
    let accumulator = match m.dtype {
        DType::F64 => 8,
        _ => 4,
    };
    let (mut outputs, mut scores) = (0, 0);
    for l in 0..m.layers {
        let last = l + 1 == m.layers;
        if let ConvKind::Gat { heads, .. } = m.conv_kind(l) {
            let per_head = if last { m.out_dim } else { m.hidden };
            outputs += nodes * (heads * per_head) as u64 * dtype;
            scores = scores.max(edges * heads as u64 * accumulator);
        }
    }
    outputs + scores
}

impl<'a> RunShape<'a> {
    /// The shape of a run of `model` with the settings of `common`, in this process.
    pub(crate) fn of(common: &'a crate::Common) -> Result<RunShape<'a>> {
        Ok(RunShape {
            model: &common.model,
            optimizer: common.train.optimizer,
            threads: rayon::current_num_threads(),
            budget: budget_bytes(common.settings.memory_gib)?,
        })
    }
}

/// Makes the allocator give freed blocks of 256 KiB and more back to the kernel at once, and
/// keep few arenas, so the process's anonymous memory follows what it holds: by default glibc
/// raises its threshold for handing blocks to the kernel as large blocks are freed, and then
/// keeps freed blocks of up to 32 MiB, which a budget cannot account for. Large tensor
/// buffers are reused through their own cache ([`graphloom_tensor::alloc`]), which gives
/// memory back under pressure. Under an address-space limit one arena is kept (as the
/// command line sets before any thread starts): each reserves 64 MiB of address space.
pub(crate) fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let arenas = if graphloom_tensor::memory::address_space_left().is_some() {
            1
        } else {
            2
        };
        // SAFETY: mallopt only changes the allocator's tunables; both are documented to be
        // settable at any time.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_gib_are_bounded_and_said_as_given() {
        assert_eq!(gib_bytes("memory_gib", 0.5).unwrap(), 1 << 29);
        assert_eq!(gib_bytes("memory_gib", MAX_GIB as f64).unwrap(), 1 << 60);
        for (gib, said) in [
            (1e12, "not 1e12"),
            (1e300, "not 1e300"),
            (0.0, "not 0"),
            (-2.5, "not -2.5"),
            (f64::NAN, "not NaN"),
        ] {
            let e = gib_bytes("memory_gib", gib).unwrap_err().to_string();
            assert!(
                e.ends_with(said) && e.contains("at most 1073741824 (1 EiB)"),
                "{e}"
            );
        }
    }
}
