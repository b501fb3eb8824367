//! Parallel element-wise maps.

use rayon::prelude::*;

/// Elements per parallel task below which a map runs on one thread.
const MIN_PER_TASK: usize = 1 << 14;

/// Applies `f` to every element, in parallel, preserving order.
pub fn map_vec<S: Copy + Sync, D: Send>(src: &[S], f: impl Fn(S) -> D + Sync) -> Vec<D> {
    if src.len() < MIN_PER_TASK {
        return src.iter().map(|&x| f(x)).collect();
    }
    src.par_iter()
        .with_min_len(MIN_PER_TASK)
        .map(|&x| f(x))
        .collect()
}

/// Applies `f` to every pair of elements of two equally long slices, in parallel.
pub fn zip_map_vec<A: Copy + Sync, B: Copy + Sync, D: Send>(
    a: &[A],
    b: &[B],
    f: impl Fn(A, B) -> D + Sync,
) -> Vec<D> {
    assert_eq!(a.len(), b.len(), "zip_map_vec: lengths differ");
    if a.len() < MIN_PER_TASK {
        return a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect();
    }
    a.par_iter()
        .zip(b.par_iter())
        .with_min_len(MIN_PER_TASK)
        .map(|(&x, &y)| f(x, y))
        .collect()
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
