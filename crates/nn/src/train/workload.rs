//! [`Workload`]: one way of training a model (the steps of an epoch, an evaluation, its own
//! state), and [`Steps`], what the loop lends a workload for its steps, with the one training
//! step every workload runs ([`Steps::step`]).

use std::path::Path;
use std::sync::Arc;

use graphloom_comm::{Communicator, ReduceData, ReduceOp};
use graphloom_store::Embedding;
use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::{DType, Tape, Tensor, Var};

use super::Evaluation;
use crate::model::{GraphInput, Mode, Model, Param};
use crate::optim::Optimizer;
use crate::task::Targets;
use crate::Result;

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
    /// The model's parameters, by name (their values are the initial ones).
    fn params(&self) -> &[Param];

    /// Sets the model's initial parameters (from a saved model, say): the same names and
    /// shapes, in order.
    fn set_params(&mut self, params: &[Param]) -> Result<()>;

    /// Every setting of the model that changes the numbers a run computes, compared when a
    /// snapshot is resumed.
    fn model_fingerprint(&self) -> String;

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

    /// What the model measures with parameters `params` and dropout off, over the job's
    /// workers: the accuracies of node classification, the metrics of link prediction.
    fn evaluate(&mut self, params: &[Tensor]) -> Result<Evaluation>;

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

/// An epoch's loss as [`Steps::run_batches`] sums it: the batches' losses, each weighted by
/// what it scored, and the weights.
#[derive(Clone, Copy, Debug, Default)]
pub struct EpochLoss {
    /// The sum of the batches' losses times their weights.
    pub weighted_sum: f64,
    /// The sum of the weights.
    pub weight: usize,
}

impl EpochLoss {
    /// The epoch's mean loss.
    pub fn mean(self) -> f64 {
        self.weighted_sum / self.weight.max(1) as f64
    }

    /// The epoch's mean loss over the workers of `comm`, each of which summed its share of the
    /// batches' weighted losses against the weights of the whole job's batches. Collective.
    pub fn mean_over(self, comm: &dyn Communicator) -> Result<f64> {
        let mut total = [self.weighted_sum];
        comm.all_reduce(ReduceData::F64(&mut total), ReduceOp::Sum)?;
        Ok(total[0] / self.weight.max(1) as f64)
    }
}

/// The input rows of a training step.
pub enum StepInput<'a> {
    /// Fixed rows (node features), in the model's dtype.
    Rows(Var),
    /// Rows `ids` of a trainable embedding table, read as `rows` (in the model's dtype): the
    /// step applies their gradients with the table's sparse optimizer at learning rate `lr`.
    Table {
        /// The table.
        table: &'a mut Embedding,
        /// Its sparse optimizer's learning rate.
        lr: f32,
        /// The rows read.
        ids: &'a [i64],
        /// Their values.
        rows: Tensor,
    },
}

/// What a workload needs for its training steps: the parameters on a tape, the dropout key of
/// each step, and the update.
pub struct Steps<'a> {
    pub(super) values: &'a mut [Tensor],
    pub(super) opt: &'a mut Optimizer,
    pub(super) comm: Option<&'a dyn Communicator>,
    pub(super) step: &'a mut u64,
    pub(super) seed: u64,
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

    /// One training step of `model`: the forward pass over `input` and `graph`, the loss of
    /// `targets` on its output (over `normaliser`), backward, the update, and the embedding
    /// table's update when the input is one. Returns the loss.
    pub fn step(
        &mut self,
        model: &Model,
        input: StepInput<'_>,
        graph: GraphInput<'_>,
        targets: Targets,
        normaliser: f64,
    ) -> Result<f64> {
        let mut tape = Tape::new();
        let (vars, mode) = self.begin(&mut tape);
        let (x, table) = match input {
            StepInput::Rows(x) => (x, None),
            StepInput::Table {
                table,
                lr,
                ids,
                rows,
            } => (tape.leaf(rows, true), Some((table, lr, ids))),
        };
        let out = model.forward(&mut tape, &x, &vars, graph, mode)?;
        let loss = targets.loss(model, &mut tape, &out, &vars, normaliser)?;
        drop(out);
        let wants_input: Vec<&Var> = table.iter().map(|_| &x).collect();
        let (loss, input_grads) = self.finish(tape, &loss, vars, &wants_input)?;
        if let Some((table, lr, ids)) = table {
            let grad = input_grads
                .into_iter()
                .next()
                .flatten()
                .unwrap_or_else(|| Tensor::zeros(x.value().shape(), DType::F32))
                .cast(DType::F32)?;
            table.apply_gradients(ids, &grad, lr)?;
        }
        Ok(loss)
    }

    /// Ends a step begun with [`Steps::begin`]: backpropagates `loss`, sums the gradients over
    /// the workers, applies the optimizer (a parameter without a gradient gets zero) and
    /// returns the loss, with the gradient of each of `inputs` (trainable input tables' rows;
    /// `None` where the loss does not depend on one).
    pub fn finish(
        &mut self,
        mut tape: Tape,
        loss: &Var,
        vars: Vec<Var>,
        inputs: &[&Var],
    ) -> Result<(f64, Vec<Option<Tensor>>)> {
        let mut grads = tape.backward(loss)?;
        let input_grads = inputs.iter().map(|x| grads.take(x)).collect();
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
        Ok((loss.value().scalar_f64()?, input_grads))
    }

    /// The one loop over the batches of an epoch, every workload's: runs `step` on each batch
    /// of `batches` in order (with its index) until they end or a step fails. A step returns
    /// its loss weighted by what it scored and that weight (`None`: a batch with nothing to
    /// learn from); their sums come back.
    pub fn run_batches<B>(
        &mut self,
        batches: impl IntoIterator<Item = Result<B>>,
        mut step: impl FnMut(&mut Self, B, usize) -> Result<Option<(f64, usize)>>,
    ) -> Result<EpochLoss> {
        let mut loss = EpochLoss::default();
        for (i, batch) in batches.into_iter().enumerate() {
            if let Some((weighted, weight)) = step(self, batch?, i)? {
                loss.weighted_sum += weighted;
                loss.weight += weight;
            }
        }
        Ok(loss)
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
