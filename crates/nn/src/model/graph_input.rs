//! The graph a forward pass runs over, given with each pass so that a [`crate::Model`] holds
//! only its parameters and layer kinds: [`GraphInput::Nodes`] (every input row a node, every
//! layer outputs every row: the whole graph in memory, an induced subgraph, or a worker's part
//! of a graph spread over a job) or [`GraphInput::Blocks`] (one sampled block per layer).

use std::sync::Arc;

use graphloom_graph::format::edge_features::gather_edge_rows;
use graphloom_graph::sample::Block;
use graphloom_graph::Csr;
use graphloom_tensor::autodiff::ops::StatsSum;
use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::{DType, Tensor};

use super::config::Architecture;
use crate::kernels::aggregate::{GcnNorm, LinearAggregation};
use crate::kernels::gat::Attention;
use crate::kernels::gatv2::FusedGatV2;
use crate::kernels::sparse::SparseFeatures;
use crate::layers::{Aggregation, LayerOperators};
use crate::{GraphView, Result};

/// The graph value of one forward pass.
#[derive(Clone, Copy)]
pub enum GraphInput<'a> {
    /// Every input row is a node of the graph, and every layer outputs every row.
    Nodes(&'a NodeGraph),
    /// Sampled blocks, one per layer run, from the input rows (the first block's sources)
    /// to the last block's destinations.
    Blocks(&'a [LayerGraph]),
}

/// A graph whose nodes are the rows of a layer's input: its operators (built over a graph in
/// memory, or supplied, such as ones spread over the workers of a job), the node id of each
/// row (so dropout draws each node's own mask wherever it is held), how batch normalisation
/// sums its statistics over the workers holding the other rows, and optionally a sparse copy
/// of the input rows that the first layer's product reads instead of the dense ones.
#[derive(Clone, Default)]
pub struct NodeGraph {
    aggregation: Option<Arc<dyn LinearAggregation>>,
    attention: Option<Arc<dyn Attention>>,
    dynamic_attention: Option<Arc<FusedGatV2>>,
    edges: Option<Arc<GraphView>>,
    row_ids: Option<Arc<[i64]>>,
    stats_sum: Option<StatsSum>,
    sparse_input: Option<Arc<SparseFeatures>>,
}

impl NodeGraph {
    /// The operators a model of `arch` needs over `graph` (row `i` is node `i`): its linear
    /// aggregation (GCN's normalisation, the mean or the sum: [`Architecture::aggregation`]),
    /// weighted by `edge_weight` (one per edge, in `col_idx` order) when given, or GAT's
    /// attention over the graph with one self-loop per
    /// node (which ignores edge weights, as PyG's `GATConv` does). `edge_features` (a row per
    /// edge, in `col_idx` order) are what GINE's messages add; other families ignore them.
    /// Charged to [`Category::Graph`].
    pub fn in_memory(
        arch: Architecture,
        graph: &Csr,
        edge_weight: Option<Arc<[f32]>>,
        edge_features: Option<Arc<Tensor>>,
    ) -> Result<NodeGraph> {
        let _g = category_scope(Category::Graph);
        let aggregation = arch.aggregation();
        let edge_features = edge_features.filter(|_| arch.reads_edge_features());
        let ops = if aggregation.needs_self_loops() {
            let looped = Arc::new(GraphView::looped(graph, edge_features.as_deref())?);
            LayerOperators::in_memory(Some(aggregation), None, Some(&looped), None, None)?
        } else {
            let mut view = GraphView::new(graph, false);
            if let Some(w) = edge_weight {
                view = view.with_edge_weight(w)?;
            }
            if let Some(f) = edge_features {
                view = view.with_edge_features(f)?;
            }
            LayerOperators::in_memory(Some(aggregation), Some(&Arc::new(view)), None, None, None)?
        };
        Ok(NodeGraph {
            aggregation: ops.aggregation,
            attention: ops.attention,
            dynamic_attention: ops.dynamic_attention,
            edges: ops.edges,
            ..NodeGraph::default()
        })
    }

    /// A graph whose operators are given: `aggregation` for the families that aggregate
    /// linearly (the one [`Architecture::aggregation`] names), `attention` for GAT.
    pub fn with_operators(
        aggregation: Arc<dyn LinearAggregation>,
        attention: Arc<dyn Attention>,
    ) -> NodeGraph {
        NodeGraph {
            aggregation: Some(aggregation),
            attention: Some(attention),
            ..NodeGraph::default()
        }
    }

    /// The same graph whose rows are the nodes `ids` (a subset of a larger graph's nodes),
    /// so that dropout keys each row by its node id.
    pub fn with_row_ids(mut self, ids: Arc<[i64]>) -> NodeGraph {
        self.row_ids = Some(ids);
        self
    }

    /// The same graph whose batch normalisation sums its statistics with `sum` (an
    /// all-reduce over the workers that each hold some of the rows).
    pub fn with_stats_sum(mut self, sum: StatsSum) -> NodeGraph {
        self.stats_sum = Some(sum);
        self
    }

    /// The same graph whose first layer reads `sparse` (a sparse copy of the input rows, from
    /// [`crate::Model::sparse_input`]) for its products with a weight.
    pub fn with_sparse_input(mut self, sparse: Option<Arc<SparseFeatures>>) -> NodeGraph {
        self.sparse_input = sparse;
        self
    }

    /// The node id of each row, when the rows are not the nodes `0..n` in order.
    pub fn row_ids(&self) -> Option<&Arc<[i64]>> {
        self.row_ids.as_ref()
    }

    pub(crate) fn operators(&self) -> LayerOperators {
        LayerOperators {
            aggregation: self.aggregation.clone(),
            attention: self.attention.clone(),
            dynamic_attention: self.dynamic_attention.clone(),
            edges: self.edges.clone(),
            keep_rows: None,
        }
    }

    pub(crate) fn stats_sum(&self) -> Option<&StatsSum> {
        self.stats_sum.as_ref()
    }

    pub(crate) fn sparse_input(&self) -> Option<&Arc<SparseFeatures>> {
        self.sparse_input.as_ref()
    }
}

/// The graph of one layer of a sampled batch: a block as a square graph over its sources
/// (only the first `num_dst` rows have in-edges), and with self-loops for GAT and GATv2.
#[derive(Clone)]
pub struct LayerGraph {
    /// The block.
    pub view: Arc<GraphView>,
    /// The block with one self-loop per node (GAT and GATv2 only).
    pub looped: Option<Arc<GraphView>>,
    /// How many rows of the layer's output are the block's destinations.
    pub num_dst: usize,
    /// The original node id of each input row, so dropout draws the same mask for a node
    /// whichever batch, worker or position holds it.
    pub src_ids: Arc<[i64]>,
    /// GCN's normalisation of each input row: sampled training's
    /// ([`crate::kernels::aggregate::GcnNorm::of_sampled`]) or the whole graph's (`None`: the
    /// block's own degrees).
    pub gcn_norm: Option<Arc<GcnNorm>>,
}

impl LayerGraph {
    /// The layer graph of `block` for a model of `arch`: with the self-looped copy for
    /// attention, and for GINE and GATv2 with its edges' rows of `edge_features` (the whole
    /// graph's, `[num_edges, edge_dim]`), gathered by the block's edge ids as `dtype`.
    pub fn new(
        block: &Block,
        arch: Architecture,
        edge_features: Option<&Tensor>,
        dtype: DType,
    ) -> Result<LayerGraph> {
        let csr = block.to_csr();
        let rows = match edge_features.filter(|_| arch.reads_edge_features()) {
            Some(all) => Some(gather_edge_rows(all, &block.edge_ids, dtype)?),
            None => None,
        };
        let looped = match arch.aggregation().needs_self_loops() {
            true => Some(Arc::new(GraphView::looped(&csr, rows.as_ref())?)),
            false => None,
        };
        let mut view = GraphView::new(&csr, false);
        if let Some(rows) = rows {
            view = view.with_edge_features(Arc::new(rows))?;
        }
        Ok(LayerGraph {
            view: Arc::new(view),
            looped,
            num_dst: block.num_dst,
            src_ids: block.src_nodes.iter().map(|&v| i64::from(v)).collect(),
            gcn_norm: None,
        })
    }

    /// The operators of a layer reading `aggregation` of this block.
    pub(crate) fn operators(&self, aggregation: Option<Aggregation>) -> Result<LayerOperators> {
        LayerOperators::in_memory(
            aggregation,
            Some(&self.view),
            self.looped.as_ref(),
            Some(self.num_dst),
            self.gcn_norm.as_deref(),
        )
    }
}
