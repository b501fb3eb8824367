//! [`Block`]s (message-flow graphs) and the append-unique relabelling that builds them.

use graphloom_tensor::prefetch::prefetch_at;

use crate::NodeId;

/// One layer's message-flow graph: the sampled in-edges of its destination nodes, CSR by
/// destination, over local ids.
///
/// `src_nodes[..num_dst]` are the destination nodes themselves, in order (seeds first), so a
/// layer reads a destination's own features at the same local index; the rest are the new
/// neighbours in order of first appearance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// How many of `src_nodes` are destinations.
    pub num_dst: usize,
    /// Original node ids of the block's sources (destinations first).
    pub src_nodes: Vec<NodeId>,
    /// `num_dst + 1` offsets into `col_idx`.
    pub row_ptr: Vec<i64>,
    /// Local source index (into `src_nodes`) of each edge.
    pub col_idx: Vec<u32>,
    /// Original edge id (the position in the graph's `col_idx`) of each edge.
    pub edge_ids: Vec<i64>,
}

impl Block {
    /// The number of sampled edges.
    pub fn num_edges(&self) -> usize {
        self.col_idx.len()
    }

    /// Original ids of the destination nodes.
    pub fn dst_nodes(&self) -> &[NodeId] {
        &self.src_nodes[..self.num_dst]
    }

    /// Drops the edges `u -> v` (original ids) for which `keep(u, v)` is false, keeping every
    /// node: a link-prediction batch hides its own supervision edges from its blocks so.
    pub fn retain_edges(&mut self, keep: impl Fn(NodeId, NodeId) -> bool) {
        let (mut row_ptr, mut col_idx, mut edge_ids) = (vec![0i64], Vec::new(), Vec::new());
        for r in 0..self.num_dst {
            let v = self.src_nodes[r];
            for e in self.row_ptr[r] as usize..self.row_ptr[r + 1] as usize {
                let local = self.col_idx[e];
                if keep(self.src_nodes[local as usize], v) {
                    col_idx.push(local);
                    edge_ids.push(self.edge_ids[e]);
                }
            }
            row_ptr.push(col_idx.len() as i64);
        }
        (self.row_ptr, self.col_idx, self.edge_ids) = (row_ptr, col_idx, edge_ids);
    }

    /// The block as a square CSR over its source nodes, in which only the first `num_dst`
    /// rows have edges: the shape the message-passing layers take. The extra rows are empty,
    /// so a layer computes them as nodes without in-edges and the caller keeps the first
    /// `num_dst` rows.
    pub fn to_csr(&self) -> crate::Csr {
        let mut row_ptr = self.row_ptr.clone();
        let last = *row_ptr.last().expect("row_ptr has num_dst + 1 entries");
        row_ptr.resize(self.src_nodes.len() + 1, last);
        crate::Csr {
            row_ptr,
            col_idx: self.col_idx.clone(),
        }
    }
}

/// Maps original node ids to local ids in order of first appearance, with a dense table the
/// size of the graph that is reset after each use (touching only what was set).
#[derive(Debug)]
pub struct Relabeler {
    local: Vec<u32>,
    nodes: Vec<NodeId>,
}

const UNSET: u32 = u32::MAX;

/// How many nodes ahead [`Relabeler::insert_all`] prefetches a node's slot.
const INSERT_PREFETCH: usize = 32;

impl Relabeler {
    /// A relabeler for a graph of `num_nodes` nodes.
    pub fn new(num_nodes: usize) -> Relabeler {
        Relabeler {
            local: vec![UNSET; num_nodes],
            nodes: Vec::new(),
        }
    }

    /// The local id of `node`, appending it when new.
    #[inline]
    pub fn insert(&mut self, node: NodeId) -> u32 {
        let slot = &mut self.local[node as usize];
        if *slot == UNSET {
            *slot = self.nodes.len() as u32;
            self.nodes.push(node);
        }
        *slot
    }

    /// The local ids of `nodes`, appending the new ones in order.
    ///
    /// Whether a node is new is not a branch: in a sampled hop about half the neighbours are
    /// seen for the first time, in no order a predictor can learn. Each node is appended and
    /// its slot written unconditionally, and the append is kept only when the node was new.
    pub fn insert_all(&mut self, nodes: &[NodeId]) -> Vec<u32> {
        // Room for every node to be new, so that appending never reallocates in the loop.
        self.nodes.reserve(nodes.len());
        let mut local_ids = Vec::with_capacity(nodes.len());
        for (i, &node) in nodes.iter().enumerate() {
            // The table is as large as the graph, and the nodes are scattered over it.
            if let Some(&ahead) = nodes.get(i + INSERT_PREFETCH) {
                prefetch_at(&self.local, ahead as usize);
            }
            let seen = self.nodes.len();
            self.nodes.push(node);
            let slot = &mut self.local[node as usize];
            let new = *slot == UNSET;
            *slot = std::hint::select_unpredictable(new, seen as u32, *slot);
            self.nodes.truncate(seen + usize::from(new));
            local_ids.push(*slot);
        }
        local_ids
    }

    /// The number of nodes of the graph whose ids it relabels.
    pub fn graph_size(&self) -> usize {
        self.local.len()
    }

    /// The nodes seen so far, in order.
    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }

    /// Forgets every node and returns them in order.
    pub fn finish(&mut self) -> Vec<NodeId> {
        for &n in &self.nodes {
            self.local[n as usize] = UNSET;
        }
        std::mem::take(&mut self.nodes)
    }
}
