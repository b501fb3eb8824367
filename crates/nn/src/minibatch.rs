//! Mini-batch training with neighbour sampling, as a pipeline: a producer thread samples each
//! batch's blocks, gathers its input features from the store and prepares the block graphs,
//! into a bounded queue; this thread runs forward, backward and the optimizer step on one batch
//! while the producer prepares the next ones. Evaluation is exact full-neighbour inference
//! over the whole graph, or sampled inference on fixed subsets of the splits for graphs too
//! large for that. [`MiniBatch`] is the workload; [`crate::train::fit`] runs the loop.
//!
//! The graph is read through [`GraphData`]: a loaded [`graphloom_graph::Dataset`] or a
//! [`graphloom_graph::MappedDataset`] whose arrays stay in their files. Training builds no
//! whole-graph structure; only exact evaluation does, once, on first use.

use std::path::Path;
use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::Instant;

use graphloom_comm::{Communicator, ReduceData, ReduceOp};
use graphloom_graph::sample::{Sampler, SamplerKind};
use graphloom_graph::{GraphData, NodeId};
use graphloom_store::{Embedding, HotRows, StoreTensor};
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{DType, Tape, Tensor, Var};

use crate::inference::{infer_layerwise, InferenceInput, LayerwiseConfig};
use crate::model::{Architecture, LayerGraph, Model, ModelConfig};
use crate::train::{
    correct_predictions, fit, infer, EpochRecord, Output, SplitCounts, Steps, TrainConfig,
    TrainReport, Workload,
};
use crate::{Error, Result};

/// How batches are made and evaluated.
#[derive(Clone, Debug, Default)]
pub struct MiniBatchConfig {
    /// Fanouts from the seeds outwards (`-1`: all neighbours), one per layer.
    pub fanouts: Vec<i64>,
    /// Seeds per batch.
    pub batch_size: usize,
    /// Batches prepared ahead of the compute.
    pub queue_depth: usize,
    /// Batches per epoch (`None`: each training node once per epoch). With millions of
    /// training nodes an epoch is long; with a cap, each epoch draws its own order of the
    /// training nodes and trains on its first batches, so evaluation and snapshots come
    /// every that many batches.
    pub batches_per_epoch: Option<usize>,
    /// Evaluate by sampled inference (`None`: exact full-neighbour inference over the whole
    /// graph).
    pub sampled_eval: Option<SampledEval>,
    /// Threads of a pool of the producer's own for sampling and gathering (`None`: the
    /// global pool, shared with the compute). Reads of mapped files block their thread on
    /// the disk: in a pool of their own, many are in flight at once and none holds up the
    /// compute's threads.
    pub producer_threads: Option<usize>,
    /// Exact evaluation layer by layer in chunks under a memory budget ([`infer_layerwise`])
    /// (`None`: one forward pass over the whole graph, which holds every node's input row and
    /// the whole graph in memory).
    pub layerwise: Option<LayerwiseConfig>,
}

/// Evaluation by sampled inference: each split is evaluated on at most `nodes` of its nodes,
/// a fixed subset drawn once from the run's seed, each through neighbours sampled with
/// `fanouts` from draws that do not change between evaluations. Evaluations of one run are
/// therefore comparable, and a resumed run evaluates exactly as an uninterrupted one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampledEval {
    /// Fanouts from the evaluated nodes outwards (`-1`: all neighbours), one per layer.
    pub fanouts: Vec<i64>,
    /// Nodes evaluated per split, at most.
    pub nodes: usize,
}

/// The epoch number of evaluation's sampling draws: no training epoch reaches it.
const EVAL_EPOCH: u64 = u64::MAX;
/// The purpose of the draw that picks the evaluated nodes.
const EVAL_NODES_PURPOSE: u64 = 0x4556_414c;

/// The name of the learnt input table's files in a snapshot folder.
const EMBEDDING_PREFIX: &str = "input_embedding";

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

/// Samples with `fanouts` and gathers one batch (`None` for an empty slice of a global batch).
#[allow(clippy::too_many_arguments)]
fn prepare(
    data: GraphData<'_>,
    features: Option<&dyn RowSource>,
    sampler: &mut Sampler,
    seeds: &[NodeId],
    fanouts: &[i64],
    cfg: &ModelConfig,
    seed: u64,
    epoch: u64,
) -> Result<Option<Batch>> {
    if seeds.is_empty() {
        // A Distributed gather is collective: take part with no ids.
        if let Some(f) = features.filter(|f| f.collective()) {
            f.gather(&[])?;
        }
        return Ok(None);
    }
    let start = Instant::now();
    let blocks = sampler.sample(
        &data.source(),
        seeds,
        fanouts,
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
        labels: seeds.iter().map(|&v| data.labels[v as usize]).collect(),
        sample_seconds: (sampled - start).as_secs_f64(),
        gather_seconds: sampled.elapsed().as_secs_f64(),
    }))
}

