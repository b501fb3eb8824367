//! [`FullBatch`]: full-batch training on one worker, the whole graph in every step, for node
//! classification (one step per epoch) or link prediction (the supervision pairs in batches,
//! the whole graph encoded for each).

use std::path::Path;
use std::sync::Arc;

use graphloom_comm::Communicator;
use graphloom_graph::Dataset;
use graphloom_store::Embedding;
use graphloom_tensor::{Tensor, Var};

use super::{
    fit, EpochRecord, Evaluation, SplitCounts, StepInput, Steps, TrainConfig, TrainReport, Workload,
};
use crate::inference::{infer, Output};
use crate::model::{GraphInput, Model, ModelConfig, NodeGraph, Param};
use crate::task::{EvaluationSource, Targets, Task};
use crate::{Error, Result};

/// The name of a learnt input table's files in a snapshot folder.
pub(crate) const EMBEDDING_PREFIX: &str = "input_embedding";

/// Where a full-batch step reads every node's input row.
enum FullInput<'a> {
    /// Fixed rows (the features), in the compute dtype.
    Rows(Var),
    /// A trainable embedding table, read whole at every step; its rows' gradients go to its
    /// sparse optimizer with learning rate `lr`.
    Table { table: &'a mut Embedding, lr: f32 },
}

/// Full-batch training on one worker: every step is a forward pass over the whole graph and
/// the loss of the task (the training nodes' labels, or a batch of supervision pairs and
/// their negatives); evaluation is one forward pass with dropout off (exact full-neighbour
/// inference).
pub struct FullBatch<'a> {
    ds: &'a Dataset,
    model: Model,
    graph: NodeGraph,
    input: FullInput<'a>,
    task: Task<'a>,
    /// Link prediction: supervision pairs per step (`None`: all of them).
    batch_size: Option<usize>,
    seed: u64,
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
    /// the compute dtype): the features, or a fixed input embedding.
    pub fn with_inputs(
        ds: &'a Dataset,
        cfg: ModelConfig,
        seed: u64,
        x: Tensor,
    ) -> Result<FullBatch<'a>> {
        check_rows(
            ds,
            &cfg,
            x.shape()[0],
            x.shape().get(1).copied().unwrap_or(0),
        )?;
        let mut workload = FullBatch::on_graph(ds, cfg, seed, FullInput::Rows(Var::constant(x)))?;
        if let FullInput::Rows(x) = &workload.input {
            let sparse = workload.model.sparse_input(x.value());
            workload.graph = std::mem::take(&mut workload.graph).with_sparse_input(sparse);
        }
        Ok(workload)
    }

    /// The workload of model `cfg` on the graph of `ds` whose input is the trainable table
    /// `table` (one row per node, as wide as the model's input; for graphs without features),
    /// trained by its sparse optimizer with learning rate `lr`.
    pub fn with_embedding(
        ds: &'a Dataset,
        cfg: ModelConfig,
        seed: u64,
        table: &'a mut Embedding,
        lr: f32,
    ) -> Result<FullBatch<'a>> {
        check_rows(ds, &cfg, table.table().rows(), table.dim())?;
        FullBatch::on_graph(ds, cfg, seed, FullInput::Table { table, lr })
    }

    fn on_graph(
        ds: &'a Dataset,
        cfg: ModelConfig,
        seed: u64,
        input: FullInput<'a>,
    ) -> Result<FullBatch<'a>> {
        let weight = ds.edge_weight.as_ref().map(|w| Arc::from(w.as_slice()));
        let model = Model::new(cfg, seed)?;
        let edge_features = ds.edge_features.clone().map(Arc::new);
        let graph = NodeGraph::in_memory(model.cfg.arch, &ds.graph, weight, edge_features)?;
        Ok(FullBatch {
            ds,
            model,
            graph,
            input,
            task: Task::Node,
            batch_size: None,
            seed,
        })
    }

    /// The same workload training for `task`; for link prediction, `batch_size` supervision
    /// pairs per step (`None`: all of them in one step).
    pub fn with_task(mut self, task: Task<'a>, batch_size: Option<usize>) -> Result<FullBatch<'a>> {
        task.check(&self.model.cfg)?;
        if batch_size == Some(0) {
            return Err(Error::InvalidSetting {
                setting: "batch_size",
                reason: "must be at least 1".into(),
            });
        }
        self.task = task;
        self.batch_size = batch_size;
        Ok(self)
    }

    /// Every node's input rows: the fixed rows, or the table's (collective).
    fn all_rows(&mut self) -> Result<Var> {
        let dtype = self.model.cfg.dtype;
        Ok(match &mut self.input {
            FullInput::Rows(x) => x.clone(),
            FullInput::Table { table, .. } => {
                let all: Vec<i64> = (0..table.table().rows() as i64).collect();
                Var::constant(table.gather(&all)?.cast(dtype)?)
            }
        })
    }

    /// Inference over every node with parameters `params` and dropout off.
    pub fn infer(&mut self, params: &[Tensor], output: Output) -> Result<Tensor> {
        let x = self.all_rows()?;
        infer(
            &self.model,
            &x,
            GraphInput::Nodes(&self.graph),
            params,
            output,
        )
    }

    /// One step: the forward pass over the whole graph and the loss of `targets` on its output
    /// (over `normaliser`), backward, the update, and the table's update when the input is
    /// one. Returns the loss.
    fn step(&mut self, steps: &mut Steps<'_>, targets: Targets, normaliser: f64) -> Result<f64> {
        let all: Vec<i64>;
        let input = match &mut self.input {
            FullInput::Rows(x) => StepInput::Rows(x.clone()),
            FullInput::Table { table, lr } => {
                all = (0..table.table().rows() as i64).collect();
                let rows = table.gather(&all)?.cast(self.model.cfg.dtype)?;
                StepInput::Table {
                    table,
                    lr: *lr,
                    ids: &all,
                    rows,
                }
            }
        };
        let graph = GraphInput::Nodes(&self.graph);
        steps.step(&self.model, input, graph, targets, normaliser)
    }
}

