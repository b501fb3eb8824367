//! [`FullBatchPlan`]: the whole graph, loaded into memory, in every step on one worker.

use graphloom_comm::Local;
use graphloom_graph::Dataset;
use graphloom_nn::task::Task;
use graphloom_nn::train::{fit, EpochRecord, FullBatch, TrainConfig, TrainReport};

use crate::budget::{self, RunShape};
use crate::data::{embedding_table, load, no_features, EMBEDDING_LR};
use crate::link::LinkPlan;
use crate::plan::{check_sizes, Common, PlannedModel};
use crate::values::value_task;
use crate::{MemoryPlan, Result, TaskKind, TrainSettings};

/// The training, validation and test nodes of `ds`.
fn splits_of(ds: &Dataset) -> [&[usize]; 3] {
    [&ds.train_idx, &ds.valid_idx, &ds.test_idx]
}

/// A full-batch run: the dataset in memory, features cast to the compute dtype (or, for link
/// prediction on a graph without features, a learnt input embedding).
pub struct FullBatchPlan {
    /// Settings, model and loop.
    pub common: Common,
    /// The learnt input embedding's width and learning rate, when the run learns one instead
    /// of reading features.
    pub embedding: Option<(usize, f32)>,
    /// The predicted peak memory by part, checked against `memory_gib`.
    pub memory: MemoryPlan,
    dataset: Dataset,
    link: Option<LinkPlan>,
}

impl FullBatchPlan {
    pub(crate) fn new(
        settings: TrainSettings,
        train: TrainConfig,
        model: PlannedModel,
    ) -> Result<FullBatchPlan> {
        let s = &settings;
        let embedding = model
            .embedding_dim
            .map(|dim| (dim, s.embedding_lr.unwrap_or(EMBEDDING_LR)));
        let dataset = load(s, embedding.is_some(), model.arch.reads_edge_features())?;
        if embedding.is_none() && dataset.meta.feat_dim == 0 {
            return Err(no_features(s.task == Some(TaskKind::Link)));
        }
        let link = LinkPlan::open(s, s.dataset.as_deref(), dataset.data())?;
        value_task(s, dataset.targets.as_ref(), splits_of(&dataset))?;
        let common = model.common(settings, train, dataset.meta.clone())?;
        if let Some(link) = &link {
            link.check_step(&common.model, common.settings.batch_size)?;
        }
        // Every node's activations are held at once.
        check_sizes(&common.model, common.meta.num_nodes)?;
        let rows = match (&common.settings.dataset, embedding) {
            (Some(dir), None) => budget::probe_rows(dir, &common.meta)?,
            _ => None,
        };
        // A step scores a batch of supervision pairs (all of them by default).
        let pairs = link
            .as_ref()
            .map(|l| l.pairs(common.settings.batch_size.unwrap_or(l.supervision_pairs())));
        let memory = budget::full_batch(
            &RunShape::of(&common)?,
            &common.meta,
            embedding.is_some(),
            rows.as_ref(),
            pairs.as_ref(),
        )?;
        Ok(FullBatchPlan {
            common,
            embedding,
            memory,
            dataset,
            link,
        })
    }

    /// The dataset trained on.
    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }

    /// Trains on one worker, calling `on_epoch` after every epoch.
    pub fn run(&self, on_epoch: impl FnMut(&EpochRecord)) -> Result<TrainReport> {
        let c = &self.common;
        let (ds, cfg, seed) = (&self.dataset, c.model.clone(), c.train.seed);
        let mut table;
        let workload = match self.embedding {
            Some((dim, lr)) => {
                let saved = c.init.as_ref().and_then(|m| m.input_embedding.as_ref());
                table = embedding_table(Local::single(), c.meta.num_nodes, dim, seed, saved, None)?;
                FullBatch::with_embedding(ds, cfg, seed, &mut table, lr)?
            }
            None => FullBatch::new(ds, cfg, seed)?,
        };
        let values = value_task(&c.settings, ds.targets.as_ref(), splits_of(ds))?;
        let mut workload = match (&self.link, values) {
            (Some(link), _) => workload.with_task(link.task(), c.settings.batch_size)?,
            (None, Some(task)) => workload.with_task(Task::Values(task), None)?,
            (None, None) => workload,
        };
        c.start_from_saved(&mut workload)?;
        Ok(fit(&mut workload, &c.train, on_epoch)?)
    }
}
