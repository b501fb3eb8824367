//! The training loop, once for every way of training: a [`Workload`] runs the steps of an
//! epoch and evaluates; [`fit`] owns everything around it: the optimizer, the step counter
//! (part of every dropout key), gradient sums over workers, the stop on a non-finite loss,
//! evaluation every few epochs under its memory category, epoch records and model selection.
//!
//! The workloads: [`FullBatch`] (the whole graph on one worker), the sampled mini-batches of
//! [`crate::minibatch::MiniBatch`], and SAR's partitioned full batch in the `sar` crate.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use graphloom_comm::{Communicator, ReduceData, ReduceOp};
use graphloom_graph::Dataset;
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::memory::{category_scope, thread_tracker, Category, MemoryReport};
use graphloom_tensor::{RssReport, Tape, Tensor, Var};

use crate::model::{Mode, Model, ModelConfig, Param};
use crate::optim::{Optimizer, OptimizerKind};
use crate::snapshot;
pub use crate::snapshot::SnapshotConfig;
use crate::{Error, Result};

/// How to train.
#[derive(Clone, Debug)]
pub struct TrainConfig {
    /// Maximum number of epochs.
    pub epochs: usize,
    /// Learning rate.
    pub lr: f64,
    /// Weight decay.
    pub weight_decay: f64,
    /// The update rule.
    pub optimizer: OptimizerKind,
    /// Stop when the validation accuracy has not improved for this many evaluations.
    pub patience: Option<usize>,
    /// Seed of initialisation and dropout.
    pub seed: u64,
    /// Evaluate after every this many epochs (and after the last one); at least 1.
    pub eval_every: usize,
    /// Snapshots of the loop's state, and resuming from them.
    pub snapshots: Option<SnapshotConfig>,
}

impl Default for TrainConfig {
    /// 200 epochs of Adam at learning rate 0.01 with weight decay 5e-4, evaluated every epoch.
    fn default() -> TrainConfig {
        TrainConfig {
            epochs: 200,
            lr: 0.01,
            weight_decay: 5e-4,
            optimizer: OptimizerKind::Adam,
            patience: None,
            seed: 0,
            eval_every: 1,
            snapshots: None,
        }
    }
}

/// Accuracies of the three splits.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Accuracy {
    /// On the training nodes.
    pub train: f64,
    /// On the validation nodes.
    pub val: f64,
    /// On the test nodes.
    pub test: f64,
}

/// Correct predictions and node counts of the three splits (train, validation, test), summed
/// over the job's workers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SplitCounts {
    /// Correct predictions per split.
    pub correct: [f64; 3],
    /// Nodes per split.
    pub total: [f64; 3],
}

/// How many rows of `logp` (class scores, one row per label) predict their label.
pub fn correct_predictions(logp: &Tensor, labels: &[i64]) -> f64 {
    let (_, c) = logp.dims2();
    logp.to_vec_f64()
        .chunks(c.max(1))
        .zip(labels)
        .filter(|(row, &label)| predicted_class(row) as i64 == label)
        .count() as f64
}

impl SplitCounts {
    /// The counts of `logp` (one row per node of `labels`) on the splits `idx`.
    pub fn of(logp: &Tensor, labels: &[i64], idx: [&[usize]; 3]) -> SplitCounts {
        // One f64 copy of the scores for the three splits.
        let (_, c) = logp.dims2();
        let scores = logp.to_vec_f64();
        let mut counts = SplitCounts::default();
        for (s, rows) in idx.iter().enumerate() {
            counts.correct[s] = rows
                .iter()
                .filter(|&&i| predicted_class(&scores[i * c..(i + 1) * c]) as i64 == labels[i])
                .count() as f64;
            counts.total[s] = rows.len() as f64;
        }
        counts
    }

    /// The counts of a whole dataset's splits.
    pub fn of_dataset(logp: &Tensor, ds: &Dataset) -> SplitCounts {
        SplitCounts::of(
            logp,
            &ds.labels,
            [&ds.train_idx, &ds.valid_idx, &ds.test_idx],
        )
    }