/// Fails unless `rows x width` input rows fit the graph of `ds` and a model of `cfg`.
fn check_rows(ds: &Dataset, cfg: &ModelConfig, rows: usize, width: usize) -> Result<()> {
    if rows == ds.graph.num_nodes() && width == cfg.in_dim {
        return Ok(());
    }
    Err(Error::Mismatch {
        what: "input rows and the model",
        detail: format!(
            "input rows of shape [{rows}, {width}] for {} nodes of a model {} wide",
            ds.graph.num_nodes(),
            cfg.in_dim
        ),
    })
}

impl Workload for FullBatch<'_> {
    fn fingerprint(&self) -> String {
        let g = &self.ds.graph;
        let input = match &self.input {
            FullInput::Rows(_) => "features".to_string(),
            FullInput::Table { table, lr } => {
                format!("an input embedding {} wide (lr {lr})", table.dim())
            }
        };
        format!(
            "full batch over {} nodes, {} edges, {} training nodes, from {input}, for {}{}",
            g.num_nodes(),
            g.num_edges(),
            self.ds.train_idx.len(),
            self.task.describe(),
            self.batch_size
                .map_or(String::new(), |b| format!(" in batches of {b}"))
        )
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

    fn gradient_comm(&self) -> Option<Arc<dyn Communicator>> {
        None
    }

    fn input_embedding(&mut self) -> Result<Option<Tensor>> {
        match &mut self.input {
            FullInput::Table { table, .. } => {
                let all: Vec<i64> = (0..table.table().rows() as i64).collect();
                Ok(Some(table.gather(&all)?))
            }
            FullInput::Rows(_) => Ok(None),
        }
    }

    fn save_state(&mut self, dir: &Path) -> Result<()> {
        if let FullInput::Table { table, .. } = &self.input {
            table.save(&dir.join(EMBEDDING_PREFIX))?;
        }
        Ok(())
    }

    fn restore_state(&mut self, dir: &Path, saved_workers: usize) -> Result<()> {
        if let FullInput::Table { table, .. } = &mut self.input {
            table.restore(&dir.join(EMBEDDING_PREFIX), saved_workers)?;
        }
        Ok(())
    }

    fn train_epoch(&mut self, epoch: usize, steps: &mut Steps<'_>) -> Result<f64> {
        self.task.check(&self.model.cfg)?;
        let (task, n, seed, epoch) = (
            self.task,
            self.ds.graph.num_nodes(),
            self.seed,
            epoch as u64,
        );
        let batches = task.epoch(&self.ds.train_idx, seed, epoch, self.batch_size, 0, 1);
        if batches.mine.iter().all(Vec::is_empty) {
            return Err(Error::NoTrainingNodes);
        }
        // One batch (every training node, or every pair): its loss is the epoch's.
        let single = batches.mine.len() == 1;
        let labels = &self.ds.labels;
        let steps_of_epoch = (0..batches.mine.len()).map(Ok);
        let loss = steps.run_batches(steps_of_epoch, |steps, i, _| {
            let targets = task
                .batch(&batches, i, n, seed, epoch)
                .targets_of_graph(labels);
            let scored = targets.len();
            let loss = self.step(steps, targets, scored as f64)?;
            Ok(Some(match single {
                true => (loss, 1),
                false => (loss * scored as f64, scored),
            }))
        })?;
        Ok(loss.mean())
    }

    fn evaluate(&mut self, params: &[Tensor]) -> Result<Evaluation> {
        let task = self.task;
        task.evaluate(params, self)
    }
}

impl EvaluationSource for FullBatch<'_> {
    fn model(&self) -> &Model {
        &self.model
    }

    /// Correct predictions on the three splits with parameters `params` and dropout off.
    fn split_counts(&mut self, params: &[Tensor]) -> Result<SplitCounts> {
        let logp = self.infer(params, Output::LogProbabilities)?;
        Ok(SplitCounts::of_dataset(&logp, self.ds))
    }

    fn embeddings(&mut self, params: &[Tensor]) -> Result<Tensor> {
        self.infer(params, Output::Layer(self.model.num_layers()))
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
