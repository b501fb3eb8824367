//! The training plan: turns typed [`TrainSettings`] into a run. It decides the mode (full
//! batch, sampled mini-batches, or SAR over a partitioned dataset), fills in per-model
//! defaults, refuses options that do not apply, checks sizes before allocating, launches the
//! workers (threads of this process or the ranks of an MPI job), lays out the features in the
//! store and runs the workload under `graphloom_nn::train::fit`. Front ends (the command line)
//! parse into it and print what it returns; they hold no training decisions.
//!
//! ```
//! use graphloom_plan::{Plan, TrainSettings};
//!
//! let settings = TrainSettings { epochs: 3, ..Default::default() };
//! let plan = Plan::new(settings)?;
//! let outcome = plan.run(|_| {})?;
//! assert_eq!(outcome.report.epochs.len(), 3);
//! # Ok::<(), graphloom_plan::PlanError>(())
//! ```
#![deny(missing_docs)]

mod error;
mod infer;
mod launch;
mod run;
mod settings;

pub use error::{PlanError, Result};
pub use infer::{infer, labels_of, InferSettings};
pub use launch::{run_job, WorkerFigures};
pub use run::RunOutcome;
pub use settings::{
    Backend, Choice, ComputeDType, FeaturesLocation, OptimizerName, StorageDType, TrainSettings,
};

use graphloom_graph::convert::synthetic;
use graphloom_graph::parts::PartitionMeta;
use graphloom_graph::{Dataset, GraphData, MappedDataset, Meta};
use graphloom_nn::inference::LayerwiseConfig;
use graphloom_nn::minibatch::{MiniBatchConfig, SampledEval};
use graphloom_nn::model_file::ModelFile;
use graphloom_nn::train::{SnapshotConfig, TrainConfig};
use graphloom_nn::{Architecture, ModelConfig};
use graphloom_sar::SarMode;
use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::DType;

/// How a plan trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrainMode {
    /// The whole graph in every step, on one worker.
    FullBatch,
    /// Sampled mini-batches, data parallel over the workers.
    MiniBatch,
    /// The whole graph in every step, one part per worker (a partitioned dataset).
    Sar,
}

impl TrainMode {
    /// How the mode is described in messages.
    pub fn describe(self) -> &'static str {
        match self {
            TrainMode::FullBatch => "full-batch training of an unpartitioned dataset",
            TrainMode::MiniBatch => "mini-batch training (--fanouts)",
            TrainMode::Sar => "SAR training of a partitioned dataset",
        }
    }
}

/// A checked training run, ready to [`Plan::run`].
pub struct Plan {
    /// What was asked.
    pub settings: TrainSettings,
    /// The mode the settings and the dataset select.
    pub mode: TrainMode,
    /// The model, with every default filled in.
    pub model: ModelConfig,
    /// The loop's settings.
    pub train: TrainConfig,
    /// Mini-batch settings (mini-batch mode only).
    pub batches: Option<MiniBatchConfig>,
    /// The dataset's sizes and names.
    pub meta: Meta,
    /// Workers of an in-process job.
    pub workers: usize,
    /// How the workers talk.
    pub backend: Backend,
    /// SAR: how halos travel.
    pub sar_mode: SarMode,
    /// Mini-batch: where the features live.
    pub features_location: FeaturesLocation,
    /// Mini-batch: the width of the learnt input embedding, when the run learns one.
    pub embedding_dim: Option<usize>,
    /// The dataset, loaded or mapped (not for SAR, whose workers load their own parts).
    data: Option<PlanData>,
    /// The saved model the run starts from.
    init: Option<ModelFile>,
}

