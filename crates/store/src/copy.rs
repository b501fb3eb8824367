//! The row-copy loop under every gather and scatter: parallel, one row at a time, with the
//! source and destination address of each row computed by the caller.

use std::mem::MaybeUninit;

use rayon::prelude::*;

/// Rows per parallel task: enough to amortise scheduling, few enough to balance two threads.
const ROWS_PER_TASK: usize = 2048;

/// How far ahead, in bytes of rows, the copy loop asks for the source rows: random rows miss
/// every cache, and a loop that waits for each in turn leaves the memory system idle. Small
/// rows need more rows in flight to cover the same memory latency.
const PREFETCH_BYTES: usize = 8192;

/// The fewest and the most rows the copy loop prefetches ahead.
const PREFETCH_ROWS: std::ops::RangeInclusive<usize> = 8..=64;

/// How many rows ahead of the copy to prefetch for rows of `row_bytes`.
fn prefetch_distance(row_bytes: usize) -> usize {
    (PREFETCH_BYTES / row_bytes).clamp(*PREFETCH_ROWS.start(), *PREFETCH_ROWS.end())
}

/// Bytes of each row prefetched: beyond that the hardware's own prefetcher follows the copy.
const PREFETCH_ROW_BYTES: usize = 512;

/// Hints the processor to load the first cache lines of a row (at most `PREFETCH_ROW_BYTES`).
#[inline(always)]
pub(crate) fn prefetch(row: *const u8, row_bytes: usize) {
    graphloom_tensor::prefetch::prefetch_bytes(row, row_bytes.min(PREFETCH_ROW_BYTES));
}

/// A pointer that may cross threads: each task touches rows no other task touches.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut u8);
// SAFETY: used only for disjoint row ranges, as documented at each use.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// The pointer. A method (rather than the field) makes closures capture the whole
    /// `SendPtr`, which may cross threads, instead of the bare pointer, which may not.
    #[inline(always)]
    pub(crate) fn get(self) -> *mut u8 {
        self.0
    }
}

/// Copies `count` rows of `row_bytes` from `src(i)` to `dst(i)`, in parallel.
///
/// # Safety
/// `src(i)` must point to `row_bytes` readable bytes and `dst(i)` to `row_bytes` writable
/// bytes, distinct for distinct `i`, and no one else may touch the destinations during the call.
pub(crate) unsafe fn copy_rows(
    count: usize,
    row_bytes: usize,
    dst: impl Fn(usize) -> *mut u8 + Sync,
    src: impl Fn(usize) -> *const u8 + Sync,
) {
    if row_bytes == 0 {
        return;
    }
    let distance = prefetch_distance(row_bytes);
    (0..count.div_ceil(ROWS_PER_TASK))
        .into_par_iter()
        .for_each(|task| {
            let start = task * ROWS_PER_TASK;
            let end = ((task + 1) * ROWS_PER_TASK).min(count);
            // The rows the loop below would have prefetched before its start.
            for i in start..(start + distance).min(end) {
                prefetch(src(i), row_bytes);
            }
            for i in start..end {
                if i + distance < end {
                    prefetch(src(i + distance), row_bytes);
                }
                // SAFETY: guaranteed by the caller.
                unsafe { std::ptr::copy_nonoverlapping(src(i), dst(i), row_bytes) };
            }
        });
}

/// Copies rows into the consecutive rows of `out` (which may be uninitialised: every byte is
/// written), row `i` read from `src(i)`.
///
/// # Safety
/// As for [`copy_rows`]: `src(i)` must point to `row_bytes` readable bytes.
pub(crate) unsafe fn gather_rows(
    out: &mut [MaybeUninit<u8>],
    row_bytes: usize,
    src: impl Fn(usize) -> *const u8 + Sync,
) {
    if row_bytes == 0 {
        return;
    }
    let base = SendPtr(out.as_mut_ptr().cast());
    // SAFETY: destination rows are the distinct consecutive rows of `out`.
    unsafe {
        copy_rows(
            out.len() / row_bytes,
            row_bytes,
            |i| base.get().add(i * row_bytes),
            src,
        )
    };
}

/// The bytes of `out` as possibly-uninitialised memory, for [`gather_rows`].
pub(crate) fn as_uninit(out: &mut [u8]) -> &mut [MaybeUninit<u8>] {
    // SAFETY: MaybeUninit<u8> has the layout of u8, and gather_rows only writes initialised
    // bytes, so `out` stays initialised.
    unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast(), out.len()) }
}

/// A buffer of `count` rows filled by [`gather_rows`] from `src`: taken from the reuse cache
/// of large buffers (no page faults, no zeroing pass) and written once.
///
/// # Safety
/// As for [`gather_rows`].
pub(crate) unsafe fn gathered(
    count: usize,
    row_bytes: usize,
    src: impl Fn(usize) -> *const u8 + Sync,
) -> Vec<u8> {
    let len = count * row_bytes;
    let mut buffer = graphloom_tensor::alloc::with_capacity::<u8>(len);
    // SAFETY: forwarded to the caller; every one of the `len` bytes is written.
    unsafe {
        gather_rows(&mut buffer.spare_capacity_mut()[..len], row_bytes, src);
        buffer.set_len(len);
    }
    buffer
}
