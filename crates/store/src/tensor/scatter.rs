//! Scattering rows: every row is written by its owner, so no two ranks ever write one row.

use graphloom_comm::CommunicatorExt;
use graphloom_tensor::Tensor;

use super::StoreTensor;
use crate::copy::{copy_rows, SendPtr};
use crate::routing::Buckets;
use crate::{Result, StoreError};

impl StoreTensor {
    /// Writes `rows` (a tensor of this dtype with `ids.len()` rows) to rows `ids`. Collective:
    /// every rank calls it (with its own ids, possibly none), and when it returns every rank's
    /// writes are visible to every rank.
    ///
    /// Every row is written by the rank that owns it, in every layout: ids are routed to their
    /// owners, so no two ranks ever write one row (which in the layouts that map every chunk
    /// would be a data race). When a row is written more than once in a call, the last write
    /// wins, in the order of the ranks and then of each rank's ids.
    pub fn scatter(&self, ids: &[i64], rows: &Tensor) -> Result<()> {
        let mut shape = self.spec.shape.clone();
        shape[0] = ids.len();
        if rows.shape() != shape.as_slice() || rows.dtype() != self.spec.dtype {
            return Err(StoreError::Invalid(format!(
                "scatter: rows are {} {:?}, {} ids need {} {:?}",
                rows.dtype(),
                rows.shape(),
                ids.len(),
                self.spec.dtype,
                shape
            )));
        }
        self.scatter_bytes(ids, rows.as_bytes())
    }

    /// [`StoreTensor::scatter`] from raw row bytes.
    pub fn scatter_bytes(&self, ids: &[i64], rows: &[u8]) -> Result<()> {
        let checked = if rows.len() != ids.len() * self.row_bytes {
            Err(StoreError::Invalid(format!(
                "scatter: {} bytes of rows for {} ids of {} bytes",
                rows.len(),
                ids.len(),
                self.row_bytes
            )))
        } else {
            self.check_writable("scatter")
                .and_then(|_| self.check_ids("scatter", ids))
        };
        self.agree(checked)?;
        let rb = self.row_bytes;
        let (ids, rows) = last_occurrences(ids, rows, rb);
        let buckets = Buckets::by_owner(&self.partition, &ids);
        let id_sends = buckets.collect(|p| ids[p]);
        let row_sends = buckets
            .collect(|p| &rows[p * rb..(p + 1) * rb])
            .into_iter()
            .map(|parts| parts.concat())
            .collect();
        let in_ids = self.comm.all_to_all_typed(&id_sends)?;
        let in_rows = self.comm.all_to_all_v(row_sends)?;
        // Rank order, then each rank's order: the same for any layout of the writers.
        let ids: Vec<i64> = in_ids.concat();
        let rows: Vec<u8> = in_rows.concat();
        let (ids, rows) = last_occurrences(&ids, &rows, rb);
        self.write_own_rows(&ids, &rows);
        // Readers of the layouts that map every chunk read the owners' memory directly.
        self.comm.barrier()?;
        Ok(())
    }

    /// Writes distinct rows that this rank owns into its own chunk.
    fn write_own_rows(&self, ids: &[i64], rows: &[u8]) {
        let rb = self.row_bytes;
        let me = self.comm.rank();
        let own = self.partition.range(me);
        assert!(
            ids.iter().all(|&id| own.contains(&(id as usize))),
            "scatter routes every row to its owner"
        );
        let base = SendPtr(
            self.chunks[me]
                .as_ref()
                .expect("a rank maps its own chunk")
                .ptr(),
        );
        let src = SendPtr(rows.as_ptr() as *mut u8);
        // SAFETY: ids are distinct (last_occurrences) rows of this rank's own chunk (checked
        // above), which no other rank writes; the source holds one row per id.
        unsafe {
            copy_rows(
                ids.len(),
                rb,
                |i| base.get().add((ids[i] as usize - own.start) * rb),
                |i| src.get().add(i * rb),
            )
        };
    }
}

/// Keeps the last occurrence of each id and its row, sorted by id.
fn last_occurrences(ids: &[i64], rows: &[u8], row_bytes: usize) -> (Vec<i64>, Vec<u8>) {
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_unstable_by_key(|&p| (ids[p], std::cmp::Reverse(p)));
    order.dedup_by_key(|p| ids[*p]);
    let mut out_rows = Vec::with_capacity(order.len() * row_bytes);
    for &p in &order {
        out_rows.extend_from_slice(&rows[p * row_bytes..(p + 1) * row_bytes]);
    }
    (order.iter().map(|&p| ids[p]).collect(), out_rows)
}
