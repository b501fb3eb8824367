//! [`Model`]: a stack of convolutions with dropout and activations, as in the papers' and
//! PyTorch Geometric's examples: `dropout -> conv -> activation` per hidden layer, then
//! `dropout -> conv -> log_softmax` (the first dropout, on the input features, has its own
//! rate).

use std::sync::Arc;

use graphloom_graph::Csr;
use graphloom_tensor::autodiff::ops::{self, Activation, Dropout, OutputDropout, StatsSum};
use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{DType, Tape, Tensor, Var};

use crate::kernels::aggregate::to_tensor_error;
use crate::kernels::aggregate::GcnNorm;
use crate::kernels::aggregate::LinearAggregation;
use crate::kernels::gat::Attention;
use crate::kernels::sparse::SparseFeatures;
use crate::layers::{ConvKind, ConvLayer, LayerInput};
use crate::{Error, GraphView, Result};

/// The model family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    /// Graph convolutional network.
    Gcn,
    /// GraphSAGE with mean aggregation.
    Sage,
    /// Graph attention network.
    Gat,
}

impl Architecture {
    /// Parses `gcn`, `sage` or `gat`.
    pub fn parse(name: &str) -> Option<Architecture> {
        Some(match name {
            "gcn" => Architecture::Gcn,
            "sage" | "graphsage" => Architecture::Sage,
            "gat" => Architecture::Gat,
            _ => return None,
        })
    }
    /// The lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Gcn => "gcn",
            Architecture::Sage => "sage",
            Architecture::Gat => "gat",
        }
    }
}

/// The shape and regularisation of a model.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// The model family.
    pub arch: Architecture,
    /// Input feature width.
    pub in_dim: usize,
    /// Hidden width (per head for GAT).
    pub hidden: usize,
    /// Number of classes.
    pub out_dim: usize,
    /// Number of convolutions (at least 1).
    pub layers: usize,
    /// GAT: heads of the hidden layers (concatenated).
    pub heads: usize,
    /// GAT: heads of the output layer (averaged).
    pub out_heads: usize,
    /// Dropout before every convolution.
    pub dropout: f64,
    /// Dropout on the input features, before the first convolution.
    pub input_dropout: f64,
    /// GAT: dropout on the attention coefficients.
    pub attention_dropout: f64,
    /// The dtype activations are computed and stored in (parameters stay f32, or f64 for f64).
    pub dtype: DType,
    /// Recompute each layer's internals in the backward pass instead of keeping them.
    pub checkpoint: bool,
    /// Batch normalisation after every hidden convolution, before its activation, with the
    /// statistics of every node (of every worker: see [`Model::set_batch_norm_sum`]).
    pub batch_norm: bool,
}

impl Default for ModelConfig {
    /// A 2-layer GCN of hidden width 16 with dropout 0.5 (Kipf and Welling's), computing in
    /// f32. `in_dim` and `out_dim` are 0: set them to the data's widths.
    fn default() -> ModelConfig {
        ModelConfig {
            arch: Architecture::Gcn,
            in_dim: 0,
            hidden: 16,
            out_dim: 0,
            layers: 2,
            heads: 1,
            out_heads: 1,
            dropout: 0.5,
            input_dropout: 0.5,
            attention_dropout: 0.0,
            dtype: DType::F32,
            checkpoint: false,
            batch_norm: false,
        }
    }
}

/// The epsilon added to the variance of batch normalisation (PyTorch's default).
pub const BATCH_NORM_EPS: f64 = 1e-5;

/// Whether a forward pass trains (dropout on) and which step's random draws it uses.
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    /// Dropout on.
    pub training: bool,
    /// The run's seed.
    pub seed: u64,
    /// The step (epoch) number, part of every dropout key.
    pub step: u64,
}

impl Mode {
    /// Dropout off: evaluation and inference, which draw nothing, so no seed or step matters.
    pub fn inference() -> Mode {
        Mode {
            training: false,
            seed: 0,
            step: 0,
        }
    }
}

