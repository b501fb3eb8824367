//! Allocation of large element buffers backed by transparent huge pages.
//!
//! A training epoch allocates and frees buffers of hundreds of megabytes. The allocator hands
//! blocks that large straight to the kernel, so every new buffer is page-faulted in 4 KiB at a
//! time, which on a 100 MB activation costs several times the pass that fills it. Asking for
//! huge pages (`madvise(MADV_HUGEPAGE)`) before the first write makes that 2 MiB at a time.
//! It is advice: where the kernel has no huge pages the buffer is an ordinary one.
//!
//! Freed tensor buffers of that size are also kept in a cache (at most [`cache_limit`] bytes)
//! and handed out again for a request of their capacity, or failing that of up to half of it:
//! an epoch allocates the same shapes as the one before, so after the first epoch most
//! activations and gradients land in memory that is already mapped and needs no zeroing by the
//! kernel. A request that no cached buffer fits first gives back to the kernel as many cached
//! bytes as it asks for, from the tails of the oldest buffers (`madvise(MADV_DONTNEED)` on whole
//! pages; a buffer given back entirely is freed). So the cache never adds to the peak of these
//! buffers: at any moment, live buffers plus cached ones are no more than the most live buffers
//! at some earlier moment (other allocations, such as a dataset being read, do not give back
//! cached memory, hence the limit). And a small request does not cost a large buffer: the large one
//! stays cached, shorter, and when it is reused only its given-back tail is faulted in again.
//! [`cached_bytes`] says how much memory the cache holds, for memory reports.

use std::any::{Any, TypeId};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rayon::prelude::*;

use crate::Element;

/// Buffers of at least this many bytes are advised to use huge pages.
const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;
/// The huge page size on x86-64 and most aarch64 kernels.
const HUGE_PAGE: usize = 2 << 20;

