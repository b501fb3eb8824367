//! Grouping row ids by the rank that owns them, the first step of every Distributed gather,
//! scatter and gradient update.

use graphloom_tensor::alloc;

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
    ///
    /// The working buffers come from the reuse cache of large buffers and go back to it: a
    /// scatter of a million ids would otherwise page-fault 12 MB of fresh memory, which cost
    /// more than the sort.
    pub(crate) fn by_owner(partition: &RowPartition, ids: &[i64]) -> Buckets {
        let ranks = partition.ranks();
        let mut owners: Vec<u32> = alloc::with_capacity(ids.len());
        owners.extend(ids.iter().map(|&id| partition.owner(id as usize) as u32));
        let mut starts = vec![0usize; ranks + 1];
        for &o in &owners {
            starts[o as usize + 1] += 1;
        }
        for r in 0..ranks {
            starts[r + 1] += starts[r];
        }
        let mut next = starts.clone();
        let mut order: Vec<usize> = alloc::with_capacity(ids.len());
        let slots = &mut order.spare_capacity_mut()[..ids.len()];
        for (pos, &o) in owners.iter().enumerate() {
            slots[next[o as usize]].write(pos);
            next[o as usize] += 1;
        }
        // SAFETY: each owner's cursor ran from its bucket's start to the next bucket's start,
        // so the ids.len() slots were each written once.
        unsafe { order.set_len(ids.len()) };
        alloc::recycle(owners);
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

impl Drop for Buckets {
    fn drop(&mut self) {
        alloc::recycle(std::mem::take(&mut self.order));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a naive grouping: for each rank in turn, every position whose id it owns.
    #[test]
    fn buckets_group_positions_by_owner_in_their_original_order() {
        let partition = RowPartition::from_counts(&[5, 0, 7, 3]);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        // Large enough for the working buffers to go to the reuse cache of large buffers, and
        // sorted twice, so the second sort takes them back from it.
        let ids: Vec<i64> = (0..1 << 20)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % partition.rows() as u64) as i64
            })
            .collect();
        for ids in [&ids[..], &ids[..], &ids[..1000], &[]] {
            let buckets = Buckets::by_owner(&partition, ids);
            for rank in 0..partition.ranks() {
                let naive: Vec<usize> = (0..ids.len())
                    .filter(|&p| partition.range(rank).contains(&(ids[p] as usize)))
                    .collect();
                assert_eq!(
                    buckets.of(rank),
                    &naive[..],
                    "rank {rank}, {} ids",
                    ids.len()
                );
            }
        }
    }
}
