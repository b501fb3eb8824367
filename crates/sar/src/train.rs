//! The SAR workload: every worker runs the same steps on its part, with the loss divided by
//! the global number of training nodes and the parameter gradients summed over workers, so
//! the run follows one worker's full-batch run on the whole graph.

use std::sync::Arc;

use graphloom_comm::{Communicator, CommunicatorExt, ReduceData, ReduceOp};
use graphloom_graph::parts::Part;
use graphloom_nn::inference::{infer, Output};
use graphloom_nn::layers::Aggregation;
use graphloom_nn::task::Targets;
use graphloom_nn::train::{
    fit, EpochRecord, Evaluation, SplitCounts, StepInput, Steps, TrainConfig, TrainReport, Workload,
};
use graphloom_nn::values::{split_metrics, ValueEvaluation, ValueMetrics, ValueTask};
use graphloom_nn::{Architecture, GraphInput, Model, ModelConfig, NodeGraph, Param};
use graphloom_tensor::autodiff::ops::RowLoss;
use graphloom_tensor::{Tensor, Var};

use crate::{
    Error, Exchange, Normalisation, PartGraph, Result, RingAggregation, RingAttention, SarMode,
};

/// The graph of this worker's part as a model of `arch` runs over it: its rows are the part's
/// nodes (keyed by their ids), and its operators aggregate over the parts of the job in
/// `mode` (batch normalisation's statistics summed over the workers). Collective. GATv2 is
/// refused: its dynamic attention has no ring operator.
pub fn sar_graph(
    comm: Arc<dyn Communicator>,
    part: &mut Part,
    arch: Architecture,
    heads: usize,
    mode: SarMode,
) -> Result<NodeGraph> {
    if part.meta.parts != comm.size() || part.index != comm.rank() {
        return Err(Error::WorkerCount {
            rank: comm.rank(),
            workers: comm.size(),
            part: part.index,
            parts: part.meta.parts,
        });
    }
    let norm = match arch.aggregation() {
        Aggregation::Gcn => Normalisation::Gcn,
        Aggregation::Sum => Normalisation::Sum,
        // GAT reads the attention only.
        Aggregation::Mean | Aggregation::Attention => Normalisation::Mean,
        Aggregation::DynamicAttention => {
            return Err(graphloom_nn::Error::InvalidSetting {
                setting: "model",
                reason: "GATv2's scores need a source's and a destination's projected rows \
                         together, which SAR's ring attention does not exchange"
                    .into(),
            }
            .into())
        }
        Aggregation::EdgeSum => {
            return Err(graphloom_nn::Error::InvalidSetting {
                setting: "model",
                reason: "GINE's messages need each edge's features beside its source's row, \
                         which SAR's parts do not carry: train GINE full batch, sampled or in \
                         subgraph batches"
                    .into(),
            }
            .into())
        }
    };
    let ids: Arc<[i64]> = part.orig_ids.clone().into();
    let graph = Arc::new(PartGraph::new(comm.as_ref(), part)?);
    let exchange = Arc::new(Exchange::new(comm.clone(), graph, mode)?);
    let aggregation = Arc::new(RingAggregation::new(exchange.clone(), norm));
    let attention = Arc::new(RingAttention::new(exchange, heads.max(1)));
    let stats_sum = Arc::new(move |values: &mut [f64]| {
        comm.all_reduce(ReduceData::F64(values), ReduceOp::Sum)
            .map_err(|e| graphloom_tensor::Error::Op {
                op: "batch norm",
                source: Box::new(e),
            })
    });
    Ok(NodeGraph::with_operators(aggregation, attention)
        .with_row_ids(ids)
        .with_stats_sum(stats_sum))
}

/// SAR full-batch training as a [`Workload`]: every worker runs each step on its part, with
/// the loss divided by the global number of training nodes (and the parameter gradients
/// summed over the workers by the loop), so the run follows one worker's full-batch run on the
/// whole graph. Collective.
pub struct Sar<'a> {
    comm: Arc<dyn Communicator>,
    part: &'a Part,
    model: Model,
    graph: NodeGraph,
    x: Var,
    rows: Arc<[usize]>,
    labels: Arc<[i64]>,
    mode: SarMode,
    /// Multi-label classification or regression over the part's targets (local splits), and
    /// the job's count of present training targets; `None`: node classification.
    values: Option<(ValueTask<'a>, usize)>,
}

