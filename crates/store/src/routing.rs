//! Grouping row ids by the rank that owns them, the first step of every Distributed scatter
//! and gradient update. (A Distributed gather groups only the ids other ranks own, in the same
//! pass that finds the sources of its own rows.)

use crate::layout::RowPartition;

/// Positions of a list of ids, grouped by owner: `order[starts[r]..starts[r + 1]]` are the
/// positions (in the caller's list) of the ids rank `r` owns, in their original order.
pub(crate) struct Buckets {
    pub(crate) order: Vec<usize>,
    pub(crate) starts: Vec<usize>,
}

impl Buckets {
    /// Buckets `ids` (already checked to be in range) by owner with a counting sort, which
    /// keeps the original order within each owner.
    pub(crate) fn by_owner(partition: &RowPartition, ids: &[i64]) -> Buckets {
        let ranks = partition.ranks();
        let owners: Vec<u32> = ids
            .iter()
            .map(|&id| partition.owner(id as usize) as u32)
            .collect();
        let mut starts = vec![0usize; ranks + 1];
        for &o in &owners {
            starts[o as usize + 1] += 1;
        }
        for r in 0..ranks {
            starts[r + 1] += starts[r];
        }
        let mut next = starts.clone();
        let mut order = vec![0usize; ids.len()];
        for (pos, &o) in owners.iter().enumerate() {
            order[next[o as usize]] = pos;
            next[o as usize] += 1;
        }
        Buckets { order, starts }
    }

    /// The positions of the ids owned by `rank`.
    pub(crate) fn of(&self, rank: usize) -> &[usize] {
        &self.order[self.starts[rank]..self.starts[rank + 1]]
    }

    /// For every owner, the values `f(position)` of its ids, in order.
    pub(crate) fn collect<T>(&self, mut f: impl FnMut(usize) -> T) -> Vec<Vec<T>> {
        (0..self.starts.len() - 1)
            .map(|r| self.of(r).iter().map(|&p| f(p)).collect())
            .collect()
    }
}