/// A table of node features that batches gather rows from: a store table, or a store table
/// read through a cache of its hot rows ([`HotRows`]).
pub trait RowSource: Sync {
    /// Rows (nodes).
    fn rows(&self) -> usize;
    /// Rows `ids` as a `[ids.len(), columns]` tensor; collective when [`RowSource::collective`].
    fn gather(&self, ids: &[i64]) -> graphloom_store::Result<Tensor>;
    /// The communicator of the table's workers.
    fn comm(&self) -> &Arc<dyn Communicator>;
    /// Whether every worker takes part in every gather (the store's Distributed layout).
    fn collective(&self) -> bool;
}

impl RowSource for StoreTensor {
    fn rows(&self) -> usize {
        StoreTensor::rows(self)
    }
    fn gather(&self, ids: &[i64]) -> graphloom_store::Result<Tensor> {
        StoreTensor::gather(self, ids)
    }
    fn comm(&self) -> &Arc<dyn Communicator> {
        StoreTensor::comm(self)
    }
    fn collective(&self) -> bool {
        self.spec().layout == graphloom_store::Layout::Distributed
    }
}

impl RowSource for HotRows {
    fn rows(&self) -> usize {
        self.table().rows()
    }
    fn gather(&self, ids: &[i64]) -> graphloom_store::Result<Tensor> {
        HotRows::gather(self, ids)
    }
    fn comm(&self) -> &Arc<dyn Communicator> {
        self.table().comm()
    }
    fn collective(&self) -> bool {
        false
    }
}

/// Where the first layer's input rows come from.
pub enum Inputs<'a> {
    /// Node features (a store table in any layout and location, e.g. a memory-mapped file,
    /// possibly behind a row cache), gathered ahead by the producer thread.
    Features(&'a dyn RowSource),
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

/// Sampled mini-batch training as a [`Workload`]: a producer thread samples each batch's
/// blocks and gathers its input rows into a bounded queue while this thread runs the steps;
/// evaluation is exact full-neighbour inference over the whole graph, or sampled inference
/// (see [`MiniBatchConfig::sampled_eval`]).
///
/// Data parallel over the ranks of the inputs' communicator: each worker trains on its slice
/// of every global batch (see [`epoch_batches`]), the loss is normalised by the global batch
/// size, and the gradients are summed over the workers before every worker applies the same
/// step, so the workers hold the same parameters throughout. Collective.
pub struct MiniBatch<'a> {
    data: GraphData<'a>,
    inputs: Inputs<'a>,
    /// The model, built for sampled blocks: it holds no whole-graph structure.
    model: Model,
    mb: MiniBatchConfig,
    seed: u64,
    /// Exact evaluation's model over the whole graph and, from a feature table, every node's
    /// input rows: built on first use.
    exact: Option<(Model, Option<Var>)>,
    /// Sampled evaluation's nodes per split.
    eval_nodes: [Vec<NodeId>; 3],
    comm: Arc<dyn Communicator>,
    /// The producer thread gathers features over the inputs' communicator while the compute
    /// thread sums gradients: each needs its own communicator.
    grad_comm: Arc<dyn Communicator>,
    stages: StageSeconds,
    on_batch: Option<Box<dyn FnMut(usize, usize) + Send + 'a>>,
    /// The sampler, whose relabel table (a slot per node) is made once and lent to each
    /// epoch's producer thread.
    sampler: Option<Sampler>,
    /// The producer's pool, when [`MiniBatchConfig::producer_threads`] asks for one.
    producer_pool: Option<rayon::ThreadPool>,
}