impl<'a> Sar<'a> {
    /// The workload of model `cfg` (parameters drawn from `seed`, those of the one-worker
    /// model) on the part of this worker (`comm.rank()` is its part of a partition into
    /// `comm.size()` parts; its graph arrays move into the model), with halos travelling as
    /// `mode` says. Memory is charged to the calling thread's tracker: give each in-process
    /// worker its own for per-worker figures. Collective.
    pub fn new(
        comm: Arc<dyn Communicator>,
        part: &'a mut Part,
        cfg: ModelConfig,
        seed: u64,
        mode: SarMode,
    ) -> Result<Sar<'a>> {
        // Every worker sees the same count, so all stop here together.
        if part.meta.num_train == 0 {
            return Err(graphloom_nn::Error::NoTrainingNodes.into());
        }
        let model = Model::new(cfg.clone(), seed)?;
        let graph = sar_graph(comm.clone(), part, cfg.arch, cfg.heads, mode)?;
        let x = Var::constant(part.features.cast(cfg.dtype)?);
        let part: &Part = part;
        Ok(Sar {
            comm,
            model,
            graph,
            x,
            rows: part.train_idx.clone().into(),
            labels: part.train_idx.iter().map(|&v| part.labels[v]).collect(),
            part,
            mode,
            values: None,
        })
    }

    /// The same workload training for multi-label classification or regression with `loss`
    /// on the part's targets. Collective.
    pub fn with_values(mut self, loss: RowLoss) -> Result<Sar<'a>> {
        let part = self.part;
        let Some(targets) = &part.targets else {
            return Err(graphloom_nn::Error::Mismatch {
                what: "the task and the dataset's labels",
                detail: "multi-label classification and regression need [N, T] labels or real \
                         targets in node_label.npy; the partition holds one class per node"
                    .into(),
            }
            .into());
        };
        let splits = [&part.train_idx[..], &part.valid_idx, &part.test_idx];
        let task = ValueTask::new(targets, loss, splits)?;
        task.check(&self.model.cfg)?;
        let mut terms = [task.present(part.train_idx.iter().copied()) as f64];
        self.comm
            .all_reduce(ReduceData::F64(&mut terms), ReduceOp::Sum)?;
        self.values = Some((task, terms[0] as usize));
        Ok(self)
    }
}

impl Workload for Sar<'_> {
    fn fingerprint(&self) -> String {
        let m = &self.part.meta;
        format!(
            "SAR ({}) over {} parts of {} nodes, {} edges, {} training nodes",
            self.mode.name(),
            m.parts,
            m.dataset.num_nodes,
            m.dataset.num_edges,
            m.num_train
        )
    }

    fn params(&self) -> &[Param] {
        &self.model.params
    }

    fn set_params(&mut self, params: &[Param]) -> graphloom_nn::Result<()> {
        self.model.set_params(params)
    }

    fn model_fingerprint(&self) -> String {
        graphloom_nn::train::model_fingerprint(&self.model.cfg)
    }

    fn gradient_comm(&self) -> Option<Arc<dyn Communicator>> {
        Some(self.comm.clone())
    }

    fn train_epoch(&mut self, _epoch: usize, steps: &mut Steps<'_>) -> graphloom_nn::Result<f64> {
        // One batch: this worker's part, its loss already over the job's training nodes (so
        // weighed as one: the epoch's loss is the sum of the workers').
        let (targets, total) = match &self.values {
            Some((task, terms)) => (
                task.targets_of(&self.rows, self.rows.clone(), None),
                *terms as f64,
            ),
            None => (
                Targets::Nodes {
                    rows: self.rows.clone(),
                    labels: self.labels.clone(),
                    weights: None,
                },
                self.part.meta.num_train as f64,
            ),
        };
        let loss = steps.run_batches([Ok(targets)], |steps, targets, _| {
            let loss = steps.step(
                &self.model,
                StepInput::Rows(self.x.clone()),
                GraphInput::Nodes(&self.graph),
                targets,
                total,
            )?;
            Ok(Some((loss, 1)))
        })?;
        loss.mean_over(self.comm.as_ref())
    }

    fn evaluate(&mut self, params: &[Tensor]) -> graphloom_nn::Result<Evaluation> {
        match self.values {
            Some((task, _)) => self.value_metrics(params, task),
            None => Ok(Evaluation::Node(self.split_counts(params)?.accuracy())),
        }
    }
}

