//! The bounded fuzz runs of the workspace's tests: seeded cases of a [`Target`], each read under
//! watch for a panic (caught, and reported with the case that caused it), a hang (a time
//! limit), an error that is not one line naming its file, and an allocation beyond the
//! input's size times the target's factor (a counting global allocator: this file makes it
//! the test binary's allocator).
//!
//! A fuzz test binary holds only fuzz tests: they take one lock, so the allocator's peak is
//! that of one case even where the tests of a binary run on parallel threads.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::mutate::{check_errors, Case, Choices, Target};

/// Bytes every case may allocate whatever its size (read buffers, a chunk of checks).
const ALLOWANCE: usize = 48 << 20;
/// A single allocation larger than this ends the process at once, naming the case: it could
/// not be survived on a small machine.
const FATAL: usize = 1 << 30;
/// How long one case may take.
const TIME_LIMIT: Duration = Duration::from_secs(20);

/// Bytes allocated and not freed.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The most bytes live since the last reset.
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Whether a case is being read (an allocation beyond [`FATAL`] is then fatal).
static ARMED: AtomicBool = AtomicBool::new(false);
/// The case being read.
static CURRENT: Mutex<String> = Mutex::new(String::new());
/// One fuzz run at a time per process.
static RUN: Mutex<()> = Mutex::new(());

/// The system allocator, counting.
struct Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

impl Counting {
    fn grow(size: usize) {
        let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
        PEAK.fetch_max(live, Ordering::Relaxed);
    }

    /// Whether a request of `size` bytes is refused (after naming the case that made it).
    fn refuse(size: usize) -> bool {
        if size <= FATAL || !ARMED.load(Ordering::Relaxed) {
            return false;
        }
        if let Ok(case) = CURRENT.try_lock() {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "fuzz case allocates {size} bytes at once: {case}"
            );
        }
        true
    }
}

// SAFETY: every call is passed to the system allocator unchanged; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if Counting::refuse(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, as given.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            Counting::grow(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if Counting::refuse(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, as given.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            Counting::grow(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's pointer and layout, as given.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() && Counting::refuse(new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's pointer, layout and size, as given.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                Counting::grow(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

/// A scratch folder for one test's cases.
pub(crate) fn scratch(name: &str) -> PathBuf {
    crate::mutate::scratch_root().join(format!("graphloom-fuzz-{name}-{}", std::process::id()))
}

/// Reads `cases` damaged copies of `target`'s files (case `i` from seed `seed * 1000003 + i`), and fails
/// naming every case that panicked, hung, gave a badly formed error or allocated too much.
/// Also reads the valid files, which must be accepted. `GRAPHLOOM_FUZZ_SCALE=K` runs K times
/// as many cases, from other seeds past these.
pub(crate) fn fuzz(target: &Target, seed: u64, cases: u64) {
    let _one = RUN.lock().unwrap_or_else(|e| e.into_inner());
    let scale: u64 = std::env::var("GRAPHLOOM_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let cases = cases * scale.max(1);
    let dir = scratch(target.name);
    let valid = Case {
        files: (target.encode)(target.files.clone()),
        what: format!("{}: the valid files", target.name),
    };
    valid.write(&dir);
    let errors = (target.read)(&dir);
    assert!(errors.is_empty(), "{}: {errors:?}", valid.what);
    let mut failures = Vec::new();
    for i in 0..cases {
        let case_seed = seed.wrapping_mul(1_000_003).wrapping_add(i);
        let case = Case::new(target, &mut Choices::Seeded(case_seed));
        let what = format!("seed {case_seed} {}", case.what);
        match run_case(target, &case, &dir, &what) {
            Ok(_) => {}
            Err(Failure::Hung) => {
                // The reader is still running on its thread: nothing after it can be trusted.
                failures.push(format!("{what}: no answer after {TIME_LIMIT:?}"));
                break;
            }
            Err(Failure::Bad(msg)) => failures.push(format!("{what}: {msg}")),
        }
        if failures.len() == 10 {
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "{} of the cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

enum Failure {
    Hung,
    Bad(String),
}

/// Writes and reads one case under watch; returns the reader's errors.
fn run_case(target: &Target, case: &Case, dir: &Path, what: &str) -> Result<Vec<String>, Failure> {
    case.write(dir);
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = what.to_string();
    let read = target.read;
    let (tx, rx) = std::sync::mpsc::channel();
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    ARMED.store(true, Ordering::Relaxed);
    let path = dir.to_path_buf();
    std::thread::spawn(move || {
        let result = std::panic::catch_unwind(|| read(&path));
        let _ = tx.send(result);
    });
    let result = rx.recv_timeout(TIME_LIMIT);
    ARMED.store(false, Ordering::Relaxed);
    let grown = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    let errors = match result {
        Err(_) => return Err(Failure::Hung),
        Ok(Err(panic)) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            return Err(Failure::Bad(format!("panicked: {msg}")));
        }
        Ok(Ok(errors)) => errors,
    };
    let limit = target.alloc_factor * case.bytes() + ALLOWANCE;
    if grown > limit {
        return Err(Failure::Bad(format!(
            "allocated {grown} bytes for {} bytes of input (limit {limit})",
            case.bytes()
        )));
    }
    check_errors(&errors, dir).map_err(Failure::Bad)?;
    Ok(errors)
}

/// Reads `target`'s valid files with `file` (unencoded) changed by `edit`, under the same watch
/// as a fuzz case, and returns the errors; fails on a panic, a hang, an allocation beyond the
/// bound or an error that is not one line naming its file. For the regression tests of the
/// cases the fuzz runs found.
pub(crate) fn read_edited(
    target: &Target,
    file: &str,
    edit: impl FnOnce(&mut Vec<u8>),
) -> Vec<String> {
    let _one = RUN.lock().unwrap_or_else(|e| e.into_inner());
    let mut files = target.files.clone();
    let (_, bytes) = files
        .iter_mut()
        .find(|(name, _)| name == file)
        .unwrap_or_else(|| panic!("{} has no file {file}", target.name));
    edit(bytes);
    let case = Case {
        files: (target.encode)(files),
        what: format!("{}: {file} edited", target.name),
    };
    let dir = scratch(&format!("{}-edited", target.name));
    let result = run_case(target, &case, &dir, &case.what);
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(errors) => errors,
        Err(Failure::Hung) => panic!("{}: no answer after {TIME_LIMIT:?}", case.what),
        Err(Failure::Bad(msg)) => panic!("{}: {msg}", case.what),
    }
}

/// Replaces the first `from` in `bytes` by `to`.
pub(crate) fn replace(bytes: &mut Vec<u8>, from: &[u8], to: &[u8]) {
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .unwrap_or_else(|| panic!("{:?} not found", String::from_utf8_lossy(from)));
    bytes.splice(at..at + from.len(), to.iter().copied());
}

/// Fails unless one of `errors` contains `expected`.
pub(crate) fn assert_refused(errors: &[String], expected: &str) {
    assert!(
        errors.iter().any(|e| e.contains(expected)),
        "expected an error saying {expected:?}, got {errors:?}"
    );
}

/// Reads one case of each fuzzer input in `inputs`, as a `cargo fuzz` target does (so its
/// path is tested here too): each must be read without a panic.
pub(crate) fn replay(target: &Target, inputs: &[&[u8]]) {
    let _one = RUN.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch(&format!("{}-replay", target.name));
    for input in inputs {
        crate::mutate::run_input(target, &dir, input);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