/// A named parameter tensor (f32, or f64 for f64 models).
#[derive(Clone, Debug)]
pub struct Param {
    /// `layers.{i}.{name}`.
    pub name: String,
    /// The value.
    pub value: Tensor,
}

/// The graph of one layer of a sampled batch: a block as a square graph over its sources
/// (only the first `num_dst` rows have in-edges), and with self-loops for GAT.
#[derive(Clone)]
pub struct LayerGraph {
    /// The block.
    pub view: Arc<GraphView>,
    /// The block with one self-loop per node (GAT only).
    pub looped: Option<Arc<GraphView>>,
    /// How many rows of the layer's output are the block's destinations.
    pub num_dst: usize,
    /// The original node id of each input row, so dropout draws the same mask for a node
    /// whichever batch, worker or position holds it.
    pub src_ids: Arc<[i64]>,
    /// GCN's normalisation of each input row in the whole graph (`None`: the block's own
    /// degrees, as sampled training uses).
    pub gcn_norm: Option<Arc<GcnNorm>>,
}

impl LayerGraph {
    /// The layer graph of `block`, with the self-looped copy when `gat`.
    pub fn new(block: &graphloom_graph::sample::Block, gat: bool) -> LayerGraph {
        let csr = block.to_csr();
        LayerGraph {
            view: Arc::new(GraphView::new(&csr, false)),
            looped: gat.then(|| Arc::new(GraphView::new(&csr, true))),
            num_dst: block.num_dst,
            src_ids: block.src_nodes.iter().map(|&v| i64::from(v)).collect(),
            gcn_norm: None,
        }
    }
}

/// A GNN: layers, their parameters and the graph operators they use.
pub struct Model {
    /// The configuration.
    pub cfg: ModelConfig,
    layers: Vec<ConvLayer>,
    /// Every parameter, layer by layer.
    pub params: Vec<Param>,
    /// The range of `params` each layer takes.
    param_ranges: Vec<std::ops::Range<usize>>,
    /// The input features as a sparse matrix, when they are sparse enough to be worth it.
    sparse_input: Option<Arc<SparseFeatures>>,
    /// How batch normalisation sums its statistics over workers (none: this worker's rows
    /// are every row).
    norm_sum: Option<StatsSum>,
}

/// Inputs with at most this share of non-zeros take the sparse first layer.
const SPARSE_INPUT_MAX_DENSITY: f64 = 0.1;

impl Model {
    /// A model that runs only on sampled blocks ([`Model::forward_blocks`]): it holds no
    /// whole-graph structure, so a graph of any size costs it nothing. Its parameters are
    /// those [`Model::new`] draws from the same seed; a whole-graph forward pass fails.
    pub fn for_blocks(cfg: ModelConfig, seed: u64) -> Result<Model> {
        let no_graph = Csr {
            row_ptr: vec![0],
            col_idx: Vec::new(),
        };
        Model::new(cfg, &no_graph, seed)
    }

    /// Builds the model over `graph` with parameters initialised from `seed`.
    pub fn new(cfg: ModelConfig, graph: &Csr, seed: u64) -> Result<Model> {
        Model::new_weighted(cfg, graph, None, seed)
    }

    /// [`Model::new`] over a graph with a weight per edge (its `col_idx` order), which GCN
    /// and GraphSAGE's mean use; GAT's attention learns its own weights and ignores them, as
    /// PyG's `GATConv` does.
    pub fn new_weighted(
        cfg: ModelConfig,
        graph: &Csr,
        edge_weight: Option<Arc<[f32]>>,
        seed: u64,
    ) -> Result<Model> {
        Model::check(&cfg)?;
        let _g = category_scope(Category::Graph);
        let mut view = GraphView::new(graph, false);
        if let Some(w) = edge_weight {
            view = view.with_edge_weight(w)?;
        }
        let view = Arc::new(view);
        let looped = (cfg.arch == Architecture::Gat).then(|| Arc::new(GraphView::new(graph, true)));
        drop(_g);
        Model::build(cfg, seed, |kind, width, out| {
            Ok(ConvLayer::new(kind, width, out, &view, looped.as_ref()))
        })
    }

