//! What a model is made of: its family ([`Architecture`]), its sizes and rates
//! ([`ModelConfig`]) and the family's defaults ([`ArchDefaults`]).

use graphloom_tensor::autodiff::ops::{Activation, Probability};
use graphloom_tensor::DType;

use super::head::Head;
use crate::layers::{Aggregation, ConvKind, ConvLayer};

/// The model family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    /// Graph convolutional network.
    Gcn,
    /// GraphSAGE with mean aggregation.
    Sage,
    /// Graph attention network.
    Gat,
    /// GATv2: dynamic attention, the score `att . LeakyReLU(W_l x_u + W_r x_v)`.
    GatV2,
    /// Graph isomorphism network: the sum of the neighbours and `(1 + eps)` times the node,
    /// through a two-layer MLP, with `eps` learnt.
    Gin,
    /// GINE: GIN whose messages are `ReLU(x_u + W_e e_uv + b_e)`, with the edges' features
    /// (`edge_feat.npy`).
    Gine,
    /// Simplified graph convolution: `layers` hops of GCN's normalised adjacency, then one
    /// linear layer (no activation between).
    Sgc,
    /// APPNP: an MLP, then `hops` steps of personalised PageRank with teleport `teleport`
    /// over GCN's normalised adjacency.
    Appnp,
    /// SIGN: an MLP over propagations computed once (`prepare propagate`), the features'
    /// `hops + 1` column blocks `[X | A X | ... ]` each through a linear layer of its own,
    /// side by side, then linear layers; it reads no graph.
    Sign,
}

/// How many propagation steps APPNP takes by default (K, as in its paper and PyG's example).
pub const APPNP_HOPS: usize = 10;
/// APPNP's default teleport probability (alpha, as in its paper and PyG's example).
pub const APPNP_TELEPORT: f64 = 0.1;