    /// Adds up the counts of every worker of `comm`, in place. Collective.
    pub fn sum_over(&mut self, comm: &dyn Communicator) -> Result<()> {
        let mut v = [0.0; 6];
        v[..3].copy_from_slice(&self.correct);
        v[3..].copy_from_slice(&self.total);
        comm.all_reduce(ReduceData::F64(&mut v), ReduceOp::Sum)?;
        self.correct.copy_from_slice(&v[..3]);
        self.total.copy_from_slice(&v[3..]);
        Ok(())
    }

    /// The accuracies (0 for an empty split).
    pub fn accuracy(&self) -> Accuracy {
        let share = |s: usize| {
            if self.total[s] > 0.0 {
                self.correct[s] / self.total[s]
            } else {
                0.0
            }
        };
        Accuracy {
            train: share(0),
            val: share(1),
            test: share(2),
        }
    }
}

/// What one epoch measured.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpochRecord {
    /// Epoch number, from 1.
    pub epoch: usize,
    /// Training loss of the epoch (mean over its steps' training nodes, with dropout).
    pub loss: f64,
    /// Accuracies after the epoch, with dropout off; `None` on epochs that were not evaluated.
    pub accuracy: Option<Accuracy>,
    /// Seconds of the training steps (forward, backward, update), without evaluation.
    pub seconds: f64,
    /// The most tracked bytes held at once so far.
    pub peak_bytes: usize,
}

/// The outcome of a run.
pub struct TrainReport {
    /// One record per epoch run.
    pub epochs: Vec<EpochRecord>,
    /// The epoch with the best validation accuracy (the first of equals).
    pub best_epoch: usize,
    /// Its validation accuracy.
    pub best_val_acc: f64,
    /// Its test accuracy.
    pub test_acc: f64,
    /// The parameters after the best epoch.
    pub best_params: Vec<Param>,
    /// The learnt input table after the best epoch, for workloads that train one.
    pub best_input_embedding: Option<Tensor>,
    /// Whether patience ran out before the last epoch.
    pub stopped_early: bool,
    /// Tracked memory of this worker: current and peak bytes per category.
    pub memory: MemoryReport,
    /// The process's resident memory at the end.
    pub rss: RssReport,
}

impl TrainReport {
    /// Mean seconds of the training step over the epochs, leaving out the first (warm-up)
    /// when there are more than one.
    pub fn mean_epoch_seconds(&self) -> f64 {
        let timed = if self.epochs.len() > 1 {
            &self.epochs[1..]
        } else {
            &self.epochs[..]
        };
        timed.iter().map(|e| e.seconds).sum::<f64>() / timed.len().max(1) as f64
    }
}

/// The class a row of scores predicts: its largest entry (the first of equals).
pub fn predicted_class(row: &[f64]) -> usize {
    let mut best = 0;
    for j in 1..row.len() {
        if row[j] > row[best] {
            best = j;
        }
    }
    best
}

/// Sums the gradients over data-parallel workers, in place (in rank order, so every worker gets
/// the same bits).
pub fn all_reduce_gradients(comm: &dyn Communicator, grads: &mut [Tensor]) -> Result<()> {
    if comm.size() == 1 {
        return Ok(());
    }
    for g in grads {
        let data = match g.dtype() {
            graphloom_tensor::DType::F64 => ReduceData::F64(g.as_mut_slice::<f64>()?),
            _ => ReduceData::F32(g.as_mut_slice::<f32>()?),
        };
        comm.all_reduce(data, ReduceOp::Sum)?;
    }
    Ok(())
}

/// One way of training a model: the steps of an epoch and an evaluation. [`fit`] runs the
/// loop around it.
pub trait Workload {
    /// The model trained (its parameters are the initial values).
    fn model(&self) -> &Model;

    /// The model, to set its initial parameters (from a saved model, say).
    fn model_mut(&mut self) -> &mut Model;

    /// Every node's row of a learnt input table, for workloads that train one (kept with the
    /// best parameters and saved with the model). Collective.
    fn input_embedding(&mut self) -> Result<Option<Tensor>> {
        Ok(None)
    }