impl Plan {
    /// Checks `settings`, selects the mode, and loads the dataset (or generates the default
    /// one) unless it is partitioned.
    pub fn new(settings: TrainSettings) -> Result<Plan> {
        let s = &settings;
        let partitioned = s
            .dataset
            .as_ref()
            .is_some_and(|d| d.join("partition.json").exists());
        let mode = match (partitioned, s.fanouts.is_some()) {
            (true, true) => {
                return Err(PlanError::not_applicable(
                    "--fanouts",
                    TrainMode::Sar,
                    "a partitioned dataset trains full-batch; give the unpartitioned directory to sample mini-batches",
                ))
            }
            (true, false) => TrainMode::Sar,
            (false, true) => TrainMode::MiniBatch,
            (false, false) => TrainMode::FullBatch,
        };
        let saved = match &s.init_model {
            Some(path) => Some(ModelFile::load(path)?),
            None => None,
        };
        let saved_cfg = saved.as_ref().map(|m| &m.config);
        let arch = s
            .model
            .or(saved_cfg.map(|c| c.arch))
            .unwrap_or(Architecture::Gcn);
        let layers = s.layers.or(saved_cfg.map(|c| c.layers)).unwrap_or(2);
        // A saved model's learnt input embedding is the input of the run that starts from it.
        let embedding_dim = s.embedding_dim.or_else(|| {
            let e = saved.as_ref()?.input_embedding.as_ref()?;
            (mode == TrainMode::MiniBatch).then(|| e.shape()[1])
        });
        if mode != TrainMode::MiniBatch
            && saved.as_ref().is_some_and(|m| m.input_embedding.is_some())
        {
            return Err(PlanError::Invalid {
                option: "--init-model",
                reason: "learnt an input embedding, which only mini-batch training (--fanouts) \
                         continues"
                    .into(),
            });
        }
        check_applicable(s, mode, arch, embedding_dim.is_some())?;
        check_values(s, layers)?;
        let backend = s.comm.unwrap_or(Backend::Local);
        let mut workers = s.workers.unwrap_or(1);
        // The most nodes one process holds: the whole graph, but a part per process of an
        // MPI job (an in-process job's workers share one machine's memory).
        let mut nodes_per_process = None;
        let (meta, data) = match mode {
            TrainMode::Sar => {
                let dir = s
                    .dataset
                    .as_ref()
                    .expect("a partitioned dataset has a path");
                let partition = PartitionMeta::load(dir)?;
                if backend == Backend::Mpi {
                    nodes_per_process = partition.nodes.iter().copied().max();
                } else if s.workers.is_none() {
                    // One in-process worker per part unless told otherwise.
                    workers = partition.parts;
                }
                (partition.dataset, None)
            }
            _ => {
                let data = open_dataset(s, mode, embedding_dim.is_some())?;
                if mode == TrainMode::MiniBatch && data.has_edge_weights() {
                    return Err(PlanError::Invalid {
                        option: "--fanouts",
                        reason: "samples blocks without edge weights, and this dataset has \
                                 edge_weight.npy: train it full-batch (or partitioned, with \
                                 SAR), where GCN and GraphSAGE weigh every edge"
                            .into(),
                    });
                }
                (data.meta().clone(), Some(data))
            }
        };
        let mut model = model_config(s, &meta, arch, layers, saved_cfg);
        model.in_dim = embedding_dim.unwrap_or(meta.feat_dim);
        if let Some(saved) = saved_cfg {
            check_same_shape(saved, &model)?;
        }
        let lr = s.lr.unwrap_or(if arch == Architecture::Gat {
            0.005
        } else {
            0.01
        });
        let train = TrainConfig {
            epochs: s.epochs,
            lr,
            weight_decay: s.weight_decay,
            optimizer: s.optimizer.kind(),
            patience: s.patience,
            seed: s.seed,
            eval_every: s.eval_every,
            snapshots: snapshots(s)?,
        };
        let batches = s.fanouts.as_ref().map(|fanouts| MiniBatchConfig {
            fanouts: fanouts.clone(),
            batch_size: s.batch_size.unwrap_or(1024),
            queue_depth: s.queue_depth.unwrap_or(4),
            batches_per_epoch: s.batches_per_epoch,
            // Features read from their file block on the disk: sample and gather on threads of
            // their own, many reads in flight.
            producer_threads: (s.features_location == Some(FeaturesLocation::Mmap))
                .then_some(MAPPED_PRODUCER_THREADS),
            layerwise: s.inference_memory_gib.map(|gib| LayerwiseConfig {
                memory_bytes: (gib * (1u64 << 30) as f64) as usize,
                scratch_dir: s.scratch_dir.clone().unwrap_or_else(std::env::temp_dir),
            }),
            sampled_eval: (s.eval_fanouts.is_some() || s.eval_nodes.is_some()).then(|| {
                SampledEval {
                    fanouts: s.eval_fanouts.clone().unwrap_or_else(|| fanouts.clone()),
                    nodes: s.eval_nodes.unwrap_or(usize::MAX),
                }
            }),
        });
        let plan = Plan {
            mode,
            model,
            train,
            batches,
            meta,
            workers,
            backend,
            sar_mode: s.sar_mode.unwrap_or(SarMode::Sar),
            features_location: s.features_location.unwrap_or(FeaturesLocation::Host),
            embedding_dim,
            data,
            init: saved,
            settings,
        };
        plan.check_sizes(nodes_per_process.unwrap_or_else(|| plan.rows_computed()))?;
        Ok(plan)
    }

