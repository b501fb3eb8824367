//! [`FullBatch`]: full-batch training on one worker, the whole graph in every step.

use std::sync::Arc;

use graphloom_comm::Communicator;
use graphloom_graph::Dataset;
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::{Tape, Tensor, Var};

use super::{fit, EpochRecord, Evaluation, SplitCounts, Steps, TrainConfig, TrainReport, Workload};
use crate::inference::{infer, Output};
use crate::model::{GraphInput, Model, ModelConfig, NodeGraph};
use crate::{Error, Result};

/// Full-batch training on one worker: every step is a forward pass over the whole graph, the
/// loss on the training nodes, and evaluation is one forward pass with dropout off (exact
/// full-neighbour inference).
pub struct FullBatch<'a> {
    ds: &'a Dataset,
    model: Model,
    graph: NodeGraph,
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
        let model = Model::new(cfg, seed)?;
        let graph = NodeGraph::in_memory(model.cfg.arch, &ds.graph, weight)?
            .with_sparse_input(model.sparse_input(&x));
        Ok(FullBatch {
            ds,
            model,
            graph,
            x: Var::constant(x),
            rows: ds.train_idx.clone().into(),
            labels: ds.train_idx.iter().map(|&i| ds.labels[i]).collect(),
        })
    }

    /// Inference over every node with parameters `params` and dropout off.
    pub fn infer(&self, params: &[Tensor], output: Output) -> Result<Tensor> {
        infer(
            &self.model,
            &self.x,
            GraphInput::Nodes(&self.graph),
            params,
            output,
        )
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
        let scores = self.model.forward(
            &mut tape,
            &self.x,
            &vars,
            GraphInput::Nodes(&self.graph),
            mode,
        )?;
        let logp = Model::log_probabilities(&mut tape, &scores)?;
        drop(scores);
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

    fn evaluate(&mut self, params: &[Tensor]) -> Result<Evaluation> {
        Ok(Evaluation::Node(self.split_counts(params)?.accuracy()))
    }
}

impl FullBatch<'_> {
    /// Correct predictions on the three splits with parameters `params` and dropout off,
    /// summed over the job's workers.
    fn split_counts(&mut self, params: &[Tensor]) -> Result<SplitCounts> {
        let logp = self.infer(params, Output::LogProbabilities)?;
        Ok(SplitCounts::of_dataset(&logp, self.ds))
    }
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
