//! Gathering rows: direct reads for the layouts that map every chunk, an exchange with the
//! owners for the Distributed layout.

use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;
use std::time::Instant;

use graphloom_comm::CommunicatorExt;
use graphloom_tensor::Tensor;

use super::{GatherStats, StoreTensor};
use crate::copy::{as_uninit, copy_rows, gather_rows, gathered, SendPtr};
use crate::layout::Layout;
use crate::routing::Buckets;
use crate::{Result, StoreError};

/// Bytes of rows a Distributed gather moves per rank in one round. In rounds this small the
/// owners' replies are still in the processor's cache when the requester copies them into
/// place, and they take little memory. On 2 in-process ranks (`graphloom bench gather
/// --layouts distributed --locations host`), rounds of 4 to 16 MiB made gathers of 256 B and
/// 2 KiB rows 1.15-1.2x faster than one round for the whole gather; under MPI, rounds of
/// 16 MiB were as fast or faster, rounds of 8 MiB slower at 256 B rows (more rounds, each a
/// pair of exchanges).
const ROUND_BYTES: usize = 16 << 20;

impl StoreTensor {
    /// Gathers rows `ids` (any order, repeats allowed) into a new `[ids.len(), columns]` tensor
    /// (`[ids.len()]` for a 1-D tensor). Collective for the Distributed layout.
    pub fn gather(&self, ids: &[i64]) -> Result<Tensor> {
        let mut shape = self.spec.shape.clone();
        shape[0] = ids.len();
        // SAFETY: a successful gather writes every row of the output.
        unsafe { Tensor::from_fill(&shape, self.spec.dtype, |out| self.gather_uninit(ids, out)) }
    }

    /// Gathers rows `ids` into `out`, which must hold exactly `ids.len()` rows.
    pub fn gather_into(&self, ids: &[i64], out: &mut [u8]) -> Result<()> {
        self.gather_uninit(ids, as_uninit(out))
    }

    /// Gathers rows `ids` into possibly-uninitialised `out`; on success every byte is written.
    pub(crate) fn gather_uninit(&self, ids: &[i64], out: &mut [MaybeUninit<u8>]) -> Result<()> {
        let start = Instant::now();
        let checked = if out.len() != ids.len() * self.row_bytes {
            Err(StoreError::Invalid(format!(
                "gather: the output holds {} bytes, {} rows need {}",
                out.len(),
                ids.len(),
                ids.len() * self.row_bytes
            )))
        } else {
            self.check_ids("gather", ids)
        };
        if self.spec.layout == Layout::Distributed {
            // Collective: a rank with bad ids fails every rank before the exchange.
            self.agree(checked)?;
        } else {
            checked?;
        }
        match self.spec.layout {
            Layout::Continuous => {
                let base = SendPtr(self.whole.as_ref().expect("continuous").ptr());
                let rb = self.row_bytes;
                // SAFETY: ids are in range, so each source row lies inside the whole region.
                unsafe { gather_rows(out, rb, |i| base.get().add(ids[i] as usize * rb)) };
            }
            Layout::Chunked => {
                let rb = self.row_bytes;
                // Each chunk's base moved back by its first row, so a row's address is one
                // multiply-add from its owner's entry.
                let bases: Vec<SendPtr> = self
                    .chunks
                    .iter()
                    .enumerate()
                    .map(|(r, c)| {
                        let chunk = c.as_ref().expect("chunked maps every chunk");
                        let first = self.partition.range(r).start * rb;
                        SendPtr(chunk.ptr().wrapping_sub(first))
                    })
                    .collect();
                let partition = &self.partition;
                // SAFETY: ids are in range; each row lies inside its owner's chunk, where the
                // moved-back base plus the row's offset points.
                unsafe {
                    gather_rows(out, rb, |i| {
                        let row = ids[i] as usize;
                        bases[partition.owner(row)].get().wrapping_add(row * rb)
                    })
                };
            }
            Layout::Distributed => {
                let base = SendPtr(out.as_mut_ptr().cast());
                let rb = self.row_bytes;
                // SAFETY: the destinations are the distinct consecutive rows of `out`, which
                // holds ids.len() rows (checked above).
                unsafe { self.gather_distributed_to(ids, |i| base.get().add(i * rb))? }
            }
        }
        self.record_gather(ids.len(), start);
        Ok(())
    }