    /// The most nodes one forward pass covers: every node, except for mini-batches evaluated
    /// by sampled or layer-wise inference, whose passes cover one batch's neighbourhood.
    fn rows_computed(&self) -> usize {
        let n = self.meta.num_nodes;
        let Some(mb) = self
            .batches
            .as_ref()
            .filter(|b| b.sampled_eval.is_some() || b.layerwise.is_some())
        else {
            return n;
        };
        // Layer-wise evaluation sizes its chunks to its own budget.
        let eval = mb.sampled_eval.as_ref().map_or(&mb.fanouts, |e| &e.fanouts);
        [&mb.fanouts, eval]
            .iter()
            .map(|fanouts| {
                fanouts.iter().try_fold(mb.batch_size, |rows, &f| {
                    let f = usize::try_from(f).ok()?;
                    rows.checked_mul(f + 1)
                })
            })
            .map(|rows| rows.unwrap_or(n).min(n))
            .max()
            .unwrap_or(n)
    }

    /// Refuses a run whose parameters and activations over `rows` nodes (every node: each
    /// mode's evaluation, full batch and SAR in one process hold them all) cannot fit in this
    /// machine's memory, before anything large is allocated.
    fn check_sizes(&self, rows: usize) -> Result<()> {
        let m = &self.model;
        let heads = if m.arch == Architecture::Gat {
            m.heads.max(m.out_heads)
        } else {
            1
        };
        let width = m.hidden.max(m.out_dim).max(1);
        let bytes = m.dtype.size_in_bytes() as u128;
        // Parameters with their gradients and two optimizer moments; one layer's output (a
        // few copies live at once in forward and backward) for every row.
        let params = (m.in_dim.max(width) as u128) * (width as u128) * (heads as u128) * 2;
        let needed = params * (m.layers as u128) * 4 * bytes
            + (rows as u128) * (width as u128) * (heads as u128) * 4 * bytes;
        let available = total_memory_bytes();
        if available > 0 && needed > available as u128 {
            return Err(PlanError::TooLarge {
                needed_gib: needed as f64 / (1u64 << 30) as f64,
                available_gib: available as f64 / (1u64 << 30) as f64,
            });
        }
        Ok(())
    }
}

