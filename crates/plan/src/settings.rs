//! What a user asks of a training run, typed: every choice an enum, every option that only some
//! modes or models use an `Option`, so that [`crate::Plan::new`] can tell a default from a
//! value the user gave and refuse the ones that do not apply.

use std::path::PathBuf;

use graphloom_graph::convert::synthetic::EdgeModel;
use graphloom_nn::{Architecture, OptimizerKind};
use graphloom_sar::SarMode;
use graphloom_tensor::DType;

/// A closed set of named values, as front ends spell them.
pub trait Choice: Copy + 'static {
    /// Every value.
    const ALL: &'static [Self];
    /// The value's name.
    fn name(self) -> &'static str;
    /// The value named `name`.
    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.name() == name)
    }
}

/// The model: [`Architecture`] under its command-line names.
impl Choice for Architecture {
    const ALL: &'static [Self] = &[Architecture::Gcn, Architecture::Sage, Architecture::Gat];
    fn name(self) -> &'static str {
        Architecture::name(self)
    }
}

/// Where the store keeps a sampled run's node features.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeaturesLocation {
    /// Private memory of the process.
    Host,
    /// Memory shared by the processes of one machine.
    Shared,
    /// `node_feat.npy` mapped from disk, for features larger than memory.
    Mmap,
}

impl Choice for FeaturesLocation {
    const ALL: &'static [Self] = &[
        FeaturesLocation::Host,
        FeaturesLocation::Shared,
        FeaturesLocation::Mmap,
    ];
    fn name(self) -> &'static str {
        match self {
            FeaturesLocation::Host => "host",
            FeaturesLocation::Shared => "shared",
            FeaturesLocation::Mmap => "mmap",
        }
    }
}

/// How the workers of a job talk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Worker threads of this process.
    Local,
    /// The processes of an `mpirun` job (needs a build with the `mpi` feature).
    Mpi,
}

impl Choice for Backend {
    const ALL: &'static [Self] = &[Backend::Local, Backend::Mpi];
    fn name(self) -> &'static str {
        match self {
            Backend::Local => "local",
            Backend::Mpi => "mpi",
        }
    }
}

/// The dense optimizer, by name (SGD without momentum).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerName {
    /// Adam with L2 weight decay.
    Adam,
    /// Adam with decoupled weight decay.
    Adamw,
    /// Plain SGD.
    Sgd,
}

impl Choice for OptimizerName {
    const ALL: &'static [Self] = &[
        OptimizerName::Adam,
        OptimizerName::Adamw,
        OptimizerName::Sgd,
    ];
    fn name(self) -> &'static str {
        match self {
            OptimizerName::Adam => "adam",
            OptimizerName::Adamw => "adamw",
            OptimizerName::Sgd => "sgd",
        }
    }
}

impl OptimizerName {
    /// The optimizer's update rule.
    pub fn kind(self) -> OptimizerKind {
        match self {
            OptimizerName::Adam => OptimizerKind::Adam,
            OptimizerName::Adamw => OptimizerKind::AdamW,
            OptimizerName::Sgd => OptimizerKind::Sgd { momentum: 0.0 },
        }
    }
}

/// The compute dtype: the float [`DType`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ComputeDType(pub DType);

impl Choice for ComputeDType {
    const ALL: &'static [Self] = &[
        ComputeDType(DType::F32),
        ComputeDType(DType::BF16),
        ComputeDType(DType::F64),
    ];
    fn name(self) -> &'static str {
        self.0.name()
    }
}

/// The dtype features are stored in: f32, or bf16 (half the bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StorageDType(pub DType);

impl Choice for StorageDType {
    const ALL: &'static [Self] = &[StorageDType(DType::F32), StorageDType(DType::BF16)];
    fn name(self) -> &'static str {
        self.0.name()
    }
}

/// How the synthetic generator draws edges.
impl Choice for EdgeModel {
    const ALL: &'static [Self] = &[EdgeModel::Sbm, EdgeModel::Rmat];
    fn name(self) -> &'static str {
        match self {
            EdgeModel::Sbm => "sbm",
            EdgeModel::Rmat => "rmat",
        }
    }
}

impl Choice for SarMode {
    const ALL: &'static [Self] = &[SarMode::Sar, SarMode::Sa, SarMode::Osa];
    fn name(self) -> &'static str {
        SarMode::name(self)
    }
}

