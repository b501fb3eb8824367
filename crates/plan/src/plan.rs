//! [`Plan`]: the settings turned into one of three planned runs, each in its own file with its
//! own run and outcome. What the modes share (the model with its defaults filled in, the
//! loop's settings, the dataset's sizes, a saved model to start from) is [`Common`].

use graphloom_graph::parts::PartitionMeta;
use graphloom_graph::Meta;
use graphloom_nn::model_file::ModelFile;
use graphloom_nn::train::{EpochRecord, SnapshotConfig, TrainConfig, TrainReport, Workload};
use graphloom_nn::{Architecture, Decoder, Head, Model, ModelConfig};
use graphloom_tensor::autodiff::ops::Probability;

use crate::checks::{check_applicable, check_values};
use crate::full_batch::FullBatchPlan;
use crate::mini_batch::{MiniBatchOutcome, MiniBatchPlan};
use crate::sar::{SarOutcome, SarPlan};
use crate::{ModelName, PlanError, Result, TaskKind, TrainSettings};

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
            TrainMode::MiniBatch => "mini-batch training (`fanouts`)",
            TrainMode::Sar => "SAR training of a partitioned dataset",
        }
    }

    /// The mode `settings` select: SAR for a partitioned dataset, mini-batches with fanouts
    /// or subgraph batches, else full batch.
    pub fn of(settings: &TrainSettings) -> Result<TrainMode> {
        let partitioned = settings
            .dataset
            .as_ref()
            .is_some_and(|d| PartitionMeta::is_partitioned(d));
        let subgraphs = settings.subgraph.batching.is_some();
        if subgraphs && settings.fanouts.is_some() {
            return Err(PlanError::invalid(
                "batching",
                "trains on whole subgraphs, `fanouts` on sampled neighbourhoods: give one or \
                 the other",
            ));
        }
        // SIGN reads no graph: a batch size alone asks for its mini-batches of rows.
        let rows = settings.model == Some(ModelName::Homogeneous(Architecture::Sign))
            && settings.batch_size.is_some();
        Ok(match (partitioned, settings.fanouts.is_some() || subgraphs || rows) {
            (true, true) => {
                return Err(PlanError::not_applicable(
                    if subgraphs { "batching" } else { "fanouts" },
                    TrainMode::Sar,
                    "a partitioned dataset trains full-batch; give the unpartitioned directory to sample mini-batches",
                ))
            }
            (true, false) => TrainMode::Sar,
            (false, true) => TrainMode::MiniBatch,
            (false, false) => TrainMode::FullBatch,
        })
    }
}

/// What every planned run has: the settings as given, the model with every default filled
/// in, the loop's settings, the dataset's sizes and names, and the saved model to start from.
pub struct Common {
    /// What was asked.
    pub settings: TrainSettings,
    /// The model, with every default filled in.
    pub model: ModelConfig,
    /// The loop's settings.
    pub train: TrainConfig,
    /// The dataset's sizes and names.
    pub meta: Meta,
    /// The saved model the run starts from.
    pub(crate) init: Option<ModelFile>,
}

impl Common {
    /// Gives the workload's model the saved parameters, when the run starts from a saved model
    /// (whose shape was checked when planned).
    pub(crate) fn start_from_saved(&self, workload: &mut dyn Workload) -> Result<()> {
        if let Some(saved) = &self.init {
            workload.set_params(&saved.params)?;
        }
        Ok(())
    }
}

/// A checked training run, ready to [`Plan::run`].
// One plan is made per run: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum Plan {
    /// The whole graph on one worker.
    FullBatch(FullBatchPlan),
    /// Sampled mini-batches, data parallel.
    MiniBatch(MiniBatchPlan),
    /// The parts of a partitioned dataset, one per worker.
    Sar(SarPlan),
}

/// What a run produced, on the worker that reports it.
pub enum RunOutcome {
    /// A full-batch run's report.
    FullBatch(TrainReport),
    /// A mini-batch run's report and pipeline figures.
    MiniBatch(MiniBatchOutcome),
    /// A SAR run's report and every worker's figures.
    Sar(SarOutcome),
}