/// Refuses an option that the mode or the model does not use.
fn check_applicable(
    s: &TrainSettings,
    mode: TrainMode,
    arch: Architecture,
    embedding: bool,
) -> Result<()> {
    let given = |o: bool, flag: &'static str, hint: &'static str| -> Result<()> {
        if o {
            Err(PlanError::not_applicable(flag, mode, hint))
        } else {
            Ok(())
        }
    };
    let sampled = "it is a setting of sampled mini-batch training (--fanouts)";
    if mode != TrainMode::MiniBatch {
        given(s.batch_size.is_some(), "--batch-size", sampled)?;
        given(s.queue_depth.is_some(), "--queue-depth", sampled)?;
        given(
            s.features_location.is_some(),
            "--features-location",
            sampled,
        )?;
        given(s.embedding_dim.is_some(), "--embedding-dim", sampled)?;
        given(s.embedding_lr.is_some(), "--embedding-lr", sampled)?;
        given(
            s.batches_per_epoch.is_some(),
            "--batches-per-epoch",
            sampled,
        )?;
        given(s.eval_fanouts.is_some(), "--eval-fanouts", sampled)?;
        given(
            s.feature_cache_gib.is_some(),
            "--feature-cache-gib",
            sampled,
        )?;
        given(s.eval_nodes.is_some(), "--eval-nodes", sampled)?;
        given(
            s.inference_memory_gib.is_some(),
            "--inference-memory-gib",
            sampled,
        )?;
        given(s.scratch_dir.is_some(), "--scratch-dir", sampled)?;
    }
    if mode != TrainMode::Sar {
        given(
            s.sar_mode.is_some(),
            "--mode",
            "it says how halos travel between the parts of a partitioned dataset (graphloom partition)",
        )?;
    }
    if mode == TrainMode::FullBatch {
        let one = "full batch on an unpartitioned dataset runs on one worker: partition it (graphloom partition) for SAR, or sample mini-batches (--fanouts)";
        given(s.workers.is_some_and(|w| w != 1), "--workers", one)?;
        given(s.comm == Some(Backend::Mpi), "--comm", one)?;
    }
    given(
        s.comm == Some(Backend::Mpi) && s.workers.is_some(),
        "--workers",
        "under mpirun the job's processes are the workers: set their number with mpirun -np",
    )?;
    if mode == TrainMode::MiniBatch
        && s.batch_norm
        && (s.workers.unwrap_or(1) > 1 || s.comm == Some(Backend::Mpi))
    {
        return Err(PlanError::not_applicable(
            "--batch-norm",
            mode,
            "with data-parallel workers each would normalise its own slice of a batch: train mini-batches on one worker, or full-batch",
        ));
    }
    if mode == TrainMode::MiniBatch && !embedding {
        given(
            s.embedding_lr.is_some(),
            "--embedding-lr",
            "it is the learning rate of --embedding-dim's table",
        )?;
    }
    if mode == TrainMode::MiniBatch && embedding {
        given(
            s.features_location.is_some(),
            "--features-location",
            "the input is a learnt embedding table (--embedding-dim), not the features",
        )?;
    }
    if mode == TrainMode::MiniBatch && s.inference_memory_gib.is_none() {
        given(
            s.scratch_dir.is_some(),
            "--scratch-dir",
            "it is where --inference-memory-gib keeps layer outputs",
        )?;
    }
    if s.inference_memory_gib.is_some() && (s.eval_fanouts.is_some() || s.eval_nodes.is_some()) {
        return Err(PlanError::Invalid {
            option: "--inference-memory-gib",
            reason: "evaluates exactly, and --eval-fanouts/--eval-nodes evaluate by sampling: \
                     give one or the other"
                .into(),
        });
    }
    if let Some(dir) = &s.scratch_dir {
        if !dir.is_dir() {
            return Err(PlanError::Invalid {
                option: "--scratch-dir",
                reason: format!("{} is not a folder", dir.display()),
            });
        }
    }
    if mode == TrainMode::MiniBatch && s.features_location != Some(FeaturesLocation::Mmap) {
        given(
            s.feature_cache_gib.is_some(),
            "--feature-cache-gib",
            "it caches rows of features kept on disk (--features-location mmap)",
        )?;
    }
    if arch != Architecture::Gat {
        let gat = "it is a setting of GAT (--model gat)";
        given(s.heads.is_some(), "--heads", gat)?;
        given(s.out_heads.is_some(), "--out-heads", gat)?;
        given(s.attention_dropout.is_some(), "--attention-dropout", gat)?;
    }
    Ok(())
}