    /// The communicator over which parameter gradients are summed, when several workers train
    /// one model.
    fn gradient_comm(&self) -> Option<Arc<dyn Communicator>>;

    /// Runs the training steps of epoch `epoch` through `steps` and returns the epoch's loss,
    /// the same on every worker of the job.
    fn train_epoch(&mut self, epoch: usize, steps: &mut Steps<'_>) -> Result<f64>;

    /// Correct predictions on the three splits with parameters `params` and dropout off,
    /// summed over the job's workers.
    fn evaluate(&mut self, params: &[Tensor]) -> Result<SplitCounts>;

    /// What of the workload decides the bits a run computes (its data's sizes, its batching),
    /// compared when a snapshot is resumed.
    fn fingerprint(&self) -> String;

    /// Writes the workload's own training state (a learnt input table and its optimizer
    /// state) into the snapshot folder `dir`, one file per worker. Collective.
    fn save_state(&mut self, _dir: &Path) -> Result<()> {
        Ok(())
    }

    /// Reads back what [`Workload::save_state`] wrote in a job of `saved_workers`. Collective.
    fn restore_state(&mut self, _dir: &Path, _saved_workers: usize) -> Result<()> {
        Ok(())
    }
}

/// What a workload needs for its training steps: the parameters on a tape, the dropout key of
/// each step, and the update.
pub struct Steps<'a> {
    values: &'a mut [Tensor],
    opt: &'a mut Optimizer,
    comm: Option<&'a dyn Communicator>,
    step: &'a mut u64,
    seed: u64,
}

impl Steps<'_> {
    /// Starts a training step: the parameters as leaves of `tape`, and the step's mode
    /// (dropout on, keyed by the run's step counter).
    pub fn begin(&mut self, tape: &mut Tape) -> (Vec<Var>, Mode) {
        *self.step += 1;
        let vars = self
            .values
            .iter()
            .map(|v| tape.leaf(v.clone(), true))
            .collect();
        let mode = Mode {
            training: true,
            seed: self.seed,
            step: *self.step,
        };
        (vars, mode)
    }

    /// Ends a step begun with [`Steps::begin`]: backpropagates `loss`, sums the gradients over
    /// the workers, applies the optimizer (a parameter without a gradient gets zero) and
    /// returns the loss, with the gradient of `input` when asked (a trainable input table's
    /// rows).
    pub fn finish(
        &mut self,
        mut tape: Tape,
        loss: &Var,
        vars: Vec<Var>,
        input: Option<&Var>,
    ) -> Result<(f64, Option<Tensor>)> {
        let mut grads = tape.backward(loss)?;
        let input_grad = input.and_then(|x| grads.take(x));
        let grads: Vec<Tensor> = vars
            .iter()
            .zip(self.values.iter())
            .map(|(v, p)| {
                grads
                    .take(v)
                    .unwrap_or_else(|| Tensor::zeros(p.shape(), p.dtype()))
            })
            .collect();
        drop(vars);
        drop(tape);
        self.apply(grads)?;
        Ok((loss.value().scalar_f64()?, input_grad))
    }

    /// A step in which this worker has no training nodes: it still takes part in the gradient
    /// sum, with zeros, and applies the summed update like every other worker.
    pub fn skip(&mut self) -> Result<()> {
        *self.step += 1;
        let grads = self
            .values
            .iter()
            .map(|p| Tensor::zeros(p.shape(), p.dtype()))
            .collect();
        self.apply(grads)
    }

    fn apply(&mut self, mut grads: Vec<Tensor>) -> Result<()> {
        if let Some(comm) = self.comm {
            all_reduce_gradients(comm, &mut grads)?;
        }
        let _g = category_scope(Category::Optimizer);
        self.opt.step(self.values, &grads)
    }
}

/// Model selection: keeps the parameters of the evaluation with the best validation accuracy
/// (the first of equals) and says when patience has run out.
#[derive(Default)]
pub(crate) struct Selection {
    pub(crate) best: Option<Best>,
    pub(crate) evaluations_since_best: usize,
}

