//! The training loop, once for every way of training: a [`Workload`] runs the steps of an
//! epoch and evaluates; [`fit`] owns everything around it: the optimizer, the step counter
//! (part of every dropout key), gradient sums over workers, the stop on a non-finite loss,
//! evaluation every few epochs under its memory category, epoch records and model selection.
//!
//! The workloads: [`FullBatch`] (the whole graph on one worker), the sampled mini-batches of
//! [`crate::minibatch::MiniBatch`], and SAR's partitioned full batch in the `sar` crate.

mod evaluation;
mod full_batch;
mod records;
mod snapshot;
mod state;
mod workload;

pub use evaluation::Evaluation;
pub use full_batch::{train_full_batch, FullBatch};
pub(crate) use records::predicted_classes;
pub use records::{
    correct_predictions, predicted_class, Accuracy, EpochRecord, SplitCounts, TrainReport,
};
pub use snapshot::SnapshotConfig;
pub use workload::{all_reduce_gradients, EpochLoss, StepInput, Steps, Workload};

use std::time::Instant;

use graphloom_tensor::memory::{category_scope, thread_tracker, Category};
use graphloom_tensor::{RssReport, Tensor};

use crate::model::{ModelConfig, Param};
use crate::optim::{Optimizer, OptimizerKind};
use crate::{Error, Result};
use state::{Best, LoopState, Selection};

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
    /// Stop when the validation score has not improved for this many evaluations.
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
    let names: Vec<String> = workload.params().iter().map(|p| p.name.clone()).collect();
    let values: Vec<Tensor> = workload.params().iter().map(|p| p.value.clone()).collect();
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
        ("model", workload.model_fingerprint()),
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
        let evaluation = if evaluate {
            let _g = category_scope(Category::Activations);
            Some(workload.evaluate(&state.values)?)
        } else {
            None
        };
        let record = EpochRecord {
            epoch,
            loss,
            evaluation,
            seconds,
            peak_bytes: thread_tracker().report().total_peak,
        };
        on_epoch(&record);
        state.records.push(record);
        state.epoch = epoch;
        if let Some(e) = evaluation {
            let best = if state.selection.improves(&e) {
                Some(Best {
                    epoch,
                    evaluation: e,
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
        best: best.evaluation,
        best_val_score: best.evaluation.validation(),
        test_score: best.evaluation.test(),
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
pub fn model_fingerprint(cfg: &ModelConfig) -> String {
    let ModelConfig {
        arch,
        in_dim,
        hidden,
        out_dim,
        layers,
        heads,
        out_heads,
        edge_dim,
        hops,
        teleport,
        dropout,
        input_dropout,
        attention_dropout,
        dtype,
        checkpoint: _,
        batch_norm,
        head,
    } = cfg;
    // What only some families read: APPNP its propagation's settings, GINE (and GATv2 when
    // given them) its edge features,
    // GIN and GINE with batch normalisation also the normalisation inside their MLPs (which
    // builds before it did not have); other fingerprints stay those of builds before these,
    // so their snapshots still resume.
    let family = match arch {
        crate::Architecture::Appnp => format!(", hops {hops}, teleport {teleport}"),
        crate::Architecture::Gine => {
            format!(", edge features {edge_dim}, MLP normalisation {batch_norm}")
        }
        crate::Architecture::Gin if *batch_norm => ", MLP normalisation true".to_string(),
        crate::Architecture::GatV2 if *edge_dim > 0 => format!(", edge features {edge_dim}"),
        _ => String::new(),
    };
    format!(
        "{} of {layers} layers, {in_dim} -> {hidden} -> {out_dim}, heads {heads}/{out_heads}, \
         dropout {dropout}, input dropout {input_dropout}, attention dropout \
         {attention_dropout}, {dtype}, batch norm {batch_norm}, head {head:?}{family}",
        arch.name()
    )
}
