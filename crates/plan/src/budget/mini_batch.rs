//! A mini-batch run's memory, and the division of a budget among its parts: where the
//! features live, their cache, evaluation in one pass or layer by layer, the queue.

use graphloom_graph::Meta;

use super::{
    csr_bytes, model_bytes, process_bytes, rounded, view_bytes, MemoryPlan, RunShape, Sizes, GIB,
    PROCESS_BYTES,
};
use super::{edge_feature_bytes, labels_bytes, link_parts, probe, probe_step, LinkPairs};
use crate::link::PAIR_BYTES;
use crate::{FeaturesLocation, Result};
use graphloom_graph::sample::{Block, Fanouts};
use graphloom_nn::minibatch::MiniBatchConfig;

/// What a mini-batch run is asked: batches, evaluation, and the user's memory flags.
pub(crate) struct MiniBatchShape {
    /// Seeds of a batch (at most the training nodes).
    pub(crate) seeds: u64,
    /// A batch's shape, measured by drawing batches: the blocks of a sampled batch, or those
    /// around the training nodes of a subgraph batch.
    pub(crate) sampled: SampledBatch,
    /// The induced subgraph a subgraph batch's producer holds while it makes the blocks (0
    /// for sampled batches).
    pub(crate) induced_bytes: u64,
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
    /// A link predictor's pairs (a batch's and evaluation's).
    pub(crate) link: Option<LinkPairs>,
}

/// The shape of a batch's blocks.
pub(crate) struct SampledBatch {
    /// Distinct nodes within each hop, from the seeds (`[0]`) out to every input row.
    pub(crate) hop_rows: Vec<u64>,
    /// Source rows of all its blocks together.
    pub(crate) block_rows: u64,
    /// Sampled edges of all its blocks.
    pub(crate) edges: u64,
    /// A drawn batch on which the plan measures a training step ([`probe_step`]): the one
    /// with the most edges, or, past [`probe_max_edges`], one of fewer seeds (see
    /// [`step_bytes`]).
    pub(crate) probed: Vec<Block>,
}

/// The most edges times the widest layer's output of a batch the plan trains a step on to
/// measure it: a few seconds of compute. A batch of 750,000 edges (4096 seeds, fanouts
/// 15,10,5) took 27 s at width 1024.
const PROBE_MAX_WORK: u64 = 1 << 26;

/// The most edges of a batch the plan trains a step of `model` on to measure it (see
/// [`PROBE_MAX_WORK`]): 65,536 at width 1024, 262,144 at 256.
pub(crate) fn probe_max_edges(model: &graphloom_nn::ModelConfig) -> u64 {
    let widest = model.layer_widths().iter().map(|&(_, out)| out).max();
    PROBE_MAX_WORK / widest.unwrap_or(1).max(1) as u64
}

/// The bytes a training step on one batch of `mb` holds, and those the probe held (its step
/// on the probed batch): measured on the probed batch, and when that one is smaller than the
/// batch (past [`probe_max_edges`]), scaled by how much more the batch's layers read and
/// write, their rows weighted by the layers' widths.
fn step_bytes(m: &graphloom_nn::ModelConfig, mb: &MiniBatchShape) -> Result<(u64, u64)> {
    let measured = probe_step(m, &mb.sampled.probed)?;
    let widths = m.layer_widths();
    let probed = hop_rows(&mb.sampled.probed);
    let scale = activation_rows(&mb.sampled.hop_rows, &widths) / activation_rows(&probed, &widths);
    Ok(((measured as f64 * scale.max(1.0)) as u64, measured))
}

/// Distinct nodes within each hop of the batch of `blocks`, from its seeds out to its input
/// rows (as [`SampledBatch::hop_rows`]).
fn hop_rows(blocks: &[Block]) -> Vec<u64> {
    let seeds = blocks.last().map_or(0, |b| b.num_dst as u64);
    std::iter::once(seeds)
        .chain(blocks.iter().rev().map(|b| b.src_nodes.len() as u64))
        .collect()
}

