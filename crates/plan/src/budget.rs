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

use std::path::Path;

use graphloom_comm::Local;
use graphloom_graph::convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::parts::PartitionMeta;
use graphloom_graph::Meta;
use graphloom_nn::inference::Output;
use graphloom_nn::train::{fit, FullBatch, TrainConfig, Workload};
use graphloom_nn::{Architecture, Head, Model, ModelConfig, OptimizerKind};
use graphloom_store::{Layout, Location, StoreSpec, StoreTensor};
use graphloom_tensor::memory::{set_thread_tracker, Category, MemoryTracker};
use graphloom_tensor::{DType, Tensor};

use crate::{FeaturesLocation, PlanError, Result};

/// Bytes in a GiB.
pub(crate) const GIB: f64 = (1u64 << 30) as f64;

/// The process before it holds any data: the binary's own pages, the allocator's arenas and
/// the stacks of the kernel threads (measured: about 1 MiB at 2 threads).
const PROCESS_BYTES: u64 = 2 << 20;
/// What each further thread adds to [`PROCESS_BYTES`]: its touched stack and thread-local
/// state.
const THREAD_BYTES: u64 = 64 << 10;
/// Nodes of the probe graph that measures the activations per node.
const PROBE_NODES: usize = 1024;
/// The probe graph's average degree at most (GAT keeps a score per edge, so the degree
/// matters; the probe stays small).
const PROBE_MAX_DEGREE: usize = 64;

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
        let phase = self
            .parts
            .iter()
            .filter(|p| p.transient)
            .map(|p| p.bytes)
            .max()
            .unwrap_or(0);
        held + phase
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
    match memory_gib {
        None => Ok(None),
        Some(g) if g.is_finite() && g > 0.0 && g < (1u64 << 30) as f64 => {
            Ok(Some((g * GIB) as u64))
        }
        Some(g) => Err(PlanError::invalid(
            "memory_gib",
            format!("must be a positive number of GiB, not {g}"),
        )),
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
    // Value and gradient, and Adam's two moments (SGD with momentum one buffer).
    let copies = match optimizer {
        OptimizerKind::Adam | OptimizerKind::AdamW => 4,
        OptimizerKind::Sgd { momentum } if momentum > 0.0 => 3,
        OptimizerKind::Sgd { .. } => 2,
    };
    Ok((params * param_bytes * copies) as u64)
}

/// A CSR of `nodes` rows and `edges` entries in memory (`i64` offsets, `u32` sources).
fn csr_bytes(nodes: u64, edges: u64) -> u64 {
    8 * (nodes + 1) + 4 * edges
}