    /// Fails unless the configuration can make a model.
    fn check(cfg: &ModelConfig) -> Result<()> {
        if cfg.layers == 0 || cfg.hidden == 0 || cfg.out_dim == 0 || cfg.in_dim == 0 {
            return Err(Error::InvalidSetting {
                setting: "model widths",
                reason: format!("layers, hidden, in_dim and out_dim must be positive: {cfg:?}"),
            });
        }
        if !cfg.dtype.is_float() {
            return Err(Error::InvalidSetting {
                setting: "compute dtype",
                reason: format!("{} is not a float type", cfg.dtype),
            });
        }
        for (name, p) in [
            ("dropout", cfg.dropout),
            ("input dropout", cfg.input_dropout),
            ("attention dropout", cfg.attention_dropout),
        ] {
            if !(0.0..1.0).contains(&p) {
                return Err(Error::InvalidSetting {
                    setting: name,
                    reason: format!("{p} is not in [0, 1)"),
                });
            }
        }
        Ok(())
    }

    /// A model whose layers use given graph operators (ones spread over the workers of a job,
    /// say) instead of a graph in memory: `aggregation` for GCN and GraphSAGE (GCN's
    /// normalisation or the mean, to match the architecture), `attention` for GAT. The
    /// parameters are those [`Model::new`] draws from the same seed.
    pub fn with_operators(
        cfg: ModelConfig,
        seed: u64,
        aggregation: Arc<dyn LinearAggregation>,
        attention: Arc<dyn Attention>,
    ) -> Result<Model> {
        Model::check(&cfg)?;
        Model::build(cfg, seed, |kind, width, out| {
            Ok(ConvLayer::with_operators(
                kind,
                width,
                out,
                aggregation.clone(),
                attention.clone(),
            ))
        })
    }

    /// The layers (made by `layer` from kind and widths) and their parameters drawn from `seed`.
    fn build(
        cfg: ModelConfig,
        seed: u64,
        layer: impl Fn(ConvKind, usize, usize) -> Result<ConvLayer>,
    ) -> Result<Model> {
        let mut layers = Vec::new();
        let mut width = cfg.in_dim;
        for l in 0..cfg.layers {
            let last = l + 1 == cfg.layers;
            let out = if last { cfg.out_dim } else { cfg.hidden };
            let kind = match cfg.arch {
                Architecture::Gcn => ConvKind::Gcn,
                Architecture::Sage => ConvKind::Sage,
                Architecture::Gat if last => ConvKind::Gat {
                    heads: cfg.out_heads.max(1),
                    concat: false,
                },
                Architecture::Gat => ConvKind::Gat {
                    heads: cfg.heads.max(1),
                    concat: true,
                },
            };
            let layer = layer(kind, width, out)?;
            width = layer.output_width();
            layers.push(layer);
        }
        let param_dtype = if cfg.dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let _g = category_scope(Category::Optimizer);
        let mut params = Vec::new();
        let mut param_ranges = Vec::new();
        for (l, layer) in layers.iter().enumerate() {
            let start = params.len();
            for (name, value) in
                layer.init_params(RngKey::new(seed, u64::MAX, l as u64), param_dtype)?
            {
                params.push(Param {
                    name: format!("layers.{l}.{name}"),
                    value,
                });
            }
            if cfg.batch_norm && l + 1 < layers.len() {
                let width = layer.output_width();
                params.push(Param {
                    name: format!("layers.{l}.norm.weight"),
                    value: Tensor::full(&[width], param_dtype, 1.0)?,
                });
                params.push(Param {
                    name: format!("layers.{l}.norm.bias"),
                    value: Tensor::zeros(&[width], param_dtype),
                });
            }
            param_ranges.push(start..params.len());
        }
        Ok(Model {
            cfg,
            layers,
            params,
            param_ranges,
            sparse_input: None,
            norm_sum: None,
        })
    }

