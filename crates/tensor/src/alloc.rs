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
//! kernel. Fresh pages are what slows a host whose memory has been working for hours: its
//! huge pages are spent, so each fault zeroes 4 KiB, and those costs grow with the host's age
//! while the work does not.
//!
//! The cache does not raise what the process needs at its peak. A request that no cached buffer
//! fits reads the process's resident anonymous memory and gives back to the kernel only the
//! cached bytes that, with the new buffer, would take it past the most it has needed before:
//! what it held less the cache, read at each such request with the new buffer counted (a peak
//! comes right after one). They come from the tails of the oldest buffers
//! (`madvise(MADV_DONTNEED)` on whole pages; a buffer given back entirely is freed). Below that
//! the cache keeps its buffers, and the next step, or the next batch, finds them again: giving
//! back as many bytes as each such request took, as the cache did before, made full-batch
//! GraphSAGE on 100,000 nodes give back and fault in again 300 MiB of its 490 MiB every epoch.
//! Under an address-space limit, where a cached buffer's reserved addresses count as much as
//! its pages, or where the process's memory cannot be read, a request gives back as many cached
//! bytes as it takes. A small request does not cost a large buffer: the large one stays cached,
//! shorter, and when it is reused only its given-back tail is faulted in again.
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
/// The most anonymous memory this process has been seen to need, in bytes: what it held less
/// the cache, read when a request misses the cache, the new buffer counted (a peak comes right
/// after one).
static ANON_PEAK: AtomicUsize = AtomicUsize::new(0);
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

/// Gives back the cached bytes that `bytes` of new pages would take the process past the
/// most anonymous memory it has needed, or `bytes` of them under an address-space limit or
/// where the process's memory cannot be read (see the module's comment).
fn make_room(cache: &mut VecDeque<Cached>, bytes: usize) {
    let anon = if crate::memory::address_space_left().is_some() {
        None
    } else {
        crate::memory::resident_anon_bytes()
    };
    let Some(anon) = anon else {
        give_back(cache, bytes);
        return;
    };
    let before = cached_bytes();
    give_back(
        cache,
        over_peak(anon, bytes, ANON_PEAK.load(Ordering::Relaxed)),
    );
    // The peak is of what the process needs, the cache left out: counting the cache's own
    // buffers would let the peak, and the cache with it, grow every epoch (GAT's by 37%).
    let needed = anon.saturating_sub(before) + bytes;
    ANON_PEAK.fetch_max(needed, Ordering::Relaxed);
}

/// The bytes by which `anon` resident bytes and `bytes` more exceed `peak`: what the cache
/// gives back for a new buffer.
fn over_peak(anon: usize, bytes: usize, peak: usize) -> usize {
    (anon + bytes).saturating_sub(peak)
}

/// Takes the cached buffer of `T` that best fits `capacity` elements (the smallest of at
/// least `capacity` and less than twice it), emptied, its pages past `needed_bytes` given
/// back. Without one, makes room for the caller's new allocation ([`make_room`]), so that it
/// takes the place of cached memory rather than adding to the process's peak.
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
        make_room(&mut cache, needed_bytes);
        return None;
    };
    let mut hit = cache.remove(at)?;
    CACHED_BYTES.fetch_sub(hit.resident, Ordering::Relaxed);
    // A buffer whose tail was given back faults it in again when filled: as for a new
    // buffer, room is made for that much, or reusing it could add to the peak (a GCN layer
    // 512 wide peaked 40 MiB over its live tensors so).
    let tail = needed_bytes.saturating_sub(hit.resident);
    if tail > 0 {
        make_room(&mut cache, tail);
    }
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
    fn the_cache_reuses_the_best_fit_and_gives_back_from_the_oldest_tails() {
        // Its own thread's view of a process-wide cache: nextest runs each test in a process.
        set_cache_limit(1 << 30);
        let mib = (1 << 20) / 4; // f32 elements per MiB
        let buffers: Vec<Vec<f32>> = [16 * mib, 8 * mib, 40 * mib].map(written).into();
        let long_start = buffers[2].as_ptr();
        buffers.into_iter().for_each(recycle);
        assert_eq!(cached_bytes(), 64 << 20);
        // 6 MiB fits the 8 MiB buffer (the smallest of at least 6 and under 12).
        let reused = written(6 * mib);
        assert_eq!(reused.capacity(), 8 * mib);
        assert_eq!(cached_bytes(), 56 << 20);
        // It comes back with what its last use wrote: 6 MiB.
        recycle(reused);
        assert_eq!(cached_bytes(), 62 << 20);
        // 20 MiB given back: the oldest buffer goes whole, the next oldest (40 MiB) gives
        // back its tail to a huge page, and the youngest stays untouched.
        give_back(&mut CACHE.lock().unwrap(), 20 << 20);
        let cached = cached_bytes();
        assert!(
            cached <= 42 << 20 && cached + HUGE_PAGE > 42 << 20,
            "{} bytes cached",
            cached
        );
        // The shortened buffer is handed out whole and works to its last element.
        let mut long = with_capacity::<f32>(40 * mib);
        assert_eq!((long.as_ptr(), long.capacity()), (long_start, 40 * mib));
        long.extend((0..40 * mib).map(|i| i as f32));
        assert!(long.iter().enumerate().all(|(i, &v)| v == i as f32));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_request_gives_back_only_what_would_take_the_process_past_its_peak() {
        set_cache_limit(1 << 30);
        let mib = (1 << 20) / 4;
        [16 * mib, 8 * mib]
            .map(written)
            .into_iter()
            .for_each(recycle);
        assert_eq!(cached_bytes(), 24 << 20);
        // Under the peak, a request no cached buffer fits takes no cached memory's place.
        let anon = crate::memory::resident_anon_bytes().unwrap();
        ANON_PEAK.store(anon + (64 << 20), Ordering::Relaxed);
        drop(with_capacity::<f32>(32 * mib));
        assert_eq!(cached_bytes(), 24 << 20);
        // 8 MiB under the peak, a 20 MiB request gives back 12 MiB (to a huge page) from the
        // oldest buffer's tail; the peak, of what the process needs less the cache, stays.
        let anon = crate::memory::resident_anon_bytes().unwrap();
        let peak = anon + (8 << 20);
        ANON_PEAK.store(peak, Ordering::Relaxed);
        let _fresh = with_capacity::<f32>(20 * mib);
        let cached = cached_bytes();
        assert!(
            cached <= 12 << 20 && cached + HUGE_PAGE + (1 << 20) > 12 << 20,
            "{} bytes cached",
            cached
        );
        assert_eq!(ANON_PEAK.load(Ordering::Relaxed), peak);
        // Without a peak to stay under, all of it goes, and the peak becomes what the process
        // needs: what it holds less the cache, and the new buffer.
        ANON_PEAK.store(0, Ordering::Relaxed);
        let anon = crate::memory::resident_anon_bytes().unwrap();
        drop(with_capacity::<f32>(20 * mib));
        assert_eq!(cached_bytes(), 0);
        let needed = anon - cached + (20 << 20);
        let peak = ANON_PEAK.load(Ordering::Relaxed);
        assert!(
            peak.abs_diff(needed) < 1 << 20,
            "peak {peak}, needed {needed}"
        );
    }

    #[test]
    fn over_peak_is_the_excess_of_memory_and_request_over_the_peak() {
        assert_eq!(over_peak(100, 20, 130), 0);
        assert_eq!(over_peak(100, 20, 110), 10);
        assert_eq!(over_peak(100, 20, 0), 120);
    }
}