/// The best evaluation so far.
pub(crate) struct Best {
    pub(crate) epoch: usize,
    pub(crate) accuracy: Accuracy,
    pub(crate) params: Vec<Tensor>,
    pub(crate) input_embedding: Option<Tensor>,
}

impl Selection {
    /// Whether an evaluation with `acc` is better than the best so far.
    fn improves(&self, acc: Accuracy) -> bool {
        self.best.as_ref().is_none_or(|b| acc.val > b.accuracy.val)
    }

    /// Records an evaluated epoch (`best` when it improves); returns whether patience has run
    /// out.
    fn observe(&mut self, best: Option<Best>, patience: Option<usize>) -> bool {
        match best {
            Some(b) => {
                self.best = Some(b);
                self.evaluations_since_best = 0;
            }
            None => self.evaluations_since_best += 1,
        }
        patience.is_some_and(|p| self.evaluations_since_best >= p)
    }
}

/// Everything the loop carries from one epoch to the next: what a snapshot holds.
pub(crate) struct LoopState {
    /// Epochs done.
    pub(crate) epoch: usize,
    /// Steps done (part of every dropout key).
    pub(crate) step: u64,
    /// The parameters.
    pub(crate) values: Vec<Tensor>,
    /// The optimizer and its state.
    pub(crate) opt: Optimizer,
    /// Model selection so far.
    pub(crate) selection: Selection,
    /// The records of the epochs done.
    pub(crate) records: Vec<EpochRecord>,
    /// Whether patience ran out.
    pub(crate) stopped: bool,
}