impl Architecture {
    /// Every family, in the order front ends list them.
    pub const ALL: &'static [Architecture] = &[
        Architecture::Gcn,
        Architecture::Sage,
        Architecture::Gat,
        Architecture::GatV2,
        Architecture::Gin,
        Architecture::Gine,
        Architecture::Sgc,
        Architecture::Appnp,
        Architecture::Sign,
    ];

    /// Parses `gcn`, `sage` (or `graphsage`), `gat`, `gatv2`, `gin`, `gine`, `sgc`, `appnp` or
    /// `sign`.
    pub fn parse(name: &str) -> Option<Architecture> {
        Some(match name {
            "gcn" => Architecture::Gcn,
            "sage" | "graphsage" => Architecture::Sage,
            "gat" => Architecture::Gat,
            "gatv2" => Architecture::GatV2,
            "gin" => Architecture::Gin,
            "gine" => Architecture::Gine,
            "sgc" => Architecture::Sgc,
            "appnp" => Architecture::Appnp,
            "sign" => Architecture::Sign,
            _ => return None,
        })
    }
    /// What the family's graph layers read of the graph: the one aggregation every layer
    /// of a model of this family that reads the graph uses (each layer's kind says it too,
    /// [`ConvKind::aggregation`]; a test keeps the two in agreement).
    pub fn aggregation(self) -> Aggregation {
        match self {
            // SIGN's layers read no graph: GCN's stands for it where a graph is made anyway.
            Architecture::Gcn | Architecture::Sgc | Architecture::Appnp | Architecture::Sign => {
                Aggregation::Gcn
            }
            Architecture::Sage => Aggregation::Mean,
            Architecture::Gin => Aggregation::Sum,
            Architecture::Gine => Aggregation::EdgeSum,
            Architecture::Gat => Aggregation::Attention,
            Architecture::GatV2 => Aggregation::DynamicAttention,
        }
    }

    /// Whether the family's layers read the edges' features: GINE always, GATv2 when the
    /// dataset has them (its scores add them, PyG's `edge_dim`).
    pub fn reads_edge_features(self) -> bool {
        matches!(self, Architecture::Gine | Architecture::GatV2)
    }

    /// Whether the family's layers have attention heads (GAT and GATv2).
    pub fn has_heads(self) -> bool {
        matches!(self, Architecture::Gat | Architecture::GatV2)
    }

    /// The activation after each hidden layer: ELU for GAT and GATv2 (as their papers), none
    /// between SGC's hops, ReLU otherwise.
    pub fn hidden_activation(self) -> Activation {
        match self {
            Architecture::Gat | Architecture::GatV2 => Activation::Elu(1.0),
            Architecture::Sgc => Activation::Identity,
            _ => Activation::Relu,
        }
    }

    /// The family's defaults: GCN 16 wide with dropout 0.5 at learning rate 0.01 (Kipf and
    /// Welling), GraphSAGE 64 wide (PyG's example), GAT 8 wide per head with 8 heads, dropout
    /// 0.6 and learning rate 0.005 (Velickovic et al.; GATv2 as GAT, as Brody et al. and PyG's
    /// example train it), GIN 64 wide with dropout 0.8 (its
    /// sums grow with the degree: on Cora, dropout 0.5 gave 74.9% and 0.8 77.4% over 10
    /// seeds; GINE as GIN), SGC without dropout at learning rate 0.2 and weight decay 5e-5 (Wu et al.'s
    /// tuned scale for row-normalised features; PyG's example's 0.005 gave 77-79% on Cora; its
    /// hidden width is unused), APPNP's MLP 64 wide with dropout 0.5 (Gasteiger et al., PyG's
    /// example), SIGN 64 wide per block with dropout 0.8 (on Cora propagated 4 hops by GCN's
    /// operator, 82.6% over 10 seeds); weight decay 5e-4 otherwise.
    pub fn defaults(self) -> ArchDefaults {
        let (hidden, heads, dropout, lr, weight_decay) = match self {
            Architecture::Gcn => (16, 1, 0.5, 0.01, 5e-4),
            Architecture::Sage => (64, 1, 0.5, 0.01, 5e-4),
            Architecture::Gat | Architecture::GatV2 => (8, 8, 0.6, 0.005, 5e-4),
            Architecture::Gin | Architecture::Gine => (64, 1, 0.8, 0.01, 5e-4),
            Architecture::Sgc => (16, 1, 0.0, 0.2, 5e-5),
            Architecture::Appnp => (64, 1, 0.5, 0.01, 5e-4),
            Architecture::Sign => (64, 1, 0.8, 0.01, 5e-4),
        };
        ArchDefaults {
            hidden,
            heads,
            dropout: Probability::new(dropout).expect("a default is a probability"),
            lr,
            weight_decay,
        }
    }

    /// The lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Gcn => "gcn",
            Architecture::Sage => "sage",
            Architecture::Gat => "gat",
            Architecture::GatV2 => "gatv2",
            Architecture::Gin => "gin",
            Architecture::Gine => "gine",
            Architecture::Sgc => "sgc",
            Architecture::Appnp => "appnp",
            Architecture::Sign => "sign",
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
    /// Hidden width (per head for GAT and GATv2; unused by SGC, whose hops keep the input's).
    pub hidden: usize,
    /// Number of classes.
    pub out_dim: usize,
    /// Number of convolutions (at least 1; SGC's hops, APPNP's linear layers).
    pub layers: usize,
    /// GAT and GATv2: heads of the hidden layers (concatenated).
    pub heads: usize,
    /// GAT and GATv2: heads of the output layer (averaged).
    pub out_heads: usize,
    /// GINE and GATv2: the width of the edge features (0: none; always for other families).
    pub edge_dim: usize,
    /// APPNP: propagation steps of its last layer (K).
    pub hops: usize,
    /// APPNP: the teleport probability back to the MLP's output at each step (alpha).
    pub teleport: f64,
    /// Dropout before every convolution.
    pub dropout: Probability,
    /// Dropout on the input features, before the first convolution.
    pub input_dropout: Probability,
    /// GAT and GATv2: dropout on the attention coefficients.
    pub attention_dropout: Probability,
    /// The dtype activations are computed and stored in (parameters stay f32, or f64 for f64).
    pub dtype: DType,
    /// Recompute each layer's internals in the backward pass instead of keeping them.
    pub checkpoint: bool,
    /// Batch normalisation after every hidden convolution, before its activation, with the
    /// statistics of every node (of every worker: see [`Model::set_batch_norm_sum`]); for GIN
    /// and GINE also inside every layer's MLP (as PyG's `GIN(norm="batch_norm")`).
    pub batch_norm: bool,
    /// What the last layer's output is for: class scores (`out_dim` classes), or node
    /// embeddings of `out_dim` whose pairs a decoder scores.
    pub head: Head,
}

