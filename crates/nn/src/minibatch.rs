//! Mini-batch training with neighbour sampling, as a pipeline: a producer thread samples each
//! batch's blocks, gathers its input features from the store and prepares the block graphs,
//! into a bounded queue; this thread runs forward, backward and the optimizer step on one batch
//! while the producer prepares the next ones. Evaluation after each epoch is exact
//! full-neighbour inference over the whole graph.

use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::Instant;

use graphloom_comm::{Communicator, ReduceData, ReduceOp};
use graphloom_graph::sample::{CsrSource, Sampler, SamplerKind};
use graphloom_graph::{Dataset, NodeId};
use graphloom_store::{Embedding, StoreTensor};
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{DType, Tape, Tensor, Var};

use crate::model::{Architecture, LayerGraph, Mode, Model, ModelConfig};
use crate::optim::Optimizer;
use crate::train::{
    all_reduce_gradients, backward_and_step, evaluate, EpochRecord, Selection, TrainConfig,
    TrainReport,
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
    /// The input rows, gathered ahead from a feature table (`None` for an embedding table,
    /// whose rows change every step and are gathered by the compute thread).
    x: Option<Tensor>,
    graphs: Vec<LayerGraph>,
    rows: Arc<[usize]>,
    labels: Arc<[i64]>,
    sample_seconds: f64,
    gather_seconds: f64,
}

/// The seeds of each step of an epoch for worker `rank` of `ranks`: the training nodes are put
/// in an order drawn from (seed, epoch), cut into global batches of `batch_size`, and each
/// global batch into `ranks` contiguous slices. Every worker gets one slice per step (possibly
/// empty), so all run the same number of steps, and the slices of a step together are that
/// step's batch on one worker.
pub fn epoch_batches(
    train: &[usize],
    seed: u64,
    epoch: u64,
    batch_size: usize,
    rank: usize,
    ranks: usize,
) -> Vec<Vec<NodeId>> {
    let key = RngKey::new(seed, epoch, 0x5348_5546);
    let mut order: Vec<(u64, NodeId)> = train
        .iter()
        .map(|&v| (key.bits(v as u64, 0), v as NodeId))
        .collect();
    order.sort_unstable();
    let order: Vec<NodeId> = order.into_iter().map(|(_, v)| v).collect();
    order
        .chunks(batch_size.max(1))
        .map(|global| {
            let n = global.len();
            global[n * rank / ranks..n * (rank + 1) / ranks].to_vec()
        })
        .collect()
}

/// Samples and gathers one batch (`None` for an empty slice of a global batch).
fn prepare(
    ds: &Dataset,
    features: Option<&StoreTensor>,
    sampler: &mut Sampler,
    seeds: &[NodeId],
    mb: &MiniBatchConfig,
    cfg: &ModelConfig,
    seed: u64,
    epoch: u64,
) -> Result<Option<Batch>> {
    if seeds.is_empty() {
        // A Distributed gather is collective: take part with no ids.
        if let Some(f) =
            features.filter(|f| f.spec().layout == graphloom_store::Layout::Distributed)
        {
            f.gather(&[])?;
        }
        return Ok(None);
    }
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
    let x = match features {
        Some(f) => Some(f.gather(&ids)?.cast(cfg.dtype)?),
        None => None,
    };
    let gat = cfg.arch == Architecture::Gat;
    let graphs = blocks.iter().map(|b| LayerGraph::new(b, gat)).collect();
    Ok(Some(Batch {
        x,
        graphs,
        rows: (0..seeds.len()).collect(),
        labels: seeds.iter().map(|&v| ds.labels[v as usize]).collect(),
        sample_seconds: (sampled - start).as_secs_f64(),
        gather_seconds: sampled.elapsed().as_secs_f64(),
    }))
}