/// Trains the model of `workload` as `tc` says, calling `on_epoch` after every epoch, and
/// returns the records and the parameters of the best evaluation. With `tc.snapshots` it
/// writes the loop's state every few epochs and at the end, and can resume from the last
/// snapshot: a resumed run gives the bits of an uninterrupted one. Collective when the
/// workload's workers are.
pub fn fit(
    workload: &mut dyn Workload,
    tc: &TrainConfig,
    mut on_epoch: impl FnMut(&EpochRecord),
) -> Result<TrainReport> {
    if tc.epochs == 0 {
        return Err(Error::InvalidSetting {
            setting: "epochs",
            reason: "train at least one epoch".into(),
        });
    }
    if !(tc.lr.is_finite() && tc.lr > 0.0) {
        return Err(Error::InvalidSetting {
            setting: "learning rate",
            reason: format!("must be positive and finite, not {}", tc.lr),
        });
    }
    if !(tc.weight_decay.is_finite() && tc.weight_decay >= 0.0) {
        return Err(Error::InvalidSetting {
            setting: "weight decay",
            reason: format!("must be zero or positive, not {}", tc.weight_decay),
        });
    }
    let eval_every = tc.eval_every.max(1);
    let names: Vec<String> = workload
        .model()
        .params
        .iter()
        .map(|p| p.name.clone())
        .collect();
    let values: Vec<Tensor> = workload
        .model()
        .params
        .iter()
        .map(|p| p.value.clone())
        .collect();
    let mut state = LoopState {
        epoch: 0,
        step: 0,
        opt: Optimizer::new(tc.optimizer, tc.lr, tc.weight_decay, &values),
        values,
        selection: Selection::default(),
        records: Vec::new(),
        stopped: false,
    };
    // What decides the bits of the run: a snapshot resumes only a run that agrees on it.
    let settings: std::collections::BTreeMap<&str, String> = [
        ("optimizer", format!("{:?}", tc.optimizer)),
        ("learning rate", tc.lr.to_string()),
        ("weight decay", tc.weight_decay.to_string()),
        ("seed", tc.seed.to_string()),
        ("evaluated every", format!("{eval_every} epochs")),
        (
            "patience",
            tc.patience.map_or("none".into(), |p| p.to_string()),
        ),
        ("workload", workload.fingerprint()),
    ]
    .into_iter()
    .collect();
    let settings = serde_json::to_string(&settings).expect("settings serialise");
    let _lock = match &tc.snapshots {
        Some(snap) => snapshot::lock(snap, &*workload)?,
        None => None,
    };
    if let Some(snap) = tc.snapshots.as_ref().filter(|s| s.resume) {
        // The restored epochs were reported by the run that took the snapshot: only the new
        // ones are reported here (the report holds all of them).
        snapshot::restore(snap, &settings, &names, workload, &mut state)?;
        if state.epoch > tc.epochs {
            return Err(Error::InvalidSetting {
                setting: "epochs",
                reason: format!(
                    "the snapshot is at epoch {}, past the {} asked for: give --epochs above it",
                    state.epoch, tc.epochs
                ),
            });
        }
    }
    while !state.stopped && state.epoch < tc.epochs {
        let epoch = state.epoch + 1;
        let start = Instant::now();
        let loss = {
            let comm = workload.gradient_comm();
            let mut steps = Steps {
                values: &mut state.values,
                opt: &mut state.opt,
                comm: comm.as_deref(),
                step: &mut state.step,
                seed: tc.seed,
            };
            let _g = category_scope(Category::Activations);
            workload.train_epoch(epoch, &mut steps)?
        };
        let seconds = start.elapsed().as_secs_f64();
        if !loss.is_finite() {
            return Err(Error::NonFiniteLoss { epoch, loss });
        }
        let evaluate = epoch.is_multiple_of(eval_every) || epoch == tc.epochs;
        let accuracy = if evaluate {
            let _g = category_scope(Category::Activations);
            Some(workload.evaluate(&state.values)?.accuracy())
        } else {
            None
        };
        let record = EpochRecord {
            epoch,
            loss,
            accuracy,
            seconds,
            peak_bytes: thread_tracker().report().total_peak,
        };
        on_epoch(&record);
        state.records.push(record);
        state.epoch = epoch;
        if let Some(acc) = accuracy {
            let best = if state.selection.improves(acc) {
                Some(Best {
                    epoch,
                    accuracy: acc,
                    params: state.values.clone(),
                    input_embedding: workload.input_embedding()?,
                })
            } else {
                None
            };
            state.stopped = state.selection.observe(best, tc.patience);
        }
        if let Some(snap) = &tc.snapshots {
            if epoch.is_multiple_of(snap.every.max(1)) || state.stopped || epoch == tc.epochs {
                snapshot::save(snap, &settings, &names, workload, &state)?;
            }
        }
    }
    let best = state.selection.best.ok_or_else(|| Error::InvalidSetting {
        setting: "epochs",
        reason: "no epoch was evaluated".into(),
    })?;
    Ok(TrainReport {
        epochs: state.records,
        best_epoch: best.epoch,
        best_val_acc: best.accuracy.val,
        test_acc: best.accuracy.test,
        best_params: names
            .into_iter()
            .zip(best.params)
            .map(|(name, value)| Param { name, value })
            .collect(),
        best_input_embedding: best.input_embedding,
        stopped_early: state.stopped,
        memory: thread_tracker().report(),
        rss: RssReport::read(),
    })
}

/// Full-batch training on one worker: every step is a forward pass over the whole graph, the
/// loss on the training nodes, and evaluation is one forward pass with dropout off (exact
/// full-neighbour inference).
pub struct FullBatch<'a> {
    ds: &'a Dataset,
    model: Model,
    x: Var,
    rows: Arc<[usize]>,
    labels: Arc<[i64]>,
}