/// The loop's snapshot settings; the folder is made now, so an unwritable one fails before
/// any training.
fn snapshots(s: &TrainSettings) -> Result<Option<SnapshotConfig>> {
    let Some(dir) = &s.snapshot_dir else {
        if s.snapshot_every.is_some() || s.resume {
            let option = if s.resume {
                "--resume"
            } else {
                "--snapshot-every"
            };
            return Err(PlanError::Invalid {
                option,
                reason: "needs --snapshot-dir, the folder of the snapshots".into(),
            });
        }
        return Ok(None);
    };
    if s.resume && s.init_model.is_some() {
        return Err(PlanError::Invalid {
            option: "--resume",
            reason: "continues from a snapshot, which has its own parameters: drop --init-model"
                .into(),
        });
    }
    std::fs::create_dir_all(dir).map_err(|e| PlanError::Invalid {
        option: "--snapshot-dir",
        reason: format!("{} cannot be made: {e}", dir.display()),
    })?;
    Ok(Some(SnapshotConfig {
        dir: dir.clone(),
        every: s.snapshot_every.unwrap_or(1),
        resume: s.resume,
    }))
}

/// Refuses values that cannot train.
fn check_values(s: &TrainSettings, layers: usize) -> Result<()> {
    let invalid = |flag: &'static str, reason: String| {
        Err(PlanError::Invalid {
            option: flag,
            reason,
        })
    };
    let positive = |v: Option<usize>, flag: &'static str| -> Result<()> {
        match v {
            Some(0) => invalid(flag, "must be at least 1".into()),
            _ => Ok(()),
        }
    };
    positive(Some(layers), "--layers")?;
    positive(s.hidden, "--hidden")?;
    positive(s.heads, "--heads")?;
    positive(s.out_heads, "--out-heads")?;
    positive(Some(s.epochs), "--epochs")?;
    positive(Some(s.eval_every), "--eval-every")?;
    positive(s.batch_size, "--batch-size")?;
    positive(s.batches_per_epoch, "--batches-per-epoch")?;
    positive(s.eval_nodes, "--eval-nodes")?;
    positive(s.queue_depth, "--queue-depth")?;
    positive(s.workers, "--workers")?;
    positive(s.embedding_dim, "--embedding-dim")?;
    positive(s.patience, "--patience")?;
    positive(s.snapshot_every, "--snapshot-every")?;
    for (value, flag) in [
        (s.feature_cache_gib, "--feature-cache-gib"),
        (s.inference_memory_gib, "--inference-memory-gib"),
    ] {
        if let Some(gib) = value {
            if !(gib.is_finite() && gib > 0.0) {
                return invalid(flag, format!("must be a positive number, not {gib}"));
            }
        }
    }
    if let Some(lr) = s.lr {
        if !(lr.is_finite() && lr > 0.0) {
            return invalid("--lr", format!("must be a positive number, not {lr}"));
        }
    }
    if let Some(lr) = s.embedding_lr {
        if !(lr.is_finite() && lr > 0.0) {
            return invalid(
                "--embedding-lr",
                format!("must be a positive number, not {lr}"),
            );
        }
    }
    if !(s.weight_decay.is_finite() && s.weight_decay >= 0.0) {
        return invalid(
            "--weight-decay",
            format!("must be zero or positive, not {}", s.weight_decay),
        );
    }
    for (v, flag) in [
        (s.dropout, "--dropout"),
        (s.input_dropout, "--input-dropout"),
        (s.attention_dropout, "--attention-dropout"),
    ] {
        if let Some(p) = v {
            if !(0.0..1.0).contains(&p) {
                return invalid(flag, format!("must be in [0, 1), not {p}"));
            }
        }
    }
    for (f, flag) in [
        (&s.fanouts, "--fanouts"),
        (&s.eval_fanouts, "--eval-fanouts"),
    ] {
        let Some(f) = f else { continue };
        if f.len() != layers {
            return invalid(
                flag,
                format!(
                    "has {} values for {layers} layers: give one per layer",
                    f.len()
                ),
            );
        }
        if let Some(bad) = f.iter().find(|&&k| k == 0 || k < -1) {
            return invalid(
                flag,
                format!("{bad} is not a fanout: use a positive count, or -1 for all neighbours"),
            );
        }
    }
    Ok(())
}

