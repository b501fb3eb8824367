//! The convolutions, following PyTorch Geometric's definitions and initialisation.
//!
//! - GCNConv (Kipf & Welling, <https://arxiv.org/abs/1609.02907>):
//!   `X' = D^-1/2 (A + I) D^-1/2 X W + b`. Weight Glorot, bias 0.
//! - SAGEConv, mean (Hamilton et al., <https://arxiv.org/abs/1706.02216>):
//!   `x'_v = W_l mean_{u in N(v)} x_u + b + W_r x_v`. Weights and bias `U(+-1/sqrt(F_in))`.
//! - GATConv (Velickovic et al., <https://arxiv.org/abs/1710.10903>): `h = X W` split in heads,
//!   `x'_v = ||_k sum_u alpha^k_uv h^k_u` (or the mean over heads), `alpha` the softmax over
//!   `v`'s in-edges and a self-loop of `LeakyReLU_0.2(a_src^k . h^k_u + a_dst^k . h^k_v)`, with
//!   dropout on `alpha`. `W`, `a_src`, `a_dst` Glorot, bias 0.
//! - GATv2Conv (Brody et al., <https://arxiv.org/abs/2105.14491>): `xl = X W_l + b_l`,
//!   `xr = X W_r + b_r` split in heads, `x'_v = ||_k sum_u alpha^k_uv xl^k_u` (or the mean
//!   over heads), `alpha` the softmax over `v`'s in-edges and a self-loop of
//!   `att^k . LeakyReLU_0.2(xl^k_u + xr^k_v)`, with `edge_dim`
//!   `att^k . LeakyReLU_0.2(xl^k_u + xr^k_v + (e_uv W_e)^k)` (a self-loop's `e` the mean of its
//!   node's other in-edges', as PyG's `fill_value="mean"`). `W_l`, `W_r`, `att`, `W_e` Glorot,
//!   biases 0.
//! - GINConv (Xu et al., <https://arxiv.org/abs/1810.00826>), `train_eps`:
//!   `x'_v = MLP((1 + eps) x_v + sum_{u in N(v)} x_u)`, the MLP
//!   `Linear -> ReLU -> Linear`, or with `norm` `Linear -> BatchNorm -> ReLU -> Linear` (the
//!   GIN paper's, and PyG's `MLP` default in its GIN example). `eps` 0, the linears as
//!   PyTorch's `Linear`, the normalisation's scale 1 and shift 0.
//! - GINEConv (Hu et al., <https://arxiv.org/abs/1905.12265>), `train_eps`, `edge_dim`:
//!   `x'_v = MLP((1 + eps) x_v + sum_{u in N(v)} ReLU(x_u + W_e e_uv + b_e))`, the MLP as
//!   GIN's; `W_e, b_e` (`lin`) as PyTorch's `Linear`.
//! - SGC (Wu et al., <https://arxiv.org/abs/1902.07153>), PyG's `SGConv`: `K - 1` layers
//!   that only propagate (`D^-1/2 (A + I) D^-1/2 X`) before a GCNConv, which is
//!   `S^K X W + b` in all.
//! - APPNP (Gasteiger et al., <https://arxiv.org/abs/1810.05997>): linear layers (the MLP),
//!   the last followed by `K` steps `h <- (1 - alpha) S h + alpha z` from its output `z`,
//!   `S` GCN's normalised adjacency. The linears as PyTorch's `Linear`.
//!
//! Shapes: `[N, F_in] -> [N, F_out]` (GAT and GATv2 with concatenation: `[N, heads * F_out]`).
//! SGC's last layer is a GCNConv, initialised as GCNConv's (Glorot weight, zero bias) where
//! PyG's `SGConv` initialises a `Linear`.

use std::sync::Arc;

use graphloom_tensor::autodiff::ops::{self, Activation, Dropout, OutputDropout, StatsSum};
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{DType, Tape, Tensor, Var};

