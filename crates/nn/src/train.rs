//! Full-batch training on one worker: forward over the whole graph, loss on the training
//! nodes, backward, optimizer step; evaluation with dropout off after every epoch; model
//! selection by the best validation accuracy.

use std::sync::Arc;
use std::time::Instant;

use graphloom_comm::{Communicator, ReduceData, ReduceOp};
use graphloom_graph::Dataset;
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::memory::{category_scope, thread_tracker, Category, MemoryReport};
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
    /// Stop when the validation accuracy has not improved for this many epochs.
    pub patience: Option<usize>,
    /// Seed of initialisation and dropout.
    pub seed: u64,
}

/// What one epoch measured.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochRecord {
    /// Epoch number, from 1.
    pub epoch: usize,
    /// Training loss of the epoch's step (with dropout).
    pub loss: f64,
    /// Accuracies after the step, with dropout off.
    pub train_acc: f64,
    /// Validation accuracy.
    pub val_acc: f64,
    /// Test accuracy.
    pub test_acc: f64,
    /// Seconds of the training step (forward, backward, update), without evaluation.
    pub seconds: f64,
    /// The most tracked bytes held at once so far.
    pub peak_bytes: usize,
}

impl EpochRecord {
    /// The record of an epoch: its loss and seconds, and the accuracies of `logp` (every
    /// node's log-probabilities) on the three splits.
    pub(crate) fn measure(
        epoch: usize,
        loss: f64,
        seconds: f64,
        logp: &Tensor,
        ds: &Dataset,
    ) -> EpochRecord {
        EpochRecord {
            epoch,
            loss,
            train_acc: accuracy(logp, &ds.labels, &ds.train_idx),
            val_acc: accuracy(logp, &ds.labels, &ds.valid_idx),
            test_acc: accuracy(logp, &ds.labels, &ds.test_idx),
            seconds,
            peak_bytes: thread_tracker().report().total_peak,
        }
    }
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

/// The share of `idx` whose row of `logp` has its largest entry at the label.
pub fn accuracy(logp: &Tensor, labels: &[i64], idx: &[usize]) -> f64 {
    if idx.is_empty() {
        return 0.0;
    }
    correct_predictions(logp, labels, idx) as f64 / idx.len() as f64
}

/// How many of `idx` have their largest entry of `logp` (the first of equals) at the label.
pub fn correct_predictions(logp: &Tensor, labels: &[i64], idx: &[usize]) -> usize {
    let (_, c) = logp.dims2();
    let v = logp.to_vec_f64();
    idx.iter()
        .filter(|&&i| {
            let row = &v[i * c..(i + 1) * c];
            let mut best = 0;
            for j in 1..c {
                if row[j] > row[best] {
                    best = j;
                }
            }
            best as i64 == labels[i]
        })
        .count()
}

/// Log-probabilities of every node with dropout off: the whole graph in one forward pass, which
/// is exact full-neighbour inference.
pub(crate) fn evaluate(model: &Model, x: &Var, values: &[Tensor], seed: u64) -> Result<Tensor> {
    let _g = category_scope(Category::Activations);
    let mut tape = Tape::no_grad();
    let vars: Vec<Var> = values.iter().map(|v| Var::constant(v.clone())).collect();
    let mode = Mode {
        training: false,
        seed,
        step: 0,
    };
    Ok(model.forward(&mut tape, x, &vars, mode)?.value().clone())
}

/// Backpropagates `loss`, lets `reduce` combine the gradients (an all-reduce over data-parallel
/// workers), applies the optimizer to `values` (a parameter without a gradient gets zero) and
/// returns the loss, with the gradient of `input` when asked (a trainable input table's rows).
pub fn backward_and_step(
    mut tape: Tape,
    loss: &Var,
    vars: Vec<Var>,
    values: &mut [Tensor],
    opt: &mut Optimizer,
    reduce: impl FnOnce(&mut [Tensor]) -> Result<()>,
    input: Option<&Var>,
) -> Result<(f64, Option<Tensor>)> {
    let mut grads = tape.backward(loss)?;
    let input_grad = input.and_then(|x| grads.take(x));
    let mut grads: Vec<Tensor> = vars
        .iter()
        .zip(values.iter())
        .map(|(v, p)| {
            grads
                .take(v)
                .unwrap_or_else(|| Tensor::zeros(p.shape(), p.dtype()))
        })
        .collect();
    drop(vars);
    drop(tape);
    reduce(&mut grads)?;
    {
        let _g = category_scope(Category::Optimizer);
        opt.step(values, &grads)?;
    }
    Ok((loss.value().scalar_f64()?, input_grad))
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
        comm.all_reduce(data, ReduceOp::Sum)
            .map_err(|e| Error::Config(format!("gradient all-reduce: {e}")))?;
    }
    Ok(())
}

