//! The three convolutions, following PyTorch Geometric's definitions and initialisation.
//!
//! - GCNConv (Kipf & Welling, <https://arxiv.org/abs/1609.02907>):
//!   `X' = D^-1/2 (A + I) D^-1/2 X W + b`. Weight Glorot, bias 0.
//! - SAGEConv, mean (Hamilton et al., <https://arxiv.org/abs/1706.02216>):
//!   `x'_v = W_l mean_{u in N(v)} x_u + b + W_r x_v`. Weights and bias `U(+-1/sqrt(F_in))`.
//! - GATConv (Velickovic et al., <https://arxiv.org/abs/1710.10903>): `h = X W` split in heads,
//!   `x'_v = ||_k sum_u alpha^k_uv h^k_u` (or the mean over heads), `alpha` the softmax over
//!   `v`'s in-edges and a self-loop of `LeakyReLU_0.2(a_src^k . h^k_u + a_dst^k . h^k_v)`, with
//!   dropout on `alpha`. `W`, `a_src`, `a_dst` Glorot, bias 0.
//!
//! Shapes: `[N, F_in] -> [N, F_out]` (GAT with concatenation: `[N, heads * F_out]`).

use std::sync::Arc;

use graphloom_tensor::autodiff::ops::{self, Activation, Dropout, OutputDropout};
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{DType, Tape, Tensor, Var};

use super::init::{glorot, kaiming_uniform};
use crate::kernels::aggregate::{GcnNorm, LinearAggregation, WeightedSum};
use crate::kernels::gat::{Attention, FusedGat};
use crate::kernels::heads::{head_scores, mean_heads};
use crate::kernels::sparse::SparseFeatures;
use crate::{GraphView, Result};

/// Which convolution a layer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvKind {
    /// GCNConv.
    Gcn,
    /// SAGEConv with mean aggregation and a root weight.
    Sage,
    /// GATConv with `heads` heads, concatenated or averaged.
    Gat {
        /// Number of attention heads.
        heads: usize,
        /// Concatenate the heads (true) or average them (false).
        concat: bool,
    },
}

/// One convolution: its kind, widths and the graph operators it needs.
#[derive(Clone)]
pub struct ConvLayer {
    /// The kind.
    pub kind: ConvKind,
    /// Input width.
    pub in_dim: usize,
    /// Output width per head.
    pub out_dim: usize,
    /// GCN's normalised adjacency, or SAGE's mean.
    aggregation: Option<Arc<dyn LinearAggregation>>,
    /// GAT's attention kernel (graph with self-loops).
    attention: Option<Arc<dyn Attention>>,
    /// For a sampled block: only the first rows (the block's destinations) are outputs, so
    /// the layer drops the others right after aggregating, before any dense product.
    keep_rows: Option<usize>,
}

/// The aggregation of a GCN or GraphSAGE layer over `graph`, computing the first `rows` outputs
/// only when given.
fn local_aggregation(
    kind: ConvKind,
    graph: &Arc<GraphView>,
    rows: Option<usize>,
    gcn_norm: Option<&GcnNorm>,
) -> Arc<dyn LinearAggregation> {
    let sum = match (kind, gcn_norm) {
        (ConvKind::Gcn, Some(norm)) => WeightedSum::gcn_with(graph.clone(), norm),
        (ConvKind::Gcn, None) => WeightedSum::gcn(graph.clone()),
        _ => WeightedSum::mean(graph.clone()),
    };
    Arc::new(match rows {
        Some(n) => sum.with_output_rows(n),
        None => sum,
    })
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
}

impl ConvLayer {
    /// A layer over `graph` (and, for GAT, `graph_with_loops`).
    pub fn new(
        kind: ConvKind,
        in_dim: usize,
        out_dim: usize,
        graph: &Arc<GraphView>,
        graph_with_loops: Option<&Arc<GraphView>>,
    ) -> ConvLayer {
        let (aggregation, attention) = match kind {
            ConvKind::Gcn | ConvKind::Sage => {
                (Some(local_aggregation(kind, graph, None, None)), None)
            }
            ConvKind::Gat { heads, .. } => (
                None,
                Some(Arc::new(FusedGat {
                    graph: graph_with_loops
                        .expect("GAT layers need the graph with self-loops")
                        .clone(),
                    heads,
                    negative_slope: GAT_NEGATIVE_SLOPE,
                    attention_dropout: None,
                }) as Arc<dyn Attention>),
            ),
        };
        ConvLayer {
            kind,
            in_dim,
            out_dim,
            aggregation,
            attention,
            keep_rows: None,
        }
    }

    /// The same layer (kind and widths, so the same parameters) over a sampled block given as
    /// a square graph over its sources: its output is the first `num_dst` rows. GCN
    /// normalises by the block's degrees, as DGL's `GraphConv` on blocks does, unless
    /// `gcn_norm` gives each source's normalisation in the whole graph.
    pub fn on_block(
        &self,
        graph: &Arc<GraphView>,
        graph_with_loops: Option<&Arc<GraphView>>,
        num_dst: usize,
        gcn_norm: Option<&GcnNorm>,
    ) -> ConvLayer {
        let mut layer = ConvLayer::new(
            self.kind,
            self.in_dim,
            self.out_dim,
            graph,
            graph_with_loops,
        );
        layer.keep_rows = Some(num_dst);
        // Aggregations compute only the kept rows themselves.
        if layer.aggregation.is_some() {
            layer.aggregation = Some(local_aggregation(self.kind, graph, Some(num_dst), gcn_norm));
        }
        layer
    }

