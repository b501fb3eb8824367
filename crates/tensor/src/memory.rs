//! Memory accounting: current and peak bytes per [`Category`], per worker, and the process RSS.
//!
//! Every tensor buffer charges its bytes to a [`MemoryTracker`] when it is allocated and releases
//! them when it is dropped. The tracker and the category are taken from the allocating thread
//! ([`set_thread_tracker`], [`category_scope`]), so in a job whose workers are threads of one
//! process each worker has its own counters. A buffer remembers where it was charged, so it is
//! released correctly whichever thread drops it.

mod limit;

pub use limit::{address_space_left, usable_memory_bytes, MemoryMeasure};

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// What an allocation is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// Input node features.
    Features,
    /// Values kept for the backward pass, and other intermediate results.
    Activations,
    /// Gradients of parameters and activations.
    Gradients,
    /// Graph structure: CSR arrays, normalisation coefficients.
    Graph,
    /// Parameters and optimizer state.
    Optimizer,
    /// Communication buffers.
    Comm,
    /// Caches of remote rows.
    Cache,
}

impl Category {
    /// Every category, in report order.
    pub const ALL: [Category; 7] = [
        Category::Features,
        Category::Activations,
        Category::Gradients,
        Category::Graph,
        Category::Optimizer,
        Category::Comm,
        Category::Cache,
    ];

    /// The lower-case name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Category::Features => "features",
            Category::Activations => "activations",
            Category::Gradients => "gradients",
            Category::Graph => "graph",
            Category::Optimizer => "optimizer",
            Category::Comm => "comm",
            Category::Cache => "cache",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Default)]
struct Counter {
    current: AtomicUsize,
    peak: AtomicUsize,
}

impl Counter {
    fn add(&self, bytes: usize) {
        let now = self.current.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }
    fn sub(&self, bytes: usize) {
        self.current.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// Current and peak bytes per category, and of all categories together, for one worker.
#[derive(Default)]
pub struct MemoryTracker {
    categories: [Counter; 7],
    total: Counter,
}

/// A snapshot of a tracker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryReport {
    /// Bytes held now, per category (indexed like [`Category::ALL`]).
    pub current: [usize; 7],
    /// The most bytes held at once, per category.
    pub peak: [usize; 7],
    /// Bytes held now in all categories.
    pub total_current: usize,
    /// The most bytes held at once in all categories together (not the sum of the peaks).
    pub total_peak: usize,
}

impl MemoryReport {
    /// Peak bytes of one category.
    pub fn peak_of(&self, c: Category) -> usize {
        self.peak[c.index()]
    }
    /// Current bytes of one category.
    pub fn current_of(&self, c: Category) -> usize {
        self.current[c.index()]
    }
}

impl MemoryTracker {
    /// A tracker with every counter at zero.
    pub fn new() -> Arc<MemoryTracker> {
        Arc::new(MemoryTracker::default())
    }

    fn charge(&self, c: Category, bytes: usize) {
        self.categories[c.index()].add(bytes);
        self.total.add(bytes);
    }

    fn release(&self, c: Category, bytes: usize) {
        self.categories[c.index()].sub(bytes);
        self.total.sub(bytes);
    }

    /// Reads every counter.
    pub fn report(&self) -> MemoryReport {
        let mut r = MemoryReport::default();
        for (i, c) in self.categories.iter().enumerate() {
            r.current[i] = c.current.load(Ordering::Relaxed);
            r.peak[i] = c.peak.load(Ordering::Relaxed);
        }
        r.total_current = self.total.current.load(Ordering::Relaxed);
        r.total_peak = self.total.peak.load(Ordering::Relaxed);
        r
    }
}

fn process_tracker() -> &'static Arc<MemoryTracker> {
    static PROCESS: OnceLock<Arc<MemoryTracker>> = OnceLock::new();
    PROCESS.get_or_init(MemoryTracker::new)
}

