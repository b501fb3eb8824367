//! Mini-batch training with neighbour sampling: the [`MiniBatch`] workload of
//! [`crate::train::fit`]. Its batches come from the [`crate::batches`] stream: a producer
//! samples each batch's blocks, gathers its input rows from the store and prepares the block
//! graphs ahead of the compute, which runs forward, backward and the optimizer step on one
//! batch while the next ones are made. Evaluation is exact full-neighbour inference over the
//! whole graph (in one pass, or layer by layer within a memory budget), or sampled inference
//! on fixed subsets of the splits for graphs too large for that.
//!
//! The graph is read through [`GraphData`]: a loaded [`graphloom_graph::Dataset`] or a
//! [`graphloom_graph::MappedDataset`] whose arrays stay in their files. Training builds no
//! whole-graph structure; only exact evaluation in one pass does, once, on first use.

pub(crate) mod evaluate;
use evaluate::evaluated_subset;
mod subgraph;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use graphloom_comm::{Communicator, ReduceData, ReduceOp};
use graphloom_graph::sample::{Fanouts, Sampler};
use graphloom_graph::{GraphData, NodeId};
use graphloom_store::RowSource;
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{DType, Tape, Tensor, Var};

use crate::batches::{
    producer_pool, rank_slice, sample_batch, BatchStream, SampledBatch, StreamSettings,
    DEFAULT_QUEUE_DEPTH,
};
use crate::inference::{
    infer, infer_layerwise, InferenceInput, LayerRows, LayerwiseConfig, Output,
};
pub use crate::inputs::Inputs;
use crate::kernels::aggregate::GcnNorm;
use crate::layers::Aggregation;
use crate::link::exclude_pairs;
use crate::model::{GraphInput, LayerGraph, Mode, Model, ModelConfig, NodeGraph, Param};
use crate::task::{EvaluationSource, Targets, Task, TaskBatch};
use crate::train::{
    correct_predictions, fit, EpochLoss, EpochRecord, Evaluation, SplitCounts, StepInput, Steps,
    TrainConfig, TrainReport, Workload,
};
use crate::{Error, Result};
use graphloom_graph::subgraph::batching::SubgraphBatching;
pub use subgraph::batch_blocks;

/// How batches are made and evaluated.
#[derive(Clone, Debug)]
pub struct MiniBatchConfig {
    /// Fanouts from the seeds outwards (`-1`: all neighbours), one per layer.
    pub fanouts: Fanouts,
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
    /// Train on subgraph batches (Cluster-GCN, GraphSAINT) instead of sampled blocks; the
    /// fanouts and batch size then serve only sampled evaluation.
    pub subgraph: Option<SubgraphBatching>,
}

impl MiniBatchConfig {
    /// Batches of `batch_size` seeds sampled with `fanouts`, [`DEFAULT_QUEUE_DEPTH`] made
    /// ahead, each training node
    /// once per epoch, evaluated exactly in one pass over the whole graph, sampled and
    /// gathered on the global thread pool.
    pub fn new(fanouts: Fanouts, batch_size: usize) -> MiniBatchConfig {
        MiniBatchConfig {
            fanouts,
            batch_size,
            queue_depth: DEFAULT_QUEUE_DEPTH,
            batches_per_epoch: None,
            sampled_eval: None,
            producer_threads: None,
            layerwise: None,
            subgraph: None,
        }
    }
}

/// Evaluation by sampled inference: each split is evaluated on at most `nodes` of its nodes,
/// a fixed subset drawn once from the run's seed, each through neighbours sampled with
/// `fanouts` from draws that do not change between evaluations. Evaluations of one run are
/// therefore comparable, and a resumed run evaluates exactly as an uninterrupted one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampledEval {
    /// Fanouts from the evaluated nodes outwards (`-1`: all neighbours), one per layer.
    pub fanouts: Fanouts,
    /// Nodes evaluated per split, at most.
    pub nodes: usize,
}

/// The epoch number of evaluation's sampling draws: no training epoch reaches it.
pub(crate) const EVAL_EPOCH: u64 = u64::MAX;
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

/// One prepared batch: the sampled batch with its block graphs and what its loss is over.
struct Batch {
    sampled: SampledBatch,
    graphs: Vec<LayerGraph>,
    targets: Targets,
}