impl RunOutcome {
    /// The loop's records and the best parameters.
    pub fn report(&self) -> &TrainReport {
        match self {
            RunOutcome::FullBatch(r) => r,
            RunOutcome::MiniBatch(o) => &o.report,
            RunOutcome::Sar(o) => &o.report,
        }
    }

    /// Whether this process reports the job's results (rank 0 of the job).
    pub fn root(&self) -> bool {
        match self {
            RunOutcome::FullBatch(_) => true,
            RunOutcome::MiniBatch(o) => o.root,
            RunOutcome::Sar(o) => o.root,
        }
    }
}

impl Plan {
    /// Checks `settings`, selects the mode, fills in the defaults, and opens the dataset (or
    /// generates the default one) unless it is partitioned, whose workers load their own
    /// parts.
    pub fn new(settings: TrainSettings) -> Result<Plan> {
        let mode = TrainMode::of(&settings)?;
        crate::subgraph::check(&settings)?;
        if crate::budget::budget_bytes(settings.memory_gib)?.is_some() {
            crate::budget::return_freed_memory();
        }
        let saved = match &settings.init_model {
            Some(path) => Some(ModelFile::load(path)?),
            None => None,
        };
        let saved_cfg = saved.as_ref().map(|m| &m.config);
        let arch = match settings.model {
            Some(ModelName::Relational(kind)) => {
                return Err(PlanError::invalid(
                    "model",
                    format!(
                    "{} trains a heterogeneous dataset (\"format\": \"hetero\" in meta.json: node \
                         and edge types); this one has one node type and one edge type: use \
                         gcn, sage, gat, gatv2, gin, gine, sgc, appnp or sign",
                    kind.name()
                ),
                ))
            }
            Some(ModelName::Homogeneous(arch)) => Some(arch),
            None => None,
        }
        .or(saved_cfg.map(|c| c.arch))
        .unwrap_or(ModelConfig::default().arch);
        let layers = settings
            .layers
            .or(saved_cfg.map(|c| c.layers))
            .unwrap_or(ModelConfig::default().layers);
        // A saved model's learnt input embedding is the input of the run that starts from it.
        let saved_embedding = saved.as_ref().and_then(|m| m.input_embedding.as_ref());
        let link = settings.task == Some(TaskKind::Link);
        let embedding_runs = mode == TrainMode::MiniBatch || (link && mode == TrainMode::FullBatch);
        if !embedding_runs && saved_embedding.is_some() {
            return Err(PlanError::invalid(
                "init_model",
                "learnt an input embedding, which only mini-batch training (`fanouts`) and \
                 full-batch link prediction continue",
            ));
        }
        let embedding_dim = settings
            .embedding_dim
            .or(saved_embedding.map(|e| e.shape()[1]));
        check_applicable(&settings, mode, arch, embedding_dim.is_some())?;
        check_values(&settings, layers)?;
        let train = train_config(&settings, arch)?;
        let head = match settings.task.unwrap_or(TaskKind::Node) {
            TaskKind::Link => {
                let saved_decoder = saved_cfg.and_then(|c| match c.head {
                    Head::Link(d) => Some(d),
                    _ => None,
                });
                Head::Link(settings.decoder.or(saved_decoder).unwrap_or(Decoder::Dot))
            }
            TaskKind::Node => Head::NodeClasses,
            TaskKind::Multilabel => Head::NodeLabels,
            TaskKind::Regression => Head::NodeValues,
        };
        let planned = PlannedModel {
            arch,
            layers,
            embedding_dim,
            head,
            saved,
        };
        let plan = match mode {
            TrainMode::FullBatch => Plan::FullBatch(FullBatchPlan::new(settings, train, planned)?),
            TrainMode::MiniBatch => Plan::MiniBatch(MiniBatchPlan::new(settings, train, planned)?),
            TrainMode::Sar => Plan::Sar(SarPlan::new(settings, train, planned)?),
        };
        // The probes freed their memory on threads of their own, into heaps that keep it
        // resident until reused: given back now, it does not stay beside the run (a
        // full-batch link run on Cora held 4 MiB more than its prediction in one run of
        // three).
        graphloom_tensor::alloc::trim_freed();
        Ok(plan)
    }

