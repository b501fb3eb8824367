//! What a user asks of a training run, typed: every choice an enum, every checked value a
//! newtype ([`Fanouts`], [`Probability`]), every option that only some modes or models use an
//! `Option`, so that [`crate::Plan::new`] can tell a default from a value the user gave and
//! refuse the ones that do not apply. This is the one definition of each setting: the command
//! line derives its options from it (feature `cli`), and the defaults are the training
//! crate's (`TrainConfig::default`, `ModelConfig::default`, `Architecture::defaults`).

use std::fmt;
use std::path::PathBuf;

use graphloom_convert::synthetic::EdgeModel;
use graphloom_graph::sample::Fanouts;
pub use graphloom_graph::FeaturesLocation;
use graphloom_nn::hetero::RelationalKind;
use graphloom_nn::link::metrics::LinkMetric;
use graphloom_nn::link::NegativeSampling;
use graphloom_nn::task::TaskKind;
use graphloom_nn::train::TrainConfig;
use graphloom_nn::values::RegressionLoss;
use graphloom_nn::{Architecture, Decoder, ModelConfig, OptimizerKind};
use graphloom_sar::SarMode;
use graphloom_tensor::autodiff::ops::Probability;
use graphloom_tensor::DType;

/// A closed set of named values, as front ends spell them.
pub trait Choice: Copy + Send + Sync + 'static {
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
    const ALL: &'static [Self] = Architecture::ALL;
    fn name(self) -> &'static str {
        Architecture::name(self)
    }
}

/// The model as `--model` names it: a family of one node type and one edge type, or a
/// relational one, which trains heterogeneous datasets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelName {
    /// GCN, GraphSAGE, GAT, GATv2, GIN, SGC or APPNP.
    Homogeneous(Architecture),
    /// R-GCN or R-SAGE.
    Relational(RelationalKind),
}

impl From<Architecture> for ModelName {
    fn from(arch: Architecture) -> ModelName {
        ModelName::Homogeneous(arch)
    }
}

impl Choice for ModelName {
    const ALL: &'static [Self] = &[
        ModelName::Homogeneous(Architecture::Gcn),
        ModelName::Homogeneous(Architecture::Sage),
        ModelName::Homogeneous(Architecture::Gat),
        ModelName::Homogeneous(Architecture::GatV2),
        ModelName::Homogeneous(Architecture::Gin),
        ModelName::Homogeneous(Architecture::Gine),
        ModelName::Homogeneous(Architecture::Sgc),
        ModelName::Homogeneous(Architecture::Appnp),
        ModelName::Homogeneous(Architecture::Sign),
        ModelName::Relational(RelationalKind::Rgcn),
        ModelName::Relational(RelationalKind::Rsage),
    ];
    fn name(self) -> &'static str {
        match self {
            ModelName::Homogeneous(arch) => arch.name(),
            ModelName::Relational(kind) => kind.name(),
        }
    }
}

/// What `partition --balance` holds each part's load to.
impl Choice for graphloom_graph::partition::BalanceOn {
    const ALL: &'static [Self] = graphloom_graph::partition::BalanceOn::ALL;
    fn name(self) -> &'static str {
        graphloom_graph::partition::BalanceOn::name(self)
    }
}

/// Where the store keeps a sampled run's node features.
impl Choice for FeaturesLocation {
    const ALL: &'static [Self] = FeaturesLocation::ALL;
    fn name(self) -> &'static str {
        FeaturesLocation::name(self)
    }
}

/// How a sampled run reads the feature rows it keeps on disk (`features_location` mmap)
/// and does not hold in its row cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeatureReads {
    /// `mapped` when the page cache can keep every row that may miss (the rows of nodes with
    /// an in-edge, less the cache's) beside the run's predicted memory and the mapped graph,
    /// else `direct`.
    Auto,
    /// Each batch's missing rows in one batch of `O_DIRECT` reads (io_uring, or a pread pool
    /// where the kernel gives none): no page faults, no page cache.
    Direct,
    /// Page faults on the mapped file, through the page cache.
    Mapped,
}