impl Sar<'_> {
    /// The metrics of `task` with parameters `params` and dropout off: each split's outputs
    /// and targets gathered from every worker, in the order of the nodes' original ids, so
    /// every worker measures what one worker would. Collective.
    fn value_metrics(
        &mut self,
        params: &[Tensor],
        task: ValueTask<'_>,
    ) -> graphloom_nn::Result<Evaluation> {
        let out = infer(
            &self.model,
            &self.x,
            GraphInput::Nodes(&self.graph),
            params,
            Output::Layer(self.model.num_layers()),
        )?
        .to_vec_f64();
        let width = task.targets.width;
        let comm = self.comm.as_ref();
        // A split's metrics over every worker, and its nodes.
        let gathered = |local: &[usize]| -> graphloom_nn::Result<(ValueMetrics, usize)> {
            let ids: Vec<i64> = local.iter().map(|&v| self.part.orig_ids[v]).collect();
            let rows: Vec<f32> = local
                .iter()
                .flat_map(|&v| out[v * width..(v + 1) * width].iter().map(|&x| x as f32))
                .collect();
            let targets = task.targets.rows_of(local.iter().copied());
            let ids = comm.all_gather_typed(&ids)?.concat();
            let rows = comm.all_gather_typed(&rows)?.concat();
            let targets = comm.all_gather_typed(&targets)?.concat();
            let mut order: Vec<usize> = (0..ids.len()).collect();
            order.sort_by_key(|&i| ids[i]);
            let pick = |v: &[f32]| -> Vec<f32> {
                order
                    .iter()
                    .flat_map(|&i| v[i * width..(i + 1) * width].iter().copied())
                    .collect()
            };
            let metrics = split_metrics(task.loss, &pick(&rows), &pick(&targets), width);
            Ok((metrics, ids.len()))
        };
        let (train, _) = gathered(task.splits[0])?;
        let (valid, validation_nodes) = gathered(task.splits[1])?;
        let (test, _) = gathered(task.splits[2])?;
        Ok(Evaluation::Values(ValueEvaluation::new(
            [train, valid, test],
            validation_nodes,
        )?))
    }

    /// Correct predictions on the three splits with parameters `params` and dropout off,
    /// summed over the job's workers.
    fn split_counts(&mut self, params: &[Tensor]) -> graphloom_nn::Result<SplitCounts> {
        let logp = infer(
            &self.model,
            &self.x,
            GraphInput::Nodes(&self.graph),
            params,
            Output::LogProbabilities,
        )?;
        let part = self.part;
        let mut counts = SplitCounts::of(
            &logp,
            &part.labels,
            [&part.train_idx, &part.valid_idx, &part.test_idx],
        );
        counts.sum_over(self.comm.as_ref())?;
        Ok(counts)
    }
}

/// Trains a model (any family but GATv2) full-batch on the part of this worker ([`Sar`] under
/// [`fit`]), calling `on_epoch` on every worker after every epoch with the job's loss and
/// accuracies. Collective.
pub fn train_sar(
    comm: Arc<dyn Communicator>,
    part: &mut Part,
    cfg: ModelConfig,
    tc: &TrainConfig,
    sar_mode: SarMode,
    on_epoch: impl FnMut(&EpochRecord),
) -> Result<TrainReport> {
    Ok(fit(
        &mut Sar::new(comm, part, cfg, tc.seed, sar_mode)?,
        tc,
        on_epoch,
    )?)
}
