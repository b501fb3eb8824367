//! What the plans read and make besides the model: the dataset, loaded or generated, with
//! checks of its size against memory, and a learnt input embedding's table.

use std::path::Path;
use std::sync::Arc;

use graphloom_comm::Communicator;
use graphloom_convert::synthetic;
use graphloom_graph::{format_bytes, Dataset, Meta, TargetKind};
use graphloom_store::{Embedding, Layout, Location, SparseOptimizer, StoreSpec, StoreTensor};
use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::{DType, Tensor};

use crate::plan::available_memory_bytes;
use crate::{PlanError, Result, TaskKind, TrainMode, TrainSettings};

/// The default learning rate of a learnt input embedding's LazyAdam.
pub(crate) const EMBEDDING_LR: f32 = 0.01;

/// A learnt input embedding of `nodes` rows of `dim` over the workers of `comm` (each holds
/// its own rows), trained by LazyAdam: initialised N(0, 1) from `seed`, as PyTorch's
/// `nn.Embedding` (the table PyG and DGL examples learn; a table drawn in +-1/sqrt(dim), 14
/// times smaller at 64 wide, made link prediction peak within 10 epochs and then overfit,
/// ending 0.07 under PyG's Hits@50), or with `saved` rows (a saved model's). In memory, or,
/// with `files`, mapped from the file `files` with its optimizer state beside it (created;
/// the caller removes them). Collective.
pub(crate) fn embedding_table(
    comm: Arc<dyn Communicator>,
    nodes: usize,
    dim: usize,
    seed: u64,
    saved: Option<&Tensor>,
    files: Option<&Path>,
) -> Result<Embedding> {
    let location = match files {
        Some(path) => Location::Mmap {
            path: path.to_path_buf(),
            writable: true,
        },
        None => Location::Host,
    };
    let spec = StoreSpec::new(&[nodes, dim], DType::F32, Layout::Distributed, location);
    let table = StoreTensor::new(comm, spec)?;
    let mut table = match files {
        Some(prefix) => Embedding::trainable_in_files(table, SparseOptimizer::lazy_adam(), prefix)?,
        None => Embedding::trainable(table, SparseOptimizer::lazy_adam())?,
    };
    table.init_normal(seed, 1.0)?;
    if let Some(rows) = saved {
        if rows.shape() != [nodes, dim] {
            return Err(PlanError::invalid(
                "init_model",
                format!(
                    "holds an input embedding of shape {:?}, the dataset needs [{nodes}, {dim}]",
                    rows.shape()
                ),
            ));
        }
        table.fill_from_whole(
            rows.cast(DType::F32)
                .map_err(graphloom_nn::Error::from)?
                .as_bytes(),
        )?;
    }
    Ok(table)
}

/// The dataset of `s` loaded with its features in the compute dtype (or without them, for a
/// run that learns its input) and, with `edge_features`, its edges' features; or the default
/// synthetic graph generated in memory.
pub(crate) fn load(
    s: &TrainSettings,
    without_features: bool,
    edge_features: bool,
) -> Result<Dataset> {
    let mut ds = match &s.dataset {
        Some(dir) if without_features => Dataset::load_without_features(dir)?,
        Some(dir) => {
            check_features_fit(&Meta::read(dir)?, s.dtype.0, TrainMode::FullBatch)?;
            Dataset::load(dir)?
        }
        None => {
            let mut ds = synthetic::generate(&default_graph(s.seed))?;
            if let Some(kind) = planted_kind(s) {
                let planted = synthetic::PlantedTargets {
                    kind,
                    width: 4,
                    noise: 0.3,
                    missing: 0.0,
                };
                synthetic::plant(&mut ds, &planted, s.seed);
            }
            ds
        }
    };
    if let (true, Some(dir)) = (edge_features, &s.dataset) {
        let _g = category_scope(Category::Features);
        ds.load_edge_features(dir)?;
    }
    let _g = category_scope(Category::Features);
    ds.features = ds
        .features
        .cast(s.dtype.0)
        .map_err(graphloom_nn::Error::from)?;
    Ok(ds)
}

/// The targets the default graph carries for a multi-label or regression run without a
/// dataset (4 per node, planted as `prepare synthetic --targets` plants them), or `None`.
fn planted_kind(s: &TrainSettings) -> Option<TargetKind> {
    match s.task {
        Some(TaskKind::Multilabel) => Some(TargetKind::Binary),
        Some(TaskKind::Regression) => Some(TargetKind::Real),
        _ => None,
    }
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
    let available = available_memory_bytes();
    if available == 0 || bytes <= available as u128 {
        return Ok(());
    }
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
            "its node features take {} in {dtype}, more than the {} this process may use: {hint}",
            format_bytes(u64::try_from(bytes).unwrap_or(u64::MAX)),
            format_bytes(available)
        ),
    ))
}

/// The error of a dataset without node features, for a run that reads them; the input
/// embedding that replaces them is learnt in sampled training, and in full batch too for link
/// prediction (`full_batch_embedding`).
pub(crate) fn no_features(full_batch_embedding: bool) -> PlanError {
    let how = if full_batch_embedding {
        "`embedding_dim` (full batch or sampled)"
    } else {
        "`embedding_dim` and `fanouts`"
    };
    PlanError::invalid(
        "dataset",
        format!("the dataset has no node features: train an input embedding with {how}"),
    )
}