#[cfg(target_os = "linux")]
fn advise_huge_pages<T>(v: &Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if bytes < HUGE_PAGE_MIN_BYTES {
        return;
    }
    let start = v.as_ptr() as usize;
    let aligned = start.next_multiple_of(HUGE_PAGE);
    let end = (start + bytes) / HUGE_PAGE * HUGE_PAGE;
    if end > aligned {
        // SAFETY: the range lies inside the vector's own allocation; MADV_HUGEPAGE changes
        // only how the kernel backs the pages, never their contents. Failure is harmless.
        unsafe {
            libc::madvise(
                aligned as *mut libc::c_void,
                end - aligned,
                libc::MADV_HUGEPAGE,
            );
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages<T>(_: &Vec<T>) {}

/// Bytes in a base page: the granularity at which a cached buffer's tail is given back.
const PAGE: usize = 4096;

struct Cached {
    type_id: TypeId,
    capacity: usize,
    /// Where the buffer starts.
    start: usize,
    /// Its capacity in bytes.
    bytes: usize,
    /// Bytes from `start` that may be backed by memory: those its last use wrote, less any
    /// given back since.
    resident: usize,
    vec: Box<dyn Any + Send>,
}

impl Cached {
    /// Gives back the pages of the last `bytes` resident bytes (rounded up to whole huge pages
    /// where it can), or the whole buffer when that is all of it; returns the bytes given
    /// back.
    fn give_back(&mut self, bytes: usize) -> usize {
        if bytes >= self.resident {
            return std::mem::take(&mut self.resident);
        }
        let cut = (self.start + self.resident - bytes) / HUGE_PAGE * HUGE_PAGE;
        self.release_from(cut)
    }

    /// Gives back what is resident past the first `keep` bytes (from the next huge page on),
    /// for a reuse that needs no more.
    fn trim_to(&mut self, keep: usize) {
        if keep < self.resident {
            self.release_from((self.start + keep).next_multiple_of(HUGE_PAGE));
        }
    }

    /// Gives back the pages from address `cut` (a page boundary) to the end of the resident
    /// bytes, or the whole buffer when `cut` is not past its first whole page (the caller then
    /// frees it); returns the bytes given back.
    fn release_from(&mut self, cut: usize) -> usize {
        let end = self.start + self.resident;
        if cut >= end {
            return 0;
        }
        // The first page may hold the allocator's header: only whole pages of the buffer.
        if cut <= self.start.next_multiple_of(PAGE) || !cfg!(target_os = "linux") {
            return std::mem::take(&mut self.resident);
        }
        let release_end = end
            .next_multiple_of(PAGE)
            .min((self.start + self.bytes) / PAGE * PAGE);
        if release_end > cut {
            // SAFETY: [cut, release_end) is whole pages inside this cached buffer, which
            // nothing reads until it is handed out again, emptied; the pages then fault in
            // anew, zeroed.
            #[cfg(target_os = "linux")]
            unsafe {
                libc::madvise(
                    cut as *mut libc::c_void,
                    release_end - cut,
                    libc::MADV_DONTNEED,
                );
            }
        }
        let kept = cut - self.start;
        std::mem::replace(&mut self.resident, kept) - kept
    }
}

static CACHE: Mutex<VecDeque<Cached>> = Mutex::new(VecDeque::new());
static CACHED_BYTES: AtomicUsize = AtomicUsize::new(0);
static CACHE_LIMIT: AtomicUsize = AtomicUsize::new(DEFAULT_CACHE_LIMIT);

/// The cache limit unless set. The cache never raises the peak of the buffers allocated here
/// (see above), but it can hold memory while other code allocates, so it stays bounded.
pub const DEFAULT_CACHE_LIMIT: usize = 1 << 30;

/// Gives freed memory back to the kernel: the buffers this module's cache holds, and the
/// pages of freed small blocks that the C allocator's heaps keep (`malloc_trim`), which
/// otherwise stay resident until the same heap is reused. Called when a phase ends whose
/// allocations the next phase will not reuse: a stream of sampled batches (many small
/// blocks, freed on other threads) before evaluation, and evaluation (large buffers) before
/// the next batches, which on a small graph are too small to take cached buffers' place.
pub fn trim_freed() {
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    give_back(&mut cache, usize::MAX);
    drop(cache);
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of the allocator's heaps to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes of freed buffers held for reuse now.
pub fn cached_bytes() -> usize {
    CACHED_BYTES.load(Ordering::Relaxed)
}

/// The most bytes the cache of freed buffers holds ([`DEFAULT_CACHE_LIMIT`] unless set).
pub fn cache_limit() -> usize {
    CACHE_LIMIT.load(Ordering::Relaxed)
}

/// Sets the cache limit; 0 turns the cache off and empties it.
pub fn set_cache_limit(bytes: usize) {
    CACHE_LIMIT.store(bytes, Ordering::Relaxed);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let over = cached_bytes().saturating_sub(bytes);
    give_back(&mut cache, over);
}

/// Gives back at least `bytes` of cached memory (or all of it), from the tails of the oldest
/// buffers first.
fn give_back(cache: &mut VecDeque<Cached>, mut bytes: usize) {
    while bytes > 0 {
        let Some(oldest) = cache.front_mut() else {
            break;
        };
        let freed = oldest.give_back(bytes);
        CACHED_BYTES.fetch_sub(freed, Ordering::Relaxed);
        bytes = bytes.saturating_sub(freed);
        if oldest.resident == 0 {
            cache.pop_front();
        }
    }
}

/// Takes the cached buffer of `T` that best fits `capacity` elements (the smallest of at
/// least `capacity` and less than twice it), emptied, its pages past `needed_bytes` given
/// back. Without one, gives back as many cached bytes as `capacity` elements take (or all of
/// them), so that the caller's new allocation takes the place of cached memory rather than
/// adding to it.
fn take_cached<T: Send + 'static>(capacity: usize, needed_bytes: usize) -> Option<Vec<T>> {
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let fits = |c: &Cached| {
        c.type_id == TypeId::of::<T>() && c.capacity >= capacity && c.capacity / 2 < capacity
    };
    let best = cache
        .iter()
        .enumerate()
        .filter(|(_, c)| fits(c))
        .min_by_key(|(_, c)| c.capacity)
        .map(|(at, _)| at);
    let Some(at) = best else {
        give_back(&mut cache, capacity * std::mem::size_of::<T>());
        return None;
    };
    let mut hit = cache.remove(at)?;
    CACHED_BYTES.fetch_sub(hit.resident, Ordering::Relaxed);
    // A buffer whose tail was given back faults it in again when filled: as for a new
    // buffer, that much cached memory goes first, or reusing it would add to the peak (a
    // GCN layer 512 wide peaked 40 MiB over its live tensors so).
    give_back(&mut cache, needed_bytes.saturating_sub(hit.resident));
    // Pages its last use wrote past what this one needs would stay resident unaccounted.
    hit.trim_to(needed_bytes);
    let mut v = *hit.vec.downcast::<Vec<T>>().ok()?;
    v.clear();
    Some(v)
}

/// Gives a freed buffer back for reuse; small buffers are simply freed.
pub fn recycle<T: Send + 'static>(v: Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if bytes < HUGE_PAGE_MIN_BYTES || bytes > cache_limit() {
        return;
    }
    // What the buffer's use wrote: the pages past its length were never touched.
    let resident = v.len() * std::mem::size_of::<T>();
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    CACHED_BYTES.fetch_add(resident, Ordering::Relaxed);
    cache.push_back(Cached {
        type_id: TypeId::of::<T>(),
        capacity: v.capacity(),
        start: v.as_ptr() as usize,
        bytes,
        resident,
        vec: Box::new(v),
    });
    let over = cached_bytes().saturating_sub(cache_limit());
    give_back(&mut cache, over);
}

/// The capacity given to a large request of `n` elements: `n` rounded up to the next of the
/// sizes 1, 1.25, 1.5 and 1.75 times a power of two. Buffers whose sizes vary a little from one
/// use to the next (a sampled batch's features, say) then share a size and are reused from the
/// cache instead of being faulted in and zeroed by the kernel again. The rounding reserves at
/// most a quarter more address space, and pages that are never written cost no memory.
fn size_class(n: usize) -> usize {
    if n < 8 {
        return n;
    }
    let top = usize::BITS - 1 - n.leading_zeros();
    let quarter = 1usize << (top - 2);
    n.div_ceil(quarter) * quarter
}

/// An empty vector with room for `n` elements: a cached buffer of its size class, or a new one
/// advised to use huge pages when large. Fill it (push, extend) before reading.
pub fn with_capacity<T: Send + 'static>(n: usize) -> Vec<T> {
    if n * std::mem::size_of::<T>() >= HUGE_PAGE_MIN_BYTES {
        let class = size_class(n);
        if let Some(v) = take_cached(class, n * std::mem::size_of::<T>()) {
            return v;
        }
        let v = Vec::with_capacity(class);
        advise_huge_pages(&v);
        return v;
    }
    Vec::with_capacity(n)
}