impl Choice for FeatureReads {
    const ALL: &'static [Self] = &[
        FeatureReads::Auto,
        FeatureReads::Direct,
        FeatureReads::Mapped,
    ];
    fn name(self) -> &'static str {
        match self {
            FeatureReads::Auto => "auto",
            FeatureReads::Direct => "direct",
            FeatureReads::Mapped => "mapped",
        }
    }
}

/// What a run trains its model for: [`TaskKind`] under its command-line names.
impl Choice for TaskKind {
    const ALL: &'static [Self] = TaskKind::ALL;
    fn name(self) -> &'static str {
        TaskKind::name(self)
    }
}

/// Regression's loss.
impl Choice for RegressionLoss {
    const ALL: &'static [Self] = RegressionLoss::ALL;
    fn name(self) -> &'static str {
        RegressionLoss::name(self)
    }
}

/// How a link predictor scores a pair of node embeddings.
impl Choice for Decoder {
    const ALL: &'static [Self] = Decoder::ALL;
    fn name(self) -> &'static str {
        Decoder::name(self)
    }
}

/// Which ends of a pair a link predictor's training negatives draw.
impl Choice for NegativeSampling {
    const ALL: &'static [Self] = NegativeSampling::ALL;
    fn name(self) -> &'static str {
        NegativeSampling::name(self)
    }
}

/// The validation metric that selects a link predictor.
impl Choice for LinkMetric {
    const ALL: &'static [Self] = LinkMetric::ALL;
    fn name(self) -> &'static str {
        LinkMetric::name(self)
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
    /// The optimizer of a training run unless told otherwise (`TrainConfig::default`'s).
    pub fn default_for_training() -> OptimizerName {
        let default = TrainConfig::default().optimizer;
        OptimizerName::ALL
            .iter()
            .copied()
            .find(|o| o.kind() == default)
            .unwrap_or(OptimizerName::Adam)
    }

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

/// A propagation operator of `prepare propagate`.
impl Choice for graphloom_convert::propagate::Operator {
    const ALL: &'static [Self] = graphloom_convert::propagate::Operator::ALL;
    fn name(self) -> &'static str {
        graphloom_convert::propagate::Operator::name(self)
    }
}

/// How the synthetic generator draws edges.
impl Choice for EdgeModel {
    const ALL: &'static [Self] = &[
        EdgeModel::Sbm,
        EdgeModel::Rmat,
        EdgeModel::PowerLaw,
        EdgeModel::PowerLawOrdered,
    ];
    fn name(self) -> &'static str {
        match self {
            EdgeModel::Sbm => "sbm",
            EdgeModel::Rmat => "rmat",
            EdgeModel::PowerLaw => "powerlaw",
            EdgeModel::PowerLawOrdered => "powerlaw-ordered",
        }
    }
}

impl Choice for SarMode {
    const ALL: &'static [Self] = &[SarMode::Sar, SarMode::Sa, SarMode::Osa];
    fn name(self) -> &'static str {
        SarMode::name(self)
    }
}

/// The names of a [`Choice`]'s values, as they print.
macro_rules! display_by_name {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(Choice::name(*self))
            }
        }
    )*};
}
display_by_name!(OptimizerName, ComputeDType, StorageDType, Backend);

/// A command-line parser of a [`Choice`]: its names are the possible values, which `--help`
/// and the error for any other value list (with the closest name as a tip).
#[cfg(feature = "cli")]
pub fn choice_parser<T: Choice + Clone>() -> crate::suggest::ChoiceParser<T> {
    crate::suggest::ChoiceParser::new()
}

