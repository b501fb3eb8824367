//! A heterogeneous run's memory, and the division of a budget among its parts: each learnt
//! embedding and each type's features in memory when they fit, else mapped from files (the
//! learnt tables with their LazyAdam state in scratch files), the training step measured on
//! batches the run's sampler draws, and evaluation (exact, layer by layer, or sampled).

use graphloom_graph::sample::{HeteroBlock, HeteroSampler};
use graphloom_graph::{HeteroGraph, NodeId};
use graphloom_nn::hetero::CHUNK_NODES;
use graphloom_nn::hetero::{sample_blocks, HeteroLayerGraph, HeteroModel, HeteroModelConfig};
use graphloom_nn::task::Task;
use graphloom_nn::{Mode, Model, OptimizerKind};
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::memory::{set_thread_tracker, MemoryTracker};
use graphloom_tensor::{Tape, Tensor, Var};

use super::probe::on_probe_thread;
use super::{over_budget, process_bytes, rounded, MemoryPlan, GIB};
use crate::{FeaturesLocation, PlanError, Result};

/// Batches the plan draws to find the largest step of a run (the one with the most edges is
/// measured).
const DRAWN_BATCHES: usize = 8;

/// What a heterogeneous run is asked, as the division reads it.
pub(crate) struct HeteroShape<'a> {
    /// The dataset in memory (its relations mapped).
    pub(crate) graph: &'a HeteroGraph,
    /// The model, every default filled in.
    pub(crate) model: &'a HeteroModelConfig,
    /// The width of each featureless type's learnt embedding (0 for a type with features).
    pub(crate) embedding_dims: &'a [usize],
    /// Per hop, each relation's fanout, and the seeds of a global batch; `None`: full batch.
    pub(crate) sampled: Option<(&'a [Vec<i64>], usize)>,
    /// The parameters' optimizer.
    pub(crate) optimizer: OptimizerKind,
    /// Workers in this process.
    pub(crate) workers: usize,
    /// Kernel threads.
    pub(crate) threads: usize,
    /// Sampled evaluation: at most this many nodes of each split (else exact).
    pub(crate) eval_nodes: Option<usize>,
    /// The user's flag, which wins over the division.
    pub(crate) features_location: Option<FeaturesLocation>,
    /// The run's seed (the plan draws batches as the first epoch does).
    pub(crate) seed: u64,
}

/// Where the division put the tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeteroPlacement {
    /// Every type's feature table.
    pub(crate) features: FeaturesLocation,
    /// The learnt embeddings and their optimizer state live in scratch files, mapped.
    pub(crate) tables_mapped: bool,
}