    /// What every mode has: settings, model, loop, dataset sizes.
    pub fn common(&self) -> &Common {
        match self {
            Plan::FullBatch(p) => &p.common,
            Plan::MiniBatch(p) => &p.common,
            Plan::Sar(p) => &p.common,
        }
    }

    /// The predicted peak memory by part (divided from `memory_gib` when given), for front
    /// ends to print before training.
    pub fn memory(&self) -> &crate::MemoryPlan {
        match self {
            Plan::FullBatch(p) => &p.memory,
            Plan::MiniBatch(p) => &p.memory,
            Plan::Sar(p) => &p.memory,
        }
    }

    /// The mode planned.
    pub fn mode(&self) -> TrainMode {
        match self {
            Plan::FullBatch(_) => TrainMode::FullBatch,
            Plan::MiniBatch(_) => TrainMode::MiniBatch,
            Plan::Sar(_) => TrainMode::Sar,
        }
    }

    /// Trains as planned, calling `on_epoch` on the reporting worker (rank 0) after every
    /// epoch. Collective under MPI: every rank of the job calls it.
    pub fn run(&self, on_epoch: impl FnMut(&EpochRecord) + Send) -> Result<RunOutcome> {
        self.run_with_progress(on_epoch, |_, _| {})
    }

    /// [`Plan::run`], also calling `on_batch(done, total)` on the reporting worker after each
    /// step of a mini-batch epoch.
    pub fn run_with_progress(
        &self,
        on_epoch: impl FnMut(&EpochRecord) + Send,
        on_batch: impl Fn(usize, usize) + Sync,
    ) -> Result<RunOutcome> {
        let on_epoch = RootReport::new(on_epoch);
        Ok(match self {
            Plan::FullBatch(p) => RunOutcome::FullBatch(p.run(on_epoch.of_rank(0))?),
            Plan::MiniBatch(p) => RunOutcome::MiniBatch(p.run(&on_epoch, &on_batch)?),
            Plan::Sar(p) => RunOutcome::Sar(p.run(&on_epoch)?),
        })
    }
}

/// The model a run trains, as far as [`Plan::new`] decided it before the mode's plan opens
/// the dataset: family, depth, learnt input width, and the saved model it starts from.
pub(crate) struct PlannedModel {
    pub(crate) arch: Architecture,
    pub(crate) layers: usize,
    pub(crate) embedding_dim: Option<usize>,
    pub(crate) head: Head,
    pub(crate) saved: Option<ModelFile>,
}