/// A training run as the user asked for it. `None` means "the default for this mode and
/// model"; a value given where it does not apply is refused by [`crate::Plan::new`]. Each
/// field's documentation is its command-line help; setting names in messages are the field
/// names.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct TrainSettings {
    /// Dataset directory (a partitioned one, from `graphloom partition`, trains with SAR);
    /// without it, a small synthetic graph is generated in memory.
    #[cfg_attr(feature = "cli", arg(long))]
    pub dataset: Option<PathBuf>,
    /// What to train for: node classification, link prediction over the dataset's link split
    /// (`graphloom prepare link-split`), multi-label classification ([N, T] labels of 0/1,
    /// -1 missing; binary cross-entropy, ROC-AUC) or regression (float targets, NaN missing;
    /// MAE, RMSE, R²) [default: node].
    #[cfg_attr(feature = "cli", arg(long, value_parser = choice_parser::<TaskKind>()))]
    pub task: Option<TaskKind>,
    /// Regression: the loss, squared or absolute error [default: mse].
    #[cfg_attr(feature = "cli", arg(long, value_parser = choice_parser::<RegressionLoss>()))]
    pub loss: Option<RegressionLoss>,
    /// Link prediction: how a pair of node embeddings is scored: their dot product, or a
    /// two-layer perceptron on their element-wise product [default: dot].
    #[cfg_attr(feature = "cli", arg(long, value_parser = choice_parser::<Decoder>()))]
    pub decoder: Option<Decoder>,
    /// Link prediction: the width of the node embeddings, the last layer's output [default:
    /// the --hidden value].
    #[cfg_attr(feature = "cli", arg(long))]
    pub out_dim: Option<usize>,
    /// Link prediction: negatives per positive in training, at most 65536, and no more than
    /// lets a step's pairs (its supervision pairs times 1 + this) fit in memory.
    #[cfg_attr(feature = "cli", arg(long))]
    pub neg_ratio: Option<usize>,
    /// Link prediction: which ends of a positive pair its training negatives draw uniformly:
    /// both (PyG's binary negative sampling), or the destination alone, keeping the source
    /// (DGL's uniform sampler) [default: both].
    #[cfg_attr(feature = "cli", arg(long, value_parser = choice_parser::<NegativeSampling>()))]
    pub neg_sampling: Option<NegativeSampling>,
    /// Link prediction with --fanouts: hide each batch's own positive edges (both directions)
    /// from its sampled blocks, so the model cannot read them off the graph (DGL's
    /// exclude="reverse_id"); `--exclude-supervision false` keeps them, as PyG's loader does
    /// [default: true].
    #[cfg_attr(feature = "cli", arg(long, num_args = 0..=1, default_missing_value = "true"))]
    pub exclude_supervision: Option<bool>,
    /// Link prediction: the validation metric that selects the model: auc, mrr (needs the
    /// split's negative destinations per positive) or hits@20/50/100.
    #[cfg_attr(feature = "cli", arg(long, value_parser = choice_parser::<LinkMetric>()))]
    pub metric: Option<LinkMetric>,
    /// Model: gcn, sage, gat, gatv2, gin, gine (which reads the dataset's edge_feat.npy), sgc
    /// and appnp train a dataset of one node type and one edge type, sign one made by
    /// `prepare propagate` (full batch, or rows with
    /// --batch-size), rgcn and rsage a heterogeneous one [default: gcn, or that of
    /// --init-model; rgcn on a heterogeneous dataset].
    #[cfg_attr(feature = "cli", arg(long, value_parser = choice_parser::<ModelName>()))]
    pub model: Option<ModelName>,
    /// Heterogeneous R-GCN: each relation's weight a combination of this many bases shared by
    /// the relations of a layer (basis decomposition) [default: a weight per relation].
    #[cfg_attr(feature = "cli", arg(long))]
    pub num_bases: Option<usize>,
    /// Number of layers, at most 65536.
    #[cfg_attr(feature = "cli", arg(long))]
    pub layers: Option<usize>,
    /// Hidden width (per head for GAT; the model's parameters are at most 2^40, so times the
    /// heads at most 2^40 too).
    #[cfg_attr(feature = "cli", arg(long))]
    pub hidden: Option<usize>,
    /// GAT and GATv2: heads of the hidden layers.
    #[cfg_attr(feature = "cli", arg(long))]
    pub heads: Option<usize>,
    /// GAT and GATv2: heads of the output layer (averaged).
    #[cfg_attr(feature = "cli", arg(long))]
    pub out_heads: Option<usize>,
    /// APPNP: propagation steps after its MLP (K).
    #[cfg_attr(feature = "cli", arg(long))]
    pub hops: Option<usize>,
    /// APPNP: the teleport probability back to the MLP's output at each step (alpha), in
    /// [0, 1].
    #[cfg_attr(feature = "cli", arg(long))]
    pub teleport: Option<f64>,
    /// Dropout before each layer, in [0, 1).
    #[cfg_attr(feature = "cli", arg(long))]
    pub dropout: Option<Probability>,
    /// Dropout on the input features [default: the --dropout value].
    #[cfg_attr(feature = "cli", arg(long))]
    pub input_dropout: Option<Probability>,
    /// GAT and GATv2: dropout on attention coefficients [default: the --dropout value].
    #[cfg_attr(feature = "cli", arg(long))]
    pub attention_dropout: Option<Probability>,
    /// Learning rate.
    #[cfg_attr(feature = "cli", arg(long, allow_hyphen_values = true))]
    pub lr: Option<f64>,
    /// Weight decay.
    #[cfg_attr(feature = "cli", arg(long, allow_hyphen_values = true))]
    pub weight_decay: Option<f64>,
    /// Optimizer.
    #[cfg_attr(feature = "cli", arg(long, value_parser = choice_parser::<OptimizerName>(),
        default_value_t = OptimizerName::default_for_training()))]
    pub optimizer: OptimizerName,
    /// Number of epochs.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = TrainConfig::default().epochs))]
    pub epochs: usize,
    /// Stop after this many evaluations without a better validation accuracy.
    #[cfg_attr(feature = "cli", arg(long))]
    pub patience: Option<usize>,
    /// Evaluate every this many epochs (and after the last one).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = TrainConfig::default().eval_every))]
    pub eval_every: usize,
    /// Seed of initialisation, dropout and sampling.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = TrainConfig::default().seed))]
    pub seed: u64,
    /// Storage and compute dtype of features and activations.
    #[cfg_attr(feature = "cli", arg(long, value_parser = choice_parser::<ComputeDType>(),
        default_value_t = ComputeDType(ModelConfig::default().dtype)))]
    pub dtype: ComputeDType,
    /// Recompute each layer in the backward pass instead of keeping its activations.
    #[cfg_attr(feature = "cli", arg(long))]
    pub checkpoint: bool,
    /// Batch normalisation after every hidden layer (statistics over every node, summed over
    /// the workers of a SAR job).
    #[cfg_attr(feature = "cli", arg(long))]
    pub batch_norm: bool,
    /// Train in sampled mini-batches with these fanouts, one per layer from the seeds outwards
    /// (-1: all neighbours), e.g. 15,10; without it, training is full-batch.
    #[cfg_attr(feature = "cli", arg(long, allow_hyphen_values = true))]
    pub fanouts: Option<Fanouts>,
    /// Heterogeneous dataset with --fanouts: the fanouts of one relation instead, one per
    /// layer, as `RELATION=f1,f2`; the relation by its full name (`author__writes__paper`) or
    /// its middle name when that is unique (`writes`); repeat for more relations.
    #[cfg_attr(feature = "cli", arg(long, value_name = "RELATION=FANOUTS"))]
    pub fanouts_per_relation: Vec<String>,
    /// Mini-batch: seeds per batch; link prediction: supervision pairs per batch (full batch
    /// too).
    #[cfg_attr(feature = "cli", arg(long))]
    pub batch_size: Option<usize>,
    /// Mini-batch: batches sampled and gathered ahead of the compute.
    #[cfg_attr(feature = "cli", arg(long))]
    pub queue_depth: Option<usize>,
    /// Mini-batch: where the store keeps the features (mmap: node_feat.npy mapped from disk,
    /// for features larger than memory) [default: host].
    #[cfg_attr(feature = "cli", arg(long, value_parser = choice_parser::<FeaturesLocation>()))]
    pub features_location: Option<FeaturesLocation>,
    /// Mini-batch with --features-location mmap: GiB of memory for a cache of the feature
    /// rows of the nodes of highest in-degree, read once at the start (its hit rate is in the
    /// summary), at most 1073741824 (1 EiB) [default: no cache: every row is read from the
    /// file].
    #[cfg_attr(feature = "cli", arg(long))]
    pub feature_cache_gib: Option<f64>,
    /// Mini-batch with --features-location mmap: how rows outside the cache are read: direct
    /// (O_DIRECT reads of each batch's rows at once, past the page cache), mapped (page
    /// faults through the page cache) or auto (mapped when the page cache can keep every row
    /// that may miss beside the run and the mapped graph, else direct; the plan's log says
    /// which) [default: auto].
    #[cfg_attr(feature = "cli", arg(long, value_parser = choice_parser::<FeatureReads>()))]
    pub feature_reads: Option<FeatureReads>,
    /// Mini-batch: evaluate exactly but layer by layer, in chunks of nodes within this many GiB
    /// of memory (at most 1073741824, 1 EiB), each layer's output for all nodes in a scratch
    /// file when it takes more than half of it [default: one forward pass over the whole
    /// graph in memory].
    #[cfg_attr(feature = "cli", arg(long))]
    pub inference_memory_gib: Option<f64>,
    /// GiB of memory the run may take (its peak anonymous memory, at most 1073741824, 1 EiB):
    /// a mini-batch run divides it among the model, the batches in flight, the samplers, the
    /// features (in memory when they fit, else mapped from disk with what is left as
    /// --feature-cache-gib) and evaluation (layer by layer, as --inference-memory-gib, when
    /// one pass over the graph would not fit); a full-batch or SAR run checks its predicted
    /// peak against it; a tenth is kept for the prediction's error. Options given win, and
    /// one that breaks the budget is an error. Every run prints its predicted peak by part
    /// before training [default: no budget].
    #[cfg_attr(feature = "cli", arg(long))]
    pub memory_gib: Option<f64>,
    /// Folder of --inference-memory-gib's scratch files, removed after use [default: the
    /// system's temporary folder].
    #[cfg_attr(feature = "cli", arg(long))]
    pub scratch_dir: Option<PathBuf>,
    /// Mini-batch: batches per epoch; each epoch then trains on the first batches of its own
    /// order of the training nodes, so evaluation and snapshots come every that many batches;
    /// with GraphSAINT (--batching saint-*), the samples of an epoch, at most the graph's
    /// nodes [default: every training node once per epoch].
    #[cfg_attr(feature = "cli", arg(long))]
    pub batches_per_epoch: Option<usize>,
    /// Mini-batch: evaluate by sampled inference with these fanouts, one per layer (-1: all
    /// neighbours), from draws fixed for the run; for graphs whose every node's input rows do
    /// not fit in memory [default: exact full-neighbour inference].
    #[cfg_attr(feature = "cli", arg(long, allow_hyphen_values = true))]
    pub eval_fanouts: Option<Fanouts>,
    /// Mini-batch: evaluate by sampled inference on at most this many nodes of each split,
    /// a subset drawn once from --seed (with the training fanouts unless --eval-fanouts)
    /// [default: every node of each split].
    #[cfg_attr(feature = "cli", arg(long))]
    pub eval_nodes: Option<usize>,
    /// Workers in this process: data parallel for mini-batches (each takes a slice of every
    /// batch), one per part for a partitioned dataset; at most 1024, and no more than the
    /// address-space limit (ulimit -v) leaves room for their threads' stacks [default: 1, or
    /// one per part].
    #[cfg_attr(feature = "cli", arg(long))]
    pub workers: Option<usize>,
    /// How workers talk: the --workers threads of this process, or the processes of an
    /// mpirun job (needs a build with --features mpi) [default: local].
    #[cfg_attr(feature = "cli", arg(long, value_parser = choice_parser::<Backend>()))]
    pub comm: Option<Backend>,
    /// Mini-batch, or full-batch link prediction: learn a node-embedding table of this width
    /// as the input instead of reading features (for graphs without features), trained with
    /// LazyAdam; a heterogeneous dataset: the width of the table each node type without
    /// features learns [default there: 128].
    #[cfg_attr(feature = "cli", arg(long))]
    pub embedding_dim: Option<usize>,
    /// Mini-batch and heterogeneous datasets: learning rate of the embedding tables' LazyAdam.
    #[cfg_attr(feature = "cli", arg(long))]
    pub embedding_lr: Option<f32>,
    /// Partitioned dataset (SAR): how the other parts' rows travel: sar (one halo at a time,
    /// fetched again in the backward pass where needed), sa (one at a time, kept for the
    /// backward pass) or osa (all at once) [default: sar].
    #[cfg_attr(feature = "cli", arg(id = "sar_mode", long = "mode",
        value_parser = choice_parser::<SarMode>()))]
    pub sar_mode: Option<SarMode>,
    /// Start from this saved model's parameters (and learnt input embedding); its shape and
    /// dropout rates are the defaults of the model options.
    #[cfg_attr(feature = "cli", arg(long))]
    pub init_model: Option<PathBuf>,
    /// Write snapshots of the training state (parameters, optimizer state, learnt input
    /// embedding, epoch, model selection) into this folder, for --resume.
    #[cfg_attr(feature = "cli", arg(long))]
    pub snapshot_dir: Option<PathBuf>,
    /// Snapshot after every this many epochs, and at the end [default: 1].
    #[cfg_attr(feature = "cli", arg(long))]
    pub snapshot_every: Option<usize>,
    /// Continue from the snapshot in --snapshot-dir up to --epochs in total; the result is
    /// the one of an uninterrupted run.
    #[cfg_attr(feature = "cli", arg(long))]
    pub resume: bool,
    /// Subgraph mini-batches (Cluster-GCN, GraphSAINT).
    #[cfg_attr(feature = "cli", command(flatten))]
    pub subgraph: crate::SubgraphSettings,
}

