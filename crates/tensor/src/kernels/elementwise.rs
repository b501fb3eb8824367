//! Parallel element-wise maps.

use rayon::prelude::*;

/// Elements per parallel task below which a map runs on one thread.
const MIN_PER_TASK: usize = 1 << 14;

/// Applies `f` to every element, in parallel, preserving order.
pub fn map_vec<S: Copy + Sync, D: Send + 'static>(
    src: &[S],
    f: impl Fn(S) -> D + Sync + Send,
) -> Vec<D> {
    let mut out = crate::alloc::with_capacity(src.len());
    if src.len() < MIN_PER_TASK {
        out.extend(src.iter().map(|&x| f(x)));
    } else {
        out.par_extend(src.par_iter().with_min_len(MIN_PER_TASK).map(|&x| f(x)));
    }
    out
}

/// Applies `f` to every pair of elements of two equally long slices, in parallel.
pub fn zip_map_vec<A: Copy + Sync, B: Copy + Sync, D: Send + 'static>(
    a: &[A],
    b: &[B],
    f: impl Fn(A, B) -> D + Sync + Send,
) -> Vec<D> {
    assert_eq!(a.len(), b.len(), "zip_map_vec: lengths differ");
    let mut out = crate::alloc::with_capacity(a.len());
    if a.len() < MIN_PER_TASK {
        out.extend(a.iter().zip(b).map(|(&x, &y)| f(x, y)));
    } else {
        out.par_extend(
            a.par_iter()
                .zip(b.par_iter())
                .with_min_len(MIN_PER_TASK)
                .map(|(&x, &y)| f(x, y)),
        );
    }
    out
}

/// Runs `f(row_index, row)` over the `cols`-wide rows of `dst` in parallel, compiled for the
/// processor's vector instructions ([`super::simd::with_simd`]; mark `f` `#[inline(always)]`).
pub fn for_each_row_mut<T: Send>(dst: &mut [T], cols: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if cols == 0 {
        return;
    }
    dst.par_chunks_mut(cols)
        .with_min_len(super::ROW_BLOCK.max(MIN_PER_TASK / cols.max(1)).min(4096))
        .enumerate()
        .for_each(|(i, row)| {
            super::simd::with_simd(
                #[inline(always)]
                || f(i, row),
            )
        });
}

/// A vector of `len` elements (a multiple of `cols`) written row by row (rows of `cols`) by
/// `f(row_index, row)`, in parallel, in a buffer from the reuse cache that is not zeroed first
/// (`f` runs as in [`for_each_row_mut`]).
///
/// # Safety
/// `f` must write every element of each row it is given.
pub unsafe fn rows_from_fn<T: Send + 'static>(
    len: usize,
    cols: usize,
    f: impl Fn(usize, &mut [std::mem::MaybeUninit<T>]) + Sync,
) -> Vec<T> {
    let mut out = crate::alloc::with_capacity::<T>(len);
    for_each_row_mut(&mut out.spare_capacity_mut()[..len], cols, f);
    // SAFETY: `f` wrote every element of every row (the caller's promise); with no columns
    // there are no elements.
    unsafe { out.set_len(if cols == 0 { 0 } else { len }) };
    out
}