impl<'a> MiniBatch<'a> {
    /// The workload of model `cfg` (parameters drawn from `seed`) on `ds`, batched as `mb`
    /// says, with input rows from `inputs`. Collective.
    pub fn new(
        data: GraphData<'a>,
        inputs: Inputs<'a>,
        cfg: ModelConfig,
        seed: u64,
        mb: &MiniBatchConfig,
    ) -> Result<MiniBatch<'a>> {
        let check_fanouts = |what: &'static str, fanouts: &[i64]| {
            if fanouts.len() == cfg.layers {
                return Ok(());
            }
            Err(Error::Mismatch {
                what,
                detail: format!(
                    "{} fanouts for a model of {} layers: give one fanout per layer",
                    fanouts.len(),
                    cfg.layers
                ),
            })
        };
        check_fanouts("fanouts and layers", &mb.fanouts)?;
        if let Some(eval) = &mb.sampled_eval {
            check_fanouts("evaluation fanouts and layers", &eval.fanouts)?;
        }
        if mb.batch_size == 0 {
            return Err(Error::InvalidSetting {
                setting: "batch size",
                reason: "must be at least 1".into(),
            });
        }
        if data.train_idx.is_empty() {
            return Err(Error::NoTrainingNodes);
        }
        if inputs.rows() != data.num_nodes() {
            return Err(Error::Mismatch {
                what: "input rows and nodes",
                detail: format!(
                    "{} input rows for {} nodes",
                    inputs.rows(),
                    data.num_nodes()
                ),
            });
        }
        let model = Model::for_blocks(cfg.clone(), seed)?;
        let eval_nodes = match &mb.sampled_eval {
            Some(eval) => [data.train_idx, data.valid_idx, data.test_idx]
                .map(|ids| evaluated_subset(ids, eval.nodes, seed)),
            None => Default::default(),
        };
        let producer_pool = match mb.producer_threads {
            Some(threads) => Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads.max(1))
                    .thread_name(|i| format!("graphloom-producer-{i}"))
                    .build()
                    .map_err(|e| Error::InvalidSetting {
                        setting: "producer threads",
                        reason: e.to_string(),
                    })?,
            ),
            None => None,
        };
        let comm = inputs.comm();
        let grad_comm = comm.split(0, comm.rank())?;
        Ok(MiniBatch {
            data,
            inputs,
            model,
            mb: mb.clone(),
            seed,
            exact: None,
            eval_nodes,
            comm,
            grad_comm,
            stages: StageSeconds::default(),
            on_batch: None,
            sampler: None,
            producer_pool,
        })
    }

    /// Sets every row of the learnt input table (one row per node, from a saved model).
    /// Collective.
    pub fn set_input_embedding(&mut self, rows: &Tensor) -> Result<()> {
        let Inputs::Embedding { table, .. } = &mut self.inputs else {
            return Err(Error::Mismatch {
                what: "an input embedding and this model",
                detail: "the model reads node features".into(),
            });
        };
        let width = table.dim();
        if rows.shape() != [table.table().rows(), width] {
            return Err(Error::Mismatch {
                what: "an input embedding and the table",
                detail: format!(
                    "shape {:?} for a table of {} x {width}",
                    rows.shape(),
                    table.table().rows()
                ),
            });
        }
        table.fill_from_whole(rows.cast(DType::F32)?.as_bytes())?;
        Ok(())
    }

    /// Calls `report(done, total)` after each step of an epoch (for a progress bar).
    pub fn on_batch(&mut self, report: impl FnMut(usize, usize) + Send + 'a) {
        self.on_batch = Some(Box::new(report));
    }

    /// Seconds spent in each stage so far.
    pub fn stages(&self) -> StageSeconds {
        self.stages
    }

    /// Runs the step of one prepared batch (`None`: this worker's slice of the global batch is
    /// empty) whose global batch has `global` seeds; returns this worker's share of the loss.
    fn step(&mut self, batch: Option<Batch>, global: usize, steps: &mut Steps<'_>) -> Result<f64> {
        let Some(batch) = batch else {
            // An empty slice still takes part in the gradient sum, and in the embedding
            // table's collective gather and update.
            steps.skip()?;
            if let Inputs::Embedding { table, lr } = &mut self.inputs {
                table.gather(&[])?;
                let width = table.dim();
                table.apply_gradients(&[], &Tensor::zeros(&[0, width], DType::F32), *lr)?;
            }
            return Ok(0.0);
        };
        self.stages.sample += batch.sample_seconds;
        self.stages.gather += batch.gather_seconds;
        let mut tape = Tape::new();
        let (vars, mode) = steps.begin(&mut tape);
        let ids = batch.graphs[0].src_ids.clone();
        let (x, table) = match (&mut self.inputs, batch.x) {
            (_, Some(x)) => (Var::constant(x), None),
            (Inputs::Embedding { table, lr }, None) => {
                let rows = table.gather(&ids)?.cast(self.model.cfg.dtype)?;
                (tape.leaf(rows, true), Some((table, *lr)))
            }
            (Inputs::Features(_), None) => unreachable!("features are gathered ahead"),
        };
        let logp = self
            .model
            .forward_blocks(&mut tape, &x, &vars, &batch.graphs, mode)?;
        // Normalised by the global batch: the workers' gradients sum to the gradient of the
        // global batch's mean loss.
        let loss = ops::nll_loss(&mut tape, &logp, batch.rows, batch.labels, global as f64)?;
        drop(logp);
        let wants_input = table.is_some().then_some(&x);
        let (loss, input_grad) = steps.finish(tape, &loss, vars, wants_input)?;
        if let Some((table, lr)) = table {
            let grad = input_grad
                .unwrap_or_else(|| Tensor::zeros(x.value().shape(), DType::F32))
                .cast(DType::F32)?;
            table.apply_gradients(&ids, &grad, lr)?;
        }
        Ok(loss)
    }
}