/// Producer threads of a mini-batch run whose features are mapped from disk: enough reads in
/// flight for a disk that serves tens of thousands a second.
const MAPPED_PRODUCER_THREADS: usize = 32;

/// A plan's dataset: mapped in place for sampled training, so that no array of the graph is
/// read whole (host or shared features are copied into the store from the mapped file, with
/// no copy between); loaded into memory for full-batch training.
pub(crate) enum PlanData {
    /// In memory, features cast to the compute dtype.
    Loaded(Dataset),
    /// Mapped; features stay in `node_feat.npy` until the store maps or copies them.
    Mapped(MappedDataset),
}

impl PlanData {
    /// Sizes and names.
    pub(crate) fn meta(&self) -> &Meta {
        match self {
            PlanData::Loaded(ds) => &ds.meta,
            PlanData::Mapped(ds) => &ds.meta,
        }
    }

    /// What sampled training reads.
    pub(crate) fn graph_data(&self) -> GraphData<'_> {
        match self {
            PlanData::Loaded(ds) => ds.data(),
            PlanData::Mapped(ds) => ds.data(),
        }
    }

    fn has_edge_weights(&self) -> bool {
        match self {
            PlanData::Loaded(ds) => ds.edge_weight.is_some(),
            PlanData::Mapped(ds) => ds.edge_weight().is_some(),
        }
    }
}

/// Opens the dataset: mapped for mini-batch training, loaded otherwise (or the default
/// synthetic one generated), with features cast to the compute dtype.
fn open_dataset(s: &TrainSettings, mode: TrainMode, embedding: bool) -> Result<PlanData> {
    let mut ds = match &s.dataset {
        Some(dir) if mode == TrainMode::MiniBatch => {
            let meta = Meta::read(dir)?;
            if !embedding && s.features_location != Some(FeaturesLocation::Mmap) {
                let dtype = DType::parse(&meta.feat_dtype).unwrap_or(DType::F32);
                check_features_fit(&meta, dtype, mode)?;
            }
            let ds = MappedDataset::open(dir)?;
            ds.advise_random();
            if !embedding && ds.meta.feat_dim == 0 {
                return Err(no_features());
            }
            return Ok(PlanData::Mapped(ds));
        }
        Some(dir) => {
            check_features_fit(&Meta::read(dir)?, s.dtype.0, mode)?;
            Dataset::load(dir)?
        }
        None if s.features_location == Some(FeaturesLocation::Mmap) => {
            return Err(PlanError::Invalid {
                option: "--features-location",
                reason: "mmap needs --dataset (a directory with node_feat.npy)".into(),
            })
        }
        None => synthetic::generate(&synthetic::SyntheticConfig {
            nodes: 20_000,
            avg_degree: 10,
            feat_dim: 64,
            classes: 8,
            seed: s.seed,
            ..Default::default()
        })?,
    };
    if !embedding && ds.meta.feat_dim == 0 {
        return Err(no_features());
    }
    let _g = category_scope(Category::Features);
    ds.features = ds
        .features
        .cast(s.dtype.0)
        .map_err(graphloom_nn::Error::from)?;
    Ok(PlanData::Loaded(ds))
}

