//! Groups of closely linked nodes for the streaming partitioner to place whole: size-bounded
//! label propagation (the clustering multilevel partitioners such as KaMinPar coarsen with),
//! over the CSR in node order, in 8 bytes a node (16 while the groups are listed).
//!
//! A node placed alone sees only the neighbours placed before it, so a community met in
//! random id order is scattered before any part knows it; placed as a group, it lands in one.

use rayon::prelude::*;

use super::stream::filled;
use crate::format::mapped::GraphData;
use crate::NodeId;

/// The groups of a graph: the nodes of each, groups in order of their first node.
pub(crate) struct Groups {
    /// `count + 1` offsets into `members`.
    pub(crate) offsets: Vec<u32>,
    /// The nodes of group 0, then of group 1, and so on, each group in increasing order.
    pub(crate) members: Vec<NodeId>,
    /// The group of every node.
    pub(crate) group_of: Vec<u32>,
}

impl Groups {
    /// The nodes of group `g`.
    pub(crate) fn members(&self, g: usize) -> &[NodeId] {
        &self.members[self.offsets[g] as usize..self.offsets[g + 1] as usize]
    }

    /// The number of groups.
    pub(crate) fn count(&self) -> usize {
        self.offsets.len() - 1
    }
}

/// Groups `data`'s nodes by `passes` of label propagation: each node joins the group most of
/// its neighbours are in, if that group holds fewer than `largest` nodes; `block` nodes at a
/// time choose in parallel from the state before them. `progress` is told each pass's nodes
/// done.
pub(crate) fn group(
    data: &GraphData<'_>,
    largest: u32,
    passes: usize,
    block: usize,
    progress: &dyn Fn(usize, u64, u64),
) -> Groups {
    let n = data.num_nodes();
    // Every node starts alone: its group is named by its own id.
    let mut label: Vec<u32> = graphloom_tensor::alloc::with_capacity(n);
    label.extend(0..n as u32);
    let mut size = filled(n, 1u32);
    let mut wanted: Vec<u32> = Vec::with_capacity(block);
    let mut scratch = Vec::new();
    for pass in 0..passes {
        let mut moved = 0usize;
        for start in (0..n).step_by(block) {
            let end = (start + block).min(n);
            if start % (1 << 20) < block {
                progress(pass, start as u64, n as u64);
            }
            wanted.clear();
            if block > 1 {
                let (label, size) = (&label, &size);
                (start..end)
                    .into_par_iter()
                    .map_init(Vec::new, |scratch, v| {
                        best_group(data, v, label, size, largest, scratch)
                    })
                    .collect_into_vec(&mut wanted);
            } else {
                wanted.push(best_group(
                    data,
                    start,
                    &label,
                    &size,
                    largest,
                    &mut scratch,
                ));
            }
            for (v, &to) in (start..end).zip(&wanted) {
                let own = label[v];
                // A move chosen from the block's state that no longer fits is not made.
                if to != own && size[to as usize] < largest {
                    size[own as usize] -= 1;
                    size[to as usize] += 1;
                    label[v] = to;
                    moved += 1;
                }
            }
        }
        progress(pass, n as u64, n as u64);
        if moved < n / 1000 {
            break;
        }
    }
    // Groups in order of their first node, by a counting sort of the labels.
    let mut index = size;
    index.fill(u32::MAX);
    let mut count = 0u32;
    for &g in &label {
        if index[g as usize] == u32::MAX {
            index[g as usize] = count;
            count += 1;
        }
    }
    let mut offsets = vec![0u32; count as usize + 1];
    for g in label.iter_mut() {
        *g = index[*g as usize];
        offsets[*g as usize + 1] += 1;
    }
    drop(index);
    for i in 0..count as usize {
        offsets[i + 1] += offsets[i];
    }
    let mut next = offsets.clone();
    let mut members = vec![0 as NodeId; n];
    for (v, &g) in label.iter().enumerate() {
        members[next[g as usize] as usize] = v as NodeId;
        next[g as usize] += 1;
    }
    Groups {
        offsets,
        members,
        group_of: label,
    }
}

/// The group node `v` would join: the one most of its neighbours are in if that has more of
/// them than its own and room for it (ties to the smaller group), else its own. The neighbours'
/// groups are counted by sorting them in `scratch`.
fn best_group(
    data: &GraphData<'_>,
    v: usize,
    label: &[u32],
    size: &[u32],
    largest: u32,
    scratch: &mut Vec<u32>,
) -> u32 {
    scratch.clear();
    scratch.extend(
        data.in_neighbors(v as NodeId)
            .iter()
            .filter(|&&u| u as usize != v)
            .map(|&u| label[u as usize]),
    );
    scratch.sort_unstable();
    let own = label[v];
    let mut best = own;
    let mut best_links = scratch.iter().filter(|&&g| g == own).count();
    for run in scratch.chunk_by(|a, b| a == b) {
        let (g, links) = (run[0], run.len());
        let more = links > best_links
            || (links == best_links && best != own && size[g as usize] < size[best as usize]);
        if g != own && more && size[g as usize] < largest {
            best = g;
            best_links = links;
        }
    }
    best
}
