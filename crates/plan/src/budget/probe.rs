//! The probe of a model's activations: one full-batch epoch on a small generated graph of the
//! run's widths and degree, under a memory tracker of its own.

use std::path::Path;

use graphloom_comm::Local;
use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::sample::Block;
use graphloom_graph::Meta;
use graphloom_nn::inference::Output;
use graphloom_nn::task::Targets;
use graphloom_nn::train::{fit, FullBatch, TrainConfig, Workload};
use graphloom_nn::{GraphInput, Head, LayerGraph, Mode, Model, ModelConfig};
use graphloom_store::{Layout, Location, StoreSpec, StoreTensor};
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::memory::{category_scope, set_thread_tracker, Category, MemoryTracker};
use graphloom_tensor::{DType, Tensor};
use graphloom_tensor::{Tape, Var};

use crate::{PlanError, Result};

/// Nodes of the probe graph that measures the activations per node.
const PROBE_NODES: usize = 1024;
/// The probe graph's average degree at most (GAT keeps a score per edge, so the degree
/// matters; the probe stays small).
const PROBE_MAX_DEGREE: usize = 64;

/// What the probe of a model measured (see the module docs).
pub(crate) struct Probe {
    /// Bytes of activations and gradients a training step holds per node (or evaluation,
    /// when it holds more).
    pub(super) per_node: f64,
    /// Bytes an evaluation pass (inference, no gradients) holds per node.
    pub(super) eval_per_node: f64,
    /// Bytes per node that a run over the whole graph keeps from one epoch to the next,
    /// beyond the step: the aggregation of the input features, which evaluation keeps for the
    /// next (the features do not change), while the next training step aggregates their
    /// dropped-out rows anew. A batch's graph, and with it that aggregation, lasts one step.
    pub(super) held_per_node: f64,
    /// The probe's own peak, held while the plan is made.
    pub(super) peak: u64,
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
    // Charged as features, as a run's are: the model keeps its aggregation of features.
    let _g = category_scope(Category::Features);
    Ok(Some(table.gather(&ids)?))
}

/// Trains one full-batch epoch of `model` on small generated graphs of average degree
/// `avg_degree` (with `rows` as their features when given) under trackers of their own, and
/// returns the bytes per node a step holds beyond the features and the graph's view.
///
/// Two graphs, of all the rows and of the first half: the bytes per node are the difference
/// of their peaks over the difference of their nodes. What does not grow with the nodes (the
/// parameters, their gradients, the optimizer's state, made during the step) cancels out. On
/// one graph it had to be subtracted, and its peak is not what it held at the step's peak:
/// with a probe graph of 1024 nodes the parameters of a 512-wide input outweigh the
/// activations, and full-batch GraphSAGE on 100,000 nodes was predicted at a third of its
/// step (106 MiB against 310 MiB tracked).
pub(crate) fn probe(model: &ModelConfig, avg_degree: f64, rows: Option<&Tensor>) -> Result<Probe> {
    // Each graph needs two nodes at least; a dataset that small is probed on generated rows.
    let rows = rows.filter(|r| r.shape()[0] >= 4);
    let nodes = rows.map_or(PROBE_NODES, |r| r.shape()[0]);
    let half = match rows {
        Some(r) => Some(r.rows(0, nodes / 2).map_err(graphloom_nn::Error::from)?),
        None => None,
    };
    let small = measure(model, avg_degree, nodes / 2, half.as_ref())?;
    let large = measure(model, avg_degree, nodes, rows)?;
    let per_node =
        |small: u64, large: u64| large.saturating_sub(small) as f64 / (nodes - nodes / 2) as f64;
    // The rows it was given are held while it runs.
    let given = rows.map_or(0, |r| r.as_bytes().len() as u64);
    Ok(Probe {
        per_node: per_node(small.step, large.step),
        eval_per_node: per_node(small.eval, large.eval),
        held_per_node: per_node(small.held, large.held),
        peak: large.peak + given,
    })
}

