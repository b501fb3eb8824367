//! [`Model`]: a stack of convolutions with dropout and activations, as in the papers' and
//! PyTorch Geometric's examples: `dropout -> conv -> activation` per hidden layer, then
//! `dropout -> conv` (the first dropout, on the input features, has its own rate). A task is a
//! head on the last layer's output: node classification takes its log-softmax
//! ([`Model::log_probabilities`]).
//!
//! The model holds parameters and layer kinds only; the graph comes with each forward pass as
//! a [`GraphInput`]: the whole graph or a worker's part ([`NodeGraph`]), or sampled blocks
//! ([`LayerGraph`]).

mod config;
mod graph_input;
mod head;

use std::ops::Range;
use std::sync::Arc;

use graphloom_tensor::autodiff::ops::{self, Activation, Dropout, OutputDropout, Probability};
use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{DType, Tape, Tensor, Var};

pub use config::{ArchDefaults, Architecture, ModelConfig, APPNP_HOPS, APPNP_TELEPORT};
pub use graph_input::{GraphInput, LayerGraph, NodeGraph};
pub use head::{Decoder, Head};

use crate::kernels::aggregate::to_tensor_error;
use crate::kernels::sparse::SparseFeatures;
use crate::layers::{ConvLayer, LayerInput, LayerOperators};
use crate::{Error, Result};

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

/// A GNN: its configuration, layer kinds and parameters. It holds no graph: each forward pass
/// is given one ([`GraphInput`]), so the same model trains on the whole graph, on sampled
/// blocks or on a worker's part, and is saved and loaded without any.
pub struct Model {
    /// The configuration.
    pub cfg: ModelConfig,
    layers: Vec<ConvLayer>,
    /// Every parameter, layer by layer.
    pub params: Vec<Param>,
    /// The range of `params` each layer takes.
    param_ranges: Vec<Range<usize>>,
    /// The range of `params` the link decoder takes (empty for other heads).
    decoder_params: Range<usize>,
}

/// Inputs with at most this share of non-zeros take the sparse first layer.
const SPARSE_INPUT_MAX_DENSITY: f64 = 0.1;

/// The most layers a model may have (2^16): far beyond any GNN, and a bound on a forward
/// pass's length and on a model file's count of layers before any is built.
pub const MAX_LAYERS: usize = 1 << 16;

/// The most propagation steps an APPNP layer may take: far beyond any use (its paper takes
/// 10), and a bound on a forward pass's length.
pub const MAX_HOPS: usize = 1 << 16;

/// The most scalar parameters a model may have (2^40, 4 TiB of f32): far beyond any GNN, and
/// low enough that no size computed from it overflows.
pub const MAX_PARAMETERS: usize = 1 << 40;

impl Model {
    /// The model of `cfg` with parameters initialised from `seed` (PyG's initialisation per
    /// layer; the same seed gives the same parameters on every worker).
    pub fn new(cfg: ModelConfig, seed: u64) -> Result<Model> {
        let shapes = Model::param_shapes(&cfg)?;
        let layers = cfg.conv_layers();
        let param_dtype = if cfg.dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let _g = category_scope(Category::Optimizer);
        let mut params = Vec::with_capacity(shapes.len());
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
        let start = params.len();
        if let Head::Link(decoder) = cfg.head {
            let width = cfg.out_dim;
            let key = RngKey::new(seed, u64::MAX, layers.len() as u64);
            let values = decoder.init_params(width, key, param_dtype)?;
            for ((name, _), value) in decoder.param_shapes(width).into_iter().zip(values) {
                params.push(Param {
                    name: format!("decoder.{name}"),
                    value,
                });
            }
        }
        let decoder_params = start..params.len();
        debug_assert_eq!(params.len(), shapes.len());
        Ok(Model {
            cfg,
            layers,
            params,
            param_ranges,
            decoder_params,
        })
    }