use super::init::{glorot, kaiming_uniform};
use super::kinds::{Aggregation, ConvKind};
use crate::kernels::aggregate::{GcnNorm, LinearAggregation, WeightedSum};
use crate::kernels::gat::{Attention, FusedGat};
use crate::kernels::gatv2::FusedGatV2;
use crate::kernels::heads::{head_scores, mean_heads};
use crate::kernels::sparse::SparseFeatures;
use crate::{Error, GraphView, Result};

/// One convolution: its kind and widths. The graph it runs over comes with each forward pass
/// as [`LayerOperators`], so one layer serves the whole graph, a sampled block or a worker's
/// part alike.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConvLayer {
    /// The kind.
    pub kind: ConvKind,
    /// Input width.
    pub in_dim: usize,
    /// Output width per head.
    pub out_dim: usize,
}

/// The graph operators of one layer's forward pass: a linear aggregation (GCN's normalised
/// adjacency, SAGE's mean or GIN's sum), GAT's or GATv2's attention over the graph with
/// self-loops, and, for a sampled block, how many leading rows are outputs.
#[derive(Clone, Default)]
pub struct LayerOperators {
    /// GCN's normalised adjacency (also SGC's and APPNP's), SAGE's mean or GIN's sum.
    pub aggregation: Option<Arc<dyn LinearAggregation>>,
    /// GAT's attention (graph with self-loops).
    pub attention: Option<Arc<dyn Attention>>,
    /// GATv2's attention (graph with self-loops).
    pub dynamic_attention: Option<Arc<FusedGatV2>>,
    /// GINE's graph, with its edges' features.
    pub edges: Option<Arc<GraphView>>,
    /// For a sampled block: only the first rows (the block's destinations) are outputs, so
    /// the layer drops the others right after aggregating, before any dense product.
    pub keep_rows: Option<usize>,
}

impl LayerOperators {
    /// The operators of `aggregation` over a graph in memory (none for `None`): `graph` for
    /// the linear aggregations, `graph_with_loops` (one self-loop per node) for GAT's and
    /// GATv2's attention. With `block`, the graph is a sampled block as a square graph over its
    /// sources whose first `block` rows are the outputs; GCN then normalises by `gcn_norm`
    /// when given (each source's scale: sampled training's, `GcnNorm::of_sampled`, or the
    /// whole graph's), else by the block's own degrees.
    pub fn in_memory(
        aggregation: Option<Aggregation>,
        graph: Option<&Arc<GraphView>>,
        graph_with_loops: Option<&Arc<GraphView>>,
        block: Option<usize>,
        gcn_norm: Option<&GcnNorm>,
    ) -> Result<LayerOperators> {
        let missing = |what: &str| Error::Mismatch {
            what: "the graph and the layer",
            detail: format!("{aggregation:?} aggregation needs {what}"),
        };
        let mut ops = LayerOperators {
            keep_rows: block,
            ..LayerOperators::default()
        };
        let looped = || graph_with_loops.ok_or_else(|| missing("the graph with self-loops"));
        let plain = || graph.ok_or_else(|| missing("the graph without added self-loops"));
        let sum = match aggregation {
            None => return Ok(ops),
            Some(Aggregation::Attention) => {
                ops.attention = Some(Arc::new(FusedGat::new(looped()?.clone())));
                return Ok(ops);
            }
            Some(Aggregation::DynamicAttention) => {
                ops.dynamic_attention = Some(Arc::new(FusedGatV2::new(looped()?.clone())));
                return Ok(ops);
            }
            Some(Aggregation::EdgeSum) => {
                let graph = plain()?;
                if graph.edge_features.is_none() {
                    return Err(Error::InvalidSetting {
                        setting: "model",
                        reason: "GINE's messages add each edge's features, and the graph has \
                                 none: give the dataset edge_feat.npy ([num_edges, edge_dim], \
                                 in the order of csr_col_idx.npy), or train GIN"
                            .into(),
                    });
                }
                ops.edges = Some(graph.clone());
                return Ok(ops);
            }
            Some(Aggregation::Gcn) => match gcn_norm {
                Some(norm) => WeightedSum::gcn_with(plain()?.clone(), norm),
                None => WeightedSum::gcn(plain()?.clone()),
            },
            Some(Aggregation::Mean) => WeightedSum::mean(plain()?.clone()),
            Some(Aggregation::Sum) => WeightedSum::sum(plain()?.clone()),
        };
        // Aggregations compute only the kept rows themselves.
        let sum = match block {
            Some(n) => sum.with_output_rows(n),
            None => sum,
        };
        ops.aggregation = Some(Arc::new(sum));
        Ok(ops)
    }
}

