//! Splitting a graph into parts for distributed full-batch training: METIS on the symmetric,
//! loop-free graph, balancing nodes and training nodes; parts relabelled to contiguous id
//! ranges; and the figures that say what the split costs (edge cut, halo volume per part).

use crate::{Csr, Error, NodeId, Result};

/// METIS counts vertices and adjacency entries in 32-bit signed integers.
const METIS_MAX: usize = i32::MAX as usize;

/// The part of every node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// `part[v]` for each node `v`, in `0..parts`.
    pub part: Vec<u32>,
    /// The number of parts.
    pub parts: usize,
}

/// Partitions `graph` into `parts` with METIS k-way, on the symmetric loop-free version of the
/// graph, balancing both the node count and the `train` count of the parts (two constraints).
/// Graphs beyond METIS's 32-bit range are refused with a clear error.
pub fn metis(graph: &Csr, train: &[usize], parts: usize, seed: u64) -> Result<Partition> {
    let n = graph.num_nodes();
    if parts == 0 || parts > n.max(1) {
        return Err(Error::argument(
            "partition",
            format!("cannot cut {n} nodes into {parts} parts"),
        ));
    }
    if parts == 1 {
        return Ok(Partition {
            part: vec![0; n],
            parts,
        });
    }
    let sym = graph.to_undirected_simple();
    if n > METIS_MAX || sym.num_edges() > METIS_MAX {
        return Err(Error::argument(
            "partition",
            format!(
                "METIS indexes with 32-bit integers: this graph has {n} nodes and {} adjacency \
                 entries (both ways), above {METIS_MAX}",
                sym.num_edges()
            ),
        ));
    }
    let xadj: Vec<metis::Idx> = sym.row_ptr.iter().map(|&o| o as metis::Idx).collect();
    let adjncy: Vec<metis::Idx> = sym.col_idx.iter().map(|&u| u as metis::Idx).collect();
    let mut is_train = vec![0 as metis::Idx; n];
    for &t in train {
        is_train[t] = 1;
    }
    // Two constraints per node: one for the node itself, one more if it is a training node.
    let vwgt: Vec<metis::Idx> = (0..n).flat_map(|v| [1, is_train[v]]).collect();
    let ncon = if train.is_empty() { 1 } else { 2 };
    let vwgt = if ncon == 1 { vec![1; n] } else { vwgt };
    let mut part = vec![0 as metis::Idx; n];
    metis::Graph::new(ncon, parts as metis::Idx, &xadj, &adjncy)
        .map_err(|e| Error::argument("partition", format!("METIS refused the graph: {e}")))?
        .set_vwgt(&vwgt)
        .set_option(metis::option::Seed(seed as metis::Idx))
        .part_kway(&mut part)
        .map_err(|e| Error::argument("partition", format!("METIS failed: {e}")))?;
    Ok(Partition {
        part: part.into_iter().map(|p| p as u32).collect(),
        parts,
    })
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

impl Partition {
    /// The new id of every node: the nodes of part 0 first, then part 1, each in original
    /// order, so every part holds a contiguous range.
    pub fn relabel(&self) -> (Vec<NodeId>, Vec<usize>) {
        let mut offsets = vec![0usize; self.parts + 1];
        for &p in &self.part {
            offsets[p as usize + 1] += 1;
        }
        for q in 0..self.parts {
            offsets[q + 1] += offsets[q];
        }
        let mut next = offsets.clone();
        let new_id = self
            .part
            .iter()
            .map(|&p| {
                let id = next[p as usize];
                next[p as usize] += 1;
                id as NodeId
            })
            .collect();
        (new_id, offsets)
    }

    /// The edge cut and halo sizes of this partition of `graph`.
    pub fn report(&self, graph: &Csr, train: &[usize]) -> PartitionReport {
        let mut nodes = vec![0; self.parts];
        for &p in &self.part {
            nodes[p as usize] += 1;
        }
        let mut train_nodes = vec![0; self.parts];
        for &t in train {
            train_nodes[self.part[t] as usize] += 1;
        }
        let mut edge_cut = 0;
        let mut seen = vec![u32::MAX; graph.num_nodes()];
        let mut halo = vec![0; self.parts];
        // Visit destinations part by part, so `seen[u] == p` marks u as counted for part p.
        let mut by_part: Vec<usize> = (0..graph.num_nodes()).collect();
        by_part.sort_by_key(|&v| self.part[v]);
        for v in by_part {
            let p = self.part[v];
            for &u in graph.in_neighbors(v) {
                if self.part[u as usize] != p {
                    edge_cut += 1;
                    if seen[u as usize] != p {
                        seen[u as usize] = p;
                        halo[p as usize] += 1;
                    }
                }
            }
        }
        PartitionReport {
            nodes,
            train_nodes,
            edge_cut,
            halo,
        }
    }
}