    /// Fails unless the configuration can make a model.
    fn check(cfg: &ModelConfig) -> Result<()> {
        let widths = [
            ("layers", cfg.layers),
            ("hidden width", cfg.hidden),
            ("input width", cfg.in_dim),
            ("output width (classes)", cfg.out_dim),
        ];
        if let Some((name, _)) = widths.iter().find(|(_, v)| *v == 0) {
            return Err(Error::InvalidSetting {
                setting: "model widths",
                reason: format!("the {name} must be at least 1"),
            });
        }
        if !cfg.dtype.is_float() {
            return Err(Error::InvalidSetting {
                setting: "compute dtype",
                reason: format!("{} is not a float type", cfg.dtype),
            });
        }
        if cfg.arch == Architecture::Sign {
            let blocks = cfg.hops.saturating_add(1);
            if cfg.layers < 2 {
                return Err(Error::InvalidSetting {
                    setting: "layers",
                    reason: "SIGN takes at least 2: its hops' linears, then the output's".into(),
                });
            }
            if !cfg.in_dim.is_multiple_of(blocks) {
                return Err(Error::InvalidSetting {
                    setting: "sign",
                    reason: format!(
                        "reads {blocks} equal column blocks (the features and {} hops), and the \
                         input is {} wide: train it on a dataset from `prepare propagate`",
                        cfg.hops, cfg.in_dim
                    ),
                });
            }
        }
        if cfg.arch == Architecture::Appnp {
            if !(0.0..=1.0).contains(&cfg.teleport) {
                return Err(Error::InvalidSetting {
                    setting: "teleport",
                    reason: format!("must be within 0 and 1, not {}", cfg.teleport),
                });
            }
            if !(1..=MAX_HOPS).contains(&cfg.hops) {
                return Err(Error::InvalidSetting {
                    setting: "hops",
                    reason: format!("must be within 1 and {MAX_HOPS}, not {}", cfg.hops),
                });
            }
        }
        // A GAT layer's output is heads x width wide, and its weight at least that many
        // parameters: bounding the products by the parameters' bound keeps every width
        // computed from them from overflowing.
        let wide = [
            ("heads", cfg.heads, "hidden", cfg.hidden),
            ("out_heads", cfg.out_heads, "output", cfg.out_dim),
        ];
        for (count, n, width, w) in wide {
            if cfg.arch.has_heads() && n.checked_mul(w).is_none_or(|p| p > MAX_PARAMETERS) {
                return Err(Error::InvalidSetting {
                    setting: "model widths",
                    reason: format!(
                        "{n} {count} of {width} width {w} make more than {MAX_PARAMETERS} \
                         parameters"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The names and shapes of the parameters of a model of `cfg`, in the model's order,
    /// computed without allocating any; fails on a configuration that cannot make a model or
    /// would have more than [`MAX_PARAMETERS`] parameters.
    pub fn param_shapes(cfg: &ModelConfig) -> Result<Vec<(String, Vec<usize>)>> {
        Model::check(cfg)?;
        let too_large = || Error::InvalidSetting {
            setting: "model widths",
            reason: format!(
                "{} layers of {} -> {} -> {} ({} heads) make more than {MAX_PARAMETERS} \
                 parameters",
                cfg.layers, cfg.in_dim, cfg.hidden, cfg.out_dim, cfg.heads
            ),
        };
        if cfg.layers > MAX_LAYERS {
            return Err(too_large());
        }
        // `total` plus the parameters of `shape`, within the bound; the product is checked
        // too, since one shape alone can overflow (an MLP decoder's square weight of a
        // 2^32-wide embedding).
        let add = |total: usize, shape: &[usize]| {
            shape
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d))
                .and_then(|n| total.checked_add(n))
                .filter(|&t| t <= MAX_PARAMETERS)
                .ok_or_else(too_large)
        };
        let layers = cfg.conv_layers();
        let mut shapes = Vec::new();
        let mut total = 0usize;
        for (l, layer) in layers.iter().enumerate() {
            for (name, shape) in layer.param_shapes().ok_or_else(too_large)? {
                total = add(total, &shape)?;
                shapes.push((format!("layers.{l}.{name}"), shape));
            }
            if cfg.batch_norm && l + 1 < layers.len() {
                let width = layer.output_width();
                shapes.push((format!("layers.{l}.norm.weight"), vec![width]));
                shapes.push((format!("layers.{l}.norm.bias"), vec![width]));
            }
        }
        if let Head::Link(decoder) = cfg.head {
            for (name, shape) in decoder.param_shapes(cfg.out_dim) {
                total = add(total, &shape)?;
                shapes.push((format!("decoder.{name}"), shape));
            }
        }
        Ok(shapes)
    }

    /// A sparse copy of `features` for the first layer of a whole-graph pass
    /// ([`NodeGraph::with_sparse_input`]), when at most 10% of them are non-zero and the layer
    /// projects before it aggregates; the results are those of the dense input, up to the
    /// order of additions.
    pub fn sparse_input(&self, features: &Tensor) -> Option<Arc<SparseFeatures>> {
        if !self.layers[0].projects_first() {
            return None;
        }
        SparseFeatures::from_dense(features, SPARSE_INPUT_MAX_DENSITY).map(Arc::new)
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

    /// The number of layers.
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// The width of layer `l`'s output (heads concatenated for a hidden GAT layer).
    pub fn layer_width(&self, l: usize) -> usize {
        self.layers[l].output_width()
    }

    /// The encoder's output for input rows `x` (in the compute dtype) over `graph`, with
    /// parameters `params` (on the tape, in the order of [`Model::params`]): the last layer's
    /// scores before any head (the node-classification head is
    /// [`Model::log_probabilities`]). Over [`GraphInput::Blocks`], one block per layer.
    pub fn forward(
        &self,
        tape: &mut Tape,
        x: &Var,
        params: &[Var],
        graph: GraphInput<'_>,
        mode: Mode,
    ) -> Result<Var> {
        self.forward_layers(tape, x, params, graph, mode, 0..self.layers.len())
    }

    /// [`Model::forward`] through `layers` only: the output of a hidden layer is after its
    /// activation. Over [`GraphInput::Blocks`], one block per layer of the range. A training
    /// pass runs up to the last layer, because each layer applies the next one's input
    /// dropout. Node embeddings are `0..k`; layer-wise inference runs `l..l + 1`.
    pub fn forward_layers(
        &self,
        tape: &mut Tape,
        x: &Var,
        params: &[Var],
        graph: GraphInput<'_>,
        mode: Mode,
        layers: Range<usize>,
    ) -> Result<Var> {
        let count = self.layers.len();
        if layers.is_empty() || layers.end > count {
            return Err(Error::InvalidSetting {
                setting: "layer",
                reason: format!(
                    "layers {}..={} of a model of {count} layers",
                    layers.start + 1,
                    layers.end
                ),
            });
        }
        if mode.training && layers.end != count {
            return Err(Error::InvalidSetting {
                setting: "layer",
                reason: "a training pass runs through the last layer".into(),
            });
        }
        if params.len() != self.params.len() {
            return Err(Error::Mismatch {
                what: "parameters and the model",
                detail: format!("{} given, {} in the model", params.len(), self.params.len()),
            });
        }
        if let GraphInput::Blocks(blocks) = graph {
            if blocks.len() != layers.len() {
                return Err(Error::Mismatch {
                    what: "blocks and layers",
                    detail: format!(
                        "{} blocks for {} layers: give one block per layer",
                        blocks.len(),
                        layers.len()
                    ),
                });
            }
        }
        let first = layers.start;
        let mut h = x.clone();
        for l in layers {
            let layer = &self.layers[l];
            let pass = match graph {
                GraphInput::Nodes(g) => LayerPass {
                    operators: g.operators(),
                    row_ids: g.row_ids().cloned(),
                    next_row_ids: g.row_ids().cloned(),
                    // The sparse copy holds the input features' rows, which only the first
                    // layer reads.
                    sparse: if l == 0 {
                        g.sparse_input().cloned()
                    } else {
                        None
                    },
                    stats_sum: g.stats_sum().cloned(),
                },
                GraphInput::Blocks(blocks) => {
                    let block = &blocks[l - first];
                    LayerPass {
                        operators: block.operators(layer.kind.aggregation())?,
                        row_ids: Some(block.src_ids.clone()),
                        // The ids of the next layer's input rows, which this layer's output
                        // rows are.
                        next_row_ids: blocks.get(l - first + 1).map(|b| b.src_ids.clone()),
                        sparse: None,
                        stats_sum: None,
                    }
                }
            };
            let block = self.layer_fn(l, pass, mode);
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
        Ok(h)
    }

    /// The link-prediction head: the decoder's scores (logits, `[pairs, 1]`) of the pairs
    /// `(src[i], dst[i])` of rows of the encoder's output `h`, with parameters `params` (the
    /// model's, as given to [`Model::forward`]).
    pub fn link_scores(
        &self,
        tape: &mut Tape,
        h: &Var,
        params: &[Var],
        src: Arc<[usize]>,
        dst: Arc<[usize]>,
    ) -> Result<Var> {
        let Head::Link(decoder) = self.cfg.head else {
            return Err(Error::Mismatch {
                what: "the model's head and link scores",
                detail: "the model classifies nodes; it has no link decoder".into(),
            });
        };
        let decoder_params = params[self.decoder_params.clone()]
            .iter()
            .map(|p| ops::cast(tape, p, h.value().dtype()))
            .collect::<graphloom_tensor::Result<Vec<_>>>()?;
        head::score_pairs(tape, decoder, h, &decoder_params, src, dst)
    }

    /// The node-classification head: the log-softmax of the last layer's class scores.
    pub fn log_probabilities(tape: &mut Tape, scores: &Var) -> Result<Var> {
        // Class scores are few: take the softmax in f32 even when activations are bf16.
        let h = if scores.value().dtype() == DType::BF16 {
            ops::cast(tape, scores, DType::F32)?
        } else {
            scores.clone()
        };
        Ok(ops::log_softmax(tape, &h)?)
    }

    /// Layer `l` as a pure function of its input and parameters: the input dropout where the
    /// layer before does not apply it, then the convolution with its activation (none for the
    /// last layer) and the next layer's input dropout, keyed by `pass.next_row_ids`.
    /// Checkpointing reruns exactly this in the backward pass.
    fn layer_fn(
        &self,
        l: usize,
        pass: LayerPass,
        mode: Mode,
    ) -> impl Fn(&mut Tape, &[Var]) -> graphloom_tensor::Result<Var> + Send + Sync + 'static {
        let cfg = self.cfg.clone();
        let layer = self.layers[l];
        let last = l + 1 == self.layers.len();
        move |tape: &mut Tape, v: &[Var]| {
            let dropout = |purpose: u64, p: Probability| {
                (mode.training && p.get() > 0.0).then(|| Dropout {
                    p: p.get(),
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
            let sparse = pass.sparse.clone().map(|x| (x, rule));
            if let (Some(rule), None) = (rule, &sparse) {
                h = ops::dropout(tape, &h, rule, pass.row_ids.clone())?;
            }
            let output_dropout = if last || !dropout_by_previous_layer {
                None
            } else {
                dropout(2 * (l as u64 + 1), cfg.dropout).map(|rule| OutputDropout {
                    rule,
                    row_ids: pass.next_row_ids.clone(),
                })
            };
            let params = v[1..]
                .iter()
                .map(|p| ops::cast(tape, p, cfg.dtype))
                .collect::<graphloom_tensor::Result<Vec<_>>>()?;
            let activation = if last {
                Activation::Identity
            } else {
                cfg.arch.hidden_activation()
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
                stats_sum: pass.stats_sum.clone(),
            };
            let h = layer
                .forward(tape, &h, &params, &pass.operators, input)
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
                pass.stats_sum.clone(),
            )?;
            ops::activate(tape, &h, activation)
        }
    }
}

/// What one layer of a forward pass runs with, taken from the pass's [`GraphInput`].
struct LayerPass {
    operators: LayerOperators,
    /// The node id of each input row (`None`: row `i` is node `i`).
    row_ids: Option<Arc<[i64]>>,
    /// The node id of each row of the next layer's input.
    next_row_ids: Option<Arc<[i64]>>,
    sparse: Option<Arc<SparseFeatures>>,
    stats_sum: Option<graphloom_tensor::autodiff::ops::StatsSum>,
}
