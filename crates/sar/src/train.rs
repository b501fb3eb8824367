//! The SAR training loop: every worker runs the same steps on its part, with the loss divided
//! by the global number of training nodes and the parameter gradients summed over workers, so
//! the run follows one worker's full-batch run on the whole graph.

use std::sync::Arc;
use std::time::Instant;

use graphloom_comm::{Communicator, ReduceData, ReduceOp};
use graphloom_graph::parts::Part;
use graphloom_nn::train::{
    all_reduce_gradients, backward_and_step, correct_predictions, EpochRecord, Selection,
    TrainConfig, TrainReport,
};
use graphloom_nn::{Architecture, Error, Mode, Model, ModelConfig, Optimizer, Result};
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::memory::{category_scope, thread_tracker, Category};
use graphloom_tensor::{Tape, Tensor, Var};

use crate::{Exchange, Normalisation, PartGraph, RingAggregation, RingAttention, SarMode};

fn comm_error(e: graphloom_comm::CommError) -> Error {
    Error::Config(format!("SAR: {e}"))
}

/// Sums `values` over the workers, in place.
fn sum_over_workers(comm: &dyn Communicator, values: &mut [f64]) -> Result<()> {
    comm.all_reduce(ReduceData::F64(values), ReduceOp::Sum)
        .map_err(comm_error)
}

/// Correct predictions and node counts of this worker's part of each split: train, valid, test.
fn local_hits(logp: &Tensor, part: &Part) -> [f64; 6] {
    let hits = |idx: &[usize]| correct_predictions(logp, &part.labels, idx) as f64;
    [
        hits(&part.train_idx),
        part.train_idx.len() as f64,
        hits(&part.valid_idx),
        part.valid_idx.len() as f64,
        hits(&part.test_idx),
        part.test_idx.len() as f64,
    ]
}

/// The model `cfg` with parameters drawn from `seed` (those of the one-worker model), whose
/// layers aggregate over the parts of the job in `mode`. Collective.
pub fn sar_model(
    comm: Arc<dyn Communicator>,
    part: &mut Part,
    cfg: ModelConfig,
    seed: u64,
    mode: SarMode,
) -> Result<Model> {
    if part.meta.parts != comm.size() || part.index != comm.rank() {
        return Err(Error::Config(format!(
            "rank {} of a job of {} workers got part {} of a partition into {} parts: \
             partition again or change the worker count",
            comm.rank(),
            comm.size(),
            part.index,
            part.meta.parts,
        )));
    }
    let graph = Arc::new(PartGraph::new(comm.as_ref(), part).map_err(comm_error)?);
    let exchange = Arc::new(Exchange::new(comm.clone(), graph, mode).map_err(comm_error)?);
    let norm = match cfg.arch {
        Architecture::Gcn => Normalisation::Gcn,
        _ => Normalisation::Mean,
    };
    let aggregation = Arc::new(RingAggregation::new(exchange.clone(), norm));
    let attention = Arc::new(RingAttention::new(exchange, cfg.heads.max(1)));
    let mut model = Model::with_operators(cfg, seed, aggregation, attention)?;
    if model.cfg.batch_norm {
        model.set_batch_norm_sum(Arc::new(move |values: &mut [f64]| {
            comm.all_reduce(ReduceData::F64(values), ReduceOp::Sum)
                .map_err(|e| graphloom_tensor::Error::Autodiff(format!("batch norm: {e}")))
        }));
    }
    Ok(model)
}

/// Trains GCN, GraphSAGE or GAT full-batch on the part of this worker (`comm.rank()` is its
/// part of a partition into `comm.size()` parts; its graph arrays move into the model), with
/// halos travelling as `sar_mode` says, calling `on_epoch` on every worker after every epoch
/// with the job's loss and accuracies. Collective. Memory is charged to the calling thread's
/// tracker: give each in-process worker its own for per-worker figures.
pub fn train_sar(
    comm: Arc<dyn Communicator>,
    part: &mut Part,
    cfg: ModelConfig,
    tc: &TrainConfig,
    sar_mode: SarMode,
    mut on_epoch: impl FnMut(&EpochRecord),
) -> Result<TrainReport> {
    let model = sar_model(comm.clone(), part, cfg.clone(), tc.seed, sar_mode)?;
    let mut values: Vec<Tensor> = model.params.iter().map(|p| p.value.clone()).collect();
    let mut opt = Optimizer::new(tc.optimizer, tc.lr, tc.weight_decay, &values);
    let x = Var::constant(part.features.cast(cfg.dtype)?);
    let ids: Arc<[i64]> = part.orig_ids.clone().into();
    let rows: Arc<[usize]> = part.train_idx.clone().into();
    let labels: Arc<[i64]> = part.train_idx.iter().map(|&v| part.labels[v]).collect();
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
            let logp = model.forward_rows(&mut tape, &x, &vars, mode, ids.clone())?;
            let normaliser = part.meta.num_train as f64;
            let loss = ops::nll_loss(&mut tape, &logp, rows.clone(), labels.clone(), normaliser)?;
            drop(logp);
            let reduce = |grads: &mut [Tensor]| all_reduce_gradients(comm.as_ref(), grads);
            backward_and_step(tape, &loss, vars, &mut values, &mut opt, reduce, None)?.0
        };
        let mut total = [loss];
        sum_over_workers(comm.as_ref(), &mut total)?;
        let seconds = start.elapsed().as_secs_f64();
        let logp = {
            let mut tape = Tape::no_grad();
            let vars: Vec<Var> = values.iter().map(|v| Var::constant(v.clone())).collect();
            let mode = Mode {
                training: false,
                seed: tc.seed,
                step: 0,
            };
            model
                .forward_rows(&mut tape, &x, &vars, mode, ids.clone())?
                .value()
                .clone()
        };
        let mut hits = local_hits(&logp, part);
        sum_over_workers(comm.as_ref(), &mut hits)?;
        let share = |h: f64, n: f64| if n > 0.0 { h / n } else { 0.0 };
        let record = EpochRecord {
            epoch,
            loss: total[0],
            train_acc: share(hits[0], hits[1]),
            val_acc: share(hits[2], hits[3]),
            test_acc: share(hits[4], hits[5]),
            seconds,
            peak_bytes: thread_tracker().report().total_peak,
        };
        on_epoch(&record);
        if selection.observe(record, &values, tc.patience) {
            break;
        }
    }
    selection.into_report(model)
}
