//! Subgraph mini-batches, the batchings of Cluster-GCN and GraphSAINT: a batch is a set of
//! nodes and the subgraph it induces (every edge of the graph whose two ends are in the set),
//! on which a model runs as on a small whole graph.
//!
//! - [`clusters`]: METIS clusters of the graph, kept beside the dataset and reused, or read
//!   from a partitioned directory; a batch is the union of a few of them (Cluster-GCN).
//! - [`saint`]: GraphSAINT's node, edge and random-walk samplers and the normalisation they
//!   estimate by sampling ahead (`node_norm`, `edge_norm`).
//! - [`NodeSet`] and [`InducedSubgraph`]: a batch's members (a slot per node of the graph, made
//!   once and reset after each batch) and the subgraph they induce, CSR by destination over
//!   the batch's own ids, with the graph's edge id of each of its edges.

pub mod batching;
pub mod clusters;
pub mod saint;

use rayon::prelude::*;

use crate::{Csr, GraphData, NodeId};

/// The slot of a node that is not in the batch.
const ABSENT: u32 = u32::MAX;

/// Nodes per parallel task when a subgraph is induced.
const NODES_PER_TASK: usize = 512;

/// A slot per node of a graph, giving each member of a batch its position in the batch: made
/// once per graph, filled for a batch by [`NodeSet::members`] and reset when the batch's
/// [`Members`] are dropped (touching only the batch's slots).
#[derive(Debug)]
pub struct NodeSet {
    slot: Vec<u32>,
}

impl NodeSet {
    /// The table of a graph of `num_nodes` nodes.
    pub fn new(num_nodes: usize) -> NodeSet {
        NodeSet {
            slot: vec![ABSENT; num_nodes],
        }
    }

    /// The batch of `nodes` (distinct node ids of the graph, each below the table's size):
    /// node `nodes[i]` gets position `i`.
    pub fn members<'a>(&'a mut self, nodes: &'a [NodeId]) -> Members<'a> {
        for (i, &v) in nodes.iter().enumerate() {
            self.slot[v as usize] = i as u32;
        }
        Members { set: self, nodes }
    }
}

/// The members of one batch, looked up in a [`NodeSet`]; the table is reset on drop.
pub struct Members<'a> {
    set: &'a mut NodeSet,
    nodes: &'a [NodeId],
}

impl Members<'_> {
    /// The position of node `v` in the batch, if it is a member.
    #[inline]
    pub fn position(&self, v: NodeId) -> Option<u32> {
        let p = self.set.slot[v as usize];
        (p != ABSENT).then_some(p)
    }

    /// The members, in batch order.
    pub fn nodes(&self) -> &[NodeId] {
        self.nodes
    }

    /// The subgraph the members induce in `data`: every in-edge of a member whose source is a
    /// member, in the graph's order.
    pub fn induced(&self, data: GraphData<'_>) -> InducedSubgraph {
        let slot = &self.set.slot;
        // Each task collects its rows' edges; the pieces are joined in order.
        let pieces: Vec<(Vec<i64>, Vec<NodeId>, Vec<i64>)> = self
            .nodes
            .par_chunks(NODES_PER_TASK)
            .map(|chunk| {
                let (mut ends, mut col, mut ids) =
                    (Vec::with_capacity(chunk.len()), vec![], vec![]);
                for &v in chunk {
                    let (lo, hi) = (
                        data.row_ptr[v as usize] as usize,
                        data.row_ptr[v as usize + 1] as usize,
                    );
                    for (e, &u) in data.col_idx[lo..hi].iter().enumerate() {
                        let p = slot[u as usize];
                        if p != ABSENT {
                            col.push(p);
                            ids.push((lo + e) as i64);
                        }
                    }
                    ends.push(col.len() as i64);
                }
                (ends, col, ids)
            })
            .collect();
        let edges = pieces.iter().map(|p| p.1.len()).sum();
        let mut row_ptr = Vec::with_capacity(self.nodes.len() + 1);
        row_ptr.push(0);
        let (mut col_idx, mut edge_ids) = (Vec::with_capacity(edges), Vec::with_capacity(edges));
        for (ends, col, ids) in pieces {
            let base = col_idx.len() as i64;
            row_ptr.extend(ends.into_iter().map(|e| e + base));
            col_idx.extend(col);
            edge_ids.extend(ids);
        }
        InducedSubgraph {
            nodes: self.nodes.to_vec(),
            csr: Csr { row_ptr, col_idx },
            edge_ids,
        }
    }
}

impl Drop for Members<'_> {
    fn drop(&mut self) {
        for &v in self.nodes {
            self.set.slot[v as usize] = ABSENT;
        }
    }
}

/// The subgraph a set of nodes induces: CSR by destination over the batch's positions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InducedSubgraph {
    /// The node id of each position.
    pub nodes: Vec<NodeId>,
    /// The induced edges, by destination, over positions.
    pub csr: Csr,
    /// The graph's edge id (position in its `col_idx`) of each induced edge.
    pub edge_ids: Vec<i64>,
}

/// A fast 64-bit digest of `words`, for telling whether a graph changed since a file derived
/// from it was written (not a cryptographic hash).
pub(crate) fn digest(state: u64, words: impl Iterator<Item = u64>) -> u64 {
    words.fold(state, graphloom_tensor::rng::combine)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::random_dataset;

    #[test]
    fn the_induced_subgraph_holds_exactly_the_edges_between_members() {
        let ds = random_dataset(300, 7, 3);
        let data = ds.data();
        let nodes: Vec<NodeId> = (0..300).filter(|v| v % 3 != 1).collect();
        let mut set = NodeSet::new(300);
        let sub = set.members(&nodes).induced(data);
        // The reference: every edge of the graph, kept when both ends are members.
        let inside = |v: NodeId| v % 3 != 1;
        let mut want = Vec::new();
        for v in 0..300u32 {
            for (e, &u) in data.in_neighbors(v).iter().enumerate() {
                if inside(u) && inside(v) {
                    want.push((u, v, data.row_ptr[v as usize] + e as i64));
                }
            }
        }
        let mut got = Vec::new();
        for (p, &v) in sub.nodes.iter().enumerate() {
            for i in sub.csr.row_ptr[p] as usize..sub.csr.row_ptr[p + 1] as usize {
                got.push((sub.nodes[sub.csr.col_idx[i] as usize], v, sub.edge_ids[i]));
            }
        }
        assert_eq!(got, want);
        assert!(sub.csr.check().is_ok());
        // The table is reset for the next batch.
        assert!(set.slot.iter().all(|&s| s == ABSENT));
    }
}