/// LeakyReLU's negative slope in GAT's attention scores (0.2, as in the paper and PyG).
pub const GAT_NEGATIVE_SLOPE: f64 = 0.2;

/// What a layer's forward pass needs besides its input and parameters.
#[derive(Clone)]
pub struct LayerInput {
    /// The input as sparse features with the input dropout to apply to them, used instead of
    /// the dense input for the products `X W` (first layer only, and only where the layer
    /// projects before it aggregates).
    pub sparse: Option<(Arc<SparseFeatures>, Option<Dropout>)>,
    /// Dropout applied to the attention coefficients (GAT), if training.
    pub attention_dropout: Option<Dropout>,
    /// The activation applied to the output, fused with the bias.
    pub activation: Activation,
    /// The dropout applied to the activated output (the next layer's input dropout), fused
    /// with the bias and the activation.
    pub output_dropout: Option<OutputDropout>,
    /// How a batch normalisation inside the layer (GIN's MLP) sums its statistics over the
    /// workers holding the other rows (`None`: the rows are all).
    pub stats_sum: Option<StatsSum>,
}

impl ConvLayer {
    /// The rows this layer outputs: all, or a block's destinations.
    fn kept(ops: &LayerOperators, tape: &mut Tape, h: &Var) -> Result<Var> {
        match ops.keep_rows {
            Some(n) => Ok(ops::leading_rows(tape, h, n)?),
            None => Ok(h.clone()),
        }
    }

    /// Width of the output. Saturating: a model file's damaged widths are refused by the
    /// parameter count that follows (see [`ConvLayer::param_shapes`]), not by an overflow.
    pub fn output_width(&self) -> usize {
        match self.kind {
            ConvKind::Gat {
                heads,
                concat: true,
            }
            | ConvKind::GatV2 {
                heads,
                concat: true,
                ..
            } => heads.saturating_mul(self.out_dim),
            ConvKind::Sign { blocks } => blocks.saturating_mul(self.out_dim),
            _ => self.out_dim,
        }
    }

    /// Names and shapes of the parameters, in the order [`ConvLayer::forward`] takes; `None`
    /// when a shape's size overflows.
    pub fn param_shapes(&self) -> Option<Vec<(&'static str, Vec<usize>)>> {
        let (i, o) = (self.in_dim, self.out_dim);
        let shapes = match self.kind {
            ConvKind::Gcn => vec![("weight", vec![i, o]), ("bias", vec![o])],
            ConvKind::Sage => vec![
                ("lin_l.weight", vec![i, o]),
                ("lin_l.bias", vec![o]),
                ("lin_r.weight", vec![i, o]),
            ],
            ConvKind::Gat { heads, concat } => {
                let wide = heads.checked_mul(o)?;
                vec![
                    ("lin.weight", vec![i, wide]),
                    ("att_src", vec![wide]),
                    ("att_dst", vec![wide]),
                    ("bias", vec![if concat { wide } else { o }]),
                ]
            }
            ConvKind::GatV2 {
                heads,
                concat,
                edge_dim,
            } => {
                let wide = heads.checked_mul(o)?;
                let mut shapes = vec![
                    ("lin_l.weight", vec![i, wide]),
                    ("lin_l.bias", vec![wide]),
                    ("lin_r.weight", vec![i, wide]),
                    ("lin_r.bias", vec![wide]),
                    ("att", vec![wide]),
                ];
                if edge_dim > 0 {
                    shapes.push(("lin_edge.weight", vec![edge_dim, wide]));
                }
                shapes.push(("bias", vec![if concat { wide } else { o }]));
                shapes
            }
            ConvKind::Gin { norm } | ConvKind::Gine { norm, .. } => {
                let mut shapes = vec![("eps", vec![1])];
                if let ConvKind::Gine { edge_dim, .. } = self.kind {
                    shapes.push(("lin.weight", vec![edge_dim, i]));
                    shapes.push(("lin.bias", vec![i]));
                }
                shapes.extend([
                    ("mlp.0.weight", vec![i, o]),
                    ("mlp.0.bias", vec![o]),
                    ("mlp.1.weight", vec![o, o]),
                    ("mlp.1.bias", vec![o]),
                ]);
                if norm {
                    shapes.push(("mlp.norm.weight", vec![o]));
                    shapes.push(("mlp.norm.bias", vec![o]));
                }
                shapes
            }
            ConvKind::Propagate => Vec::new(),
            ConvKind::Linear | ConvKind::Appnp { .. } => {
                vec![("lin.weight", vec![i, o]), ("lin.bias", vec![o])]
            }
            // One [F, H] map per block, stacked: block b's are rows b F..(b + 1) F.
            ConvKind::Sign { blocks } => vec![
                ("lins.weight", vec![i, o]),
                ("lins.bias", vec![blocks.checked_mul(o)?]),
            ],
        };
        shapes
            .iter()
            .all(|(_, s)| {
                s.iter()
                    .try_fold(1usize, |n, &d| n.checked_mul(d))
                    .is_some()
            })
            .then_some(shapes)
    }

