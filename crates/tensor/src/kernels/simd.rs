//! Runtime choice of the processor's vector instructions for the crates' own loops.
//!
//! The build targets the baseline x86-64 processor (SSE2), so that one binary or wheel runs
//! on every x86-64 machine. The gemm crate picks AVX2 or AVX-512 kernels at run time, but the
//! loops written here (aggregation, bias and activation, dropout, softmax) were compiled for
//! SSE2 only: 4 floats per instruction where the processor takes 8. [`with_simd`] runs a loop
//! in a copy of itself compiled for AVX2 and FMA when the processor has them. Rust does not
//! fuse or reorder floating-point operations on its own, so the results are the same bit for
//! bit either way; only the width of the instructions changes.

/// Whether this processor runs the AVX2 and FMA copies (checked once, then cached by std).
#[inline(always)]
pub fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Runs `f`, compiled for AVX2 and FMA where the processor has them (see the module docs).
///
/// Call it around a loop, inside a parallel task: work that rayon hands to other threads
/// runs in code of its own, compiled without these instructions.
///
/// Mark `f` `#[inline(always)]`, and so every closure it calls with a loop (the row function
/// a helper such as `for_each_row_mut` passes on): `f` is called from both copies, and a
/// large closure called twice is compiled once, for the baseline processor, and called from
/// the vector copy, which then runs SSE2 code.
#[inline(always)]
pub fn with_simd<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        #[target_feature(enable = "avx2,fma")]
        fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        // SAFETY: the processor has AVX2 and FMA (checked above).
        return unsafe { avx2(f) };
    }
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vector_copy_gives_the_plain_loop_bit_for_bit() {
        let x: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
        let run = |x: &[f32]| -> Vec<f32> { x.iter().map(|&v| v * 1.5 + 0.25).collect() };
        assert_eq!(with_simd(|| run(&x)), run(&x));
    }
}