impl Workload for MiniBatch<'_> {
    fn fingerprint(&self) -> String {
        let input = match &self.inputs {
            Inputs::Features(_) => "features".to_string(),
            Inputs::Embedding { table, lr } => {
                format!("an input embedding {} wide (lr {lr})", table.dim())
            }
        };
        let mut text = format!(
            "mini-batches of {} seeds, fanouts {:?}, over {} nodes, {} edges, {} training \
             nodes, from {input}",
            self.mb.batch_size,
            self.mb.fanouts,
            self.data.num_nodes(),
            self.data.num_edges(),
            self.data.train_idx.len()
        );
        if let Some(b) = self.mb.batches_per_epoch {
            text += &format!(", {b} batches per epoch");
        }
        if let Some(eval) = &self.mb.sampled_eval {
            text += &format!(
                ", evaluated on {} nodes per split with fanouts {:?}",
                eval.nodes, eval.fanouts
            );
        }
        text
    }

    fn model(&self) -> &Model {
        &self.model
    }

    fn model_mut(&mut self) -> &mut Model {
        &mut self.model
    }

    fn save_state(&mut self, dir: &Path) -> Result<()> {
        if let Inputs::Embedding { table, .. } = &self.inputs {
            table.save(&dir.join(EMBEDDING_PREFIX))?;
        }
        Ok(())
    }

    fn restore_state(&mut self, dir: &Path, saved_workers: usize) -> Result<()> {
        if let Inputs::Embedding { table, .. } = &mut self.inputs {
            table.restore(&dir.join(EMBEDDING_PREFIX), saved_workers)?;
        }
        Ok(())
    }

    fn input_embedding(&mut self) -> Result<Option<Tensor>> {
        match &mut self.inputs {
            Inputs::Embedding { table, .. } => {
                let all: Vec<i64> = (0..table.table().rows() as i64).collect();
                Ok(Some(table.gather(&all)?))
            }
            Inputs::Features(_) => Ok(None),
        }
    }

    fn gradient_comm(&self) -> Option<Arc<dyn Communicator>> {
        Some(self.grad_comm.clone())
    }

    fn train_epoch(&mut self, epoch: usize, steps: &mut Steps<'_>) -> Result<f64> {
        let (rank, ranks) = (self.comm.rank(), self.comm.size());
        let (data, seed, epoch) = (self.data, self.seed, epoch as u64);
        let cap = self.mb.batches_per_epoch.unwrap_or(usize::MAX);
        let mut batches =
            epoch_batches(data.train_idx, seed, epoch, self.mb.batch_size, rank, ranks);
        batches.truncate(cap);
        let global_sizes: Vec<usize> =
            epoch_batches(data.train_idx, seed, epoch, self.mb.batch_size, 0, 1)
                .iter()
                .take(cap)
                .map(Vec::len)
                .collect();
        let features = match &self.inputs {
            Inputs::Features(f) => Some(*f),
            Inputs::Embedding { .. } => None,
        };
        let (mb, cfg) = (self.mb.clone(), self.model.cfg.clone());
        let (mut loss_sum, mut seen) = (0.0, 0usize);
        let mut sampler = self
            .sampler
            .take()
            .unwrap_or_else(|| Sampler::new(data.num_nodes()));
        // Lent to the producer thread for the epoch, like the sampler.
        let pool = self.producer_pool.take();
        let result = std::thread::scope(|scope| -> Result<()> {
            let (tx, rx) = sync_channel::<Result<Option<Batch>>>(mb.queue_depth.max(1));
            let producer = {
                let (batches, mb, cfg, sampler) = (&batches, &mb, &cfg, &mut sampler);
                let pool = pool.as_ref();
                scope.spawn(move || {
                    for seeds in batches {
                        let batch = in_pool(pool, || {
                            prepare(
                                data,
                                features,
                                sampler,
                                seeds,
                                &mb.fanouts,
                                cfg,
                                seed,
                                epoch,
                            )
                        });
                        let failed = batch.is_err();
                        if tx.send(batch).is_err() || failed {
                            break;
                        }
                    }
                })
            };
            let total = global_sizes.len();
            for (done, (batch, &global)) in rx.into_iter().zip(&global_sizes).enumerate() {
                let compute = Instant::now();
                let loss = self.step(batch?, global, steps)?;
                loss_sum += loss * global as f64;
                seen += global;
                self.stages.compute += compute.elapsed().as_secs_f64();
                if let Some(report) = &mut self.on_batch {
                    report(done + 1, total);
                }
            }
            producer.join().expect("the producer thread does not panic");
            Ok(())
        });
        self.producer_pool = pool;
        self.sampler = Some(sampler);
        result?;
        // Each worker's loss is its share of the global batches' mean: sum them.
        let mut total = [loss_sum];
        self.comm
            .all_reduce(ReduceData::F64(&mut total), ReduceOp::Sum)?;
        Ok(total[0] / seen.max(1) as f64)
    }

    fn evaluate(&mut self, params: &[Tensor]) -> Result<SplitCounts> {
        if self.mb.sampled_eval.is_some() {
            return self.evaluate_sampled(params);
        }
        if let Some(layerwise) = &self.mb.layerwise {
            let table;
            let input = match &mut self.inputs {
                Inputs::Features(f) => InferenceInput::Rows(*f),
                Inputs::Embedding { table: t, .. } => {
                    let all: Vec<i64> = (0..t.table().rows() as i64).collect();
                    table = t.gather(&all)?;
                    InferenceInput::Tensor(&table)
                }
            };
            let d = self.data;
            let logp = infer_layerwise(
                &self.model,
                d,
                input,
                params,
                Output::LogProbabilities,
                layerwise,
            )?;
            // Every worker evaluates the whole graph: its counts are the job's.
            let mut counts = SplitCounts::default();
            for (s, ids) in [d.train_idx, d.valid_idx, d.test_idx].iter().enumerate() {
                let labels: Vec<i64> = ids.iter().map(|&v| d.labels[v]).collect();
                counts.correct[s] = correct_predictions(&logp.gather(ids)?, &labels);
                counts.total[s] = ids.len() as f64;
            }
            return Ok(counts);
        }
        if self.exact.is_none() {
            // Exact evaluation needs the whole graph and every node's input rows: built once.
            let model = Model::new(self.model.cfg.clone(), &self.data.to_csr(), self.seed)?;
            let fixed = match &self.inputs {
                Inputs::Features(f) => {
                    let all: Vec<i64> = (0..f.rows() as i64).collect();
                    Some(Var::constant(f.gather(&all)?.cast(self.model.cfg.dtype)?))
                }
                Inputs::Embedding { .. } => None,
            };
            self.exact = Some((model, fixed));
        }
        let (model, fixed) = self.exact.as_ref().expect("built above");
        let logp = match (fixed, &mut self.inputs) {
            (Some(x), _) => infer(model, x, params, Output::LogProbabilities)?,
            (None, Inputs::Embedding { table, .. }) => {
                let all: Vec<i64> = (0..table.table().rows() as i64).collect();
                let x = Var::constant(table.gather(&all)?.cast(self.model.cfg.dtype)?);
                infer(model, &x, params, Output::LogProbabilities)?
            }
            (None, Inputs::Features(_)) => unreachable!("feature tables are read once"),
        };
        // Every worker evaluates the whole graph: its counts are the job's.
        let d = self.data;
        Ok(SplitCounts::of(
            &logp,
            d.labels,
            [d.train_idx, d.valid_idx, d.test_idx],
        ))
    }
}