/// Samples and gathers one batch and builds its block graphs (`None` for an empty slice of a
/// global batch).
#[allow(clippy::too_many_arguments)]
fn prepare(
    data: GraphData<'_>,
    features: Option<&dyn RowSource>,
    sampler: &mut Sampler,
    work: TaskBatch<'_>,
    fanouts: &[i64],
    cfg: &ModelConfig,
    seed: u64,
    epoch: u64,
) -> Result<Option<Batch>> {
    let seeds = work.nodes();
    let Some(mut sampled) = sample_batch(
        data, features, cfg.dtype, sampler, &seeds, fanouts, seed, epoch,
    )?
    else {
        return Ok(None);
    };
    let start = Instant::now();
    if let Some(hidden) = work.hidden() {
        exclude_pairs(&mut sampled.blocks, hidden);
    }
    let targets = work.targets_of_rows(&seeds, data.labels);
    let mut graphs = sampled
        .blocks
        .iter()
        .map(|b| LayerGraph::new(b, cfg.arch, data.edge_features, cfg.dtype))
        .collect::<Result<Vec<_>>>()?;
    if cfg.arch.aggregation() == Aggregation::Gcn {
        // The blocks run from the input layer, the fanouts from the seeds outwards.
        for (graph, (block, &fanout)) in graphs
            .iter_mut()
            .zip(sampled.blocks.iter().zip(fanouts.iter().rev()))
        {
            let norm = block
                .src_nodes
                .iter()
                .map(|&v| GcnNorm::of_sampled(data, v, fanout));
            graph.gcn_norm = Some(Arc::new(norm.collect()));
        }
    }
    sampled.gather_seconds += start.elapsed().as_secs_f64();
    Ok(Some(Batch {
        sampled,
        graphs,
        targets,
    }))
}

/// The second stage of a batch made in two: its input rows gathered from `features` as
/// `dtype`. A worker with an empty slice of the global batch (`None`) still takes part in a
/// collective gather.
fn gather_inputs(
    batch: Option<Batch>,
    features: Option<&dyn RowSource>,
    dtype: DType,
) -> Result<Option<Batch>> {
    let Some(rows) = features else {
        return Ok(batch);
    };
    let Some(mut batch) = batch else {
        if rows.collective() {
            rows.gather(&[])?;
        }
        return Ok(None);
    };
    let start = Instant::now();
    batch.sampled.x = Some(rows.gather(&batch.sampled.input_ids)?.cast(dtype)?);
    batch.sampled.gather_seconds += start.elapsed().as_secs_f64();
    Ok(Some(batch))
}

/// Sampled mini-batch training as a [`Workload`]: the [`crate::batches`] stream samples each
/// batch's blocks and gathers its input rows while this thread runs the steps; evaluation is
/// exact full-neighbour inference over the whole graph, or sampled inference (see
/// [`MiniBatchConfig::sampled_eval`]).
///
/// Data parallel over the ranks of `comm`: each worker trains on its slice of every global
/// batch (see [`epoch_batches`]), the loss is normalised by the global batch size, and the
/// gradients are summed over the workers before every worker applies the same step, so the
/// workers hold the same parameters throughout. Collective.
pub struct MiniBatch<'a> {
    data: GraphData<'a>,
    inputs: Inputs<'a>,
    model: Model,
    mb: MiniBatchConfig,
    seed: u64,
    /// Exact evaluation's whole graph and, from a feature table, every node's input rows:
    /// built on first use.
    exact: Option<(NodeGraph, Option<Var>)>,
    /// Sampled evaluation's nodes per split.
    eval_nodes: [Vec<NodeId>; 3],
    comm: Arc<dyn Communicator>,
    /// The producer gathers features over the job's communicator while the compute thread
    /// sums gradients: each needs its own communicator.
    grad_comm: Arc<dyn Communicator>,
    stages: StageSeconds,
    on_batch: Option<Box<dyn FnMut(usize, usize) + Send + 'a>>,
    /// The sampler, whose relabel table (a slot per node) is made once and lent to each
    /// stream.
    sampler: Option<Sampler>,
    /// The producer's pool, when [`MiniBatchConfig::producer_threads`] asks for one.
    producer_pool: Option<Arc<rayon::ThreadPool>>,
    /// What the model trains for.
    task: Task<'a>,
    /// Subgraph batching's state, when the batches are subgraphs.
    subgraph: Option<subgraph::SubgraphState>,
}