    /// Uses a sparse copy of `features` in the first layer when at most 10% of them are
    /// non-zero and the layer projects before it aggregates; returns whether it does. The
    /// results are those of the dense input, up to the order of additions.
    pub fn use_sparse_input(&mut self, features: &Tensor) -> bool {
        self.sparse_input = None;
        if self.layers[0].projects_first() {
            self.sparse_input =
                SparseFeatures::from_dense(features, SPARSE_INPUT_MAX_DENSITY).map(Arc::new);
        }
        self.sparse_input.is_some()
    }

    /// Makes batch normalisation sum its statistics with `sum` (an all-reduce over the workers
    /// that each hold some of the graph's rows), so the workers normalise as one would.
    pub fn set_batch_norm_sum(&mut self, sum: StatsSum) {
        self.norm_sum = Some(sum);
    }

    /// Sets the parameters to `values` (a saved model's, in the model's order), each in the
    /// dtype the model keeps it in; names and shapes must match.
    pub fn set_params(&mut self, values: &[Param]) -> Result<()> {
        if values.len() != self.params.len() {
            return Err(Error::Mismatch {
                what: "saved parameters and the model",
                detail: format!("{} saved, {} in the model", values.len(), self.params.len()),
            });
        }
        for (p, v) in self.params.iter_mut().zip(values) {
            if p.name != v.name || p.value.shape() != v.value.shape() {
                return Err(Error::Mismatch {
                    what: "saved parameters and the model",
                    detail: format!(
                        "saved {} {:?}, the model has {} {:?}",
                        v.name,
                        v.value.shape(),
                        p.name,
                        p.value.shape()
                    ),
                });
            }
            p.value = v.value.cast(p.value.dtype())?;
        }
        Ok(())
    }

    /// The number of scalar parameters.
    pub fn num_parameters(&self) -> usize {
        self.params.iter().map(|p| p.value.numel()).sum()
    }

    /// Log-probabilities `[N, classes]` for input `x` (in the compute dtype) with parameters
    /// `params` (on the tape, in the order of [`Model::params`]).
    pub fn forward(&self, tape: &mut Tape, x: &Var, params: &[Var], mode: Mode) -> Result<Var> {
        self.run_layers(tape, x, params, mode, None, None, None)
    }

    /// The output of the first `layers` layers (after the activation of a hidden layer; the
    /// class scores before the softmax for the last) with dropout off: node embeddings.
    pub fn embed(&self, tape: &mut Tape, x: &Var, params: &[Var], layers: usize) -> Result<Var> {
        if layers == 0 || layers > self.layers.len() {
            return Err(Error::InvalidSetting {
                setting: "layer",
                reason: format!(
                    "{layers} of a model of {} layers: give 1..={}",
                    self.layers.len(),
                    self.layers.len()
                ),
            });
        }
        self.run_layers(tape, x, params, Mode::inference(), None, None, Some(layers))
    }

    /// The names and shapes of the parameters of a model of `cfg`, in the model's order.
    pub fn param_shapes(cfg: &ModelConfig) -> Result<Vec<(String, Vec<usize>)>> {
        let one_node = Csr {
            row_ptr: vec![0, 0],
            col_idx: Vec::new(),
        };
        let model = Model::new(cfg.clone(), &one_node, 0)?;
        Ok(model
            .params
            .into_iter()
            .map(|p| (p.name, p.value.shape().to_vec()))
            .collect())
    }

    /// [`Model::forward`] over rows that are a subset of the graph's nodes (a worker's part):
    /// `row_ids` are their node ids, so dropout draws each node's own mask.
    pub fn forward_rows(
        &self,
        tape: &mut Tape,
        x: &Var,
        params: &[Var],
        mode: Mode,
        row_ids: Arc<[i64]>,
    ) -> Result<Var> {
        self.run_layers(tape, x, params, mode, None, Some(row_ids), None)
    }

