//! Splitting a graph into parts for distributed full-batch training: METIS for the graphs its
//! 32-bit indices and memory can take ([`metis`]), a streaming partitioner in bounded memory
//! for the others ([`stream`]); parts relabelled to contiguous id ranges ([`Layout`]); and the
//! figures that say what a split costs (edge cut, halo volume per part).

mod coarse;
mod groups;
mod metis;
mod stream;

pub use self::metis::{metis, metis_can_index, metis_memory_bytes, METIS_MAX};
pub use self::stream::{
    stream, BalanceOn, PassFigures, StreamProgress, StreamSettings, BLOCKS_FROM,
};

use crate::format::mapped::GraphData;
use crate::{Error, NodeId, Result};

/// The part of every node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// `part[v]` for each node `v`, in `0..parts`.
    pub part: Vec<u32>,
    /// The number of parts.
    pub parts: usize,
}

/// What a partition costs: edges between parts and the rows each part must receive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionReport {
    /// Nodes per part.
    pub nodes: Vec<usize>,
    /// Training nodes per part.
    pub train_nodes: Vec<usize>,
    /// Edges (of the directed graph) whose endpoints lie in different parts.
    pub edge_cut: usize,
    /// For each part, the distinct remote source nodes of its in-edges: the rows it receives
    /// in one full exchange of a layer.
    pub halo: Vec<usize>,
}

/// Refuses a part count no graph of `nodes` nodes can be cut into.
pub(crate) fn check_parts(nodes: usize, parts: usize) -> Result<()> {
    if parts == 0 || parts > nodes.max(1) {
        return Err(Error::argument(
            "partition",
            format!("cannot cut {nodes} nodes into {parts} parts"),
        ));
    }
    Ok(())
}

/// The new ids of a partition: the nodes of part 0 first, then part 1, each in original order,
/// so every part holds a contiguous range.
pub struct Layout {
    /// The new id of every node.
    pub new_id: Vec<NodeId>,
    /// Part `p` holds new ids `offsets[p]..offsets[p + 1]`.
    pub offsets: Vec<usize>,
    /// The original id of every new id.
    pub order: Vec<NodeId>,
}

impl Layout {
    /// The original ids of part `p`'s nodes, in increasing order.
    pub fn members(&self, p: usize) -> &[NodeId] {
        &self.order[self.offsets[p]..self.offsets[p + 1]]
    }

    /// The id of node `v` within its part `q`.
    pub fn local(&self, v: usize, q: usize) -> u32 {
        self.new_id[v] - self.offsets[q] as NodeId
    }
}

impl Partition {
    /// Every node in one part.
    pub fn single(nodes: usize) -> Partition {
        Partition {
            part: vec![0; nodes],
            parts: 1,
        }
    }

    /// The contiguous relabelling of this partition.
    pub fn layout(&self) -> Layout {
        let mut offsets = vec![0usize; self.parts + 1];
        for &p in &self.part {
            offsets[p as usize + 1] += 1;
        }
        for q in 0..self.parts {
            offsets[q + 1] += offsets[q];
        }
        let mut next = offsets.clone();
        let mut order = vec![0 as NodeId; self.part.len()];
        let new_id = self
            .part
            .iter()
            .enumerate()
            .map(|(v, &p)| {
                let id = next[p as usize];
                next[p as usize] += 1;
                order[id] = v as NodeId;
                id as NodeId
            })
            .collect();
        Layout {
            new_id,
            offsets,
            order,
        }
    }

    /// The edge cut and halo sizes of this partition of `data`'s graph.
    pub fn report(&self, data: &GraphData<'_>) -> PartitionReport {
        let layout = self.layout();
        let mut marks = SourceMarks::new(data.num_nodes());
        let mut report = PartitionReport::sizes(self, &layout, data.train_idx);
        for p in 0..self.parts {
            report.add_part(p, marks.mark(data, self, p, layout.members(p)));
        }
        report
    }
}

impl PartitionReport {
    /// The nodes and training nodes of each part of `partition` (laid out as `layout`); the
    /// cut and halos are added a part at a time ([`PartitionReport::add_part`]).
    pub(crate) fn sizes(partition: &Partition, layout: &Layout, train: &[usize]) -> Self {
        let mut train_nodes = vec![0; partition.parts];
        for &t in train {
            train_nodes[partition.part[t] as usize] += 1;
        }
        PartitionReport {
            nodes: (0..partition.parts)
                .map(|p| layout.members(p).len())
                .collect(),
            train_nodes,
            edge_cut: 0,
            halo: vec![0; partition.parts],
        }
    }

    /// Adds part `p`'s cut in-edges and halo rows, as [`SourceMarks::mark`] counts them.
    pub(crate) fn add_part(&mut self, p: usize, (cut, halo): (usize, usize)) {
        self.edge_cut += cut;
        self.halo[p] = halo;
    }
}

/// The distinct in-neighbours of one part's nodes at a time: a stamp per node, so marking a
/// part costs its edges and no clearing.
pub(crate) struct SourceMarks {
    stamp: Vec<u32>,
    current: u32,
}

impl SourceMarks {
    pub(crate) fn new(nodes: usize) -> SourceMarks {
        SourceMarks {
            stamp: vec![u32::MAX; nodes],
            current: u32::MAX,
        }
    }

    /// Marks the in-neighbours of `members` (the nodes of part `p`), forgetting the previous
    /// part's; returns the in-edges from other parts and the distinct nodes they come from.
    pub(crate) fn mark(
        &mut self,
        data: &GraphData<'_>,
        partition: &Partition,
        p: usize,
        members: &[NodeId],
    ) -> (usize, usize) {
        self.current = p as u32;
        let (mut cut, mut halo) = (0, 0);
        for &v in members {
            for &u in data.in_neighbors(v) {
                let remote = partition.part[u as usize] as usize != p;
                cut += usize::from(remote);
                if self.stamp[u as usize] != self.current {
                    self.stamp[u as usize] = self.current;
                    halo += usize::from(remote);
                }
            }
        }
        (cut, halo)
    }

    /// Whether node `u` is an in-neighbour of the part marked last.
    pub(crate) fn is_marked(&self, u: usize) -> bool {
        self.stamp[u] == self.current
    }
}