    /// Counts one gather of `rows` rows begun at `start` in [`StoreTensor::stats`] (also the
    /// cache's fetches, which call [`StoreTensor::gather_distributed_to`] directly).
    pub(crate) fn record_gather(&self, rows: usize, start: Instant) {
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        self.counters.rows.fetch_add(rows as u64, Ordering::Relaxed);
        self.counters
            .nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// Distributed gather of ids already checked to be in range, row `i` written to `dst(i)`,
    /// in rounds of [`ROUND_BYTES`] of rows per rank (or one row, if larger; see
    /// [`StoreTensor::gather_round`]). Collective: the ranks agree on the number of rounds, the
    /// most any of them needs.
    ///
    /// # Safety
    /// `dst(i)` must point to `row_bytes` writable bytes, distinct for distinct `i`, that no one
    /// else touches during the call.
    pub(crate) unsafe fn gather_distributed_to(
        &self,
        ids: &[i64],
        dst: impl Fn(usize) -> *mut u8 + Sync,
    ) -> Result<()> {
        let per_round = ROUND_BYTES
            .checked_div(self.row_bytes)
            .unwrap_or(usize::MAX)
            .max(1);
        let needed = ids.len().div_ceil(per_round) as u64;
        let rounds = self.communicate(|| self.comm.all_gather_one(needed))?;
        for round in 0..rounds.into_iter().max().unwrap_or(0) as usize {
            let start = round.saturating_mul(per_round).min(ids.len());
            let end = start.saturating_add(per_round).min(ids.len());
            // SAFETY: the rows of this round are distinct rows of the caller's destinations.
            unsafe { self.gather_round(&ids[start..end], |i| dst(start + i))? };
        }
        Ok(())
    }

    /// One round of a Distributed gather: the ids are grouped by owner, each owner gets the
    /// ids it holds, reads them and sends the rows back, and then one pass copies every row
    /// into place, from this rank's chunk or from a reply. Collective.
    ///
    /// # Safety
    /// As for [`StoreTensor::gather_distributed_to`].
    unsafe fn gather_round(
        &self,
        ids: &[i64],
        dst: impl Fn(usize) -> *mut u8 + Sync,
    ) -> Result<()> {
        let me = self.comm.rank();
        let rb = self.row_bytes;
        let chunk = SendPtr(self.own_chunk().ptr());
        let mine = self.local_rows();
        let buckets = Buckets::by_owner(&self.partition, ids);
        // No request to this rank itself: its rows are copied straight from its chunk.
        let requests: Vec<Vec<i64>> = (0..self.comm.size())
            .map(|r| {
                if r == me {
                    Vec::new()
                } else {
                    buckets.of(r).iter().map(|&p| ids[p]).collect()
                }
            })
            .collect();
        let incoming = self.communicate(|| self.comm.all_to_all_typed(&requests))?;
        for (src, wanted) in incoming.iter().enumerate() {
            if let Some(&bad) = wanted.iter().find(|&&id| !mine.contains(&(id as usize))) {
                return Err(self.broken(format!(
                    "rank {src} asked rank {me} for row {bad}, which it does not own: the \
                     ranks disagree about the partition"
                )));
            }
        }
        let replies = incoming
            .iter()
            .map(|wanted| {
                // SAFETY: every wanted id is this rank's (checked above).
                unsafe {
                    gathered(wanted.len(), rb, |i| {
                        chunk.get().add((wanted[i] as usize - mine.start) * rb)
                    })
                }
            })
            .collect();
        let rows = self.communicate(|| self.comm.all_to_all_v(replies))?;
        for (owner, reply) in rows.iter().enumerate() {
            if owner != me && reply.len() != buckets.of(owner).len() * rb {
                return Err(self.broken(format!(
                    "rank {owner} sent {} bytes for {} rows",
                    reply.len(),
                    buckets.of(owner).len()
                )));
            }
        }
        debug_assert_eq!(
            rows.len(),
            self.partition.ranks(),
            "a reply from every owner"
        );
        // Every row's source, so that one pass writes the destinations in order (a pass per
        // owner would write them with gaps, which is slower).
        let mut sources: Vec<SendPtr> = graphloom_tensor::alloc::with_capacity(ids.len());
        let slots = &mut sources.spare_capacity_mut()[..ids.len()];
        for (owner, reply) in rows.iter().enumerate() {
            for (k, &p) in buckets.of(owner).iter().enumerate() {
                // SAFETY: an own row lies inside the chunk; a reply holds one row per position
                // of its owner's bucket, in order (checked above).
                slots[p].write(SendPtr(unsafe {
                    if owner == me {
                        chunk.get().add((ids[p] as usize - mine.start) * rb)
                    } else {
                        reply.as_ptr().add(k * rb) as *mut u8
                    }
                }));
            }
        }
        // SAFETY: the buckets hold every position once, so every slot was written.
        unsafe { sources.set_len(ids.len()) };
        // SAFETY: each source points at one whole row; the destinations are the caller's.
        unsafe { copy_rows(ids.len(), rb, dst, |i| sources[i].get()) };
        graphloom_tensor::alloc::recycle(sources);
        for reply in rows {
            graphloom_tensor::alloc::recycle(reply);
        }
        Ok(())
    }

    /// Runs one exchange of a Distributed gather, counting its time as communication in
    /// [`StoreTensor::stats`].
    fn communicate<T>(&self, exchange: impl FnOnce() -> graphloom_comm::Result<T>) -> Result<T> {
        let start = Instant::now();
        let result = exchange();
        self.counters
            .comm_nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(result?)
    }

    /// The error for ranks found to disagree in the middle of a gather. The other ranks may
    /// already be in its next exchange, so the job is failed too: they stop at once with an
    /// error naming this rank, instead of waiting for it until the timeout.
    fn broken(&self, reason: String) -> StoreError {
        self.comm.fail(&reason);
        StoreError::Invalid(reason)
    }

    /// Gather counters since creation.
    pub fn stats(&self) -> GatherStats {
        let c = &self.counters;
        GatherStats {
            calls: c.calls.load(Ordering::Relaxed),
            rows: c.rows.load(Ordering::Relaxed),
            seconds: c.nanos.load(Ordering::Relaxed) as f64 * 1e-9,
            comm_seconds: c.comm_nanos.load(Ordering::Relaxed) as f64 * 1e-9,
        }
    }
}