impl MiniBatch<'_> {
    /// Sampled inference on each split's evaluated nodes, in batches whose seeds the workers
    /// share out as they do in training; the counts are summed over the workers. Collective.
    fn evaluate_sampled(&mut self, params: &[Tensor]) -> Result<SplitCounts> {
        let eval = self
            .mb
            .sampled_eval
            .clone()
            .expect("called for sampled evaluation");
        let (rank, ranks) = (self.comm.rank(), self.comm.size());
        let mut sampler = self
            .sampler
            .take()
            .unwrap_or_else(|| Sampler::new(self.data.num_nodes()));
        let vars: Vec<Var> = params.iter().map(|v| Var::constant(v.clone())).collect();
        let mut counts = SplitCounts::default();
        for (split, nodes) in self.eval_nodes.iter().enumerate() {
            counts.total[split] = nodes.len() as f64;
            for global in nodes.chunks(self.mb.batch_size.max(1)) {
                let n = global.len();
                let seeds = &global[n * rank / ranks..n * (rank + 1) / ranks];
                let features = match &self.inputs {
                    Inputs::Features(f) => Some(*f),
                    Inputs::Embedding { .. } => None,
                };
                let cfg = &self.model.cfg;
                let (data, seed) = (self.data, self.seed);
                let batch = in_pool(self.producer_pool.as_ref(), || {
                    prepare(
                        data,
                        features,
                        &mut sampler,
                        seeds,
                        &eval.fanouts,
                        cfg,
                        seed,
                        EVAL_EPOCH,
                    )
                })?;
                let Some(batch) = batch else {
                    // An empty slice still takes part in the embedding table's gather.
                    if let Inputs::Embedding { table, .. } = &mut self.inputs {
                        table.gather(&[])?;
                    }
                    continue;
                };
                let x = match (&batch.x, &mut self.inputs) {
                    (Some(x), _) => x.clone(),
                    (None, Inputs::Embedding { table, .. }) => {
                        table.gather(&batch.graphs[0].src_ids)?.cast(cfg.dtype)?
                    }
                    (None, Inputs::Features(_)) => unreachable!("features are gathered by prepare"),
                };
                let mut tape = Tape::no_grad();
                let logp = self.model.forward_blocks(
                    &mut tape,
                    &Var::constant(x),
                    &vars,
                    &batch.graphs,
                    crate::model::Mode::inference(),
                )?;
                counts.correct[split] += correct_predictions(logp.value(), &batch.labels);
            }
        }
        self.sampler = Some(sampler);
        // Totals are the job's already; correct predictions are summed over the workers.
        let mut correct = counts.correct;
        self.comm
            .all_reduce(ReduceData::F64(&mut correct), ReduceOp::Sum)?;
        counts.correct = correct;
        Ok(counts)
    }
}

