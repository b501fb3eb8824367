//! What a model is made of: its family ([`Architecture`]), its sizes and rates
//! ([`ModelConfig`]) and the family's defaults ([`ArchDefaults`]).

use graphloom_tensor::autodiff::ops::Probability;
use graphloom_tensor::DType;

use super::head::Head;
use crate::layers::{ConvKind, ConvLayer};

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
    /// The convolution of layer `l` of `layers` in a model of this family with `heads` heads
    /// per hidden layer and `out_heads` in the output layer (GAT concatenates a hidden
    /// layer's heads and averages the output layer's).
    pub fn conv_kind(self, l: usize, layers: usize, heads: usize, out_heads: usize) -> ConvKind {
        let last = l + 1 == layers;
        match self {
            Architecture::Gcn => ConvKind::Gcn,
            Architecture::Sage => ConvKind::Sage,
            Architecture::Gat if last => ConvKind::Gat {
                heads: out_heads.max(1),
                concat: false,
            },
            Architecture::Gat => ConvKind::Gat {
                heads: heads.max(1),
                concat: true,
            },
        }
    }

    /// The family's defaults: GCN 16 wide with dropout 0.5 at learning rate 0.01 (Kipf and
    /// Welling), GraphSAGE 64 wide (PyG's example), GAT 8 wide per head with 8 heads, dropout
    /// 0.6 and learning rate 0.005 (Velickovic et al.).
    pub fn defaults(self) -> ArchDefaults {
        let (hidden, heads, dropout, lr) = match self {
            Architecture::Gcn => (16, 1, 0.5, 0.01),
            Architecture::Sage => (64, 1, 0.5, 0.01),
            Architecture::Gat => (8, 8, 0.6, 0.005),
        };
        ArchDefaults {
            hidden,
            heads,
            dropout: Probability::new(dropout).expect("a default is a probability"),
            lr,
        }
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
    pub dropout: Probability,
    /// Dropout on the input features, before the first convolution.
    pub input_dropout: Probability,
    /// GAT: dropout on the attention coefficients.
    pub attention_dropout: Probability,
    /// The dtype activations are computed and stored in (parameters stay f32, or f64 for f64).
    pub dtype: DType,
    /// Recompute each layer's internals in the backward pass instead of keeping them.
    pub checkpoint: bool,
    /// Batch normalisation after every hidden convolution, before its activation, with the
    /// statistics of every node (of every worker: see [`Model::set_batch_norm_sum`]).
    pub batch_norm: bool,
    /// What the last layer's output is for: class scores (`out_dim` classes), or node
    /// embeddings of `out_dim` whose pairs a decoder scores.
    pub head: Head,
}

impl ModelConfig {
    /// The layers: kinds and widths.
    pub(crate) fn conv_layers(&self) -> Vec<ConvLayer> {
        let mut width = self.in_dim;
        (0..self.layers)
            .map(|l| {
                let last = l + 1 == self.layers;
                let layer = ConvLayer {
                    kind: self
                        .arch
                        .conv_kind(l, self.layers, self.heads, self.out_heads),
                    in_dim: width,
                    out_dim: if last { self.out_dim } else { self.hidden },
                };
                width = layer.output_width();
                layer
            })
            .collect()
    }

    /// A model of `arch` with its family's defaults ([`Architecture::defaults`]): 2 layers,
    /// computing in f32. `in_dim` and `out_dim` are 0: set them to the data's widths.
    pub fn of(arch: Architecture) -> ModelConfig {
        let d = arch.defaults();
        ModelConfig {
            arch,
            in_dim: 0,
            hidden: d.hidden,
            out_dim: 0,
            layers: 2,
            heads: d.heads,
            out_heads: 1,
            dropout: d.dropout,
            input_dropout: d.dropout,
            attention_dropout: if arch == Architecture::Gat {
                d.dropout
            } else {
                Probability::ZERO
            },
            dtype: DType::F32,
            checkpoint: false,
            batch_norm: false,
            head: Head::NodeClasses,
        }
    }

    /// The input and output width of each convolution, from the input layer on (a GAT
    /// layer's output is its heads' width together).
    pub fn layer_widths(&self) -> Vec<(usize, usize)> {
        self.conv_layers()
            .iter()
            .map(|l| (l.in_dim, l.output_width()))
            .collect()
    }
}

impl Default for ModelConfig {
    /// A 2-layer GCN of hidden width 16 with dropout 0.5 (Kipf and Welling's), computing in
    /// f32. `in_dim` and `out_dim` are 0: set them to the data's widths.
    fn default() -> ModelConfig {
        ModelConfig::of(Architecture::Gcn)
    }
}

/// What a model family trains with unless told otherwise, as its paper and PyG's examples
/// train it: the one table of per-model defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArchDefaults {
    /// Hidden width (per head for GAT).
    pub hidden: usize,
    /// Heads of the hidden layers (GAT).
    pub heads: usize,
    /// Dropout before every layer, on the input too, and on GAT's attention.
    pub dropout: Probability,
    /// The learning rate.
    pub lr: f64,
}