impl<'a> MiniBatch<'a> {
    /// The workload of model `cfg` (parameters drawn from `seed`) on `data`, batched as `mb`
    /// says, with input rows from `inputs`, over the workers of `comm`. Collective.
    pub fn new(
        data: GraphData<'a>,
        inputs: Inputs<'a>,
        comm: Arc<dyn Communicator>,
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
        if mb.subgraph.is_none() {
            check_fanouts("fanouts and layers", &mb.fanouts)?;
        }
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
        let model = Model::new(cfg, seed)?;
        let eval_nodes = match &mb.sampled_eval {
            Some(eval) => [data.train_idx, data.valid_idx, data.test_idx]
                .map(|ids| evaluated_subset(ids, eval.nodes, seed)),
            None => Default::default(),
        };
        let producer_pool = mb.producer_threads.map(producer_pool).transpose()?;
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
            task: Task::Node,
            subgraph: mb
                .subgraph
                .clone()
                .map(|b| subgraph::SubgraphState::new(b, data)),
        })
    }

    /// The same workload training for `task`. Link prediction takes batches of
    /// [`MiniBatchConfig::batch_size`] supervision pairs, whose ends (and their negatives')
    /// are the seeds, and evaluates exactly (in one pass or layer by layer), not by sampling.
    pub fn with_task(mut self, task: Task<'a>) -> Result<MiniBatch<'a>> {
        task.check(&self.model.cfg)?;
        if matches!(task, Task::Link(_)) && self.mb.subgraph.is_some() {
            return Err(Error::InvalidSetting {
                setting: "batching",
                reason: "subgraph batches train node classification".into(),
            });
        }
        if !matches!(task, Task::Node) && self.mb.sampled_eval.is_some() {
            return Err(Error::InvalidSetting {
                setting: "eval_fanouts",
                reason: "link prediction, multi-label classification and regression evaluate \
                         every node exactly: leave out sampled evaluation"
                    .into(),
            });
        }
        self.task = task;
        Ok(self)
    }

    /// Calls `report(done, total)` after each step of an epoch (for a progress bar).
    pub fn on_batch(&mut self, report: impl FnMut(usize, usize) + Send + 'a) {
        self.on_batch = Some(Box::new(report));
    }

    /// Seconds spent in each stage so far.
    pub fn stages(&self) -> StageSeconds {
        self.stages
    }

    /// The stream settings of `batches` batches, lending the workload's sampler.
    fn stream_settings(&mut self, batches: usize) -> StreamSettings {
        StreamSettings {
            batches,
            depth: self.mb.queue_depth,
            sampler: self
                .sampler
                .take()
                .unwrap_or_else(|| Sampler::new(self.data.num_nodes())),
            pool: self.producer_pool.clone(),
        }
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
        self.stages.sample += batch.sampled.sample_seconds;
        self.stages.gather += batch.sampled.gather_seconds;
        let ids = &batch.sampled.input_ids;
        let graph = GraphInput::Blocks(&batch.graphs);
        let targets = batch.targets;
        // Normalised by the global batch: the workers' gradients sum to the gradient of the
        // global batch's mean loss.
        self.run_step(batch.sampled.x, ids, graph, steps, targets, global as f64)
    }

    /// Runs `step` on the `total` batches of `stream` through the one batch loop
    /// ([`Steps::run_batches`]), timing the compute and reporting progress; gets the stream's
    /// sampler back.
    fn run_stream<'s, B: Send + 's>(
        &mut self,
        mut stream: BatchStream<'s, B, Error>,
        total: usize,
        steps: &mut Steps<'_>,
        mut step: impl FnMut(&mut Self, &mut Steps<'_>, B, usize) -> Result<Option<(f64, usize)>>,
    ) -> Result<EpochLoss> {
        let loss = steps.run_batches(stream.by_ref().take(total), |steps, batch, i| {
            let compute = Instant::now();
            let weighted = step(self, steps, batch, i);
            self.stages.compute += compute.elapsed().as_secs_f64();
            if let Some(report) = &mut self.on_batch {
                report(i + 1, total);
            }
            weighted
        });
        self.sampler = Some(stream.finish()?);
        loss
    }

    /// One training step over input rows `ids` (gathered ahead as `gathered`, or read now from
    /// the embedding table) and `graph`: the forward pass, the loss of `targets` on its output
    /// (over `normaliser`), backward, the update, and the embedding table's update when the
    /// input is one. Returns the loss.
    #[allow(clippy::too_many_arguments)]
    fn run_step(
        &mut self,
        gathered: Option<Tensor>,
        ids: &[i64],
        graph: GraphInput<'_>,
        steps: &mut Steps<'_>,
        targets: Targets,
        normaliser: f64,
    ) -> Result<f64> {
        let rows = self
            .inputs
            .batch_rows(gathered, ids, self.model.cfg.dtype)?;
        let input = match &mut self.inputs {
            Inputs::Embedding { table, lr } => StepInput::Table {
                table,
                lr: *lr,
                ids,
                rows,
            },
            Inputs::Features(_) => StepInput::Rows(Var::constant(rows)),
        };
        steps.step(&self.model, input, graph, targets, normaliser)
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
        let batches = match &self.mb.subgraph {
            Some(b) => b.describe(),
            None => format!(
                "mini-batches of {} seeds, fanouts {}",
                self.mb.batch_size, self.mb.fanouts
            ),
        };
        let mut text = format!(
            "{batches}, over {} nodes, {} edges, {} training nodes, from {input}",
            self.data.num_nodes(),
            self.data.num_edges(),
            self.data.train_idx.len()
        );
        if let Some(b) = self.mb.batches_per_epoch {
            text += &format!(", {b} batches per epoch");
        }
        if let Some(eval) = &self.mb.sampled_eval {
            text += &format!(
                ", evaluated on {} nodes per split with fanouts {}",
                eval.nodes, eval.fanouts
            );
        }
        text
    }

    fn params(&self) -> &[Param] {
        &self.model.params
    }

    fn set_params(&mut self, params: &[Param]) -> Result<()> {
        self.model.set_params(params)
    }

    fn model_fingerprint(&self) -> String {
        crate::train::model_fingerprint(&self.model.cfg)
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
            Inputs::Embedding { .. } => Ok(Some(self.inputs.all_rows(DType::F32)?)),
            Inputs::Features(_) => Ok(None),
        }
    }

    fn gradient_comm(&self) -> Option<Arc<dyn Communicator>> {
        Some(self.grad_comm.clone())
    }

    fn train_epoch(&mut self, epoch: usize, steps: &mut Steps<'_>) -> Result<f64> {
        let (rank, ranks) = (self.comm.rank(), self.comm.size());
        let (data, seed, epoch) = (self.data, self.seed, epoch as u64);
        self.task.check(&self.model.cfg)?;
        if let Some(mut state) = self.subgraph.take() {
            let loss = self.train_subgraph_epoch(&mut state, epoch, steps);
            self.subgraph = Some(state);
            return loss;
        }
        let cap = self.mb.batches_per_epoch.unwrap_or(usize::MAX);
        // Each step's share of this worker (node ids, or indices of supervision pairs), and
        // the number of scores of the step over every worker (its loss's normaliser).
        let task = self.task;
        let batch_size = Some(self.mb.batch_size);
        let mut batches = task.epoch(data.train_idx, seed, epoch, batch_size, rank, ranks);
        batches.truncate(cap);
        let settings = self.stream_settings(batches.mine.len());
        let (fanouts, cfg) = (self.mb.fanouts.clone(), self.model.cfg.clone());
        let features = self.inputs.features();
        // Producer threads of their own mean the rows come from a file: sampling (whose
        // graph may be mapped too) and gathering wait on the disk, so they overlap in stages.
        let staged = features.is_some() && settings.pool.is_some();
        let n = data.num_nodes();
        let batches = &batches;
        let loss = std::thread::scope(|scope| -> Result<EpochLoss> {
            let make = |sampler: &mut Sampler, i: usize| {
                let work = task.batch(batches, i, n, seed, epoch);
                // In two stages, the first samples and the second gathers the rows.
                let rows = if staged { None } else { features };
                prepare(data, rows, sampler, work, &fanouts, &cfg, seed, epoch)
            };
            let stream = if staged {
                let finish = |batch| gather_inputs(batch, features, cfg.dtype);
                BatchStream::scoped_in_stages(scope, settings, make, finish)?
            } else {
                BatchStream::scoped(scope, settings, make)?
            };
            self.run_stream(
                stream,
                batches.weights.len(),
                steps,
                |this, steps, batch, i| {
                    let global = batches.weights[i];
                    let loss = this.step(batch, global, steps)?;
                    Ok(Some((loss * global as f64, global)))
                },
            )
        })?;
        // The stream's threads freed their batches' small blocks into the allocator's heaps.
        graphloom_tensor::alloc::trim_freed();
        loss.mean_over(self.comm.as_ref())
    }

    fn evaluate(&mut self, params: &[Tensor]) -> Result<Evaluation> {
        let task = self.task;
        let evaluation = task.evaluate(params, self);
        // The pass's large buffers would stay cached beside the next batches' small ones.
        graphloom_tensor::alloc::trim_freed();
        evaluation
    }
}

/// Trains `cfg` on `data` in sampled mini-batches ([`MiniBatch`] under [`fit`]), with input
/// rows from `inputs` over the workers of `comm`, calling `on_epoch` after every epoch.
/// Collective.
pub fn train_mini_batch(
    data: GraphData<'_>,
    inputs: Inputs<'_>,
    comm: Arc<dyn Communicator>,
    cfg: ModelConfig,
    tc: &TrainConfig,
    mb: &MiniBatchConfig,
    on_epoch: impl FnMut(&EpochRecord),
) -> Result<(TrainReport, StageSeconds)> {
    let mut workload = MiniBatch::new(data, inputs, comm, cfg, tc.seed, mb)?;
    let report = fit(&mut workload, tc, on_epoch)?;
    Ok((report, workload.stages()))
}