/// Runs `work` in `pool` when there is one (its parallel loops then use that pool's threads),
/// else on this thread with the global pool.
fn in_pool<T: Send>(pool: Option<&rayon::ThreadPool>, work: impl FnOnce() -> T + Send) -> T {
    match pool {
        Some(pool) => pool.install(work),
        None => work(),
    }
}

/// At most `limit` of `ids`, drawn once from `seed` and sorted: sampled evaluation's nodes.
fn evaluated_subset(ids: &[usize], limit: usize, seed: u64) -> Vec<NodeId> {
    let key = RngKey::new(seed, 0, EVAL_NODES_PURPOSE);
    let mut order: Vec<(u64, NodeId)> = ids
        .iter()
        .map(|&v| (key.bits(v as u64, 0), v as NodeId))
        .collect();
    if order.len() > limit {
        order.select_nth_unstable(limit);
        order.truncate(limit);
    }
    let mut nodes: Vec<NodeId> = order.into_iter().map(|(_, v)| v).collect();
    nodes.sort_unstable();
    nodes
}

/// Trains `cfg` on `data` in sampled mini-batches ([`MiniBatch`] under [`fit`]), with input
/// rows from `inputs`, calling `on_epoch` after every epoch. Collective.
pub fn train_mini_batch(
    data: GraphData<'_>,
    inputs: Inputs<'_>,
    cfg: ModelConfig,
    tc: &TrainConfig,
    mb: &MiniBatchConfig,
    on_epoch: impl FnMut(&EpochRecord),
) -> Result<(TrainReport, StageSeconds)> {
    let mut workload = MiniBatch::new(data, inputs, cfg, tc.seed, mb)?;
    let report = fit(&mut workload, tc, on_epoch)?;
    Ok((report, workload.stages()))
}