impl PlannedModel {
    /// The shared part of a plan over a dataset of `meta`: the model config (options given
    /// win, then those of the saved model, then the family's defaults), checked against the
    /// saved model's shape.
    pub(crate) fn common(
        self,
        settings: TrainSettings,
        train: TrainConfig,
        meta: Meta,
    ) -> Result<Common> {
        let s = &settings;
        if self.head == Head::NodeClasses && meta.num_classes == 1 {
            // One class gives every node the same prediction and a loss of 0: nothing to learn.
            return Err(PlanError::invalid(
                "dataset",
                "has 1 class (num_classes in its meta.json): node classification needs 2 or \
                 more",
            ));
        }
        let saved = self.saved.as_ref().map(|m| &m.config);
        let defaults = self.arch.defaults();
        let dropout = s
            .dropout
            .or(saved.map(|c| c.dropout))
            .unwrap_or(match self.head {
                Head::Link(_) => Probability::new(graphloom_nn::link::DROPOUT)
                    .expect("a default is a probability"),
                // Dropout scales a regressor's outputs in training only: on a planted linear
                // target, GCN reached R² 0.75 in 100 epochs with 0.5 and 0.91 without.
                Head::NodeValues => Probability::ZERO,
                Head::NodeClasses | Head::NodeLabels => defaults.dropout,
            });
        let base = ModelConfig::of(self.arch);
        let hidden = s.hidden.or(saved.map(|c| c.hidden)).unwrap_or(base.hidden);
        let model = ModelConfig {
            arch: self.arch,
            in_dim: self.embedding_dim.unwrap_or(meta.feat_dim),
            hidden,
            // A link predictor's last layer outputs node embeddings, a classifier's classes.
            out_dim: match self.head {
                Head::NodeClasses | Head::NodeLabels | Head::NodeValues => meta.num_classes,
                Head::Link(_) => s
                    .out_dim
                    .or(saved
                        .filter(|c| c.head != Head::NodeClasses)
                        .map(|c| c.out_dim))
                    .unwrap_or(hidden),
            },
            layers: self.layers,
            heads: s.heads.or(saved.map(|c| c.heads)).unwrap_or(base.heads),
            out_heads: s
                .out_heads
                .or(saved.map(|c| c.out_heads))
                .unwrap_or(base.out_heads),
            edge_dim: edge_dim(self.arch, s, saved)?,
            hops: match self.arch {
                // SIGN's input blocks are the dataset's propagated hops.
                Architecture::Sign => sign_hops(s, &meta)?,
                _ => s.hops.or(saved.map(|c| c.hops)).unwrap_or(base.hops),
            },
            teleport: s
                .teleport
                .or(saved.map(|c| c.teleport))
                .unwrap_or(base.teleport),
            dropout,
            input_dropout: s
                .input_dropout
                .or(saved.map(|c| c.input_dropout))
                .unwrap_or(dropout),
            attention_dropout: if self.arch.has_heads() {
                s.attention_dropout
                    .or(saved.map(|c| c.attention_dropout))
                    .unwrap_or(dropout)
            } else {
                base.attention_dropout
            },
            dtype: s.dtype.0,
            checkpoint: s.checkpoint,
            batch_norm: s.batch_norm || saved.is_some_and(|c| c.batch_norm),
            head: self.head,
        };
        // Widths are checked, and the parameters counted, before anything is allocated.
        Model::param_shapes(&model).map_err(|e| model_error(e, &meta))?;
        if let Some(saved) = saved {
            check_same_shape(saved, &model)?;
        }
        Ok(Common {
            settings,
            model,
            train,
            meta,
            init: self.saved,
        })
    }
}

/// A model config the training crate refused, as a plan error naming the setting.
fn model_error(e: graphloom_nn::Error, meta: &Meta) -> PlanError {
    match e {
        // The model's own bounds on settings given as they are (APPNP's propagation, SIGN's
        // depth).
        graphloom_nn::Error::InvalidSetting {
            setting: setting @ ("hops" | "teleport" | "layers"),
            reason,
        } => PlanError::invalid(setting, reason),
        graphloom_nn::Error::InvalidSetting { reason, .. } if meta.num_classes == 0 => {
            PlanError::invalid(
                "dataset",
                format!("has no classes (num_classes is 0 in its meta.json): {reason}"),
            )
        }
        graphloom_nn::Error::InvalidSetting { reason, .. } if meta.feat_dim == 0 => {
            PlanError::invalid("dataset", format!("has no node features: {reason}"))
        }
        other => other.into(),
    }
}

/// The loop's settings: learning rate from the family's defaults unless given, checked by
/// the loop's own check; the snapshot folder made now, so an unwritable one fails before any
/// training.
fn train_config(s: &TrainSettings, arch: Architecture) -> Result<TrainConfig> {
    let train = TrainConfig {
        epochs: s.epochs,
        lr: s.lr.unwrap_or(arch.defaults().lr),
        weight_decay: s.weight_decay.unwrap_or(match s.task {
            Some(TaskKind::Link) => graphloom_nn::link::WEIGHT_DECAY,
            _ => arch.defaults().weight_decay,
        }),
        optimizer: s.optimizer.kind(),
        patience: s.patience,
        seed: s.seed,
        eval_every: s.eval_every,
        snapshots: snapshots(s)?,
    };
    train.check().map_err(|e| match e {
        graphloom_nn::Error::InvalidSetting { setting, reason } => {
            PlanError::invalid(setting, reason)
        }
        other => other.into(),
    })?;
    Ok(train)
}

