//! The row-copy loops under gather and scatter: parallel, one row at a time, with the source
//! or destination address of each row computed by the caller.

use rayon::prelude::*;

/// Rows per parallel task: enough to amortise scheduling, few enough to balance two threads.
const ROWS_PER_TASK: usize = 2048;

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

/// Copies `count` rows of `row_bytes` into `out`, row `i` read from `src(i)`.
///
/// # Safety
/// `src(i)` must point to `row_bytes` readable bytes that no one writes during the call.
pub(crate) unsafe fn gather_rows(
    out: &mut [u8],
    row_bytes: usize,
    src: impl Fn(usize) -> *const u8 + Sync,
) {
    if row_bytes == 0 {
        return;
    }
    out.par_chunks_mut(row_bytes * ROWS_PER_TASK)
        .enumerate()
        .for_each(|(task, block)| {
            let first = task * ROWS_PER_TASK;
            for (i, row) in block.chunks_exact_mut(row_bytes).enumerate() {
                // SAFETY: the caller guarantees the source row; `row` is this task's own.
                unsafe {
                    std::ptr::copy_nonoverlapping(src(first + i), row.as_mut_ptr(), row_bytes)
                };
            }
        });
}

/// Writes `rows` (`count` rows of `row_bytes`) to `dst(i)` for each row `i`.
///
/// # Safety
/// `dst(i)` must point to `row_bytes` writable bytes, distinct for distinct `i`, that no one
/// reads or writes during the call.
pub(crate) unsafe fn scatter_rows(
    rows: &[u8],
    row_bytes: usize,
    dst: impl Fn(usize) -> *mut u8 + Sync,
) {
    if row_bytes == 0 {
        return;
    }
    rows.par_chunks(row_bytes * ROWS_PER_TASK)
        .enumerate()
        .for_each(|(task, block)| {
            let first = task * ROWS_PER_TASK;
            for (i, row) in block.chunks_exact(row_bytes).enumerate() {
                // SAFETY: the caller guarantees distinct, writable destinations.
                unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), dst(first + i), row_bytes) };
            }
        });
}