    /// Log-probabilities of the seeds of a sampled batch: layer `l` runs over `blocks[l]`, from
    /// input rows `x` (the first block's sources) to the last block's destinations.
    pub fn forward_blocks(
        &self,
        tape: &mut Tape,
        x: &Var,
        params: &[Var],
        blocks: &[LayerGraph],
        mode: Mode,
    ) -> Result<Var> {
        if blocks.len() != self.layers.len() {
            return Err(Error::Mismatch {
                what: "blocks and layers",
                detail: format!(
                    "{} blocks for a model of {} layers",
                    blocks.len(),
                    self.layers.len()
                ),
            });
        }
        self.run_layers(tape, x, params, mode, Some(blocks), None, None)
    }

    fn run_layers(
        &self,
        tape: &mut Tape,
        x: &Var,
        params: &[Var],
        mode: Mode,
        blocks: Option<&[LayerGraph]>,
        rows: Option<Arc<[i64]>>,
        upto: Option<usize>,
    ) -> Result<Var> {
        // A layer applies the next layer's input dropout: a training run must not stop early.
        debug_assert!(upto.is_none() || !mode.training);
        let mut h = x.clone();
        let count = upto.unwrap_or(self.layers.len());
        for (l, layer) in self.layers.iter().enumerate().take(count) {
            let last = l + 1 == self.layers.len();
            let layer = match blocks {
                Some(b) => layer.on_block(
                    &b[l].view,
                    b[l].looped.as_ref(),
                    b[l].num_dst,
                    b[l].gcn_norm.as_deref(),
                ),
                None => layer.clone(),
            };
            let row_ids = blocks
                .map(|b| b[l].src_ids.clone())
                .or_else(|| rows.clone());
            // The ids of the next layer's input rows, which this layer's output rows are.
            let next_row_ids = match blocks {
                Some(b) => b.get(l + 1).map(|next| next.src_ids.clone()),
                None => rows.clone(),
            };
            let block = self.block(l, layer, last, mode, row_ids, next_row_ids);
            let p = &params[self.param_ranges[l].clone()];
            h = if self.cfg.checkpoint && tape.grad_enabled() {
                let mut inputs: Vec<&Var> = vec![&h];
                inputs.extend(p.iter());
                tape.checkpoint(&inputs, block)?
            } else {
                let mut inputs = vec![h.clone()];
                inputs.extend(p.iter().cloned());
                block(tape, &inputs)?
            };
        }
        if upto.is_some() {
            return Ok(h);
        }
        Model::log_probabilities(tape, &h)
    }

    /// The log-softmax of the last layer's class scores.
    pub fn log_probabilities(tape: &mut Tape, scores: &Var) -> Result<Var> {
        // Class scores are few: take the softmax in f32 even when activations are bf16.
        let h = if scores.value().dtype() == DType::BF16 {
            ops::cast(tape, scores, DType::F32)?
        } else {
            scores.clone()
        };
        Ok(ops::log_softmax(tape, &h)?)
    }

    /// The number of layers.
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Layer `l` alone over `graph` (a block whose sources are the rows of `x`) with dropout
    /// off: the output of its first `graph.num_dst` rows (after the activation of a hidden
    /// layer; the class scores before the softmax for the last). Layer-wise inference runs
    /// the model one layer over all nodes at a time with it.
    pub fn forward_layer(
        &self,
        tape: &mut Tape,
        x: &Var,
        params: &[Var],
        l: usize,
        graph: &LayerGraph,
    ) -> Result<Var> {
        let layer = self.layers.get(l).ok_or_else(|| Error::InvalidSetting {
            setting: "layer",
            reason: format!("{l} of a model of {} layers", self.layers.len()),
        })?;
        let layer = layer.on_block(
            &graph.view,
            graph.looped.as_ref(),
            graph.num_dst,
            graph.gcn_norm.as_deref(),
        );
        let last = l + 1 == self.layers.len();
        let block = self.block(
            l,
            layer,
            last,
            Mode::inference(),
            Some(graph.src_ids.clone()),
            None,
        );
        let mut inputs = vec![x.clone()];
        inputs.extend(params[self.param_ranges[l].clone()].iter().cloned());
        Ok(block(tape, &inputs)?)
    }