/// Where the first layer's input rows come from.
pub enum Inputs<'a> {
    /// Node features in the store (any layout and location, e.g. a memory-mapped file),
    /// gathered ahead by the producer thread.
    Features(&'a StoreTensor),
    /// A trainable node-embedding table, for graphs without features: its rows are gathered by
    /// the compute thread at every step, and their gradients go to its sparse optimizer (the
    /// rows' owners apply them) with learning rate `lr`.
    Embedding {
        /// The table: one row per node, as wide as the model's input.
        table: &'a mut Embedding,
        /// The sparse optimizer's learning rate.
        lr: f32,
    },
}

impl Inputs<'_> {
    fn rows(&self) -> usize {
        match self {
            Inputs::Features(f) => f.rows(),
            Inputs::Embedding { table, .. } => table.table().rows(),
        }
    }

    fn comm(&self) -> Arc<dyn Communicator> {
        match self {
            Inputs::Features(f) => f.comm().clone(),
            Inputs::Embedding { table, .. } => table.table().comm().clone(),
        }
    }
}

/// Trains `cfg` on `ds` in sampled mini-batches, with input rows from `inputs`, calling
/// `on_epoch` after every epoch.
///
/// Data parallel over the ranks of the features' communicator: each worker trains on its slice
/// of every global batch (see [`epoch_batches`]), the loss is normalised by the global batch
/// size, and the gradients are summed over the workers before every worker applies the same
/// step, so the workers hold the same parameters throughout. Collective.
pub fn train_mini_batch(
    ds: &Dataset,
    mut inputs: Inputs<'_>,
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
    if inputs.rows() != ds.graph.num_nodes() {
        return Err(Error::Config(format!(
            "{} input rows for {} nodes",
            inputs.rows(),
            ds.graph.num_nodes()
        )));
    }
    let model = Model::new(cfg.clone(), &ds.graph, tc.seed)?;
    let mut values: Vec<Tensor> = model.params.iter().map(|p| p.value.clone()).collect();
    let mut opt = Optimizer::new(tc.optimizer, tc.lr, tc.weight_decay, &values);
    let all: Vec<i64> = (0..inputs.rows() as i64).collect();
    // Evaluation reads every node's features: once, for a feature table.
    let fixed_inputs = match &inputs {
        Inputs::Features(f) => Some(Var::constant(f.gather(&all)?.cast(cfg.dtype)?)),
        Inputs::Embedding { .. } => None,
    };
    let comm = inputs.comm();
    // The producer thread gathers features over the features' communicator while this thread
    // all-reduces gradients: each needs its own communicator.
    let grad_comm = comm
        .split(0, comm.rank())
        .map_err(|e| Error::Config(format!("creating the gradient communicator: {e}")))?;
    let mut selection = Selection::default();
    let mut stages = StageSeconds::default();
    let mut step = 0u64;
    for epoch in 1..=tc.epochs {
        let start = Instant::now();
        let (rank, ranks) = (comm.rank(), comm.size());
        let features = match &inputs {
            Inputs::Features(f) => Some(*f),
            Inputs::Embedding { .. } => None,
        };
        let batches = epoch_batches(
            &ds.train_idx,
            tc.seed,
            epoch as u64,
            mb.batch_size,
            rank,
            ranks,
        );
        let global_sizes = epoch_batches(&ds.train_idx, tc.seed, epoch as u64, mb.batch_size, 0, 1)
            .iter()
            .map(Vec::len)
            .collect::<Vec<_>>();
        let (mut loss_sum, mut seen) = (0.0, 0usize);
        std::thread::scope(|scope| -> Result<()> {
            let (tx, rx) = sync_channel::<Result<Option<Batch>>>(mb.queue_depth.max(1));
            let producer = {
                let (batches, cfg) = (&batches, &cfg);
                scope.spawn(move || {
                    let mut sampler = Sampler::new(ds.graph.num_nodes());
                    for seeds in batches {
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
            for (batch, &global) in rx.into_iter().zip(&global_sizes) {
                let batch = batch?;
                let compute = Instant::now();
                step += 1;
                let _g = category_scope(Category::Activations);
                let mut tape = Tape::new();
                let vars: Vec<Var> = values.iter().map(|v| tape.leaf(v.clone(), true)).collect();
                let reduce = |grads: &mut [Tensor]| all_reduce_gradients(grad_comm.as_ref(), grads);
                let loss = match batch {
                    Some(batch) => {
                        stages.sample += batch.sample_seconds;
                        stages.gather += batch.gather_seconds;
                        let ids = batch.graphs[0].src_ids.clone();
                        let (x, table) = match (&mut inputs, batch.x) {
                            (_, Some(x)) => (Var::constant(x), None),
                            (Inputs::Embedding { table, lr }, None) => {
                                let rows = table.gather(&ids)?.cast(cfg.dtype)?;
                                (tape.leaf(rows, true), Some((table, *lr)))
                            }
                            (Inputs::Features(_), None) => {
                                unreachable!("features are gathered ahead")
                            }
                        };
                        let mode = Mode {
                            training: true,
                            seed: tc.seed,
                            step,
                        };
                        let logp =
                            model.forward_blocks(&mut tape, &x, &vars, &batch.graphs, mode)?;
                        // Normalised by the global batch: the workers' gradients sum to the
                        // gradient of the global batch's mean loss.
                        let loss = ops::nll_loss(
                            &mut tape,
                            &logp,
                            batch.rows,
                            batch.labels,
                            global as f64,
                        )?;
                        drop(logp);
                        let wants_input = table.is_some().then_some(&x);
                        let (loss, input_grad) = backward_and_step(
                            tape,
                            &loss,
                            vars,
                            &mut values,
                            &mut opt,
                            reduce,
                            wants_input,
                        )?;
                        if let Some((table, lr)) = table {
                            let grad = input_grad
                                .unwrap_or_else(|| Tensor::zeros(x.value().shape(), DType::F32))
                                .cast(DType::F32)?;
                            table.apply_gradients(&ids, &grad, lr)?;
                        }
                        loss
                    }
                    // An empty slice still takes part in the all-reduce, with zero gradients,
                    // and in the embedding table's collective gather and update.
                    None => {
                        drop((tape, vars));
                        let mut grads: Vec<Tensor> = values
                            .iter()
                            .map(|p| Tensor::zeros(p.shape(), p.dtype()))
                            .collect();
                        reduce(&mut grads)?;
                        {
                            let _g = category_scope(Category::Optimizer);
                            opt.step(&mut values, &grads)?;
                        }
                        if let Inputs::Embedding { table, lr } = &mut inputs {
                            table.gather(&[])?;
                            let width = table.dim();
                            table.apply_gradients(
                                &[],
                                &Tensor::zeros(&[0, width], DType::F32),
                                *lr,
                            )?;
                        }
                        0.0
                    }
                };
                if !loss.is_finite() {
                    return Err(Error::Config(format!(
                        "the loss became {loss} at epoch {epoch}; lower the learning rate"
                    )));
                }
                loss_sum += loss * global as f64;
                seen += global;
                stages.compute += compute.elapsed().as_secs_f64();
            }
            producer.join().expect("the producer thread does not panic");
            Ok(())
        })?;
        let seconds = start.elapsed().as_secs_f64();
        // Each worker's loss is its share of the global batches' mean: sum them.
        let mut total = [loss_sum];
        comm.all_reduce(ReduceData::F64(&mut total), ReduceOp::Sum)
            .map_err(|e| Error::Config(format!("loss all-reduce: {e}")))?;
        let loss_sum = total[0];
        let logp = match (&fixed_inputs, &mut inputs) {
            (Some(x), _) => evaluate(&model, x, &values, tc.seed)?,
            (None, Inputs::Embedding { table, .. }) => {
                let x = Var::constant(table.gather(&all)?.cast(cfg.dtype)?);
                evaluate(&model, &x, &values, tc.seed)?
            }
            (None, Inputs::Features(_)) => unreachable!("feature tables are read once"),
        };
        let loss = loss_sum / seen.max(1) as f64;
        let record = EpochRecord::measure(epoch, loss, seconds, &logp, ds);
        drop(logp);
        on_epoch(&record);
        if selection.observe(record, &values, tc.patience) {
            break;
        }
    }
    Ok((selection.into_report(model)?, stages))
}