/// Refuses to load features larger than this machine's memory, before reading any.
fn check_features_fit(meta: &Meta, dtype: DType, mode: TrainMode) -> Result<()> {
    let bytes = (meta.num_nodes as u128) * (meta.feat_dim as u128) * dtype.size_in_bytes() as u128;
    let available = total_memory_bytes() as u128;
    if available == 0 || bytes <= available {
        return Ok(());
    }
    let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
    let hint = match mode {
        TrainMode::MiniBatch => "keep them on disk with --features-location mmap",
        _ => {
            "sample mini-batches (--fanouts) with --features-location mmap, or partition the \
              graph (graphloom partition) over an MPI job"
        }
    };
    Err(PlanError::Invalid {
        option: "--dataset",
        reason: format!(
            "its node features take {:.1} GiB in {dtype}, more than this machine's {:.1} GiB: \
             {hint}",
            gib(bytes),
            gib(available)
        ),
    })
}

fn no_features() -> PlanError {
    PlanError::Invalid {
        option: "--dataset",
        reason: "the dataset has no node features: train an input embedding with --fanouts \
                 and --embedding-dim"
            .into(),
    }
}

/// The model of `s` on a dataset of `meta`: options given win, then those of the saved model,
/// then the per-model defaults.
fn model_config(
    s: &TrainSettings,
    meta: &Meta,
    arch: Architecture,
    layers: usize,
    saved: Option<&ModelConfig>,
) -> ModelConfig {
    let gat = arch == Architecture::Gat;
    let dropout = s
        .dropout
        .or(saved.map(|c| c.dropout))
        .unwrap_or(if gat { 0.6 } else { 0.5 });
    ModelConfig {
        arch,
        in_dim: meta.feat_dim,
        hidden: s.hidden.or(saved.map(|c| c.hidden)).unwrap_or(match arch {
            Architecture::Gcn => 16,
            Architecture::Sage => 64,
            Architecture::Gat => 8,
        }),
        out_dim: meta.num_classes,
        layers,
        heads: s
            .heads
            .or(saved.map(|c| c.heads))
            .unwrap_or(if gat { 8 } else { 1 }),
        out_heads: s.out_heads.or(saved.map(|c| c.out_heads)).unwrap_or(1),
        dropout,
        input_dropout: s
            .input_dropout
            .or(saved.map(|c| c.input_dropout))
            .unwrap_or(dropout),
        attention_dropout: if gat {
            s.attention_dropout
                .or(saved.map(|c| c.attention_dropout))
                .unwrap_or(dropout)
        } else {
            0.0
        },
        dtype: s.dtype.0,
        checkpoint: s.checkpoint,
        batch_norm: s.batch_norm || saved.is_some_and(|c| c.batch_norm),
    }
}

/// Refuses to start from a saved model whose parameters do not fit the model of this run.
fn check_same_shape(saved: &ModelConfig, model: &ModelConfig) -> Result<()> {
    let shape = |c: &ModelConfig| {
        let heads = if c.arch == Architecture::Gat {
            format!(", {} heads, {} output heads", c.heads, c.out_heads)
        } else {
            String::new()
        };
        format!(
            "{} of {} layers, {} -> {} -> {}{heads}{}",
            c.arch.name(),
            c.layers,
            c.in_dim,
            c.hidden,
            c.out_dim,
            if c.batch_norm { ", batch norm" } else { "" }
        )
    };
    if shape(saved) != shape(model) {
        return Err(PlanError::Invalid {
            option: "--init-model",
            reason: format!(
                "holds a {}, this run builds a {}",
                shape(saved),
                shape(model)
            ),
        });
    }
    Ok(())
}

/// The memory this process may use (the machine's, or less under a limit), 0 where it cannot
/// be read.
fn total_memory_bytes() -> u64 {
    use graphloom_tensor::memory::{usable_memory_bytes, MemoryMeasure};
    usable_memory_bytes(MemoryMeasure::Total).unwrap_or(0)
}
