//! Groups of closely linked nodes for the streaming partitioner to place whole: size-bounded
//! label propagation (the clustering multilevel partitioners such as KaMinPar coarsen with),
//! over the CSR in node order, in 12 bytes a node (16 while the groups are listed).
//!
//! A node placed alone sees only the neighbours placed before it, so a community met in
//! random id order is scattered before any part knows it; placed as a group, it lands in one.

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
/// its neighbours are in, if that group holds fewer than `largest` nodes. `progress` is told
/// each pass's nodes done.
pub(crate) fn group(
    data: &GraphData<'_>,
    largest: u32,
    passes: usize,
    progress: &dyn Fn(usize, u64, u64),
) -> Groups {
    let n = data.num_nodes();
    // Every node starts alone: its group is named by its own id.
    let mut label: Vec<u32> = (0..n as u32).collect();
    let mut size = vec![1u32; n];
    let mut links = vec![0u32; n];
    let mut touched: Vec<u32> = Vec::new();
    for pass in 0..passes {
        let mut moved = 0usize;
        for v in 0..n {
            if v % (1 << 20) == 0 {
                progress(pass, v as u64, n as u64);
            }
            let own = label[v];
            touched.clear();
            for &u in data.in_neighbors(v as NodeId) {
                if u as usize == v {
                    continue;
                }
                let g = label[u as usize];
                if links[g as usize] == 0 {
                    touched.push(g);
                }
                links[g as usize] += 1;
            }
            let mut best = own;
            for &g in &touched {
                let more = links[g as usize] > links[best as usize]
                    || (links[g as usize] == links[best as usize]
                        && best != own
                        && size[g as usize] < size[best as usize]);
                if g != own && more && size[g as usize] < largest {
                    best = g;
                }
            }
            for &g in &touched {
                links[g as usize] = 0;
            }
            if best != own {
                size[own as usize] -= 1;
                size[best as usize] += 1;
                label[v] = best;
                moved += 1;
            }
        }
        progress(pass, n as u64, n as u64);
        if moved < n / 1000 {
            break;
        }
    }
    drop(links);
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
