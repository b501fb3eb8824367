//! METIS k-way on the symmetric, loop-free graph, balancing nodes and training nodes, and what
//! it would cost in memory.

use super::{check_parts, Partition};
use crate::{Csr, Error, Result};

/// METIS counts vertices and adjacency entries in 32-bit signed integers.
pub const METIS_MAX: usize = i32::MAX as usize;

/// Partitions `graph` into `parts` with METIS k-way, on the symmetric loop-free version of the
/// graph, balancing both the node count and the `train` count of the parts (two constraints).
/// Graphs beyond METIS's 32-bit range are refused with a clear error.
pub fn metis(graph: &Csr, train: &[usize], parts: usize, seed: u64) -> Result<Partition> {
    let n = graph.num_nodes();
    check_parts(n, parts)?;
    if parts == 1 {
        return Ok(Partition::single(n));
    }
    let sym = graph.to_undirected_simple();
    if n > METIS_MAX || sym.num_edges() > METIS_MAX {
        return Err(Error::argument(
            "partition",
            format!(
                "METIS indexes with 32-bit integers: this graph has {n} nodes and {} adjacency \
                 entries (both ways), above {METIS_MAX}; --method stream splits it",
                sym.num_edges()
            ),
        ));
    }
    let xadj: Vec<metis::Idx> = sym.row_ptr.iter().map(|&o| o as metis::Idx).collect();
    let adjncy: Vec<metis::Idx> = sym.col_idx.iter().map(|&u| u as metis::Idx).collect();
    drop(sym);
    let mut is_train = vec![0 as metis::Idx; n];
    for &t in train {
        is_train[t] = 1;
    }
    // Two constraints per node: one for the node itself, one more if it is a training node.
    let ncon = if train.is_empty() { 1 } else { 2 };
    let vwgt: Vec<metis::Idx> = if ncon == 1 {
        vec![1; n]
    } else {
        (0..n).flat_map(|v| [1, is_train[v]]).collect()
    };
    let part = kway(&xadj, &adjncy, None, &vwgt, ncon, parts, seed)?;
    Ok(Partition { part, parts })
}

/// METIS k-way on a symmetric graph in METIS's arrays: `vwgt` holds `ncon` weights a vertex,
/// `adjwgt` (when given) a weight an adjacency entry. Returns the part of every vertex.
pub(crate) fn kway(
    xadj: &[metis::Idx],
    adjncy: &[metis::Idx],
    adjwgt: Option<&[metis::Idx]>,
    vwgt: &[metis::Idx],
    ncon: usize,
    parts: usize,
    seed: u64,
) -> Result<Vec<u32>> {
    let mut part = vec![0 as metis::Idx; xadj.len() - 1];
    let graph = metis::Graph::new(ncon as metis::Idx, parts as metis::Idx, xadj, adjncy)
        .map_err(|e| Error::argument("partition", format!("METIS refused the graph: {e}")))?
        .set_vwgt(vwgt)
        .set_option(metis::option::Seed(seed as metis::Idx));
    match adjwgt {
        Some(w) => graph.set_adjwgt(w).part_kway(&mut part),
        None => graph.part_kway(&mut part),
    }
    .map_err(|e| Error::argument("partition", format!("METIS failed: {e}")))?;
    Ok(part.into_iter().map(|p| p as u32).collect())
}

/// Whether METIS's 32-bit indices can hold a graph of `nodes` nodes and `entries` CSR entries
/// (its symmetric version has at most twice as many).
pub fn metis_can_index(nodes: usize, entries: usize) -> bool {
    nodes <= METIS_MAX && entries.saturating_mul(2) <= METIS_MAX
}

/// The anonymous memory [`metis`] takes at its peak, in bytes, for a graph of `nodes` nodes and
/// `entries` CSR entries, on the safe side: the symmetric copy is built from an edge list of
/// twice the entries (two 4-byte ids each, then sorted into a CSR), its 32-bit copies are handed
/// to METIS, whose coarsening holds about four more graphs of that size.
pub fn metis_memory_bytes(nodes: usize, entries: usize) -> u64 {
    let (n, m) = (nodes as u64, 2 * entries as u64);
    let edge_list = 2 * 4 * m + 8 * n + 4 * m;
    let metis_arrays = 4 * (n + m) + 3 * 4 * n;
    edge_list.max(metis_arrays + 4 * (4 * n + 4 * m)) + 16 * n
}