/// The graph view of a whole-graph pass over `nodes` and `edges` (GAT adds a self-loop per
/// node): the CSR by destination, its transpose and the edge map, and GCN's normalisation.
fn view_bytes(arch: Architecture, nodes: u64, edges: u64) -> u64 {
    let edges = match arch {
        Architecture::Gat => edges + nodes,
        _ => edges,
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

/// What the probe of a model measured (see the module docs).
pub(crate) struct Probe {
    /// Bytes of activations and gradients a training step holds per node (or evaluation,
    /// when it holds more).
    per_node: f64,
    /// Bytes an evaluation pass (inference, no gradients) holds per node.
    eval_per_node: f64,
    /// The probe's own peak, held while the plan is made.
    peak: u64,
}

/// Rows of the dataset's features in `dir` for the probe, spread over the file and read
/// through a mapping (page cache, not anonymous memory), so the probe sees the features'
/// real density (a sparse input takes the sparse first layer); `None` without features.
pub(crate) fn probe_rows(dir: &Path, meta: &Meta) -> Result<Option<Tensor>> {
    let path = dir.join("node_feat.npy");
    let dtype = DType::parse(&meta.feat_dtype);
    let (Some(dtype), true, true) = (dtype, meta.feat_dim > 0, path.is_file()) else {
        return Ok(None);
    };
    let n = meta.num_nodes;
    let k = PROBE_NODES.min(n);
    let spec = StoreSpec::new(
        &[n, meta.feat_dim],
        dtype,
        Layout::Continuous,
        Location::Mmap {
            path,
            writable: false,
        },
    );
    let table = StoreTensor::new(Local::single(), spec)?;
    let ids: Vec<i64> = (0..k).map(|i| (i * n / k.max(1)) as i64).collect();
    Ok(Some(table.gather(&ids)?))
}

/// Trains one full-batch epoch of `model` on a small generated graph of average degree
/// `avg_degree` (with `rows` as its features when given) under a tracker of its own, and
/// returns the bytes per node its step held beyond the features, the parameters, their
/// gradients and the optimizer's state.
pub(crate) fn probe(model: &ModelConfig, avg_degree: f64, rows: Option<&Tensor>) -> Result<Probe> {
    let mut cfg = model.clone();
    // The probe classifies nodes: a link head's decoder works on pairs, not on nodes.
    cfg.head = Head::NodeClasses;
    let nodes = rows.map_or(PROBE_NODES, |r| r.shape()[0]).max(2);
    let degree = (avg_degree.round() as usize).clamp(1, PROBE_MAX_DEGREE.min(nodes - 1));
    let params = model_bytes(&cfg, OptimizerKind::Sgd { momentum: 0.0 })? / 2;
    let measured = std::thread::scope(|s| {
        s.spawn(|| -> Result<Probe> {
            let tracker = MemoryTracker::new();
            set_thread_tracker(tracker.clone());
            let mut ds = generate(&SyntheticConfig {
                nodes,
                avg_degree: degree,
                feat_dim: if rows.is_some() { 1 } else { cfg.in_dim },
                classes: cfg.out_dim.max(2),
                seed: 0,
                ..Default::default()
            })?;
            if let Some(rows) = rows {
                ds.meta.feat_dim = cfg.in_dim;
                ds.features = rows.clone();
            }
            ds.features = ds
                .features
                .cast(cfg.dtype)
                .map_err(graphloom_nn::Error::from)?;
            let held = tracker.report().total_current as u64;
            let mut workload = FullBatch::new(&ds, cfg.clone(), 0)?;
            let train = TrainConfig {
                epochs: 1,
                ..Default::default()
            };
            fit(&mut workload, &train, |_| {})?;
            let r = tracker.report();
            let step = (r.total_peak as u64)
                .saturating_sub(held)
                .saturating_sub(r.peak_of(Category::Optimizer) as u64)
                .saturating_sub(params);
            // An evaluation pass alone, under a tracker of its own.
            let params: Vec<Tensor> = workload
                .model()
                .params
                .iter()
                .map(|p| p.value.clone())
                .collect();
            let eval = MemoryTracker::new();
            set_thread_tracker(eval.clone());
            drop(workload.infer(&params, Output::LogProbabilities)?);
            // The rows it was given are held while it runs.
            let given = rows.map_or(0, |r| r.as_bytes().len() as u64);
            Ok(Probe {
                per_node: step as f64 / nodes as f64,
                eval_per_node: eval.report().total_peak as f64 / nodes as f64,
                peak: r.total_peak as u64 + given,
            })
        })
        .join()
    });
    measured.unwrap_or_else(|_| {
        Err(PlanError::invalid(
            "memory_gib",
            "could not be checked: the probe of the model's memory failed",
        ))
    })
}

/// The sizes the cost model reads off a dataset.
struct Sizes {
    nodes: u64,
    edges: u64,
    /// Bytes of one node's feature row in the compute dtype.
    row: u64,
}

impl Sizes {
    fn of(meta: &Meta, dtype: DType) -> Sizes {
        Sizes {
            nodes: meta.num_nodes as u64,
            edges: meta.num_edges as u64,
            row: (meta.feat_dim * dtype.size_in_bytes()) as u64,
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

/// A full-batch run's memory: the whole graph, its features and every node's activations in
/// one process; an error when it exceeds the budget. `rows` are a sample of the features for
/// the probe.
pub(crate) fn full_batch(
    run: &RunShape,
    meta: &Meta,
    learnt_input: bool,
    rows: Option<&Tensor>,
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
    plan.add_phase("dataset loading", loading_bytes(z.nodes, z.edges))?;
    plan.add_phase("model probe", probe.peak)?;
    plan.add_phase(
        "training step",
        rounded((probe.per_node * z.nodes as f64) as u64),
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
        [
            // The part's CSR and its shards' local sources.
            csr_bytes(n, e) + 4 * e + labels_bytes(n),
            n * z.row,
            // The step's activations, and the halo rows it receives of the layer input.
            (probe.per_node * n as f64) as u64 + halo * z.row,
            loading_bytes(n, e),
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

/// What a mini-batch run is asked: batches, evaluation, and the user's memory flags.
pub(crate) struct MiniBatchShape {
    /// Seeds of a batch (at most the training nodes).
    pub(crate) seeds: u64,
    /// Fanouts from the seeds outwards (-1: every neighbour); `None` for subgraph batches.
    pub(crate) fanouts: Option<Vec<i64>>,
    /// The most nodes of a subgraph batch.
    pub(crate) subgraph_nodes: u64,
    /// Batches in flight: the queue, the one being made and the one computed, at most an
    /// epoch's.
    pub(crate) in_flight: u64,
    /// The queue's depth was given (`queue_depth`), so the division keeps it.
    pub(crate) queue_given: bool,
    /// Workers in this process.
    pub(crate) workers: u64,
    /// Producer threads of a pool of their own when the features are mapped.
    pub(crate) producer_threads: usize,
    /// The default synthetic graph is generated in memory, not mapped.
    pub(crate) graph_in_memory: bool,
    /// The run learns an input embedding (no features to place).
    pub(crate) learnt_input: bool,
    /// Nodes of the largest split (evaluation gathers its rows).
    pub(crate) largest_split: u64,
    /// Exact evaluation of every node (not sampled).
    pub(crate) exact_eval: bool,
    /// The user's flags, which win over the division.
    pub(crate) features_location: Option<FeaturesLocation>,
    pub(crate) feature_cache_gib: Option<f64>,
    pub(crate) inference_memory_gib: Option<f64>,
}

impl MiniBatchShape {
    /// The distinct nodes of a batch's blocks: each hop draws `min(fanout, degree)` neighbours
    /// of the last hop's nodes, of which about `n (1 - e^(-draws / n))` are distinct.
    fn batch_rows(&self, z: &Sizes) -> u64 {
        let Some(fanouts) = &self.fanouts else {
            return self.subgraph_nodes.min(z.nodes);
        };
        let n = z.nodes.max(1) as f64;
        let (mut frontier, mut draws) = (self.seeds as f64, self.seeds as f64);
        for &f in fanouts {
            let f = if f < 0 {
                z.avg_degree()
            } else {
                (f as f64).min(z.avg_degree())
            };
            frontier *= f;
            draws += frontier;
        }
        (n * (1.0 - (-draws / n).exp())).ceil() as u64
    }
}

/// What a mini-batch budget decided: where the features live, the cache, the evaluation's
/// budget, and the memory by part.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MiniBatchDivision {
    pub(crate) features_location: FeaturesLocation,
    pub(crate) feature_cache_gib: Option<f64>,
    pub(crate) inference_memory_gib: Option<f64>,
    /// A shorter queue than asked, for a budget the batches in flight would crowd.
    pub(crate) queue_depth: Option<usize>,
    pub(crate) memory: MemoryPlan,
}

/// The least memory layer-wise evaluation is given.
const MIN_LAYERWISE_BYTES: u64 = 16 << 20;

/// A mini-batch run's memory, and with a budget its division: the fixed parts first (the
/// process, the model, the samplers, the batches in flight), then the features in memory with
/// exact evaluation in one pass if both fit, else with evaluation layer by layer within what
/// is left, else the features stay mapped, evaluation takes half of what is left and the
/// rest caches the rows of highest in-degree. Flags the user gave win; one that breaks the
/// budget is an error naming its part.
pub(crate) fn mini_batch(
    run: &RunShape,
    meta: &Meta,
    mb: &MiniBatchShape,
) -> Result<MiniBatchDivision> {
    let m = run.model;
    let z = Sizes::of(meta, m.dtype);
    // Blocks feed the first layer dense rows, as the probe's generated features are.
    let probe = probe(m, z.avg_degree(), None)?;
    let mut base = MemoryPlan {
        budget: run.budget,
        ..Default::default()
    };
    base.add("process", process_bytes(run.threads, 0))?;
    base.add(
        "model and optimizer",
        mb.workers * model_bytes(m, run.optimizer)?,
    )?;
    if mb.graph_in_memory {
        base.add("graph", csr_bytes(z.nodes, z.edges) + labels_bytes(z.nodes))?;
    }
    // Each worker's sampler keeps a relabelling slot (u32) per node.
    base.add("sampler tables", mb.workers * 4 * z.nodes)?;
    if mb.learnt_input {
        // LazyAdam's table: f32 rows with two moments.
        base.add("input embedding", z.nodes * m.in_dim as u64 * 4 * 3)?;
    }
    base.add_phase("model probe", probe.peak)?;
    // Each batch in flight holds its gathered input rows and its blocks (an i64 offset and a
    // u32 source per node); the computed one its activations.
    let batch_rows = mb.batch_rows(&z);
    let input_row = (m.in_dim * m.dtype.size_in_bytes()) as u64;
    let per_batch = batch_rows * (input_row + 12);
    let computed = mb.workers * (probe.per_node * batch_rows as f64) as u64;
    // The batches in flight take at most a quarter of a budget, the queue shortened down to
    // one batch ahead (unless its depth was given).
    let mut in_flight = mb.in_flight;
    let mut queue_depth = None;
    if let (Some(b), false) = (run.budget, mb.queue_given) {
        let fit = (b / 4).saturating_sub(computed) / per_batch.max(1);
        if fit < in_flight && in_flight > 3 {
            in_flight = fit.max(3);
            queue_depth = Some(in_flight as usize - 2);
            base.decisions.push(format!(
                "a queue {} batches deep ({:.3} GiB in flight with the one computed)",
                in_flight - 2,
                (in_flight * per_batch + computed) as f64 / GIB
            ));
        }
    }
    base.add_phase(
        "batches in flight",
        rounded(in_flight * per_batch + computed),
    )?;
    let features = if mb.learnt_input { 0 } else { z.nodes * z.row };
    // Log-probabilities are f32 (f64 in an f64 model).
    let scores_row = (m.out_dim * m.dtype.size_in_bytes().max(4)) as u64;
    let exact = Exact {
        // Every node's input row, the graph in memory and its view, kept once built.
        held: z.nodes * input_row
            + csr_bytes(z.nodes, z.edges)
            + view_bytes(m.arch, z.nodes, z.edges),
        pass: rounded((probe.eval_per_node * z.nodes as f64) as u64),
        nodes: z.nodes,
        degree: z.avg_degree(),
        layers: m.layers as u64,
        input_row,
        hidden_row: (m.hidden * m.heads.max(1) * m.dtype.size_in_bytes()) as u64,
        out_row: scores_row,
        split_rows: mb.largest_split * scores_row,
    };
    let host = |location| Placement {
        location,
        features: match location {
            // Shared memory is not the process's anonymous memory.
            FeaturesLocation::Shared => 0,
            _ => features,
        },
        producer_threads: 0,
    };
    let mapped = Placement {
        location: FeaturesLocation::Mmap,
        features: 0,
        producer_threads: mb.producer_threads,
    };
    let division = match mb.features_location {
        Some(FeaturesLocation::Mmap) => place(base, mb, &exact, mapped, features),
        Some(l) => place(base, mb, &exact, host(l), features),
        None if mb.learnt_input || run.budget.is_none() => {
            place(base, mb, &exact, host(FeaturesLocation::Host), features)
        }
        None => place(
            base.clone(),
            mb,
            &exact,
            host(FeaturesLocation::Host),
            features,
        )
        .or_else(|_| {
            let mut d = place(base, mb, &exact, mapped, features)?;
            d.memory.decisions.insert(
                0,
                format!(
                    "features mapped from disk: in memory they would take {:.2} GiB",
                    features as f64 / GIB
                ),
            );
            Ok(d)
        }),
    }?;
    Ok(MiniBatchDivision {
        queue_depth,
        ..division
    })
}

/// Exact evaluation: in one pass, what it keeps once built and what a pass holds; and the
/// sizes layer-by-layer evaluation works with.
struct Exact {
    held: u64,
    pass: u64,
    nodes: u64,
    degree: f64,
    layers: u64,
    /// Bytes of a node's input row, hidden layer output and log-probabilities.
    input_row: u64,
    hidden_row: u64,
    out_row: u64,
    /// The largest split's log-probabilities, gathered to count its correct predictions.
    split_rows: u64,
}

impl Exact {
    /// What layer-by-layer evaluation within `budget` bytes holds (`infer_layerwise`): the
    /// previous and the current layer's outputs, each in memory when it takes at most half
    /// the budget (else in a scratch file, mapped), one chunk's gathered input rows, where a
    /// chunk is as many nodes as half the budget allows at its own estimate of four copies of
    /// the rows of a node and its in-edges (measured: about half of it is used), a sampler's
    /// table and GCN's normalisation; then the last output and the largest split's rows.
    fn layerwise(&self, budget: u64) -> u64 {
        let (keep, work) = (budget / 2, budget / 2);
        let in_memory = |row: u64| {
            let bytes = self.nodes * row;
            if bytes <= keep {
                bytes
            } else {
                0
            }
        };
        let (hidden, out) = (in_memory(self.hidden_row), in_memory(self.out_row));
        let outputs = match self.layers {
            0 | 1 => out,
            2 => hidden + out,
            _ => (2 * hidden).max(hidden + out),
        };
        // A chunk's work: the budget's half, at most the whole graph's at the code's own
        // estimate per node.
        let per_node = (1.0 + self.degree) * (self.input_row + self.hidden_row) as f64 * 4.0;
        let work = work.min((per_node * self.nodes as f64) as u64);
        // Per node: GCN's normalisation (two f64) and what building it holds, the sampler's
        // table, the labels and ids of a split, the chunks' id lists (96 bytes measured on a
        // graph of a million nodes).
        let per_node_fixed = 96 * self.nodes;
        (outputs + work / 2).max(out + self.split_rows) + per_node_fixed
    }
}

/// Where the features go, and what that costs.
struct Placement {
    location: FeaturesLocation,
    /// Anonymous bytes of the features.
    features: u64,
    /// Producer threads of their own (mapped features).
    producer_threads: usize,
}

/// The parts of `base` with the features placed at `at`, evaluation exact or layer by
/// layer, and with mapped features a cache of what is left.
fn place(
    mut plan: MemoryPlan,
    mb: &MiniBatchShape,
    exact: &Exact,
    at: Placement,
    features: u64,
) -> Result<MiniBatchDivision> {
    let gib = |b: u64| b as f64 / GIB;
    if at.producer_threads > 0 {
        plan.add(
            "producer threads",
            process_bytes(0, at.producer_threads) - PROCESS_BYTES,
        )?;
    }
    if at.location != FeaturesLocation::Mmap && at.features > 0 {
        plan.add("features in memory", at.features)?;
    }
    let held: u64 = plan.peak() - max_phase(&plan);
    let budget = plan.planned();
    let fits = |extra_held: u64, phase: u64| {
        budget.is_none_or(|b| held + extra_held + max_phase(&plan).max(phase) <= b)
    };
    let mut inference = mb.inference_memory_gib;
    if inference.is_none() && mb.exact_eval && budget.is_some() && !fits(exact.held, exact.pass) {
        // Layer by layer within what is left beside the largest phase: all of it with the
        // features in memory, half of it with mapped features (the rest is their cache); at
        // most what one pass would take.
        let room = budget.unwrap_or(0).saturating_sub(held + max_phase(&plan));
        let room = match at.location {
            FeaturesLocation::Mmap => room / 2,
            _ => room,
        };
        // A smaller budget can take less: its layer outputs go to scratch files.
        let mut g = room.min(exact.held + exact.pass).max(MIN_LAYERWISE_BYTES);
        while exact.layerwise(g) > room && g / 2 >= MIN_LAYERWISE_BYTES {
            g /= 2;
        }
        plan.decisions.push(format!(
            "evaluation layer by layer within {:.3} GiB (one pass over the graph would take {:.3})",
            gib(g),
            gib(exact.held + exact.pass)
        ));
        inference = Some(gib(g));
    }
    match inference {
        Some(g) => plan.add(
            "evaluation layer by layer",
            exact.layerwise((g * GIB) as u64),
        )?,
        None if mb.exact_eval => {
            plan.add("evaluation graph and rows", exact.held)?;
            plan.add_phase("evaluation pass", exact.pass)?;
        }
        None => {}
    }
    let mut cache = mb.feature_cache_gib;
    if at.location == FeaturesLocation::Mmap {
        if cache.is_none() && budget.is_some() && features > 0 {
            // What is left caches the rows of highest in-degree, at most every row.
            let rows = (plan.left() / 10 * 9).min(features);
            if rows > 0 {
                cache = Some(gib(rows));
                plan.decisions.push(format!(
                    "a feature cache of {:.3} GiB ({:.0}% of the rows)",
                    gib(rows),
                    100.0 * rows as f64 / features as f64
                ));
            }
        }
        if let Some(g) = cache {
            plan.add("feature cache", ((g * GIB) as u64).min(features))?;
        }
    }
    Ok(MiniBatchDivision {
        features_location: at.location,
        feature_cache_gib: cache,
        inference_memory_gib: inference,
        queue_depth: None,
        memory: plan,
    })
}

/// The largest phase of `plan`.
fn max_phase(plan: &MemoryPlan) -> u64 {
    plan.parts
        .iter()
        .filter(|p| p.transient)
        .map(|p| p.bytes)
        .max()
        .unwrap_or(0)
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
/// memory back under pressure.
pub(crate) fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's tunables; both are documented to be
    // settable at any time.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
