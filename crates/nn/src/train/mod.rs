//! The training loop, once for every way of training: a [`Workload`] runs the steps of an
//! epoch and evaluates; [`fit`] owns everything around it: the optimizer, the step counter
//! (part of every dropout key), gradient sums over workers, the stop on a non-finite loss,
//! evaluation every few epochs under its memory category, epoch records and model selection.
//!
//! The workloads: [`FullBatch`] (the whole graph on one worker), the sampled mini-batches of
//! [`crate::minibatch::MiniBatch`], and SAR's partitioned full batch in the `sar` crate.

mod full_batch;
mod records;
mod snapshot;

pub use full_batch::{train_full_batch, FullBatch};
pub use records::{
    correct_predictions, predicted_class, Accuracy, EpochRecord, SplitCounts, TrainReport,
};
pub use snapshot::SnapshotConfig;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use graphloom_comm::{Communicator, ReduceData, ReduceOp};
use graphloom_tensor::memory::{category_scope, thread_tracker, Category};
use graphloom_tensor::{RssReport, Tape, Tensor, Var};

use crate::model::{Mode, Model, ModelConfig, Param};
use crate::optim::{Optimizer, OptimizerKind};
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
    /// 200 epochs of Adam at GCN's learning rate (0.01) with weight decay 5e-4, evaluated
    /// every epoch.
    fn default() -> TrainConfig {
        TrainConfig {
            epochs: 200,
            lr: crate::Architecture::Gcn.defaults().lr,
            weight_decay: 5e-4,
            optimizer: OptimizerKind::Adam,
            patience: None,
            seed: 0,
            eval_every: 1,
            snapshots: None,
        }
    }
}

impl TrainConfig {
    /// Fails unless the loop can run with these settings: at least one epoch, a positive
    /// finite learning rate, a finite non-negative weight decay, evaluation every epoch or
    /// more. The settings are named as [`crate::Error::InvalidSetting`] names them: by their
    /// field names.
    pub fn check(&self) -> Result<()> {
        let invalid = |setting, reason: String| Err(Error::InvalidSetting { setting, reason });
        if self.epochs == 0 {
            return invalid("epochs", "must be at least 1".into());
        }
        if self.eval_every == 0 {
            return invalid("eval_every", "must be at least 1".into());
        }
        if self.patience == Some(0) {
            return invalid("patience", "must be at least 1".into());
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return invalid("lr", format!("must be a positive number, not {}", self.lr));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return invalid(
                "weight_decay",
                format!("must be zero or positive, not {}", self.weight_decay),
            );
        }
        Ok(())
    }
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
    tc.check()?;
    let eval_every = tc.eval_every;
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
        ("model", trajectory_fingerprint(&workload.model().cfg)),
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

/// Every setting of a model that changes the numbers a run computes (all but
/// checkpointing, which recomputes exactly what it drops), for the snapshot check.
fn trajectory_fingerprint(cfg: &ModelConfig) -> String {
    let ModelConfig {
        arch,
        in_dim,
        hidden,
        out_dim,
        layers,
        heads,
        out_heads,
        dropout,
        input_dropout,
        attention_dropout,
        dtype,
        checkpoint: _,
        batch_norm,
    } = cfg;
    format!(
        "{} of {layers} layers, {in_dim} -> {hidden} -> {out_dim}, heads {heads}/{out_heads}, \
         dropout {dropout}, input dropout {input_dropout}, attention dropout \
         {attention_dropout}, {dtype}, batch norm {batch_norm}",
        arch.name()
    )
}
