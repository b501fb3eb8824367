//! What a layer is: which convolution ([`ConvKind`]) and what it reads of the graph
//! ([`Aggregation`]); how each computes is [`super::conv`]'s.

/// What a layer reads of the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aggregation {
    /// GCN's normalised adjacency with self-loops, `D^-1/2 (A + I) D^-1/2`.
    Gcn,
    /// The mean over in-neighbours.
    Mean,
    /// The sum over in-neighbours.
    Sum,
    /// GINE's sum over in-edges of `ReLU(x_u + e_uv)`, with the edges' features.
    EdgeSum,
    /// GAT's attention over the graph with self-loops.
    Attention,
    /// GATv2's dynamic attention over the graph with self-loops.
    DynamicAttention,
}

impl Aggregation {
    /// Whether the aggregation runs over the graph with one self-loop per node (attention's).
    pub fn needs_self_loops(self) -> bool {
        matches!(self, Aggregation::Attention | Aggregation::DynamicAttention)
    }
}

/// Which convolution a layer is.
#[derive(Clone, Copy, Debug, PartialEq)]
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
    /// GATv2Conv with `heads` heads, concatenated or averaged.
    GatV2 {
        /// Number of attention heads.
        heads: usize,
        /// Concatenate the heads (true) or average them (false).
        concat: bool,
        /// Width of the edge features its scores add (0: none).
        edge_dim: usize,
    },
    /// GINConv with a learnt `eps` and a two-layer MLP.
    Gin {
        /// Batch normalisation inside the MLP, after its first linear layer.
        norm: bool,
    },
    /// GINEConv: GIN whose messages add each edge's features, mapped from `edge_dim` columns
    /// to the input's width.
    Gine {
        /// Width of the edge features.
        edge_dim: usize,
        /// Batch normalisation inside the MLP, as GIN's.
        norm: bool,
    },
    /// A hop of GCN's normalised adjacency, with no parameters (SGC's hops before its last).
    Propagate,
    /// A linear layer, reading no graph (APPNP's MLP).
    Linear,
    /// SIGN's first layer: the input's `blocks` column blocks (the features and their
    /// propagated hops) each through a linear map of its own, the outputs side by side
    /// (`blocks` times the layer's width); it reads no graph.
    Sign {
        /// Column blocks of the input.
        blocks: usize,
    },
    /// A linear layer followed by APPNP's propagation.
    Appnp {
        /// Propagation steps (K).
        hops: usize,
        /// The teleport probability (alpha).
        teleport: f64,
    },
}

impl ConvKind {
    /// What a layer of this kind reads of the graph (`None`: nothing).
    pub fn aggregation(self) -> Option<Aggregation> {
        Some(match self {
            ConvKind::Gcn | ConvKind::Propagate | ConvKind::Appnp { .. } => Aggregation::Gcn,
            ConvKind::Sage => Aggregation::Mean,
            ConvKind::Gin { .. } => Aggregation::Sum,
            ConvKind::Gine { .. } => Aggregation::EdgeSum,
            ConvKind::Gat { .. } => Aggregation::Attention,
            ConvKind::GatV2 { .. } => Aggregation::DynamicAttention,
            ConvKind::Linear | ConvKind::Sign { .. } => return None,
        })
    }

    /// Whether a layer of this kind propagates over its own hops (APPNP's), which a sampled
    /// block, one hop a layer, cannot give.
    pub fn propagates_hops(self) -> bool {
        matches!(self, ConvKind::Appnp { .. })
    }
}
