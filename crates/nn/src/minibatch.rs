//! Mini-batch training with neighbour sampling, as a pipeline: a producer thread samples each
//! batch's blocks, gathers its input features from the store and prepares the block graphs,
//! into a bounded queue; this thread runs forward, backward and the optimizer step on one batch
//! while the producer prepares the next ones. Evaluation after each epoch is exact
//! full-neighbour inference over the whole graph.

use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::Instant;

use graphloom_graph::sample::{CsrSource, Sampler, SamplerKind};
use graphloom_graph::{Dataset, NodeId};
use graphloom_store::StoreTensor;
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::memory::{category_scope, thread_tracker, Category};
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{RssReport, Tape, Tensor, Var};

use crate::model::{Architecture, LayerGraph, Mode, Model, ModelConfig};
use crate::optim::Optimizer;
use crate::train::{
    accuracy, backward_and_step, evaluate, EpochRecord, Selection, TrainConfig, TrainReport,
};
use crate::{Error, Result};

/// How batches are made.
#[derive(Clone, Debug)]
pub struct MiniBatchConfig {
    /// Fanouts from the seeds outwards (`-1`: all neighbours), one per layer.
    pub fanouts: Vec<i64>,
    /// Seeds per batch.
    pub batch_size: usize,
    /// Batches prepared ahead of the compute.
    pub queue_depth: usize,
}

/// Seconds spent in each stage over a run (sampling and gathering overlap the compute).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageSeconds {
    /// Sampling blocks.
    pub sample: f64,
    /// Gathering input features from the store and building the block graphs.
    pub gather: f64,
    /// Forward, backward and optimizer steps.
    pub compute: f64,
}

/// One prepared batch.
struct Batch {
    x: Tensor,
    graphs: Vec<LayerGraph>,
    rows: Arc<[usize]>,
    labels: Arc<[i64]>,
    sample_seconds: f64,
    gather_seconds: f64,
}

/// The training nodes in this epoch's order: sorted by a counter-based key of (seed, epoch).
fn epoch_order(train: &[usize], seed: u64, epoch: u64) -> Vec<NodeId> {
    let key = RngKey::new(seed, epoch, 0x5348_5546);
    let mut order: Vec<(u64, NodeId)> = train
        .iter()
        .map(|&v| (key.bits(v as u64, 0), v as NodeId))
        .collect();
    order.sort_unstable();
    order.into_iter().map(|(_, v)| v).collect()
}

/// Samples and gathers one batch.
fn prepare(
    ds: &Dataset,
    features: &StoreTensor,
    sampler: &mut Sampler,
    seeds: &[NodeId],
    mb: &MiniBatchConfig,
    cfg: &ModelConfig,
    seed: u64,
    epoch: u64,
) -> Result<Batch> {
    let start = Instant::now();
    let blocks = sampler.sample(
        &CsrSource::new(&ds.graph),
        seeds,
        &mb.fanouts,
        SamplerKind::Uniform,
        seed,
        epoch,
    )?;
    let sampled = Instant::now();
    let ids: Vec<i64> = blocks[0].src_nodes.iter().map(|&v| i64::from(v)).collect();
    let x = features.gather(&ids)?.cast(cfg.dtype)?;
    let gat = cfg.arch == Architecture::Gat;
    let graphs = blocks.iter().map(|b| LayerGraph::new(b, gat)).collect();
    Ok(Batch {
        x,
        graphs,
        rows: (0..seeds.len()).collect(),
        labels: seeds.iter().map(|&v| ds.labels[v as usize]).collect(),
        sample_seconds: (sampled - start).as_secs_f64(),
        gather_seconds: sampled.elapsed().as_secs_f64(),
    })
}