impl TrainSettings {
    /// Whether a link-prediction run hides each batch's positive edges from its sampled
    /// blocks: as asked, else in every sampled run. A sampled batch that keeps them lets the
    /// model read the answer off its neighbourhood, and on a heavy-tailed graph it peaked
    /// within 9 of 20 epochs at test AUC 0.70 against 0.75 with them hidden (and PyG's full
    /// batch 0.73).
    pub fn excludes_supervision(&self) -> bool {
        self.exclude_supervision.unwrap_or(self.fanouts.is_some())
    }
}

impl Default for TrainSettings {
    /// GCN, 2 layers, the training loop's defaults, full batch on the generated graph.
    fn default() -> TrainSettings {
        let train = TrainConfig::default();
        TrainSettings {
            dataset: None,
            task: None,
            loss: None,
            decoder: None,
            out_dim: None,
            neg_ratio: None,
            neg_sampling: None,
            exclude_supervision: None,
            metric: None,
            model: None,
            num_bases: None,
            layers: None,
            hidden: None,
            heads: None,
            out_heads: None,
            hops: None,
            teleport: None,
            dropout: None,
            input_dropout: None,
            attention_dropout: None,
            lr: None,
            weight_decay: None,
            optimizer: OptimizerName::default_for_training(),
            epochs: train.epochs,
            patience: None,
            eval_every: train.eval_every,
            seed: train.seed,
            dtype: ComputeDType(ModelConfig::default().dtype),
            checkpoint: false,
            batch_norm: false,
            fanouts: None,
            fanouts_per_relation: Vec::new(),
            batch_size: None,
            queue_depth: None,
            features_location: None,
            feature_cache_gib: None,
            feature_reads: None,
            inference_memory_gib: None,
            memory_gib: None,
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
            subgraph: Default::default(),
        }
    }
}

/// The command-line spelling of a setting: `batch_size` is `--batch-size`, `sar_mode` is
/// `--mode`.
pub fn flag_of(setting: &str) -> String {
    match setting {
        "sar_mode" => "--mode".into(),
        other => format!("--{}", other.replace('_', "-")),
    }
}
