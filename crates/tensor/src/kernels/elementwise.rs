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

/// Runs `f(row_index, row)` over the `cols`-wide rows of `dst` in parallel.
pub fn for_each_row_mut<T: Send>(dst: &mut [T], cols: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if cols == 0 {
        return;
    }
    dst.par_chunks_mut(cols)
        .with_min_len(super::ROW_BLOCK.max(MIN_PER_TASK / cols.max(1)).min(4096))
        .enumerate()
        .for_each(|(i, row)| f(i, row));
}