/// The rows a step's activations take over a batch of `hops`, weighted by the layers'
/// `widths`: layer `l` reads the nodes within `L - l + 1` hops and writes those within
/// `L - l`, its tensors of the input's width having the rows it reads, those of the output's
/// width the rows it writes. Only a ratio of two of these is used: it says how a step grows
/// from a batch to a larger one, what the step holds per row is measured.
fn activation_rows(hops: &[u64], widths: &[(usize, usize)]) -> f64 {
    let layers = widths.len().min(hops.len().saturating_sub(1));
    let mut rows = 0.0;
    for (l, &(input, output)) in widths.iter().take(layers).enumerate() {
        let (read, written) = (hops[layers - l], hops[layers - l - 1]);
        rows += (input as u64 * read + output as u64 * written) as f64;
    }
    rows.max(1.0)
}

/// The allocator's heap of small allocations a worker's batch stream holds: 9-10 MiB measured
/// (`/proc/PID/smaps`, the `[heap]` mapping) in runs on graphs of 20 thousand and 1 million
/// nodes, with features in memory or mapped; given back when the stream ends
/// ([`graphloom_tensor::alloc::trim_freed`]).
const STREAM_HEAP_BYTES: u64 = 10 << 20;

/// Bytes a batch keeps per sampled edge: its block's local source (u32) and edge id (i64),
/// and the layer graph made of the block in the queue (the source by destination and the
/// destination by source, u32 each, and the transpose's edge id, u64).
const BATCH_EDGE_BYTES: u64 = 28;
/// What a GAT batch adds per edge: the layer graph again, with self-loops.
const GAT_EDGE_BYTES: u64 = 16;
/// Bytes a batch keeps per source row of each block: the block's node id (u32) and offset
/// (i64), the layer graph's offsets by destination and by source (i64 each) and its node
/// id for dropout (i64).
const BATCH_BLOCK_ROW_BYTES: u64 = 36;