    /// Names and initial values of the parameters, in the order [`ConvLayer::forward`] takes:
    /// PyG's initialisation (see the module docs), drawn from `key`.
    pub fn init_params(&self, key: RngKey, dtype: DType) -> Result<Vec<(String, Tensor)>> {
        let (i, o) = (self.in_dim, self.out_dim);
        let shapes = self.param_shapes().ok_or_else(|| Error::InvalidSetting {
            setting: "model widths",
            reason: format!("a layer of {i} -> {o} has more parameters than memory can address"),
        })?;
        let heads = match self.kind {
            ConvKind::Gat { heads, .. } | ConvKind::GatV2 { heads, .. } => heads,
            _ => 1,
        };
        shapes
            .into_iter()
            .enumerate()
            .map(|(k, (name, shape))| {
                let key = key.derive(k as u64);
                let value = match (self.kind, name) {
                    (_, "bias" | "eps" | "mlp.norm.bias") => Tensor::zeros(&shape, dtype),
                    (_, "mlp.norm.weight") => Tensor::full(&shape, dtype, 1.0)?,
                    (ConvKind::Gcn, _) => glorot(&shape, i, o, key, dtype)?,
                    // PyTorch's `Linear`: weight and bias by the weight's fan-in.
                    (
                        ConvKind::Gin { .. } | ConvKind::Gine { .. },
                        "mlp.1.weight" | "mlp.1.bias",
                    ) => kaiming_uniform(&shape, o, key, dtype)?,
                    (ConvKind::Gine { edge_dim, .. }, "lin.weight" | "lin.bias") => {
                        kaiming_uniform(&shape, edge_dim, key, dtype)?
                    }
                    (
                        ConvKind::Sage
                        | ConvKind::Gin { .. }
                        | ConvKind::Gine { .. }
                        | ConvKind::Linear
                        | ConvKind::Appnp { .. }
                        | ConvKind::Propagate,
                        _,
                    ) => kaiming_uniform(&shape, i, key, dtype)?,
                    // PyTorch's `Linear` per block: the fan-in is a block's width.
                    (ConvKind::Sign { blocks }, _) => {
                        kaiming_uniform(&shape, i / blocks.max(1), key, dtype)?
                    }
                    (ConvKind::Gat { .. }, "lin.weight") => {
                        glorot(&shape, i, shape[1], key, dtype)?
                    }
                    (ConvKind::Gat { .. }, _) => glorot(&shape, heads, o, key, dtype)?,
                    (ConvKind::GatV2 { .. }, "lin_l.bias" | "lin_r.bias") => {
                        Tensor::zeros(&shape, dtype)
                    }
                    (ConvKind::GatV2 { .. }, "att") => glorot(&shape, heads, o, key, dtype)?,
                    (ConvKind::GatV2 { edge_dim, .. }, "lin_edge.weight") => {
                        glorot(&shape, edge_dim, shape[1], key, dtype)?
                    }
                    (ConvKind::GatV2 { .. }, _) => glorot(&shape, i, shape[1], key, dtype)?,
                };
                Ok((name.to_string(), value))
            })
            .collect()
    }