    /// Layer `l` as a pure function of its input and parameters: the input dropout where the
    /// layer before does not apply it, then the convolution with its activation (none for the
    /// last layer) and the next layer's input dropout, keyed by `next_row_ids`. Checkpointing
    /// reruns exactly this in the backward pass.
    fn block(
        &self,
        l: usize,
        layer: ConvLayer,
        last: bool,
        mode: Mode,
        row_ids: Option<Arc<[i64]>>,
        next_row_ids: Option<Arc<[i64]>>,
    ) -> impl Fn(&mut Tape, &[Var]) -> graphloom_tensor::Result<Var> + Send + Sync + 'static {
        let cfg = self.cfg.clone();
        let norm_sum = self.norm_sum.clone();
        // The sparse copy holds the whole graph's features: a sampled batch has its own rows.
        let sparse = if l == 0 && row_ids.is_none() {
            self.sparse_input.clone()
        } else {
            None
        };
        move |tape: &mut Tape, v: &[Var]| {
            let dropout = |purpose: u64, p: f64| {
                (mode.training && p > 0.0).then(|| Dropout {
                    p,
                    key: RngKey::new(mode.seed, mode.step, purpose),
                })
            };
            let mut h = v[0].clone();
            let p = if l == 0 {
                cfg.input_dropout
            } else {
                cfg.dropout
            };
            let norm = cfg.batch_norm && !last;
            // A hidden layer's input dropout is applied by the layer before it, fused with its
            // bias and activation, unless batch normalisation runs the activation apart; the
            // first layer drops out the model's input itself.
            let dropout_by_previous_layer = !cfg.batch_norm;
            let rule = dropout(2 * l as u64, p).filter(|_| l == 0 || !dropout_by_previous_layer);
            // The sparse input takes its dropout inside the product.
            let sparse = sparse.clone().map(|x| (x, rule));
            if let (Some(rule), None) = (rule, &sparse) {
                h = ops::dropout(tape, &h, rule, row_ids.clone())?;
            }
            let output_dropout = if last || !dropout_by_previous_layer {
                None
            } else {
                dropout(2 * (l as u64 + 1), cfg.dropout).map(|rule| OutputDropout {
                    rule,
                    row_ids: next_row_ids.clone(),
                })
            };
            let params = v[1..]
                .iter()
                .map(|p| ops::cast(tape, p, cfg.dtype))
                .collect::<graphloom_tensor::Result<Vec<_>>>()?;
            let activation = match (last, cfg.arch) {
                (true, _) => Activation::Identity,
                (false, Architecture::Gat) => Activation::Elu(1.0),
                (false, _) => Activation::Relu,
            };
            let input = LayerInput {
                sparse,
                attention_dropout: dropout(2 * l as u64 + 1, cfg.attention_dropout),
                activation: if norm {
                    Activation::Identity
                } else {
                    activation
                },
                output_dropout,
            };
            let h = layer
                .forward(tape, &h, &params, input)
                .map_err(to_tensor_error)?;
            if !norm {
                return Ok(h);
            }
            // The normalisation's scale and shift are the layer's last two parameters.
            let k = params.len();
            let h = ops::batch_norm(
                tape,
                &h,
                &params[k - 2],
                &params[k - 1],
                BATCH_NORM_EPS,
                norm_sum.clone(),
            )?;
            ops::activate(tape, &h, activation)
        }
    }
}