/// A training run as the user asked for it. `None` means "the default for this mode and
/// model"; a value given where it does not apply is refused by [`crate::Plan::new`].
#[derive(Clone, Debug)]
pub struct TrainSettings {
    /// Dataset directory (a partitioned one trains with SAR); `None`: a small synthetic graph
    /// generated in memory.
    pub dataset: Option<PathBuf>,
    /// The model [default: gcn, or that of `init_model`].
    pub model: Option<Architecture>,
    /// Number of layers [default: 2, or that of `init_model`].
    pub layers: Option<usize>,
    /// Hidden width (per head for GAT) [default: gcn 16, sage 64, gat 8, or that of
    /// `init_model`; the same holds for every model option below].
    pub hidden: Option<usize>,
    /// GAT: heads of the hidden layers [default: 8].
    pub heads: Option<usize>,
    /// GAT: heads of the output layer, averaged [default: 1].
    pub out_heads: Option<usize>,
    /// Dropout before each layer [default: 0.5, gat 0.6].
    pub dropout: Option<f64>,
    /// Dropout on the input features [default: `dropout`].
    pub input_dropout: Option<f64>,
    /// GAT: dropout on attention coefficients [default: `dropout`].
    pub attention_dropout: Option<f64>,
    /// Learning rate [default: 0.01, gat 0.005].
    pub lr: Option<f64>,
    /// Weight decay.
    pub weight_decay: f64,
    /// The dense optimizer.
    pub optimizer: OptimizerName,
    /// Maximum number of epochs.
    pub epochs: usize,
    /// Stop after this many evaluations without a better validation accuracy.
    pub patience: Option<usize>,
    /// Evaluate every this many epochs (and after the last).
    pub eval_every: usize,
    /// Seed of initialisation, dropout and sampling.
    pub seed: u64,
    /// Storage and compute dtype of features and activations.
    pub dtype: ComputeDType,
    /// Recompute each layer in the backward pass.
    pub checkpoint: bool,
    /// Batch normalisation after every hidden layer.
    pub batch_norm: bool,
    /// Sampled mini-batches with these fanouts (one per layer, -1: all neighbours).
    pub fanouts: Option<Vec<i64>>,
    /// Mini-batch: seeds per batch [default: 1024].
    pub batch_size: Option<usize>,
    /// Mini-batch: batches prepared ahead of the compute [default: 4].
    pub queue_depth: Option<usize>,
    /// Mini-batch: where the features live [default: host].
    pub features_location: Option<FeaturesLocation>,
    /// Mini-batch with mapped features: GiB of memory for a cache of the rows of the nodes of
    /// highest in-degree [default: none].
    pub feature_cache_gib: Option<f64>,
    /// Mini-batch: evaluate exactly, layer by layer in chunks of nodes within this many GiB
    /// [default: one pass over the whole graph in memory].
    pub inference_memory_gib: Option<f64>,
    /// Where layer outputs larger than half of `inference_memory_gib` go [default: the
    /// system's temporary folder].
    pub scratch_dir: Option<PathBuf>,
    /// Mini-batch: batches per epoch [default: every training node once].
    pub batches_per_epoch: Option<usize>,
    /// Mini-batch: evaluate by sampled inference with these fanouts [default: exact
    /// inference; the training fanouts when only `eval_nodes` is given].
    pub eval_fanouts: Option<Vec<i64>>,
    /// Mini-batch: evaluate by sampled inference on at most this many nodes per split
    /// [default: every node of each split, when `eval_fanouts` is given].
    pub eval_nodes: Option<usize>,
    /// Workers in this process (mini-batch data parallel, or SAR) [default: 1].
    pub workers: Option<usize>,
    /// How workers talk [default: local].
    pub comm: Option<Backend>,
    /// Mini-batch: learn an input embedding of this width instead of reading features.
    pub embedding_dim: Option<usize>,
    /// Mini-batch: the embedding's LazyAdam learning rate [default: 0.01].
    pub embedding_lr: Option<f32>,
    /// SAR: how halos travel [default: sar].
    pub sar_mode: Option<SarMode>,
    /// Start from the parameters (and learnt input embedding) of this saved model, whose
    /// shape and dropout rates are the defaults of the options above.
    pub init_model: Option<PathBuf>,
    /// Write snapshots of the training state into this folder.
    pub snapshot_dir: Option<PathBuf>,
    /// Snapshot after every this many epochs (and at the end) [default: 1].
    pub snapshot_every: Option<usize>,
    /// Continue from the snapshot in `snapshot_dir`, up to `epochs` in total.
    pub resume: bool,
}

impl Default for TrainSettings {
    /// GCN, 2 layers, 200 epochs of Adam, full batch on the generated graph.
    fn default() -> TrainSettings {
        TrainSettings {
            dataset: None,
            model: None,
            layers: None,
            hidden: None,
            heads: None,
            out_heads: None,
            dropout: None,
            input_dropout: None,
            attention_dropout: None,
            lr: None,
            weight_decay: 5e-4,
            optimizer: OptimizerName::Adam,
            epochs: 200,
            patience: None,
            eval_every: 1,
            seed: 0,
            dtype: ComputeDType(DType::F32),
            checkpoint: false,
            batch_norm: false,
            fanouts: None,
            batch_size: None,
            queue_depth: None,
            features_location: None,
            feature_cache_gib: None,
            inference_memory_gib: None,
            scratch_dir: None,
            batches_per_epoch: None,
            eval_fanouts: None,
            eval_nodes: None,
            workers: None,
            comm: None,
            embedding_dim: None,
            embedding_lr: None,
            sar_mode: None,
            init_model: None,
            snapshot_dir: None,
            snapshot_every: None,
            resume: false,
        }
    }
}
