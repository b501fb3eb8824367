//! [`FullBatchPlan`]: the whole graph, loaded into memory, in every step on one worker.

use graphloom_graph::convert::synthetic;
use graphloom_graph::{Dataset, Meta};
use graphloom_nn::train::{fit, EpochRecord, FullBatch, TrainConfig, TrainReport};
use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::DType;

use crate::plan::{available_memory_bytes, check_sizes, Common, PlannedModel};
use crate::{PlanError, Result, TrainMode, TrainSettings};

/// A full-batch run: the dataset in memory, features cast to the compute dtype.
pub struct FullBatchPlan {
    /// Settings, model and loop.
    pub common: Common,
    dataset: Dataset,
}

impl FullBatchPlan {
    pub(crate) fn new(
        settings: TrainSettings,
        train: TrainConfig,
        model: PlannedModel,
    ) -> Result<FullBatchPlan> {
        let dataset = load(&settings)?;
        if dataset.meta.feat_dim == 0 {
            return Err(no_features());
        }
        let common = model.common(settings, train, dataset.meta.clone())?;
        // Every node's activations are held at once.
        check_sizes(&common.model, common.meta.num_nodes)?;
        Ok(FullBatchPlan { common, dataset })
    }

    /// The dataset trained on.
    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }

    /// Trains on one worker, calling `on_epoch` after every epoch.
    pub fn run(&self, on_epoch: impl FnMut(&EpochRecord)) -> Result<TrainReport> {
        let c = &self.common;
        let mut workload = FullBatch::new(&self.dataset, c.model.clone(), c.train.seed)?;
        c.start_from_saved(&mut workload)?;
        Ok(fit(&mut workload, &c.train, on_epoch)?)
    }
}

/// The dataset of `s` loaded with its features in the compute dtype, or the default synthetic
/// graph generated in memory.
pub(crate) fn load(s: &TrainSettings) -> Result<Dataset> {
    let mut ds = match &s.dataset {
        Some(dir) => {
            check_features_fit(&Meta::read(dir)?, s.dtype.0, TrainMode::FullBatch)?;
            Dataset::load(dir)?
        }
        None => synthetic::generate(&default_graph(s.seed))?,
    };
    let _g = category_scope(Category::Features);
    ds.features = ds
        .features
        .cast(s.dtype.0)
        .map_err(graphloom_nn::Error::from)?;
    Ok(ds)
}

/// The graph trained on when no dataset is given: 20,000 nodes of 8 classes with 64 features,
/// generated from the run's seed in a second.
pub(crate) fn default_graph(seed: u64) -> synthetic::SyntheticConfig {
    synthetic::SyntheticConfig {
        nodes: 20_000,
        avg_degree: 10,
        feat_dim: 64,
        classes: 8,
        seed,
        ..Default::default()
    }
}

/// Refuses to load features larger than the memory this process may use, before reading any.
pub(crate) fn check_features_fit(meta: &Meta, dtype: DType, mode: TrainMode) -> Result<()> {
    let bytes = (meta.num_nodes as u128) * (meta.feat_dim as u128) * dtype.size_in_bytes() as u128;
    let available = available_memory_bytes() as u128;
    if available == 0 || bytes <= available {
        return Ok(());
    }
    let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
    let hint = match mode {
        TrainMode::MiniBatch => "keep them on disk with `features_location` mmap",
        _ => {
            "sample mini-batches (`fanouts`) with `features_location` mmap, or partition the \
              graph (graphloom partition) over an MPI job"
        }
    };
    Err(PlanError::invalid(
        "dataset",
        format!(
            "its node features take {:.1} GiB in {dtype}, more than the {:.1} GiB this process may use: \
             {hint}",
            gib(bytes),
            gib(available)
        ),
    ))
}

/// The error of a dataset without node features, for a run that reads them.
pub(crate) fn no_features() -> PlanError {
    PlanError::invalid(
        "dataset",
        "the dataset has no node features: train an input embedding with `fanouts` and \
         `embedding_dim`",
    )
}