    /// The layer's activated output for input `x` and parameters `p` (already in the compute
    /// dtype) over the graph of `graph`, with `input.output_dropout` applied when there is
    /// one.
    pub fn forward(
        &self,
        tape: &mut Tape,
        x: &Var,
        p: &[Var],
        graph: &LayerOperators,
        input: LayerInput,
    ) -> Result<Var> {
        let missing = |what: &str| Error::Mismatch {
            what: "the graph and the layer",
            detail: format!("a {:?} layer needs {what}", self.kind),
        };
        if graph.keep_rows.is_some() && self.kind.propagates_hops() {
            return Err(Error::InvalidSetting {
                setting: "model",
                reason: "APPNP's last layer propagates over all its hops, and a sampled block \
                         (or layer-wise inference) gives a layer one: run APPNP over the whole \
                         graph (full batch, or SAR over workers)"
                    .into(),
            });
        }
        let aggregation = || {
            graph
                .aggregation
                .as_ref()
                .ok_or_else(|| missing("an aggregation"))
        };
        // The sum before the bias, and the bias.
        let (h, bias) = match self.kind {
            ConvKind::GatV2 {
                heads,
                concat,
                edge_dim,
            } => {
                let gat = graph
                    .dynamic_attention
                    .as_ref()
                    .ok_or_else(|| missing("a GATv2 attention kernel"))?;
                let xl = self.project(tape, x, &p[0], &input)?;
                let xl = ops::add_bias(tape, &xl, &p[1])?;
                let xr = self.project(tape, x, &p[2], &input)?;
                let xr = ops::add_bias(tape, &xr, &p[3])?;
                // With edge features, each edge's row mapped to the heads' width.
                let ee = match edge_dim {
                    0 => None,
                    _ => {
                        let rows = gat
                            .graph
                            .edge_features
                            .as_ref()
                            .ok_or_else(|| missing("edge features"))?;
                        let rows = Var::constant(rows.cast(x.value().dtype())?);
                        Some(ops::matmul(tape, &rows, &p[5])?)
                    }
                };
                let out = gat.apply_with_edges(
                    tape,
                    &xl,
                    &xr,
                    &p[4],
                    ee.as_ref(),
                    heads,
                    input.attention_dropout,
                )?;
                let out = ConvLayer::kept(graph, tape, &out)?;
                let out = if concat {
                    out
                } else {
                    mean_heads(tape, &out, heads)?
                };
                (out, &p[p.len() - 1])
            }
            ConvKind::Gin { norm } => {
                let agg = aggregation()?;
                // `MLP((1 + eps) x + A x)`, whose first product distributes over the sum: the
                // narrower side is aggregated.
                let z = if self.projects_first() {
                    let xw = self.project(tape, x, &p[1], &input)?;
                    let neighbours = agg.apply(tape, &xw)?;
                    let own = ConvLayer::kept(graph, tape, &xw)?;
                    ops::add_scaled_by(tape, &neighbours, &own, &p[0])?
                } else {
                    let neighbours = agg.apply(tape, x)?;
                    let own = ConvLayer::kept(graph, tape, x)?;
                    let sum = ops::add_scaled_by(tape, &neighbours, &own, &p[0])?;
                    ops::matmul(tape, &sum, &p[1])?
                };
                ConvLayer::gin_mlp_rest(tape, &z, &p[2..], norm, &input)?
            }
            ConvKind::Gine { norm, .. } => {
                let gv = graph
                    .edges
                    .as_ref()
                    .ok_or_else(|| missing("the graph with its edges' features"))?;
                let features = gv
                    .edge_features
                    .as_ref()
                    .ok_or_else(|| missing("edge features"))?;
                let features = Var::constant(features.cast(x.value().dtype())?);
                let edges = ops::matmul(tape, &features, &p[1])?;
                let edges = ops::add_bias(tape, &edges, &p[2])?;
                let neighbours = crate::kernels::gine::gine_messages(tape, gv, x, &edges)?;
                let neighbours = ConvLayer::kept(graph, tape, &neighbours)?;
                let own = ConvLayer::kept(graph, tape, x)?;
                let sum = ops::add_scaled_by(tape, &neighbours, &own, &p[0])?;
                let z = ops::matmul(tape, &sum, &p[3])?;
                ConvLayer::gin_mlp_rest(tape, &z, &p[4..], norm, &input)?
            }
            ConvKind::Propagate => {
                let h = aggregation()?.apply(tape, x)?;
                return ConvLayer::activate_without_bias(tape, h, input);
            }
            ConvKind::Linear => {
                let h = self.project(tape, x, &p[0], &input)?;
                (ConvLayer::kept(graph, tape, &h)?, &p[1])
            }
            ConvKind::Sign { blocks } => {
                let h = ops::block_matmul(tape, x, &p[0], blocks)?;
                (ConvLayer::kept(graph, tape, &h)?, &p[1])
            }
            ConvKind::Appnp { hops, teleport } => {
                let agg = aggregation()?;
                let z = self.project(tape, x, &p[0], &input)?;
                let z = ops::add_bias(tape, &z, &p[1])?;
                let mut h = z.clone();
                for _ in 0..hops {
                    let spread = agg.apply(tape, &h)?;
                    h = ops::combine(tape, &spread, 1.0 - teleport, &z, teleport)?;
                }
                return ConvLayer::activate_without_bias(tape, h, input);
            }
            ConvKind::Gcn => {
                let agg = aggregation()?;
                let h = self
                    .aggregate_linear(tape, agg, x, &p[0], &input)?
                    .product(tape, &p[0])?;
                (h, &p[1])
            }
            ConvKind::Sage => {
                let agg = aggregation()?;
                let h = match self.aggregate_linear(tape, agg, x, &p[0], &input)? {
                    // Both products in one buffer: `(A X) W_l + X_dst W_r`.
                    Linear::Aggregated(ax) if input.sparse.is_none() => {
                        let x_dst = ConvLayer::kept(graph, tape, x)?;
                        ops::matmul_pair(tape, &ax, &p[0], &x_dst, &p[2])?
                    }
                    linear => {
                        let neigh = linear.product(tape, &p[0])?;
                        if input.sparse.is_some() {
                            let root = self.project(tape, x, &p[2], &input)?;
                            ops::add(tape, &neigh, &root)?
                        } else {
                            let x_dst = ConvLayer::kept(graph, tape, x)?;
                            ops::add_matmul(tape, &neigh, &x_dst, &p[2])?
                        }
                    }
                };
                (h, &p[1])
            }
            ConvKind::Gat { heads, concat } => {
                let gat = graph
                    .attention
                    .as_ref()
                    .ok_or_else(|| missing("an attention kernel"))?;
                let h = self.project(tape, x, &p[0], &input)?;
                let el = head_scores(tape, &h, &p[1], heads)?;
                let er = head_scores(tape, &h, &p[2], heads)?;
                let out = gat.apply(tape, &h, &el, &er, input.attention_dropout)?;
                let out = ConvLayer::kept(graph, tape, &out)?;
                let out = if concat {
                    out
                } else {
                    mean_heads(tape, &out, heads)?
                };
                (out, &p[3])
            }
        };
        Ok(ops::bias_activation_dropout(
            tape,
            &h,
            bias,
            input.activation,
            input.output_dropout,
        )?)
    }