/// Trains one step of `model` on the sampled batch of `blocks` (generated input rows of the
/// model's width, every seed of class 0) under a tracker of its own, and returns the bytes the
/// step holds at its peak beyond the batch's input rows, its layer graphs and the parameters'
/// gradients (the batch and the model are parts of their own in the plan).
///
/// Measured on a batch the run's sampler drew, because what a layer keeps depends on where it
/// projects: GAT projects every source row of a block to its output width before attending,
/// GraphSAGE aggregates first, and a sampled block reads many more rows than it writes. Rows
/// weighted by widths from a full-batch probe put sampled GAT at a third of its step.
pub(crate) fn probe_step(model: &ModelConfig, blocks: &[Block]) -> Result<u64> {
    let Some(first) = blocks.first() else {
        return Ok(0);
    };
    let mut cfg = model.clone();
    // As in `measure`: a link head's decoder is probed on pairs, apart.
    cfg.head = Head::NodeClasses;
    let run = || -> Result<u64> {
        let tracker = MemoryTracker::new();
        set_thread_tracker(tracker.clone());
        let m = Model::new(cfg.clone(), 0)?;
        // GINE's edge rows: each block's edges numbered from 0 over rows of one value.
        let most_edges = blocks.iter().map(Block::num_edges).max().unwrap_or(0);
        let edge_rows = Tensor::full(&[most_edges, cfg.edge_dim], cfg.dtype, 0.5)
            .map_err(graphloom_nn::Error::from)?;
        let graphs = blocks
            .iter()
            .map(|b| {
                let numbered = Block {
                    edge_ids: (0..b.num_edges() as i64).collect(),
                    ..b.clone()
                };
                LayerGraph::new(&numbered, cfg.arch, Some(&edge_rows), cfg.dtype)
            })
            .collect::<graphloom_nn::Result<Vec<_>>>()?;
        let x = Tensor::full(&[first.src_nodes.len(), cfg.in_dim], cfg.dtype, 0.5)
            .map_err(graphloom_nn::Error::from)?;
        let seeds = blocks.last().map_or(0, |b| b.num_dst);
        let held = tracker.report().total_current as u64;
        let mut tape = Tape::new();
        let vars: Vec<Var> = m
            .params
            .iter()
            .map(|p| tape.leaf(p.value.clone(), true))
            .collect();
        let mode = Mode {
            training: true,
            seed: 0,
            step: 1,
        };
        let out = m.forward(
            &mut tape,
            &Var::constant(x),
            &vars,
            GraphInput::Blocks(&graphs),
            mode,
        )?;
        let targets = Targets::first_rows(vec![0; seeds].into());
        let loss = targets.loss(&m, &mut tape, &out, &vars, seeds.max(1) as f64)?;
        drop(out);
        drop(tape.backward(&loss).map_err(graphloom_nn::Error::from)?);
        let gradients: u64 = m
            .params
            .iter()
            .map(|p| p.value.as_bytes().len() as u64)
            .sum();
        Ok((tracker.report().total_peak as u64)
            .saturating_sub(held)
            .saturating_sub(gradients))
    };
    on_probe_thread("the probe of a batch's step", run)
}

/// Pairs the pair probe scores in its larger count (half as many in the smaller).
const PROBE_PAIRS: usize = 8192;
/// Rows of the embeddings the pair probe's pairs index.
const PROBE_PAIR_ROWS: usize = 64;

/// What a link predictor's decoder holds per scored pair, measured (see [`probe_pairs`]).
pub(crate) struct PairProbe {
    /// In a training step: the pair product, the decoder's activations, the score, and their
    /// gradients.
    pub(super) train: f64,
    /// In an evaluation pass, without gradients.
    pub(super) eval: f64,
}