    /// A layer whose graph operators are given (ones spread over workers, say) rather than
    /// built over a graph in memory: GCN and GraphSAGE use `aggregation` (which must be GCN's
    /// normalisation or the mean), GAT uses `attention`.
    pub fn with_operators(
        kind: ConvKind,
        in_dim: usize,
        out_dim: usize,
        aggregation: Arc<dyn LinearAggregation>,
        attention: Arc<dyn Attention>,
    ) -> ConvLayer {
        let gat = matches!(kind, ConvKind::Gat { .. });
        ConvLayer {
            kind,
            in_dim,
            out_dim,
            aggregation: (!gat).then_some(aggregation),
            attention: gat.then_some(attention),
            keep_rows: None,
        }
    }

    /// The rows this layer outputs: all, or a block's destinations.
    fn kept(&self, tape: &mut Tape, h: &Var) -> Result<Var> {
        match self.keep_rows {
            Some(n) => Ok(ops::leading_rows(tape, h, n)?),
            None => Ok(h.clone()),
        }
    }

    /// Width of the output.
    pub fn output_width(&self) -> usize {
        match self.kind {
            ConvKind::Gat {
                heads,
                concat: true,
            } => heads * self.out_dim,
            _ => self.out_dim,
        }
    }

    /// Names and initial values of the parameters, in the order [`ConvLayer::forward`] takes.
    pub fn init_params(&self, key: RngKey, dtype: DType) -> Result<Vec<(String, Tensor)>> {
        let (i, o) = (self.in_dim, self.out_dim);
        Ok(match self.kind {
            ConvKind::Gcn => vec![
                (
                    "weight".into(),
                    glorot(&[i, o], i, o, key.derive(0), dtype)?,
                ),
                ("bias".into(), Tensor::zeros(&[o], dtype)),
            ],
            ConvKind::Sage => vec![
                (
                    "lin_l.weight".into(),
                    kaiming_uniform(&[i, o], i, key.derive(0), dtype)?,
                ),
                (
                    "lin_l.bias".into(),
                    kaiming_uniform(&[o], i, key.derive(1), dtype)?,
                ),
                (
                    "lin_r.weight".into(),
                    kaiming_uniform(&[i, o], i, key.derive(2), dtype)?,
                ),
            ],
            ConvKind::Gat { heads, concat } => vec![
                (
                    "lin.weight".into(),
                    glorot(&[i, heads * o], i, heads * o, key.derive(0), dtype)?,
                ),
                (
                    "att_src".into(),
                    glorot(&[heads * o], heads, o, key.derive(1), dtype)?,
                ),
                (
                    "att_dst".into(),
                    glorot(&[heads * o], heads, o, key.derive(2), dtype)?,
                ),
                (
                    "bias".into(),
                    Tensor::zeros(&[if concat { heads * o } else { o }], dtype),
                ),
            ],
        })
    }

    /// The layer's activated output for input `x` and parameters `p` (already in the compute
    /// dtype), with `input.output_dropout` applied when there is one.
    pub fn forward(&self, tape: &mut Tape, x: &Var, p: &[Var], input: LayerInput) -> Result<Var> {
        // The sum before the bias, and the bias.
        let (h, bias) = match self.kind {
            ConvKind::Gcn => {
                let agg = self.aggregation.as_ref().expect("GCN has an aggregation");
                let h = self.aggregate_linear(tape, agg, x, &p[0], &input)?;
                (h, &p[1])
            }
            ConvKind::Sage => {
                let agg = self.aggregation.as_ref().expect("SAGE has an aggregation");
                let neigh = self.aggregate_linear(tape, agg, x, &p[0], &input)?;
                let h = if input.sparse.is_some() {
                    let root = self.project(tape, x, &p[2], &input)?;
                    ops::add(tape, &neigh, &root)?
                } else {
                    let x_dst = self.kept(tape, x)?;
                    ops::add_matmul(tape, &neigh, &x_dst, &p[2])?
                };
                (h, &p[1])
            }
            ConvKind::Gat { heads, concat } => {
                let gat = self
                    .attention
                    .as_ref()
                    .expect("GAT has an attention kernel");
                let h = self.project(tape, x, &p[0], &input)?;
                let el = head_scores(tape, &h, &p[1], heads)?;
                let er = head_scores(tape, &h, &p[2], heads)?;
                let out = gat.apply(tape, &h, &el, &er, input.attention_dropout)?;
                let out = self.kept(tape, &out)?;
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
    /// sparse input can be used: GAT always, GCN and SAGE when they narrow.
    pub fn projects_first(&self) -> bool {
        matches!(self.kind, ConvKind::Gat { .. }) || self.out_dim < self.in_dim
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
    /// aggregating wider rows, unless the block is nearly square.
    fn aggregate_linear(
        &self,
        tape: &mut Tape,
        agg: &Arc<dyn LinearAggregation>,
        x: &Var,
        w: &Var,
        input: &LayerInput,
    ) -> Result<Var> {
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
            agg.apply(tape, &xw)
        } else {
            let ax = agg.apply(tape, x)?;
            Ok(ops::matmul(tape, &ax, w)?)
        }
    }
}