/// The memory plan of `shape` within `budget` bytes (when given), with where it placed the
/// tables.
pub(crate) fn hetero_plan(
    shape: &HeteroShape<'_>,
    budget: Option<u64>,
) -> Result<(MemoryPlan, HeteroPlacement)> {
    let g = shape.graph;
    let mut plan = MemoryPlan {
        budget,
        ..MemoryPlan::default()
    };
    plan.add("process", process_bytes(shape.threads, shape.workers))?;
    plan.add("model", model_bytes(shape.model, shape.optimizer))?;
    let target = g.type_sizes[g.target] as u64;
    let split_ids: u64 = g.splits.iter().map(|s| s.len() as u64).sum();
    plan.add("labels and splits", 8 * target + 8 * split_ids)?;
    // Each worker's sampler keeps a slot per node of every type.
    let nodes: u64 = g.type_sizes.iter().map(|&n| n as u64).sum();
    plan.add("samplers", 4 * nodes * shape.workers as u64)?;
    let owned: u64 = g.relations.iter().map(|r| r.csr.owned_bytes() as u64).sum();
    if owned > 0 {
        // Sources stored as int64 are narrowed into memory; int32 ones stay mapped.
        plan.add("relations (int64 sources narrowed)", owned)?;
    }
    match shape.sampled {
        Some((fanouts, batch)) => {
            let seeds = batch.div_ceil(shape.workers.max(1));
            let step = measure_step(shape, fanouts, seeds)?;
            plan.add_phase("training step", step * shape.workers as u64)?;
        }
        None => plan.add_phase("training step", full_batch_step(shape))?,
    }
    if shape.eval_nodes.is_none() {
        let eval = exact_eval_bytes(shape);
        let left = plan.left();
        plan.add_phase("evaluation", eval)
            .map_err(|e| match budget {
                Some(_) if shape.sampled.is_some() => PlanError::invalid(
                    "memory_gib",
                    format!(
                        "leaves {:.3} GiB for exact evaluation, which holds {:.3} GiB (every \
                     node's layer outputs): give --eval-nodes N to evaluate by sampled \
                     inference on N nodes of each split",
                        left as f64 / GIB,
                        eval as f64 / GIB
                    ),
                ),
                _ => e,
            })?;
    }
    let tables: u64 = g
        .type_sizes
        .iter()
        .zip(shape.embedding_dims)
        .map(|(&n, &d)| table_bytes(n as u64, d as u64))
        .sum();
    let tables_mapped = tables > 0 && budget.is_some() && tables > plan.left();
    if tables_mapped {
        plan.decisions.push(format!(
            "learnt embeddings with their LazyAdam state mapped from scratch files \
             (--scratch-dir): {:.3} GiB of page cache, more than the {:.3} GiB left",
            tables as f64 / GIB,
            plan.left() as f64 / GIB
        ));
    } else if tables > 0 {
        plan.add("learnt embeddings", tables)?;
    }
    let features: u64 = g
        .features
        .iter()
        .flatten()
        .map(|f| (f.rows * f.width * if f.dtype == "bf16" { 2 } else { 4 }) as u64)
        .sum();
    let features_location = match shape.features_location {
        Some(given) => given,
        None if budget.is_some() && features > plan.left() => {
            plan.decisions.push(format!(
                "features mapped from their files: {:.3} GiB of page cache, more than the \
                 {:.3} GiB left",
                features as f64 / GIB,
                plan.left() as f64 / GIB
            ));
            FeaturesLocation::Mmap
        }
        None => FeaturesLocation::Host,
    };
    if features > 0 && features_location != FeaturesLocation::Mmap {
        plan.add("features in memory", features)?;
    }
    if let Some(b) = budget {
        if plan.peak() > plan.planned().unwrap_or(b) {
            return Err(over_budget("everything", plan.peak(), &plan, b));
        }
    }
    Ok((
        plan,
        HeteroPlacement {
            features: features_location,
            tables_mapped,
        },
    ))
}

/// A learnt table of `n` rows of `d` f32 values with LazyAdam's two moments and its step
/// count per row.
fn table_bytes(n: u64, d: u64) -> u64 {
    if d == 0 {
        return 0;
    }
    3 * 4 * n * d + 8 * n
}

/// The parameters with their gradients, the best evaluation's copy and the optimizer's state.
fn model_bytes(model: &HeteroModelConfig, optimizer: OptimizerKind) -> u64 {
    let params = model.param_count().unwrap_or(usize::MAX) as u64;
    let copies = match optimizer {
        OptimizerKind::Adam | OptimizerKind::AdamW => 5,
        OptimizerKind::Sgd { momentum } if momentum > 0.0 => 4,
        OptimizerKind::Sgd { .. } => 3,
    };
    params
        .saturating_mul(model.dtype.size_in_bytes() as u64)
        .saturating_mul(copies)
}