/// Trains `cfg` on `ds` in sampled mini-batches, with input features read from `features` (any
/// layout and location, e.g. a memory-mapped file), calling `on_epoch` after every epoch.
pub fn train_mini_batch(
    ds: &Dataset,
    features: &StoreTensor,
    cfg: ModelConfig,
    tc: &TrainConfig,
    mb: &MiniBatchConfig,
    mut on_epoch: impl FnMut(&EpochRecord),
) -> Result<(TrainReport, StageSeconds)> {
    if mb.fanouts.len() != cfg.layers {
        return Err(Error::Config(format!(
            "{} fanouts for a model of {} layers: give one fanout per layer",
            mb.fanouts.len(),
            cfg.layers
        )));
    }
    if mb.batch_size == 0 || ds.train_idx.is_empty() {
        return Err(Error::Config(
            "the batch size and the training set must not be empty".into(),
        ));
    }
    if features.rows() != ds.graph.num_nodes() {
        return Err(Error::Config(format!(
            "{} feature rows for {} nodes",
            features.rows(),
            ds.graph.num_nodes()
        )));
    }
    let mut model = Model::new(cfg.clone(), &ds.graph, tc.seed)?;
    let mut values: Vec<Tensor> = model.params.iter().map(|p| p.value.clone()).collect();
    let mut opt = Optimizer::new(tc.optimizer, tc.lr, tc.weight_decay, &values);
    // Evaluation reads every node's features once per epoch.
    let all: Vec<i64> = (0..features.rows() as i64).collect();
    let x_all = Var::constant(features.gather(&all)?.cast(cfg.dtype)?);
    let mut selection = Selection::default();
    let mut stages = StageSeconds::default();
    let mut step = 0u64;
    for epoch in 1..=tc.epochs {
        let start = Instant::now();
        let order = epoch_order(&ds.train_idx, tc.seed, epoch as u64);
        let (mut loss_sum, mut seen) = (0.0, 0usize);
        std::thread::scope(|scope| -> Result<()> {
            let (tx, rx) = sync_channel::<Result<Batch>>(mb.queue_depth.max(1));
            let producer = {
                let (order, cfg) = (&order, &cfg);
                scope.spawn(move || {
                    let mut sampler = Sampler::new(ds.graph.num_nodes());
                    for seeds in order.chunks(mb.batch_size) {
                        let batch = prepare(
                            ds,
                            features,
                            &mut sampler,
                            seeds,
                            mb,
                            cfg,
                            tc.seed,
                            epoch as u64,
                        );
                        let failed = batch.is_err();
                        if tx.send(batch).is_err() || failed {
                            break;
                        }
                    }
                })
            };
            for batch in rx {
                let batch = batch?;
                stages.sample += batch.sample_seconds;
                stages.gather += batch.gather_seconds;
                let compute = Instant::now();
                step += 1;
                let _g = category_scope(Category::Activations);
                let mut tape = Tape::new();
                let vars: Vec<Var> = values.iter().map(|v| tape.leaf(v.clone(), true)).collect();
                let x = Var::constant(batch.x);
                let mode = Mode {
                    training: true,
                    seed: tc.seed,
                    step,
                };
                let logp = model.forward_blocks(&mut tape, &x, &vars, &batch.graphs, mode)?;
                let n = batch.rows.len();
                let loss = ops::nll_loss(&mut tape, &logp, batch.rows, batch.labels, n as f64)?;
                drop(logp);
                let loss = backward_and_step(tape, &loss, vars, &mut values, &mut opt)?;
                if !loss.is_finite() {
                    return Err(Error::Config(format!(
                        "the loss became {loss} at epoch {epoch}; lower the learning rate"
                    )));
                }
                loss_sum += loss * n as f64;
                seen += n;
                stages.compute += compute.elapsed().as_secs_f64();
            }
            producer.join().expect("the producer thread does not panic");
            Ok(())
        })?;
        let seconds = start.elapsed().as_secs_f64();
        let logp = evaluate(&model, &x_all, &values, tc.seed)?;
        let record = EpochRecord {
            epoch,
            loss: loss_sum / seen.max(1) as f64,
            train_acc: accuracy(&logp, &ds.labels, &ds.train_idx),
            val_acc: accuracy(&logp, &ds.labels, &ds.valid_idx),
            test_acc: accuracy(&logp, &ds.labels, &ds.test_idx),
            seconds,
            peak_bytes: thread_tracker().report().total_peak,
        };
        drop(logp);
        on_epoch(&record);
        if selection.observe(record, &values, tc.patience) {
            break;
        }
    }
    let (records, best_epoch, best_val_acc, test_acc, best_values) = selection.finish()?;
    for (p, v) in model.params.iter_mut().zip(best_values) {
        p.value = v;
    }
    Ok((
        TrainReport {
            epochs: records,
            best_epoch,
            best_val_acc,
            test_acc,
            best_params: model.params,
            memory: thread_tracker().report(),
            rss: RssReport::read(),
        },
        stages,
    ))
}