impl<'a> FullBatch<'a> {
    /// The workload of model `cfg` (parameters drawn from `seed`) on `ds`, whose features must
    /// already be in the model's compute dtype.
    pub fn new(ds: &'a Dataset, cfg: ModelConfig, seed: u64) -> Result<FullBatch<'a>> {
        if ds.features.dtype() != cfg.dtype {
            return Err(Error::Mismatch {
                what: "the features' dtype and the model's",
                detail: format!(
                    "features are {}, the model computes in {}",
                    ds.features.dtype(),
                    cfg.dtype
                ),
            });
        }
        FullBatch::with_inputs(ds, cfg, seed, ds.features.clone())
    }

    /// The workload of model `cfg` on the graph of `ds` with input rows `x` (one per node, in
    /// the compute dtype): the features, or a learnt input embedding.
    pub fn with_inputs(
        ds: &'a Dataset,
        cfg: ModelConfig,
        seed: u64,
        x: Tensor,
    ) -> Result<FullBatch<'a>> {
        if x.shape() != [ds.graph.num_nodes(), cfg.in_dim] {
            return Err(Error::Mismatch {
                what: "input rows and the model",
                detail: format!(
                    "input rows of shape {:?} for {} nodes of a model {} wide",
                    x.shape(),
                    ds.graph.num_nodes(),
                    cfg.in_dim
                ),
            });
        }
        let weight = ds.edge_weight.as_ref().map(|w| Arc::from(w.as_slice()));
        let mut model = Model::new_weighted(cfg, &ds.graph, weight, seed)?;
        model.use_sparse_input(&x);
        Ok(FullBatch {
            ds,
            model,
            x: Var::constant(x),
            rows: ds.train_idx.clone().into(),
            labels: ds.train_idx.iter().map(|&i| ds.labels[i]).collect(),
        })
    }

    /// Inference over every node with parameters `params` and dropout off.
    pub fn infer(&self, params: &[Tensor], output: Output) -> Result<Tensor> {
        infer(&self.model, &self.x, params, output)
    }
}

impl Workload for FullBatch<'_> {
    fn fingerprint(&self) -> String {
        let g = &self.ds.graph;
        format!(
            "full batch over {} nodes, {} edges, {} training nodes",
            g.num_nodes(),
            g.num_edges(),
            self.rows.len()
        )
    }

    fn model(&self) -> &Model {
        &self.model
    }

    fn model_mut(&mut self) -> &mut Model {
        &mut self.model
    }

    fn gradient_comm(&self) -> Option<Arc<dyn Communicator>> {
        None
    }

    fn train_epoch(&mut self, _epoch: usize, steps: &mut Steps<'_>) -> Result<f64> {
        if self.rows.is_empty() {
            return Err(Error::NoTrainingNodes);
        }
        let mut tape = Tape::new();
        let (vars, mode) = steps.begin(&mut tape);
        let logp = self.model.forward(&mut tape, &self.x, &vars, mode)?;
        let loss = ops::nll_loss(
            &mut tape,
            &logp,
            self.rows.clone(),
            self.labels.clone(),
            self.rows.len() as f64,
        )?;
        drop(logp);
        Ok(steps.finish(tape, &loss, vars, None)?.0)
    }

    fn evaluate(&mut self, params: &[Tensor]) -> Result<SplitCounts> {
        let logp = self.infer(params, Output::LogProbabilities)?;
        Ok(SplitCounts::of_dataset(&logp, self.ds))
    }
}

/// What inference computes for every node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Log-probabilities of the classes.
    LogProbabilities,
    /// The output of the first `k` layers (node embeddings; for the last layer, the class
    /// scores before the softmax).
    Layer(usize),
}

/// Inference over every node with parameters `values` and dropout off: the whole graph in one
/// forward pass, which is exact full-neighbour inference. Evaluation during training and
/// `predict`/`embed` after it both come here.
pub fn infer(model: &Model, x: &Var, values: &[Tensor], output: Output) -> Result<Tensor> {
    let mut tape = Tape::no_grad();
    let vars: Vec<Var> = values.iter().map(|v| Var::constant(v.clone())).collect();
    let out = match output {
        Output::LogProbabilities => model.forward(&mut tape, x, &vars, Mode::inference())?,
        Output::Layer(k) => model.embed(&mut tape, x, &vars, k)?,
    };
    Ok(out.value().clone())
}

/// Trains `cfg` on `ds` full-batch ([`FullBatch`] under [`fit`]), calling `on_epoch` after
/// every epoch. The features must already be in the model's compute dtype.
pub fn train_full_batch(
    ds: &Dataset,
    cfg: ModelConfig,
    tc: &TrainConfig,
    on_epoch: impl FnMut(&EpochRecord),
) -> Result<TrainReport> {
    fit(&mut FullBatch::new(ds, cfg, tc.seed)?, tc, on_epoch)
}