thread_local! {
    static THREAD_TRACKER: RefCell<Option<Arc<MemoryTracker>>> = const { RefCell::new(None) };
    static THREAD_CATEGORY: Cell<Category> = const { Cell::new(Category::Activations) };
}

/// The tracker that allocations on this thread are charged to: the one set by
/// [`set_thread_tracker`], or the process-wide tracker.
pub fn thread_tracker() -> Arc<MemoryTracker> {
    THREAD_TRACKER.with(|t| {
        t.borrow()
            .clone()
            .unwrap_or_else(|| process_tracker().clone())
    })
}

/// Makes this thread charge its allocations to `tracker` (a worker of a multi-worker job calls
/// this once on its own thread).
pub fn set_thread_tracker(tracker: Arc<MemoryTracker>) {
    THREAD_TRACKER.with(|t| *t.borrow_mut() = Some(tracker));
}

/// The category allocations on this thread are charged to now.
pub fn current_category() -> Category {
    THREAD_CATEGORY.with(|c| c.get())
}

/// Charges this thread's allocations to `category` until the returned guard is dropped.
pub fn category_scope(category: Category) -> CategoryGuard {
    let previous = THREAD_CATEGORY.with(|c| c.replace(category));
    CategoryGuard { previous }
}

/// Restores the previous category when dropped; see [`category_scope`].
#[must_use = "the category is restored when the guard drops"]
pub struct CategoryGuard {
    previous: Category,
}

impl Drop for CategoryGuard {
    fn drop(&mut self) {
        THREAD_CATEGORY.with(|c| c.set(self.previous));
    }
}

/// Bytes charged to a tracker, released on drop: how buffers that are not tensors (messages
/// in flight, say) show up in a worker's report.
pub struct Charge {
    tracker: Arc<MemoryTracker>,
    category: Category,
    bytes: usize,
}

impl Charge {
    /// Charges `bytes` to this thread's tracker under its current category.
    pub fn new(bytes: usize) -> Charge {
        let tracker = thread_tracker();
        let category = current_category();
        tracker.charge(category, bytes);
        Charge {
            tracker,
            category,
            bytes,
        }
    }

    pub(crate) fn category(&self) -> Category {
        self.category
    }
}

impl std::fmt::Debug for Charge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Charge({} bytes of {})",
            self.bytes,
            self.category.name()
        )
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.tracker.release(self.category, self.bytes);
    }
}

/// The process's resident memory, split by what backs it (from `/proc/self/status`).
///
/// Shared memory and memory-mapped files are reported apart from anonymous memory because
/// several processes of one node map the same pages: summing RSS over ranks would count them
/// once per rank.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RssReport {
    /// Private anonymous pages (heap, stacks).
    pub anon_bytes: u64,
    /// Pages of memory-mapped files.
    pub file_bytes: u64,
    /// Pages of shared memory.
    pub shmem_bytes: u64,
    /// The peak resident set size of the process (VmHWM).
    pub peak_bytes: u64,
}

/// The value in bytes of a `Key:   N kB` line of a `/proc` file's `text`.
fn kib_field(text: &str, key: &str) -> Option<u64> {
    let rest = text.lines().find_map(|l| l.strip_prefix(key))?;
    let kb = rest
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kb * 1024)
}

/// A field of the machine's `/proc/meminfo` in bytes (`"MemTotal:"`, `"MemAvailable:"`), or
/// `None` where it cannot be read (non-Linux). What this process may use can be less: see
/// [`usable_memory_bytes`], which sizes are checked against.
pub fn system_memory_bytes(key: &str) -> Option<u64> {
    kib_field(&std::fs::read_to_string("/proc/meminfo").ok()?, key)
}

/// The process's resident anonymous memory in bytes (`RssAnon` of `/proc/self/status`), or
/// `None` where it cannot be read (non-Linux).
pub fn resident_anon_bytes() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&text, "RssAnon:").map(|b| b as usize)
}

