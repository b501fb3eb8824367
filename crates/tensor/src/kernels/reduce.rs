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

#[cfg(test)]
mod tests {
    use super::*;

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