/// The bytes of a full-batch step, from its sizes: every node's input rows (and the learnt
/// ones' gradients), and per layer and type each relation's mean of its inputs, and three
/// rows of the output width (the relations' projections summed in place, the activation, the
/// dropout); the gradients flow back through buffers the forward pass frees.
fn full_batch_step(shape: &HeteroShape<'_>) -> u64 {
    let cfg = shape.model;
    let g = shape.graph;
    let scalar = cfg.dtype.size_in_bytes() as u64;
    let inputs: u64 = (0..g.types.len())
        .map(|t| {
            let copies = if shape.embedding_dims[t] > 0 { 2 } else { 1 };
            copies * g.type_sizes[t] as u64 * cfg.in_dims[t] as u64 * scalar
        })
        .sum();
    let mut layers = 0;
    for l in 0..cfg.layers {
        let outputs = cfg.output_types(l);
        let width_in = if l == 0 {
            cfg.in_dims.iter().copied().max().unwrap_or(0)
        } else {
            cfg.hidden
        } as u64;
        let width_out = cfg.width_out(l) as u64;
        for (t, &n) in g.type_sizes.iter().enumerate() {
            if outputs[t] {
                let into = cfg.relations.iter().filter(|r| r.dst_type == t).count() as u64;
                layers += n as u64 * (into * width_in + 3 * width_out) * scalar;
            }
        }
    }
    let edges: u64 = g.relations.iter().map(|r| r.csr.num_edges() as u64).sum();
    rounded(inputs + layers) + 24 * edges
}

/// What exact layer-by-layer evaluation holds at its peak: the previous layer's output for
/// every node of the types it reads, the current layer's (the last one's predicted classes,
/// taken chunk by chunk), and one chunk's block (every
/// in-neighbour of [`CHUNK_NODES`] nodes, their input rows and each relation's mean).
fn exact_eval_bytes(shape: &HeteroShape<'_>) -> u64 {
    let cfg = shape.model;
    let g = shape.graph;
    let scalar = cfg.dtype.size_in_bytes() as u64;
    let layer_bytes = |l: usize| -> u64 {
        let outputs = cfg.output_types(l);
        // The last layer keeps each node's predicted class (an i64) only.
        let row = match l + 1 == cfg.layers {
            true => 8,
            false => cfg.width_out(l) as u64 * scalar,
        };
        (0..g.types.len())
            .filter(|&t| outputs[t])
            .map(|t| g.type_sizes[t] as u64 * row)
            .sum()
    };
    let widest_in = cfg
        .in_dims
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(cfg.hidden) as u64;
    let mut peak = 0;
    for l in 0..cfg.layers {
        let previous = if l == 0 { 0 } else { layer_bytes(l - 1) };
        let outputs = cfg.output_types(l);
        let chunk = (0..g.types.len())
            .filter(|&t| outputs[t])
            .map(|t| {
                let (rows, edges) = most_chunk_sources(g, t);
                let into = cfg.relations.iter().filter(|r| r.dst_type == t).count() as u64;
                // The sources' rows, gathered and cast; each relation's mean and projection
                // of the chunk's destinations; the sampler's block and the layer's graph
                // (offsets, sources, edge ids and each relation's mean over its edges).
                2 * rows * widest_in * scalar
                    + 2 * (into + 2) * CHUNK_NODES as u64 * widest_in * scalar
                    + 32 * edges
            })
            .max()
            .unwrap_or(0);
        peak = peak.max(previous + layer_bytes(l) + rounded(chunk));
    }
    peak
}

/// The most source rows and the most in-edges of [`CHUNK_NODES`] consecutive nodes of type
/// `t`, over every relation into it, of any chunk: what a chunk of exact evaluation reads
/// (its rows are distinct nodes: at most each source type's nodes).
fn most_chunk_sources(g: &HeteroGraph, t: usize) -> (u64, u64) {
    let n = g.type_sizes[t];
    let into: Vec<(&[i64], usize)> = g
        .relations
        .iter()
        .filter(|r| r.dst_type == t)
        .map(|r| (r.csr.row_ptr(), r.src_type))
        .collect();
    let mut most = (0, 0);
    for start in (0..n).step_by(CHUNK_NODES) {
        let end = (start + CHUNK_NODES).min(n);
        let mut rows = vec![0u64; g.types.len()];
        let mut edges = 0;
        for &(row_ptr, s) in &into {
            let e = (row_ptr[end] - row_ptr[start]) as u64;
            rows[s] = (rows[s] + e).min(g.type_sizes[s] as u64);
            edges += e;
        }
        most = (most.0.max(rows.iter().sum()), most.1.max(edges));
    }
    most
}