    /// Whether the layer multiplies its input by a weight before anything else, so that a
    /// sparse input can be used: GAT, GATv2 and the linear layers always, GCN, SAGE and GIN
    /// when they narrow, a propagation never.
    pub fn projects_first(&self) -> bool {
        match self.kind {
            ConvKind::Gat { .. }
            | ConvKind::GatV2 { .. }
            | ConvKind::Linear
            | ConvKind::Appnp { .. } => true,
            // SIGN's propagated rows are dense, and its blocks' product takes no sparse input;
            // GINE's messages add edge rows to the input's own.
            ConvKind::Propagate | ConvKind::Sign { .. } | ConvKind::Gine { .. } => false,
            ConvKind::Gcn | ConvKind::Sage | ConvKind::Gin { .. } => self.out_dim < self.in_dim,
        }
    }

    /// The rest of GIN's MLP after its first product `z`, given the parameters from its first
    /// bias on (`mlp.0.bias`, `mlp.1.weight`, `mlp.1.bias`, then with `norm` the
    /// normalisation's scale and shift): `z + b0`, normalised with `norm`, ReLU, times `W1`.
    /// Returns the product and the bias `b1` still to add.
    fn gin_mlp_rest<'p>(
        tape: &mut Tape,
        z: &Var,
        p: &'p [Var],
        norm: bool,
        input: &LayerInput,
    ) -> Result<(Var, &'p Var)> {
        let z = if norm {
            let z = ops::add_bias(tape, z, &p[0])?;
            let z = ops::batch_norm(
                tape,
                &z,
                &p[3],
                &p[4],
                crate::BATCH_NORM_EPS,
                input.stats_sum.clone(),
            )?;
            ops::activate(tape, &z, Activation::Relu)?
        } else {
            ops::bias_activation(tape, z, &p[0], Activation::Relu)?
        };
        Ok((ops::matmul(tape, &z, &p[1])?, &p[2]))
    }

    /// `h` activated and with the output dropout applied, for a layer whose last step added
    /// its bias already or has none.
    fn activate_without_bias(tape: &mut Tape, h: Var, input: LayerInput) -> Result<Var> {
        let h = ops::activate(tape, &h, input.activation)?;
        Ok(match input.output_dropout {
            Some(d) => ops::dropout(tape, &h, d.rule, d.row_ids)?,
            None => h,
        })
    }

    /// `X W`, from the sparse input when there is one.
    fn project(&self, tape: &mut Tape, x: &Var, w: &Var, input: &LayerInput) -> Result<Var> {
        match &input.sparse {
            Some((sparse, dropout)) => sparse.matmul(tape, w, *dropout),
            None => Ok(ops::matmul(tape, x, w)?),
        }
    }

    /// `A X W` for a linear aggregation `A`, in the order of fewer operations: `A (X W)` when
    /// the layer narrows, `(A X) W` otherwise, except on a sampled block, whose aggregation
    /// outputs only its destinations: projecting all of its sources first then costs more than
    /// aggregating wider rows, unless the block is nearly square. In the second order it
    /// returns `A X`, whose product with `W` the caller takes, alone or with another.
    fn aggregate_linear(
        &self,
        tape: &mut Tape,
        agg: &Arc<dyn LinearAggregation>,
        x: &Var,
        w: &Var,
        input: &LayerInput,
    ) -> Result<Linear> {
        let project_first = match agg.block_shape() {
            // A sparse input is read only through its product with a weight.
            Some(_) if input.sparse.is_some() => true,
            Some(block) => {
                let (i, o) = (self.in_dim as f64, self.out_dim as f64);
                let (rows, kept, edges) = (
                    x.value().dims2().0 as f64,
                    block.output_rows as f64,
                    block.edges as f64,
                );
                rows * i * o + edges * o < edges * i + kept * i * o
            }
            None => self.projects_first(),
        };
        if project_first {
            // The aggregation returns only the kept rows.
            let xw = self.project(tape, x, w, input)?;
            Ok(Linear::Product(agg.apply(tape, &xw)?))
        } else {
            Ok(Linear::Aggregated(agg.apply(tape, x)?))
        }
    }
}

/// What [`ConvLayer::aggregate_linear`] computed of `A X W`.
enum Linear {
    /// All of it, `A (X W)`.
    Product(Var),
    /// `A X`, still to be multiplied by `W`.
    Aggregated(Var),
}

impl Linear {
    /// `A X W`, given `W`.
    fn product(self, tape: &mut Tape, w: &Var) -> Result<Var> {
        match self {
            Linear::Product(h) => Ok(h),
            Linear::Aggregated(ax) => Ok(ops::matmul(tape, &ax, w)?),
        }
    }
}