/// The loop's snapshot settings; the folder is made now, so an unwritable one fails before
/// any training.
pub(crate) fn snapshots(s: &TrainSettings) -> Result<Option<SnapshotConfig>> {
    let Some(dir) = &s.snapshot_dir else {
        if s.snapshot_every.is_some() || s.resume {
            let setting = if s.resume { "resume" } else { "snapshot_every" };
            return Err(PlanError::invalid(
                setting,
                "needs `snapshot_dir`, the folder of the snapshots",
            ));
        }
        return Ok(None);
    };
    if s.resume && s.init_model.is_some() {
        return Err(PlanError::invalid(
            "resume",
            "continues from a snapshot, which has its own parameters: drop `init_model`",
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        PlanError::invalid(
            "snapshot_dir",
            format!("{} cannot be made: {e}", dir.display()),
        )
    })?;
    Ok(Some(SnapshotConfig {
        dir: dir.clone(),
        every: s.snapshot_every.unwrap_or(1),
        resume: s.resume,
    }))
}

/// The hops of every operator of the propagated dataset SIGN trains on: its feature blocks
/// past the first (`prepare propagate` records them).
fn sign_hops(s: &TrainSettings, meta: &Meta) -> Result<usize> {
    let propagation = match &s.dataset {
        Some(dir) => graphloom_convert::propagate::Propagation::read(dir)?,
        None => None,
    };
    match propagation {
        Some(p) if p.source.feat_dim * p.blocks() == meta.feat_dim => Ok(p.blocks() - 1),
        Some(_) => Err(PlanError::invalid(
            "dataset",
            "has features of another width than its propagation.json records: make it again \
             with graphloom prepare propagate",
        )),
        None => Err(PlanError::invalid(
            "model",
            "sign trains on precomputed propagations: make a dataset with `graphloom prepare \
             propagate --dataset D --hops K --out D2` and give D2",
        )),
    }
}

/// The width of the edge features a model of `arch` reads: for GINE the columns of the
/// dataset's `edge_feat.npy`, which it needs; for GATv2 those when the dataset has the file,
/// else 0 (no edge term); 0 for other families. Without a dataset directory, the saved
/// model's.
fn edge_dim(arch: Architecture, s: &TrainSettings, saved: Option<&ModelConfig>) -> Result<usize> {
    if !arch.reads_edge_features() {
        return Ok(0);
    }
    let needed = arch == Architecture::Gine;
    let absent = || match needed {
        true => Err(no_edge_features()),
        false => Ok(0),
    };
    let Some(dir) = &s.dataset else {
        return saved.map_or_else(absent, |c| Ok(c.edge_dim));
    };
    if graphloom_graph::parts::PartitionMeta::is_partitioned(dir) {
        if !needed {
            // SAR refuses GATv2 with its own reason.
            return Ok(0);
        }
        return Err(PlanError::invalid(
            "model",
            "gine reads each edge's features beside its source's row, which SAR's parts do not \
             carry: give the unpartitioned dataset (full batch, --fanouts or --batching)",
        ));
    }
    let path = dir.join(graphloom_graph::format::edge_features::EDGE_FEATURES_FILE);
    if !path.exists() {
        return absent();
    }
    let header = graphloom_graph::npy::read_header(&path).map_err(graphloom_graph::Error::from)?;
    match header.shape[..] {
        [_, cols] if cols > 0 => Ok(cols),
        _ => Err(PlanError::invalid(
            "dataset",
            format!(
                "{}: shape {:?}: edge features are [num_edges, edge_dim], edge_dim at least 1",
                path.display(),
                header.shape
            ),
        )),
    }
}

fn no_edge_features() -> PlanError {
    PlanError::invalid(
        "model",
        "gine's messages add each edge's features, and the dataset has no edge_feat.npy \
         ([num_edges, edge_dim], in the order of csr_col_idx.npy): give one, or train gin",
    )
}

/// Refuses to start from a saved model whose parameters do not fit the model of this run.
fn check_same_shape(saved: &ModelConfig, model: &ModelConfig) -> Result<()> {
    let (was, is) = (TaskKind::of(saved.head), TaskKind::of(model.head));
    if was != is {
        return Err(PlanError::invalid(
            "init_model",
            format!(
                "was trained with `task` {}: give `task` {} to continue training it",
                was.name(),
                was.name()
            ),
        ));
    }
    let shape = |c: &ModelConfig| {
        let heads = if c.arch.has_heads() {
            format!(", {} heads, {} output heads", c.heads, c.out_heads)
        } else {
            String::new()
        };
        let head = match c.head {
            Head::Link(d) => format!(", {} link decoder", d.name()),
            _ => String::new(),
        };
        let edges = match c.edge_dim {
            0 => String::new(),
            d => format!(", {d} edge features"),
        };
        format!(
            "{} of {} layers, {} -> {} -> {}{heads}{edges}{}{head}",
            c.arch.name(),
            c.layers,
            c.in_dim,
            c.hidden,
            c.out_dim,
            if c.batch_norm { ", batch norm" } else { "" }
        )
    };
    if shape(saved) != shape(model) {
        return Err(PlanError::invalid(
            "init_model",
            format!(
                "holds a {}, this run builds a {}",
                shape(saved),
                shape(model)
            ),
        ));
    }
    Ok(())
}

/// Calls a run's `on_epoch` from the reporting worker only (rank 0); the lock is taken per
/// call, never held across collectives.
pub(crate) struct RootReport<F>(std::sync::Mutex<F>);

impl<F: FnMut(&EpochRecord) + Send> RootReport<F> {
    fn new(on_epoch: F) -> RootReport<F> {
        RootReport(std::sync::Mutex::new(on_epoch))
    }

    /// The callback of the worker of rank `rank`.
    pub(crate) fn of_rank(&self, rank: usize) -> impl FnMut(&EpochRecord) + '_ {
        move |r: &EpochRecord| {
            if rank == 0 {
                (self.0.lock().unwrap_or_else(|e| e.into_inner()))(r)
            }
        }
    }
}