/// Scores pairs of rows of generated embeddings with `model`'s decoder, with a backward pass
/// and without, twice (`PROBE_PAIRS` pairs and half as many) under trackers of their own:
/// the bytes per pair are the difference of the peaks over the difference of the pairs, so
/// the parameters and the embeddings cancel out. What a pair costs depends on the decoder
/// (an MLP keeps two activations of the embeddings' width besides the product), the width
/// and the dtype, which a formula would have to follow op by op.
pub(crate) fn probe_pairs(model: &ModelConfig) -> Result<PairProbe> {
    let per_pair = |grad: bool| -> Result<f64> {
        let small = measure_pairs(model, PROBE_PAIRS / 2, grad)?;
        let large = measure_pairs(model, PROBE_PAIRS, grad)?;
        Ok(large.saturating_sub(small) as f64 / (PROBE_PAIRS - PROBE_PAIRS / 2) as f64)
    };
    Ok(PairProbe {
        train: per_pair(true)?,
        eval: per_pair(false)?,
    })
}

/// The peak tracked bytes of scoring `pairs` pairs (and, with `grad`, the loss's backward
/// pass) beyond the model and the embeddings, on a thread of its own.
fn measure_pairs(model: &ModelConfig, pairs: usize, grad: bool) -> Result<u64> {
    let run = || -> Result<u64> {
        let tracker = MemoryTracker::new();
        set_thread_tracker(tracker.clone());
        let m = Model::new(model.clone(), 0)?;
        let width = model.out_dim.max(1);
        let values = vec![0.5; PROBE_PAIR_ROWS * width];
        let h = Tensor::from_f64(&values, &[PROBE_PAIR_ROWS, width], model.dtype)
            .map_err(graphloom_nn::Error::from)?;
        let mut tape = if grad { Tape::new() } else { Tape::no_grad() };
        let h = tape.leaf(h, grad);
        let vars: Vec<Var> = m
            .params
            .iter()
            .map(|p| tape.leaf(p.value.clone(), grad))
            .collect();
        let held = tracker.report().total_current as u64;
        let ends = |step: usize| -> std::sync::Arc<[usize]> {
            (0..pairs).map(|i| i * step % PROBE_PAIR_ROWS).collect()
        };
        let scores = m.link_scores(&mut tape, &h, &vars, ends(1), ends(7))?;
        if grad {
            let labels = (0..pairs).map(|i| (i % 2) as f64).collect();
            let loss = ops::bce_with_logits(&mut tape, &scores, labels, pairs as f64)
                .map_err(graphloom_nn::Error::from)?;
            drop(tape.backward(&loss).map_err(graphloom_nn::Error::from)?);
        }
        Ok((tracker.report().total_peak as u64).saturating_sub(held))
    };
    on_probe_thread("the probe of the decoder's memory", run)
}

/// What one probe epoch held: its step and an evaluation pass beyond the features and the
/// graph's view, and its own peak.
struct Measured {
    step: u64,
    eval: u64,
    held: u64,
    peak: u64,
}

/// One full-batch epoch and one evaluation pass of `model` on a generated graph of `nodes`
/// nodes (`rows` as its features when given), each under a tracker of its own.
fn measure(
    model: &ModelConfig,
    avg_degree: f64,
    nodes: usize,
    rows: Option<&Tensor>,
) -> Result<Measured> {
    let mut cfg = model.clone();
    // The probe classifies nodes: a link head's decoder works on pairs, not on nodes.
    cfg.head = Head::NodeClasses;
    let degree = (avg_degree.round() as usize).clamp(1, PROBE_MAX_DEGREE.min(nodes - 1));
    on_probe_thread("the probe of the model's memory", || -> Result<Measured> {
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
        // Charged as features (a cast is a new tensor), as a run's are: the model keeps
        // its aggregation of features, not of other inputs.
        let features = category_scope(Category::Features);
        ds.features = ds
            .features
            .cast(cfg.dtype)
            .map_err(graphloom_nn::Error::from)?;
        if cfg.edge_dim > 0 {
            let edges = ds.graph.num_edges();
            ds.edge_features = Some(
                Tensor::full(&[edges, cfg.edge_dim], DType::F32, 0.5)
                    .map_err(graphloom_nn::Error::from)?,
            );
        }
        drop(features);
        let held = tracker.report().total_current as u64;
        let mut workload = FullBatch::new(&ds, cfg.clone(), 0)?;
        let train = TrainConfig {
            epochs: 1,
            ..Default::default()
        };
        fit(&mut workload, &train, |_| {})?;
        let r = tracker.report();
        // The graph's view is a part of its own in the plan (`view_bytes`).
        let step = (r.total_peak as u64)
            .saturating_sub(held)
            .saturating_sub(r.peak_of(Category::Graph) as u64);
        // What the epoch left (the parameters and their state, which cancel out between
        // the two graphs, and what evaluation keeps for the next epoch).
        let left = (r.total_current as u64)
            .saturating_sub(held)
            .saturating_sub(r.current_of(Category::Graph) as u64);
        // An evaluation pass alone, under a tracker of its own.
        let params: Vec<Tensor> = workload.params().iter().map(|p| p.value.clone()).collect();
        let eval = MemoryTracker::new();
        set_thread_tracker(eval.clone());
        drop(workload.infer(&params, Output::LogProbabilities)?);
        Ok(Measured {
            step,
            eval: eval.report().total_peak as u64,
            held: left,
            peak: r.total_peak as u64,
        })
    })
}