/// A vector of `n` zeros, huge-page backed when large.
pub fn zeros<T: Element>(n: usize) -> Vec<T> {
    let mut v = with_capacity(n);
    if n * std::mem::size_of::<T>() >= HUGE_PAGE_MIN_BYTES {
        v.par_extend(rayon::iter::repeat_n(T::ZERO, n));
    } else {
        v.resize(n, T::ZERO);
    }
    v
}

/// A copy of `src`, huge-page backed when large.
pub fn copy_of<T: Element>(src: &[T]) -> Vec<T> {
    let mut v = with_capacity(src.len());
    if std::mem::size_of_val(src) >= HUGE_PAGE_MIN_BYTES {
        v.par_extend(src.par_iter().copied());
    } else {
        v.extend_from_slice(src);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_round_up_by_at_most_a_quarter() {
        for n in [8usize, 9, 100, 1000, 4095, 4096, 4097, 123_456_789] {
            let c = size_class(n);
            assert!(c >= n && c <= n + n / 4 + 1, "{n} -> {c}");
            assert_eq!(size_class(c), c, "classes are fixed points");
        }
        assert_eq!(size_class(1000), 1024);
        assert_eq!(size_class(1025), 1280);
    }

    #[test]
    fn large_and_small_buffers_hold_the_right_values() {
        for n in [10, 3 << 20] {
            let z = zeros::<f32>(n);
            recycle(copy_of(&z));
            assert!(z.len() == n && z.iter().all(|&v| v == 0.0));
            let src: Vec<f32> = (0..n).map(|i| i as f32).collect();
            assert_eq!(copy_of(&src), src);
        }
    }

    /// A large buffer of `n` elements, written (so it is resident).
    fn written(n: usize) -> Vec<f32> {
        let mut v = with_capacity(n);
        v.resize(n, 1.0);
        v
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn the_cache_reuses_the_best_fit_and_gives_back_as_much_as_a_new_buffer_takes() {
        // Its own thread's view of a process-wide cache: nextest runs each test in a process.
        set_cache_limit(1 << 30);
        let mib = (1 << 20) / 4; // f32 elements per MiB
        let buffers: Vec<Vec<f32>> = [16 * mib, 8 * mib, 40 * mib].map(written).into();
        buffers.into_iter().for_each(recycle);
        assert_eq!(cached_bytes(), 64 << 20);
        // 6 MiB fits the 8 MiB buffer (the smallest of at least 6 and under 12).
        let reused = written(6 * mib);
        assert_eq!(reused.capacity(), 8 * mib);
        assert_eq!(cached_bytes(), 56 << 20);
        // It comes back with what its last use wrote: 6 MiB.
        recycle(reused);
        assert_eq!(cached_bytes(), 62 << 20);
        // 100 MiB fits none: everything cached is given back, being less than 100 MiB.
        let fresh = with_capacity::<f32>(100 * mib);
        assert!(fresh.capacity() >= 100 * mib);
        assert_eq!(cached_bytes(), 0);
        // 12 MiB fits neither 8 MiB buffer nor the 48 MiB one (over twice): the oldest buffer
        // goes whole, the next gives back its tail, and the 48 MiB buffer stays untouched.
        let (a, b, c) = (written(8 * mib), written(8 * mib), written(48 * mib));
        let b_start = b.as_ptr();
        [a, b, c].into_iter().for_each(recycle);
        let _fresh = with_capacity::<f32>(12 * mib);
        let cached = cached_bytes();
        assert!(
            cached > 48 << 20 && cached <= 52 << 20,
            "{} MiB cached",
            cached >> 20
        );
        // The shortened buffer is handed out whole and works to its last element; the tail
        // it faults in again is given back first by the 48 MiB buffer (to a huge page).
        let mut b = with_capacity::<f32>(8 * mib);
        assert_eq!((b.as_ptr(), b.capacity()), (b_start, 8 * mib));
        b.extend((0..8 * mib).map(|i| i as f32));
        assert!(b.iter().enumerate().all(|(i, &v)| v == i as f32));
        let left = cached_bytes();
        assert!(
            left <= cached - (8 << 20) && left + HUGE_PAGE > cached - (8 << 20),
            "{left} bytes cached of {cached}"
        );
    }
}