/// The memory this process may use: the machine's, bounded by the process's address-space
/// limit and its control group's; 0 where it cannot be read.
pub(crate) fn available_memory_bytes() -> u64 {
    use graphloom_tensor::memory::{usable_memory_bytes, MemoryMeasure};
    usable_memory_bytes(MemoryMeasure::Total).unwrap_or(0)
}

/// Refuses a run whose parameters and activations over `rows` nodes cannot fit in the memory
/// this process may use, before anything large is allocated.
pub(crate) fn check_sizes(m: &ModelConfig, rows: usize) -> Result<()> {
    let heads = if m.arch.has_heads() {
        m.heads.max(m.out_heads)
    } else {
        1
    };
    let width = m.hidden.max(m.out_dim).max(1);
    let bytes = m.dtype.size_in_bytes() as u128;
    // Parameters with their gradients and two optimizer moments, by their real shapes (a
    // square of the widest layer made a 12,000-wide link embedding need 9.1 GiB for a run
    // that peaks at 2.6); one layer's output (a few copies live at once in forward and
    // backward) for every row.
    let params: u128 = Model::param_shapes(m)?
        .iter()
        .map(|(_, shape)| shape.iter().map(|&d| d as u128).product::<u128>())
        .sum();
    let needed =
        params * 4 * bytes.max(4) + (rows as u128) * (width as u128) * (heads as u128) * 4 * bytes;
    let available = available_memory_bytes();
    if available > 0 && needed > available as u128 {
        return Err(PlanError::TooLarge {
            needed_bytes: u64::try_from(needed).unwrap_or(u64::MAX),
            available_bytes: available,
        });
    }
    Ok(())
}
