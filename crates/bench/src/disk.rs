//! The disk under a benchmark's files: how many reads it has completed, and how many random
//! direct reads per second it sustains (the limit out-of-core training is measured against).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use graphloom_io::direct::DirectFile;

/// Reads the disk under `dir` has completed so far (the first field of its
/// `/sys/dev/block/MAJOR:MINOR/stat`: every process's, so run the bench on a quiet disk), or,
/// where no block device can be found, this process's bytes read from storage in 4 KiB pages.
/// Counting requests, not bytes, keeps page faults (4 KiB) and direct reads (a sector or
/// more) comparable.
pub(crate) fn disk_reads(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let device = std::fs::metadata(dir).ok().and_then(|m| {
        let dev = m.dev();
        let stat = format!(
            "/sys/dev/block/{}:{}/stat",
            libc::major(dev),
            libc::minor(dev)
        );
        std::fs::read_to_string(stat)
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    });
    device.unwrap_or_else(|| {
        std::fs::read_to_string("/proc/self/io")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("read_bytes:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
            / 4096
    })
}

/// What [`probe`] measured.
pub(crate) struct Probe {
    /// Reads completed per second.
    pub(crate) reads_per_second: f64,
    /// Bytes per read: the file system's direct-read alignment, the size a row is read with.
    pub(crate) read_bytes: usize,
}

/// Random reads of `path` with O_DIRECT, each of the file system's direct-read alignment (what
/// `DirectFile` reads a row with), from 32 threads (queue depth 32) for `seconds`: the disk's
/// limit for the reads a training run makes.
pub(crate) fn probe(path: &Path, seconds: f64) -> Result<Probe> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    const DEPTH: usize = 32;
    let block = DirectFile::open(path, None)?.alignment();
    let page_bytes = graphloom_io::direct::ALIGN;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .with_context(|| format!("opening {} for direct reads", path.display()))?;
    let blocks = (file.metadata()?.len() as usize / block).max(1) as u64;
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let reads = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..DEPTH {
            let (file, reads) = (&file, &reads);
            scope.spawn(move || {
                let layout =
                    std::alloc::Layout::from_size_align(page_bytes, page_bytes).expect("valid");
                // SAFETY: a non-zero size; freed below.
                let buf = unsafe { std::alloc::alloc(layout) };
                // SAFETY: buf holds a page, aligned for O_DIRECT; a read takes its first block.
                let slice = unsafe { std::slice::from_raw_parts_mut(buf, block) };
                let key = graphloom_tensor::rng::RngKey::new(7, t as u64, 0x50524f42);
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let at = key.bits(i, 0) % blocks;
                    i += 1;
                    if file.read_at(slice, at * block as u64).is_ok() {
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                }
                // SAFETY: allocated above with this layout.
                unsafe { std::alloc::dealloc(buf, layout) };
            });
        }
    });
    Ok(Probe {
        reads_per_second: reads.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64(),
        read_bytes: block,
    })
}