impl ModelConfig {
    /// The convolution of layer `l`: GAT and GATv2 concatenate a hidden layer's heads and
    /// average the output layer's; SGC's layers before the last only propagate; APPNP's
    /// layers before the last are its MLP's.
    pub fn conv_kind(&self, l: usize) -> ConvKind {
        let last = l + 1 == self.layers;
        match self.arch {
            Architecture::Gcn => ConvKind::Gcn,
            Architecture::Sage => ConvKind::Sage,
            Architecture::Gin => ConvKind::Gin {
                norm: self.batch_norm,
            },
            Architecture::Gine => ConvKind::Gine {
                edge_dim: self.edge_dim,
                norm: self.batch_norm,
            },
            Architecture::Gat if last => ConvKind::Gat {
                heads: self.out_heads.max(1),
                concat: false,
            },
            Architecture::Gat => ConvKind::Gat {
                heads: self.heads.max(1),
                concat: true,
            },
            Architecture::GatV2 => ConvKind::GatV2 {
                heads: if last { self.out_heads } else { self.heads }.max(1),
                concat: !last,
                edge_dim: self.edge_dim,
            },
            Architecture::Sgc if last => ConvKind::Gcn,
            Architecture::Sgc => ConvKind::Propagate,
            Architecture::Appnp if last => ConvKind::Appnp {
                hops: self.hops,
                teleport: self.teleport,
            },
            Architecture::Appnp => ConvKind::Linear,
            Architecture::Sign if l == 0 => ConvKind::Sign {
                blocks: self.hops + 1,
            },
            Architecture::Sign => ConvKind::Linear,
        }
    }

    /// The layers: kinds and widths.
    pub(crate) fn conv_layers(&self) -> Vec<ConvLayer> {
        let mut width = self.in_dim;
        (0..self.layers)
            .map(|l| {
                let last = l + 1 == self.layers;
                let kind = self.conv_kind(l);
                let layer = ConvLayer {
                    kind,
                    in_dim: width,
                    out_dim: match (last, kind) {
                        (true, _) => self.out_dim,
                        // SGC's hops keep the input's width.
                        (false, ConvKind::Propagate) => width,
                        (false, _) => self.hidden,
                    },
                };
                width = layer.output_width();
                layer
            })
            .collect()
    }

    /// A model of `arch` with its family's defaults ([`Architecture::defaults`]): 2 layers,
    /// computing in f32. `in_dim`, `out_dim` and `edge_dim` are 0: set them to the data's
    /// widths.
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
            edge_dim: 0,
            hops: APPNP_HOPS,
            teleport: APPNP_TELEPORT,
            dropout: d.dropout,
            input_dropout: d.dropout,
            attention_dropout: if arch.has_heads() {
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
    /// The weight decay of a node classifier.
    pub weight_decay: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layer_of_a_family_reads_the_family_s_aggregation() {
        for &arch in Architecture::ALL {
            for layers in 1..4 {
                let cfg = ModelConfig {
                    layers,
                    ..ModelConfig::of(arch)
                };
                let read: Vec<_> = (0..layers)
                    .filter_map(|l| cfg.conv_kind(l).aggregation())
                    .collect();
                // SIGN alone reads no graph: its propagations were computed before.
                assert_eq!(
                    read.is_empty(),
                    arch == Architecture::Sign,
                    "{arch:?} of {layers} layers"
                );
                assert!(
                    read.iter().all(|&a| a == arch.aggregation()),
                    "{arch:?}: {read:?}"
                );
            }
        }
    }
}