/// The bytes a training step holds at its peak on the largest of [`DRAWN_BATCHES`] batches of
/// `seeds` training nodes drawn as the first epoch draws them: measured by training one step
/// of the model on that batch's blocks (generated input rows of each type's width) under a
/// tracker of its own, plus the blocks themselves and the learnt rows' sparse update (their
/// gradients routed and summed: twice the gathered learnt rows).
fn measure_step(shape: &HeteroShape<'_>, fanouts: &[Vec<i64>], seeds: usize) -> Result<u64> {
    let g = shape.graph;
    let batches = Task::Node
        .epoch(&g.splits[0], shape.seed, 0, Some(seeds.max(1)), 0, 1)
        .mine;
    let mut sampler = HeteroSampler::new(&g.type_sizes);
    let mut largest: Option<Vec<HeteroBlock>> = None;
    for batch in batches.iter().take(DRAWN_BATCHES) {
        let nodes: Vec<NodeId> = batch.iter().map(|&v| v as NodeId).collect();
        let blocks = sample_blocks(g, &mut sampler, g.target, &nodes, fanouts, shape.seed, 0)?;
        let edges = |b: &[HeteroBlock]| b.iter().map(HeteroBlock::num_edges).sum::<usize>();
        if largest.as_ref().is_none_or(|l| edges(&blocks) > edges(l)) {
            largest = Some(blocks);
        }
    }
    drop(sampler);
    let Some(blocks) = largest else {
        return Ok(0);
    };
    let block_bytes: u64 = blocks
        .iter()
        .map(|b| {
            let ids: usize = b.src_nodes.iter().map(Vec::len).sum();
            let rels: usize = b
                .relations
                .iter()
                .map(|r| 8 * r.row_ptr.len() + 12 * r.col_idx.len())
                .sum();
            (4 * ids + rels) as u64
        })
        .sum();
    let learnt: u64 = (0..g.types.len())
        .map(|t| 4 * blocks[0].src_nodes[t].len() as u64 * shape.embedding_dims[t] as u64)
        .sum();
    let cfg = shape.model.clone();
    let run = || -> Result<u64> {
        let tracker = MemoryTracker::new();
        set_thread_tracker(tracker.clone());
        let model = HeteroModel::new(cfg.clone(), 0)?;
        let held = tracker.report().total_current as u64;
        let mut tape = Tape::new();
        let vars: Vec<Var> = (model.params.iter())
            .map(|p| tape.leaf(p.value.clone(), true))
            .collect();
        let inputs = (0..cfg.types.len())
            .map(|t| {
                let rows = blocks[0].src_nodes[t].len();
                let x = Tensor::full(&[rows, cfg.in_dims[t]], cfg.dtype, 0.5)
                    .map_err(graphloom_nn::Error::from)?;
                Ok(tape.leaf(x, shape.embedding_dims[t] > 0))
            })
            .collect::<Result<Vec<Var>>>()?;
        let graphs = (blocks.iter())
            .map(|b| HeteroLayerGraph::from_block(&cfg.relations, b))
            .collect::<graphloom_nn::Result<Vec<_>>>()?;
        let graphs: Vec<&HeteroLayerGraph> = graphs.iter().collect();
        let mode = Mode {
            training: true,
            seed: 0,
            step: 1,
        };
        let scores = model.forward(&mut tape, &inputs, &vars, &graphs, mode)?;
        let logp = Model::log_probabilities(&mut tape, &scores)?;
        let n = scores.value().shape()[0];
        let loss = ops::nll_loss(
            &mut tape,
            &logp,
            (0..n).collect(),
            vec![0; n].into(),
            n.max(1) as f64,
        )
        .map_err(graphloom_nn::Error::from)?;
        drop((scores, logp));
        drop(tape.backward(&loss).map_err(graphloom_nn::Error::from)?);
        let gradients: u64 = (model.params.iter())
            .map(|p| p.value.as_bytes().len() as u64)
            .sum();
        Ok((tracker.report().total_peak as u64)
            .saturating_sub(held)
            .saturating_sub(gradients))
    };
    let step = on_probe_thread("the probe of a batch's step", run)?;
    Ok(step + block_bytes + 2 * learnt)
}