/// Runs the probe `run` (named `what` in its error) on a kernel thread of its own, whose
/// memory tracker it sets without touching the caller's; a thread that cannot start (no room
/// left for its stack) or a probe that panics fails the budget's check in one line.
pub(super) fn on_probe_thread<T: Send>(
    what: &str,
    run: impl FnOnce() -> Result<T> + Send,
) -> Result<T> {
    std::thread::scope(|s| {
        graphloom_tensor::threads::builder()
            .and_then(|b| b.spawn_scoped(s, run))
            .map_err(|e| {
                PlanError::invalid(
                    "memory_gib",
                    format!("could not be checked: the probe's thread could not start: {e}"),
                )
            })?
            .join()
            .unwrap_or_else(|_| {
                Err(PlanError::invalid(
                    "memory_gib",
                    format!("could not be checked: {what} failed"),
                ))
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::model_bytes;
    use graphloom_nn::{Architecture, OptimizerKind};

    /// The plan's step (the bytes per node the probe measured, times the nodes) and its model
    /// part (the parameters, their gradients and Adam's state) together come within a tenth of
    /// what an epoch on a graph eight times the probe's holds. With a 512-wide input the
    /// parameters outweigh the probe graph's activations; subtracting their peak from the
    /// probe's peak left GraphSAGE's bytes per node at a third.
    #[test]
    fn the_bytes_per_node_predict_the_step_of_a_larger_graph() {
        for arch in [Architecture::Sage, Architecture::Gcn, Architecture::Gat] {
            let mut m = ModelConfig::of(arch);
            m.in_dim = 512;
            m.out_dim = 16;
            (m.hidden, m.heads) = match arch {
                Architecture::Gat => (64, 4),
                _ => (256, 1),
            };
            let probe = probe(&m, 10.0, None).unwrap();
            let nodes = 8 * PROBE_NODES;
            let measured = measure(&m, 10.0, nodes, None).unwrap().step as f64;
            let predicted = probe.per_node * nodes as f64
                + model_bytes(&m, OptimizerKind::Adam).unwrap() as f64;
            assert!(
                (predicted - measured).abs() <= 0.1 * measured,
                "{arch:?}: predicted {:.2} MiB, measured {:.2} MiB",
                predicted / (1 << 20) as f64,
                measured / (1 << 20) as f64
            );
        }
    }

    /// The probe takes a dataset's own rows, and a dataset may have only a few.
    #[test]
    fn a_dataset_of_a_few_nodes_is_probed() {
        let mut m = ModelConfig::of(Architecture::Gcn);
        (m.in_dim, m.out_dim) = (4, 2);
        for n in 1..6 {
            let rows = Tensor::zeros(&[n, 4], DType::F32);
            let probe = probe(&m, 1.0, Some(&rows));
            assert!(probe.is_ok(), "{n} rows: {:?}", probe.err());
        }
    }
}