/// Model selection: keeps the parameters of the epoch with the best validation accuracy (the
/// first of equals) and says when patience has run out.
#[derive(Default)]
pub struct Selection {
    records: Vec<EpochRecord>,
    best: Option<(usize, f64, f64, Vec<Tensor>)>,
}

impl Selection {
    /// Records an epoch; returns whether to stop.
    pub fn observe(
        &mut self,
        record: EpochRecord,
        values: &[Tensor],
        patience: Option<usize>,
    ) -> bool {
        if self.best.as_ref().is_none_or(|b| record.val_acc > b.1) {
            self.best = Some((
                record.epoch,
                record.val_acc,
                record.test_acc,
                values.to_vec(),
            ));
        }
        let epoch = record.epoch;
        self.records.push(record);
        match (patience, self.best.as_ref()) {
            (Some(p), Some(b)) => epoch - b.0 >= p,
            _ => false,
        }
    }

    /// The report of the run: the model gets the best epoch's parameters.
    pub fn into_report(self, mut model: Model) -> Result<TrainReport> {
        let (epoch, val, test, values) = self
            .best
            .ok_or_else(|| Error::Config("no epoch was run".into()))?;
        for (p, v) in model.params.iter_mut().zip(values) {
            p.value = v;
        }
        Ok(TrainReport {
            epochs: self.records,
            best_epoch: epoch,
            best_val_acc: val,
            test_acc: test,
            best_params: model.params,
            memory: thread_tracker().report(),
            rss: RssReport::read(),
        })
    }
}

/// Trains `cfg` on `ds`, calling `on_epoch` after every epoch. The features must already be in
/// the model's compute dtype.
pub fn train_full_batch(
    ds: &Dataset,
    cfg: ModelConfig,
    tc: &TrainConfig,
    mut on_epoch: impl FnMut(&EpochRecord),
) -> Result<TrainReport> {
    if ds.features.dtype() != cfg.dtype {
        return Err(Error::Config(format!(
            "features are {}, the model computes in {}",
            ds.features.dtype(),
            cfg.dtype
        )));
    }
    if ds.train_idx.is_empty() {
        return Err(Error::Config("the dataset has no training nodes".into()));
    }
    let mut model = Model::new(cfg, &ds.graph, tc.seed)?;
    model.use_sparse_input(&ds.features);
    let mut values: Vec<Tensor> = model.params.iter().map(|p| p.value.clone()).collect();
    let mut opt = Optimizer::new(tc.optimizer, tc.lr, tc.weight_decay, &values);
    let rows: Arc<[usize]> = ds.train_idx.clone().into();
    let labels: Arc<[i64]> = ds.train_idx.iter().map(|&i| ds.labels[i]).collect();
    let x = Var::constant(ds.features.clone());
    let mut selection = Selection::default();
    for epoch in 1..=tc.epochs {
        let start = Instant::now();
        let loss = {
            let _g = category_scope(Category::Activations);
            let mut tape = Tape::new();
            let vars: Vec<Var> = values.iter().map(|v| tape.leaf(v.clone(), true)).collect();
            let mode = Mode {
                training: true,
                seed: tc.seed,
                step: epoch as u64,
            };
            let logp = model.forward(&mut tape, &x, &vars, mode)?;
            let loss = ops::nll_loss(
                &mut tape,
                &logp,
                rows.clone(),
                labels.clone(),
                rows.len() as f64,
            )?;
            drop(logp);
            backward_and_step(tape, &loss, vars, &mut values, &mut opt, |_| Ok(()), None)?.0
        };
        let seconds = start.elapsed().as_secs_f64();
        if !loss.is_finite() {
            return Err(Error::Config(format!(
                "the loss became {loss} at epoch {epoch}; lower the learning rate"
            )));
        }
        let logp = evaluate(&model, &x, &values, tc.seed)?;
        let record = EpochRecord::measure(epoch, loss, seconds, &logp, ds);
        drop(logp);
        on_epoch(&record);
        let stop = selection.observe(record, &values, tc.patience);
        if stop {
            break;
        }
    }
    selection.into_report(model)
}