impl MiniBatchShape {
    /// The input rows of a batch: every node its blocks reach.
    fn batch_rows(&self) -> u64 {
        self.sampled.hop_rows.last().copied().unwrap_or(self.seeds)
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
    let (step, probed_step) = step_bytes(m, mb)?;
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
    if m.edge_dim > 0 {
        base.add("edge features", edge_feature_bytes(m, z.edges))?;
    }
    // Each worker's sampler keeps a relabelling slot (u32) per node.
    base.add("sampler tables", mb.workers * 4 * z.nodes)?;
    if mb.learnt_input {
        // LazyAdam's table: f32 rows with two moments.
        base.add("input embedding", z.nodes * m.in_dim as u64 * 4 * 3)?;
    }
    // The probes run one after the other.
    base.add_phase("model probe", probe.peak.max(probed_step))?;
    // Each batch in flight holds its gathered input rows and their ids (i64), its blocks and
    // the layer graphs made of them; the computed one its activations too.
    let batch_rows = mb.batch_rows().min(z.nodes);
    let input_row = (m.in_dim * m.dtype.size_in_bytes()) as u64;
    let edge = BATCH_EDGE_BYTES + u64::from(m.arch.has_heads()) * GAT_EDGE_BYTES;
    let graph = mb.sampled.block_rows * BATCH_BLOCK_ROW_BYTES + mb.sampled.edges * edge;
    // A link batch keeps its pairs' ids and labels; the computed one its scores too.
    let (pairs, scored) = match &mb.link {
        Some(p) => (p.step * PAIR_BYTES, link_parts(&mut base, m, z.nodes, p)?),
        None => (0, 0),
    };
    let per_batch = batch_rows * (input_row + 8) + graph + pairs;
    let computed = mb.workers * (step + scored);
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
    // The batch stream's small allocations (per-task vectors of the sampler, channel slots)
    // fill the allocator's heap, given back when the stream ends. The batches are sized by
    // formula, with an eighth more for what it misses; the step was measured.
    base.add_phase(
        "batches in flight",
        rounded(in_flight * per_batch + mb.workers * mb.induced_bytes)
            + computed
            + mb.workers * STREAM_HEAP_BYTES,
    )?;
    // The table in memory and a cache of mapped rows keep the rows as the file stores them
    // (an f32 file under a bf16 model: twice the model's bytes; counted in the model's, a
    // sampled run's features were a half of what they held).
    let on_disk = if mb.learnt_input {
        0
    } else {
        z.nodes * z.file_row
    };
    let features = on_disk;
    // Log-probabilities are f32 (f64 in an f64 model).
    let scores_row = (m.out_dim * m.dtype.size_in_bytes().max(4)) as u64;
    let exact = Exact {
        // Every node's input row and the graph's view, kept once built.
        held: z.nodes * input_row + view_bytes(m.arch, z.nodes, z.edges),
        // The larger of building the view (from a copy of the CSR, dropped once built) and a
        // pass, whose buffers the probe measured as the allocator holds them.
        pass: csr_bytes(z.nodes, z.edges).max((probe.eval_per_node * z.nodes as f64) as u64),
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
        staged_blocks: 0,
    };
    let mapped = Placement {
        location: FeaturesLocation::Mmap,
        features: 0,
        producer_threads: mb.producer_threads,
        // Two stages (sampling, then gathering in the producers' pool): one batch in each
        // stage's hands and one between them, of which the rows are not gathered yet.
        staged_blocks: 2 * rounded(graph),
    };
    let division = match mb.features_location {
        Some(FeaturesLocation::Mmap) => place(base, mb, &exact, mapped, on_disk),
        Some(l) => place(base, mb, &exact, host(l), on_disk),
        None if mb.learnt_input || run.budget.is_none() => {
            place(base, mb, &exact, host(FeaturesLocation::Host), on_disk)
        }
        None => place(
            base.clone(),
            mb,
            &exact,
            host(FeaturesLocation::Host),
            on_disk,
        )
        .or_else(|_| {
            let mut d = place(base, mb, &exact, mapped, on_disk)?;
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
    /// Blocks of the batches sampled but not yet gathered, beyond the batches in flight
    /// (a stream in two stages, with mapped features).
    staged_blocks: u64,
}

/// The parts of `base` with the features placed at `at`, evaluation exact or layer by
/// layer, and with mapped features a cache of what is left, at most every row of the file
/// (`on_disk` bytes).
fn place(
    mut plan: MemoryPlan,
    mb: &MiniBatchShape,
    exact: &Exact,
    at: Placement,
    on_disk: u64,
) -> Result<MiniBatchDivision> {
    let gib = |b: u64| b as f64 / GIB;
    if at.producer_threads > 0 {
        plan.add(
            "producer threads",
            process_bytes(0, at.producer_threads) - PROCESS_BYTES,
        )?;
        plan.grow("batches in flight", at.staged_blocks)?;
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
        if cache.is_none() && budget.is_some() && on_disk > 0 {
            // What is left caches the rows of highest in-degree, at most every row.
            let slots = 4 * exact.nodes;
            let rows = (plan.left().saturating_sub(slots) / 10 * 9).min(on_disk);
            if rows > 0 {
                cache = Some(gib(rows));
                plan.decisions.push(format!(
                    "a feature cache of {:.3} GiB ({:.0}% of the rows)",
                    gib(rows),
                    100.0 * rows as f64 / on_disk as f64
                ));
            }
        }
        if let Some(g) = cache {
            // The rows, and a slot (u32) per node saying where a cached row is.
            plan.add(
                "feature cache",
                ((g * GIB) as u64).min(on_disk) + 4 * exact.nodes,
            )?;
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

/// The most nodes a training batch's blocks hold: its seeds and every hop's sampled
/// neighbours (all of them for a fanout of -1), at most the graph; a subgraph batch's own
/// nodes.
fn training_rows(mb: &MiniBatchConfig, n: usize) -> usize {
    match &mb.subgraph {
        Some(subgraph) => subgraph.max_batch_nodes(n),
        None => sampled_rows(mb, &mb.fanouts, n),
    }
}

/// The most nodes the blocks of a batch sampled with `fanouts` hold, at most `n`.
fn sampled_rows(mb: &MiniBatchConfig, fanouts: &Fanouts, n: usize) -> usize {
    fanouts
        .iter()
        .try_fold(mb.batch_size, |rows, &f| {
            let f = usize::try_from(f).ok()?;
            rows.checked_mul(f.checked_add(1)?)
        })
        .unwrap_or(n)
        .min(n)
}

/// The most nodes one forward pass covers: every node, except when evaluation is sampled or
/// layer-wise, whose passes cover one batch's neighbourhood.
pub(crate) fn rows_computed(mb: &MiniBatchConfig, n: usize) -> usize {
    if mb.sampled_eval.is_none() && mb.layerwise.is_none() {
        return n;
    }
    // Layer-wise evaluation sizes its chunks to its own budget.
    let eval = mb.sampled_eval.as_ref().map_or(&mb.fanouts, |e| &e.fanouts);
    // A subgraph batch computes its own nodes only.
    training_rows(mb, n).max(sampled_rows(mb, eval, n))
}
