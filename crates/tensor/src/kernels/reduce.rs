//! Reductions whose result does not depend on the number of threads.
//!
//! Every reduction splits its input into fixed chunks, reduces each chunk sequentially and then
//! combines the partial results sequentially in chunk order. The chunking depends only on the
//! input's size, so 1 and 64 threads add the same numbers in the same order.

use rayon::prelude::*;

use crate::{Float, Real};

/// Elements per chunk of a flat reduction.
const CHUNK: usize = 1 << 13;
/// Rows per chunk of a column reduction.
const ROW_CHUNK: usize = 512;

/// The sum of all elements, accumulated in `T::Acc`.
pub fn sum<T: Float>(x: &[T]) -> T::Acc {
    let partials: Vec<T::Acc> = x
        .par_chunks(CHUNK)
        .map(|c| {
            let mut s = T::Acc::ZERO;
            for &v in c {
                s += v.to_acc();
            }
            s
        })
        .collect();
    let mut total = T::Acc::ZERO;
    for p in partials {
        total += p;
    }
    total
}

/// The sum of the element-wise products of `a` and `b` (of one length), accumulated in
/// `T::Acc`.
pub fn dot<T: Float>(a: &[T], b: &[T]) -> T::Acc {
    assert_eq!(a.len(), b.len(), "dot: lengths differ");
    let partials: Vec<T::Acc> = a
        .par_chunks(CHUNK)
        .zip(b.par_chunks(CHUNK))
        .map(|(x, y)| {
            let mut s = T::Acc::ZERO;
            for (&u, &v) in x.iter().zip(y) {
                s += u.to_acc() * v.to_acc();
            }
            s
        })
        .collect();
    let mut total = T::Acc::ZERO;
    for p in partials {
        total += p;
    }
    total
}

/// The sum over rows of an `[n, cols]` matrix: a vector of `cols` sums, in `T::Acc`.
pub fn column_sums<T: Float>(x: &[T], cols: usize) -> Vec<T::Acc> {
    if cols == 0 {
        return Vec::new();
    }
    let partials: Vec<Vec<T::Acc>> = x
        .par_chunks(ROW_CHUNK * cols)
        .map(|block| {
            let mut s = vec![T::Acc::ZERO; cols];
            for row in block.chunks_exact(cols) {
                for (acc, &v) in s.iter_mut().zip(row) {
                    *acc += v.to_acc();
                }
            }
            s
        })
        .collect();
    let mut total = vec![T::Acc::ZERO; cols];
    for p in partials {
        for (t, v) in total.iter_mut().zip(p) {
            *t += v;
        }
    }
    total
}

/// An `[n, cols]` matrix of `len` elements written row by row by `f(row_index, row)`, in
/// parallel, in a buffer from the reuse cache that is not zeroed first, with its column sums
/// taken in the same pass, each chunk of rows summed while it is still in the core's cache:
/// the sums are [`column_sums`] of the matrix, bit for bit, without a second pass over it.
/// The loop is compiled for the processor's vector instructions
/// ([`super::simd::with_simd`]; mark `f` `#[inline(always)]`).
///
/// # Safety
/// `f` must write every element of each row it is given.
pub unsafe fn rows_with_column_sums<T: Float>(
    len: usize,
    cols: usize,
    f: impl Fn(usize, &mut [std::mem::MaybeUninit<T>]) + Sync,
) -> (Vec<T>, Vec<T::Acc>) {
    if cols == 0 {
        return (Vec::new(), Vec::new());
    }
    let mut out = crate::alloc::with_capacity::<T>(len);
    // The chunks of `column_sums`, summed in the same order.
    let partials: Vec<Vec<T::Acc>> = out.spare_capacity_mut()[..len]
        .par_chunks_mut(ROW_CHUNK * cols)
        .enumerate()
        .map(|(chunk, block)| {
            super::simd::with_simd(
                #[inline(always)]
                || {
                    let mut s = vec![T::Acc::ZERO; cols];
                    for (i, row) in block.chunks_exact_mut(cols).enumerate() {
                        f(chunk * ROW_CHUNK + i, row);
                        for (acc, v) in s.iter_mut().zip(row.iter()) {
                            // SAFETY: `f` wrote every element of the row (the caller's promise).
                            *acc += unsafe { v.assume_init_read() }.to_acc();
                        }
                    }
                    s
                },
            )
        })
        .collect();
    // SAFETY: the chunks cover all `len` elements, each row written by `f`.
    unsafe { out.set_len(len) };
    let mut total = vec![T::Acc::ZERO; cols];
    for p in partials {
        for (t, v) in total.iter_mut().zip(p) {
            *t += v;
        }
    }
    (out, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_with_column_sums_are_the_rows_and_column_sums() {
        let (rows, cols) = (1500, 7);
        let value = |r: usize, c: usize| ((r * 31 + c * 17) % 97) as f32 * 0.013 - 0.4;
        // SAFETY: every element of every row is written.
        let (m, sums) = unsafe {
            rows_with_column_sums::<f32>(rows * cols, cols, |r, row| {
                for (c, o) in row.iter_mut().enumerate() {
                    o.write(value(r, c));
                }
            })
        };
        let expected: Vec<f32> = (0..rows * cols)
            .map(|i| value(i / cols, i % cols))
            .collect();
        assert_eq!(m, expected);
        assert_eq!(sums, column_sums(&expected, cols));
    }

    #[test]
    fn sums_match_f64_and_do_not_depend_on_threads() {
        let x: Vec<f32> = (0..100_003)
            .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.3)
            .collect();
        let exact: f64 = x.iter().map(|&v| v as f64).sum();
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let four = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap();
        let a = one.install(|| sum(&x));
        let b = four.install(|| sum(&x));
        assert_eq!(a.to_bits(), b.to_bits());
        assert!((a as f64 - exact).abs() < 1e-2);
        let cs1 = one.install(|| column_sums(&x[..100_000], 10));
        let cs4 = four.install(|| column_sums(&x[..100_000], 10));
        assert_eq!(cs1, cs4);
        for c in 0..10 {
            let e: f64 = (0..10_000).map(|r| x[r * 10 + c] as f64).sum();
            assert!((cs1[c] as f64 - e).abs() < 1e-2);
        }
    }
}
