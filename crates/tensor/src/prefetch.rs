//! Hints that ask the processor to start loading memory before it is read.
//!
//! Gathers of rows or entries scattered over a table larger than the cache wait on memory
//! latency, one miss at a time; asking for the lines a few items ahead overlaps the misses.
//! A prefetch never faults and never changes a result.

/// Bytes in one cache line.
const LINE: usize = 64;

/// Asks for the `bytes` bytes from `start` (any address: a prefetch never faults).
#[inline(always)]
pub fn prefetch_bytes(start: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    for offset in (0..bytes).step_by(LINE) {
        // SAFETY: a prefetch is a hint that never faults, whatever the address.
        unsafe {
            std::arch::x86_64::_mm_prefetch(
                start.wrapping_add(offset).cast::<i8>(),
                std::arch::x86_64::_MM_HINT_T0,
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, bytes);
}

/// Asks for every line of `values`.
#[inline(always)]
pub fn prefetch<T>(values: &[T]) {
    prefetch_bytes(values.as_ptr().cast(), std::mem::size_of_val(values));
}

/// Asks for `values[index]`; nothing when `index` is out of range (the end of a loop that
/// prefetches ahead).
#[inline(always)]
pub fn prefetch_at<T>(values: &[T], index: usize) {
    if let Some(value) = values.get(index) {
        prefetch(std::slice::from_ref(value));
    }
}