impl RssReport {
    /// Reads `/proc/self/status`; every field is 0 where the file is missing (non-Linux).
    pub fn read() -> RssReport {
        let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |key: &str| kib_field(&text, key).unwrap_or(0);
        RssReport {
            anon_bytes: field("RssAnon:"),
            file_bytes: field("RssFile:"),
            shmem_bytes: field("RssShmem:"),
            peak_bytes: field("VmHWM:"),
        }
    }
}

/// How often [`RssPeaks`] reads the process's memory: often enough to catch a phase of a
/// tenth of a second (the plan's probes; every 100 ms missed them in one run of three, and a
/// small run's peak then read a fifth under its prediction or over it), for reads of about
/// 20 microseconds each.
pub const RSS_SAMPLE_MS: u64 = 10;

/// The peaks of anonymous and file-backed resident memory of this process, sampled from
/// `/proc/self/status` every [`RSS_SAMPLE_MS`] ms by a thread of its own until
/// [`RssPeaks::finish`]. The
/// kernel's own peak (`VmHWM`) counts the page cache of mapped files, which the kernel
/// reclaims at will; anonymous memory is what a process truly holds.
pub struct RssPeaks {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<(u64, u64)>>,
}

impl RssPeaks {
    /// Starts sampling.
    pub fn start() -> RssPeaks {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            // A sampler that cannot start (no room for its stack) leaves the peaks to the
            // reading `finish` makes.
            crate::threads::builder().and_then(|b| {
                b.spawn(move || {
                    let mut peaks = (0, 0);
                    loop {
                        let r = RssReport::read();
                        peaks = (peaks.0.max(r.anon_bytes), peaks.1.max(r.file_bytes));
                        if stop.load(Ordering::Relaxed) {
                            return peaks;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(RSS_SAMPLE_MS));
                    }
                })
            })
        };
        RssPeaks {
            stop,
            thread: thread.ok(),
        }
    }

    /// Stops sampling; returns the peaks (anonymous, file-backed) in bytes, the moment of the
    /// call included.
    pub fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let peaks = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let now = RssReport::read();
        (peaks.0.max(now.anon_bytes), peaks.1.max(now.file_bytes))
    }
}

impl Drop for RssPeaks {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tensor;

    #[test]
    fn tensors_charge_their_category_and_release_on_drop() {
        let tracker = MemoryTracker::new();
        let t = tracker.clone();
        // A fresh thread, so no other test's allocations are counted.
        std::thread::spawn(move || {
            set_thread_tracker(t.clone());
            let a = {
                let _g = category_scope(Category::Features);
                Tensor::zeros(&[100, 10], crate::DType::F32)
            };
            let b = Tensor::zeros(&[50], crate::DType::F64);
            let r = t.report();
            assert_eq!(r.current_of(Category::Features), 4000);
            assert_eq!(r.current_of(Category::Activations), 400);
            assert_eq!(r.total_current, 4400);
            drop(a);
            drop(b);
            let c = Tensor::zeros(&[10], crate::DType::BF16);
            let r = t.report();
            assert_eq!(r.total_current, 20);
            assert_eq!(r.total_peak, 4400);
            assert_eq!(r.peak_of(Category::Features), 4000);
            drop(c);
        })
        .join()
        .unwrap();
        assert_eq!(tracker.report().total_current, 0);
    }

    #[test]
    fn rss_is_read_on_linux() {
        let r = RssReport::read();
        if cfg!(target_os = "linux") {
            assert!(r.anon_bytes > 0 && r.peak_bytes >= r.anon_bytes);
            // 64 MiB touched while sampling shows in the anonymous peak.
            let peaks = RssPeaks::start();
            let v = vec![1u8; 64 << 20];
            std::thread::sleep(std::time::Duration::from_millis(250));
            let (anon, _) = peaks.finish();
            assert!(
                anon >= r.anon_bytes + (60 << 20),
                "{anon} vs {}",
                r.anon_bytes
            );
            drop(v);
        }
    }
}
