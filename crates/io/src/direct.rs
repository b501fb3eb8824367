//! Reading many scattered byte ranges of a large file at once, past the page cache.
//!
//! A batch gathers thousands of feature rows from all over a file larger than memory. Read
//! through a mapping, each missing row is a page fault that blocks a compute thread for a disk
//! round trip, and the kernel keeps (and evicts for) whole 4 KiB pages around rows of a few
//! hundred bytes. A [`DirectFile`] instead takes the whole batch of ranges at once, turns them
//! into sorted, de-duplicated, block-aligned runs, and keeps many reads in flight: through one
//! io_uring where the kernel allows it, through a pool of threads calling `pread` where not.
//! The file is opened with `O_DIRECT`, so the reads neither fault nor fill the page cache
//! (what is worth keeping, the caller keeps in its own row cache); on a file system that
//! refuses `O_DIRECT` (tmpfs) the same reads go through the page cache.

use std::alloc::Layout;
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::{Error, Result};

/// The alignment of reads where the file system does not say what `O_DIRECT` needs (and of
/// every buffer): a page, which every block size a Linux file system uses divides.
pub const ALIGN: usize = 4096;

/// The longest single read: longer merged runs are read in pieces, so one run of hub rows does
/// not serialise a batch behind it.
const MAX_READ: usize = 256 << 10;

/// The most bytes of blocks read before they are copied out and the buffer reused.
const GROUP_BYTES: usize = 32 << 20;

/// Reads in flight at once through a ring: 64 kept a virtio disk at 69% of the requests per
/// second 32 synchronous threads reach, 128 at 84% (bench/history/2026-11-29-to-2026-12-03.md).
const QUEUE_DEPTH: usize = 128;

/// The longest run [`DirectFile::read_ranges_bridging`] makes by reading across gaps, so
/// that a bridged run stays a small part of a group's buffer.
const MAX_BRIDGED_RUN: u64 = 4 << 20;

/// Threads of the pread pool, each with one read in flight.
const POOL_THREADS: usize = 64;

/// How a [`DirectFile`] issues its reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadEngine {
    /// One io_uring: every read of a batch submitted together, completions reaped as they come.
    IoUring,
    /// A pool of threads, each with one `pread` in flight (where io_uring is unavailable:
    /// old kernels, containers whose seccomp profile forbids it).
    PreadPool,
}

impl ReadEngine {
    /// The engine's name, as reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            ReadEngine::IoUring => "io_uring",
            ReadEngine::PreadPool => "pread",
        }
    }
}

/// A file read in batches of scattered ranges; see the module docs.
pub struct DirectFile {
    path: PathBuf,
    file: File,
    len: u64,
    direct: bool,
    /// Offsets and lengths of reads are multiples of this: the file system's `O_DIRECT`
    /// alignment (often a 512-byte sector, so a 256-byte row costs a sector, not a page).
    align: usize,
    engine: ReadEngine,
    /// Idle rings, one taken per batch so concurrent batches do not share a queue.
    rings: Mutex<Vec<io_uring::IoUring>>,
}

impl DirectFile {
    /// Opens `path` for batched reads, with `O_DIRECT` where its file system allows, through
    /// `engine` (default: io_uring when the kernel grants a ring, else the pread pool).
    pub fn open(path: &Path, engine: Option<ReadEngine>) -> Result<DirectFile> {
        let open = |flags| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(flags)
                .open(path)
        };
        let (file, direct) = match open(libc::O_DIRECT) {
            Ok(f) => (f, true),
            // tmpfs and some network file systems refuse O_DIRECT: read through the cache.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                (open(0).map_err(|e| Error::io(path, e))?, false)
            }
            Err(e) => return Err(Error::io(path, e)),
        };
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let align = if direct {
            direct_alignment(&file).unwrap_or(ALIGN)
        } else {
            ALIGN
        };
        let mut rings = Vec::new();
        let engine = match engine {
            Some(ReadEngine::PreadPool) => ReadEngine::PreadPool,
            wanted => match io_uring::IoUring::new(QUEUE_DEPTH as u32) {
                Ok(ring) => {
                    rings.push(ring);
                    ReadEngine::IoUring
                }
                Err(e) if wanted == Some(ReadEngine::IoUring) => {
                    return Err(Error::io(
                        path,
                        std::io::Error::other(format!("io_uring is not available here ({e})")),
                    ))
                }
                Err(_) => ReadEngine::PreadPool,
            },
        };
        Ok(DirectFile {
            path: path.to_path_buf(),
            file,
            len,
            direct,
            align,
            engine,
            rings: Mutex::new(rings),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether reads bypass the page cache (`O_DIRECT`).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// How reads are issued.
    pub fn engine(&self) -> ReadEngine {
        self.engine
    }

    /// The granularity of reads: offsets and lengths are multiples of it.
    pub fn alignment(&self) -> usize {
        self.align
    }

    /// Reads the byte ranges `ranges` (any order, overlaps allowed, each inside the file) and
    /// writes them one after the other into `out`, which must hold their total length.
    /// Returns the number of reads the disk was asked for.
    pub fn read_ranges(&self, ranges: &[Range<u64>], out: &mut [u8]) -> Result<usize> {
        self.read_grouped(ranges, out, GROUP_BYTES, 0)
    }

    /// [`DirectFile::read_ranges`], reading the bytes between two ranges too where fewer than
    /// `gap` of them lie between: a dense set of ranges (a cache's fill) becomes a few long
    /// sequential reads, which a disk serves far faster than as many short ones. A gap is
    /// worth reading while reading it takes less time than a read of its own costs, about
    /// the disk's bandwidth over its reads per second.
    pub fn read_ranges_bridging(
        &self,
        ranges: &[Range<u64>],
        out: &mut [u8],
        gap: u64,
    ) -> Result<usize> {
        self.read_grouped(ranges, out, GROUP_BYTES, gap)
    }

    /// [`DirectFile::read_ranges_bridging`], reading at most `group_bytes` of blocks (or one
    /// longer run) before copying them out.
    fn read_grouped(
        &self,
        ranges: &[Range<u64>],
        out: &mut [u8],
        group_bytes: usize,
        gap: u64,
    ) -> Result<usize> {
        let total: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
        if total != out.len() as u64 {
            return Err(Error::format(
                &self.path,
                format!("{} bytes asked for into {} bytes", total, out.len()),
            ));
        }
        if let Some(bad) = ranges.iter().find(|r| r.start > r.end || r.end > self.len) {
            return Err(Error::format(
                &self.path,
                format!(
                    "bytes {}..{} asked for: the file holds {} bytes",
                    bad.start, bad.end, self.len
                ),
            ));
        }
        // Where each range goes in `out`, and the ranges in file order.
        let mut out_at = Vec::with_capacity(ranges.len());
        let mut written = 0usize;
        for r in ranges {
            out_at.push(written);
            written += (r.end - r.start) as usize;
        }
        let mut by_start: Vec<usize> = (0..ranges.len()).collect();
        by_start.sort_unstable_by_key(|&i| ranges[i].start);
        let runs = aligned_runs(ranges, self.align as u64, gap);
        let mut buffer = AlignedBuffer::new(0);
        let mut next_range = 0usize;
        let mut reads_issued = 0usize;
        // Runs are read a group of at most `group_bytes` at a time (a single longer run alone),
        // so a batch of a million rows never holds a million blocks in memory at once.
        let mut first = 0usize;
        while first < runs.len() {
            let mut last = first;
            let mut bytes = 0usize;
            while last < runs.len() {
                let len = (runs[last].end - runs[last].start) as usize;
                if last > first && bytes + len > group_bytes {
                    break;
                }
                bytes += len;
                last += 1;
            }
            let group = &runs[first..last];
            if buffer.len() < bytes {
                buffer = AlignedBuffer::new(bytes);
            }
            // Each run's place in the buffer, and the reads that fill it.
            let mut at = Vec::with_capacity(group.len());
            let mut reads = Vec::new();
            let mut offset = 0usize;
            for run in group {
                at.push(offset);
                let mut start = run.start;
                while start < run.end {
                    let end = (start + MAX_READ as u64).min(run.end);
                    reads.push(Read {
                        file_offset: start,
                        buffer_offset: offset + (start - run.start) as usize,
                        len: (end - start) as usize,
                    });
                    start = end;
                }
                offset += (run.end - run.start) as usize;
            }
            match self.engine {
                ReadEngine::IoUring => self.read_uring(&reads, &mut buffer)?,
                ReadEngine::PreadPool => self.read_pool(&reads, buffer.as_mut_slice())?,
            }
            reads_issued += reads.len();
            // Copy out every range that starts in this group (its blocks all lie in the run
            // that holds its start).
            let group_end = group[group.len() - 1].end;
            let data = buffer.as_mut_slice();
            while let Some(&i) = by_start.get(next_range) {
                let r = &ranges[i];
                if r.start >= group_end {
                    break;
                }
                next_range += 1;
                let len = (r.end - r.start) as usize;
                if len == 0 {
                    continue;
                }
                let k = group.partition_point(|run| run.start <= r.start) - 1;
                let from = at[k] + (r.start - group[k].start) as usize;
                out[out_at[i]..out_at[i] + len].copy_from_slice(&data[from..from + len]);
            }
            first = last;
        }
        Ok(reads_issued)
    }

    /// Runs `reads` through a ring, up to [`QUEUE_DEPTH`] in flight.
    fn read_uring(&self, reads: &[Read], buffer: &mut AlignedBuffer) -> Result<()> {
        let taken = self.rings.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut ring = match taken {
            Some(ring) => ring,
            None => io_uring::IoUring::new(QUEUE_DEPTH as u32).map_err(|e| self.error(e))?,
        };
        match self.drive_ring(&mut ring, reads, buffer.as_mut_slice()) {
            Ok(()) => {
                self.rings
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(ring);
                Ok(())
            }
            Err(RingFailure::Reaped(e)) => Err(e),
            Err(RingFailure::Broken(e)) => {
                // Reads may still be in flight into the buffer, and the ring cannot reap
                // them: leak the buffer (a failing disk is rare; memory the kernel may still
                // write must never be handed out again) and the ring with it.
                std::mem::forget(std::mem::replace(buffer, AlignedBuffer::new(0)));
                std::mem::forget(ring);
                Err(e)
            }
        }
    }

    fn drive_ring(
        &self,
        ring: &mut io_uring::IoUring,
        reads: &[Read],
        buffer: &mut [u8],
    ) -> std::result::Result<(), RingFailure> {
        use io_uring::{opcode, types};
        let fd = types::Fd(self.file.as_raw_fd());
        let base = buffer.as_mut_ptr();
        // What is left of each read (a short read is continued where it stopped).
        let mut left: Vec<Read> = reads.to_vec();
        let mut queue: Vec<usize> = (0..reads.len()).rev().collect();
        let mut in_flight = 0usize;
        // The first failure: nothing more is queued, but every read in flight is reaped
        // before returning, so the kernel never writes into a buffer that has been freed.
        let mut failure: Option<Error> = None;
        while in_flight > 0 || (failure.is_none() && !queue.is_empty()) {
            while failure.is_none() && in_flight < QUEUE_DEPTH {
                let Some(k) = queue.pop() else { break };
                let r = &left[k];
                // SAFETY: the read's bytes lie inside `buffer`, which outlives every read in
                // flight (all are reaped before this returns).
                let target = unsafe { base.add(r.buffer_offset) };
                let entry = opcode::Read::new(fd, target, r.len as u32)
                    .offset(r.file_offset)
                    .build()
                    .user_data(k as u64);
                // SAFETY: as above; the queue has room (at most QUEUE_DEPTH entries in flight).
                if unsafe { ring.submission().push(&entry) }.is_err() {
                    failure = Some(self.error(std::io::Error::other("io_uring queue full")));
                    break;
                }
                in_flight += 1;
            }
            if in_flight == 0 {
                break;
            }
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) => {}
                Err(e) => return Err(RingFailure::Broken(self.error(e))),
            }
            let done: Vec<(usize, i32)> = ring
                .completion()
                .map(|c| (c.user_data() as usize, c.result()))
                .collect();
            for (k, res) in done {
                in_flight -= 1;
                if failure.is_some() {
                    continue;
                }
                if res == -libc::EINTR || res == -libc::EAGAIN {
                    queue.push(k);
                    continue;
                }
                if res < 0 {
                    failure = Some(self.error(std::io::Error::from_raw_os_error(-res)));
                    continue;
                }
                match self.advance(&mut left[k], res as usize) {
                    Ok(true) => queue.push(k),
                    Ok(false) => {}
                    Err(e) => failure = Some(e),
                }
            }
        }
        match failure {
            Some(e) => Err(RingFailure::Reaped(e)),
            None => Ok(()),
        }
    }

    /// Runs `reads` on a pool of threads calling `pread`, [`POOL_THREADS`] at most.
    fn read_pool(&self, reads: &[Read], buffer: &mut [u8]) -> Result<()> {
        let threads = reads.len().min(POOL_THREADS);
        let next = AtomicUsize::new(0);
        let base = SendPtr(buffer.as_mut_ptr());
        let errors: Mutex<Option<Error>> = Mutex::new(None);
        let work = || loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            let Some(read) = reads.get(k) else { return };
            let mut r = *read;
            let outcome = loop {
                // SAFETY: each read owns its disjoint bytes of `buffer`.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(base.get().add(r.buffer_offset), r.len)
                };
                match self.file.read_at(dst, r.file_offset) {
                    Ok(n) => match self.advance(&mut r, n) {
                        Ok(true) => continue,
                        Ok(false) => break Ok(()),
                        Err(e) => break Err(e),
                    },
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => break Err(self.error(e)),
                }
            };
            if let Err(e) = outcome {
                errors
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(e);
                next.store(reads.len(), Ordering::Relaxed);
                return;
            }
        };
        std::thread::scope(|s| {
            // Each thread takes the next read until none is left, so any number of them does
            // all the reads; with none started (no room for a stack), this thread does them.
            let started = (0..threads)
                .filter(|_| std::thread::Builder::new().spawn_scoped(s, work).is_ok())
                .count();
            if started == 0 {
                work();
            }
        });
        match errors.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Moves `r` past the `n` bytes just read; returns whether part of it is still to be read.
    /// A read stopping at the end of the file is complete (runs are rounded up to whole
    /// blocks past it); one stopping anywhere else continues where it stopped.
    fn advance(&self, r: &mut Read, n: usize) -> Result<bool> {
        let n = n.min(r.len);
        r.file_offset += n as u64;
        r.buffer_offset += n;
        r.len -= n;
        if r.len == 0 || r.file_offset >= self.len {
            return Ok(false);
        }
        if n == 0 || (self.direct && n % self.align != 0) {
            return Err(Error::format(
                &self.path,
                format!(
                    "a read stopped at byte {} of {}: was the file truncated while in use?",
                    r.file_offset, self.len
                ),
            ));
        }
        Ok(true)
    }

    fn error(&self, e: std::io::Error) -> Error {
        Error::io(&self.path, e)
    }
}

/// How a ring's batch failed.
enum RingFailure {
    /// With every read reaped: the buffer and the ring are free.
    Reaped(Error),
    /// The ring refused to submit or wait with reads in flight.
    Broken(Error),
}

/// One read: `len` bytes of the file at `file_offset` into the buffer at `buffer_offset`.
#[derive(Clone, Copy, Debug)]
struct Read {
    file_offset: u64,
    buffer_offset: usize,
    len: usize,
}

/// The alignment `O_DIRECT` needs of offsets and lengths in `file` (Linux 6.1's
/// `STATX_DIOALIGN`), when the kernel says and it divides a page.
fn direct_alignment(file: &File) -> Option<usize> {
    // SAFETY: statx writes the struct it is given; an all-zero statx is a valid value.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor, an empty path with AT_EMPTY_PATH, and a struct to fill.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut st,
        )
    };
    let offset = st.stx_dio_offset_align as usize;
    let memory = st.stx_dio_mem_align as usize;
    let known = rc == 0 && st.stx_mask & libc::STATX_DIOALIGN != 0;
    (known && offset.is_power_of_two() && offset <= ALIGN && memory <= ALIGN).then_some(offset)
}

/// The byte ranges `ranges` as sorted, merged runs of whole blocks of `align` bytes; runs less
/// than `gap` bytes apart are joined too while the joined run stays within
/// [`MAX_BRIDGED_RUN`] (a range is never split between runs).
fn aligned_runs(ranges: &[Range<u64>], align: u64, gap: u64) -> Vec<Range<u64>> {
    let mut blocks: Vec<Range<u64>> = ranges
        .iter()
        .filter(|r| r.end > r.start)
        .map(|r| r.start / align * align..r.end.div_ceil(align) * align)
        .collect();
    blocks.sort_unstable_by_key(|r| r.start);
    let mut runs: Vec<Range<u64>> = Vec::with_capacity(blocks.len());
    for b in blocks {
        match runs.last_mut() {
            Some(last) if b.start <= last.end => last.end = last.end.max(b.end),
            Some(last) if b.start - last.end < gap && b.end - last.start <= MAX_BRIDGED_RUN => {
                last.end = b.end
            }
            _ => runs.push(b),
        }
    }
    runs
}

/// A zeroed heap buffer aligned for `O_DIRECT`.
struct AlignedBuffer {
    ptr: *mut u8,
    layout: Layout,
}

impl AlignedBuffer {
    fn new(len: usize) -> AlignedBuffer {
        let layout = Layout::from_size_align(len.max(ALIGN), ALIGN).expect("aligned layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuffer { ptr, layout }
    }

    fn len(&self) -> usize {
        self.layout.size()
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the allocation holds layout.size() initialised (zeroed) bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// A pointer the pread threads share; each writes only its own reads' bytes.
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: the threads write disjoint ranges and the scope joins them before the buffer is used.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn get(self) -> *mut u8 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_groups_read_the_same_bytes() {
        let path =
            std::env::temp_dir().join(format!("graphloom-direct-groups-{}", std::process::id()));
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = DirectFile::open(&path, None).unwrap();
        // Unsorted, overlapping, empty and block-straddling ranges over many groups.
        let ranges: Vec<Range<u64>> = (0..500u64)
            .map(|i| {
                let start = (i * 7919 * 13) % 199_000;
                start..start + (i % 5) * 200
            })
            .collect();
        let want: Vec<u8> = ranges
            .iter()
            .flat_map(|r| bytes[r.start as usize..r.end as usize].iter().copied())
            .collect();
        for group in [1, ALIGN, 3 * ALIGN, 1 << 20] {
            let mut got = vec![0u8; want.len()];
            for gap in [0, 1, ALIGN as u64, 1 << 30] {
                file.read_grouped(&ranges, &mut got, group, gap).unwrap();
                assert!(got == want, "group of {group} bytes, gaps under {gap} read");
            }
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn ranges_become_sorted_merged_aligned_runs() {
        let ranges = [5000..5001, 0..10, 4095..4097, 20000..20000, 12288..12290];
        assert_eq!(aligned_runs(&ranges, 4096, 0), vec![0..8192, 12288..16384]);
        assert_eq!(
            aligned_runs(&ranges, 512, 0),
            vec![0..512, 3584..5120, 12288..12800]
        );
        // Gaps under 4096 bytes are read: 512..3584 (3072) is, 5120..12288 (7168) is not.
        assert_eq!(
            aligned_runs(&ranges, 512, 4096),
            vec![0..5120, 12288..12800]
        );
        assert_eq!(aligned_runs(&ranges, 512, 1 << 20), vec![0..12800]);
        // A bridged run stops at MAX_BRIDGED_RUN; touching blocks still join.
        let far = [0..1, MAX_BRIDGED_RUN - 512..MAX_BRIDGED_RUN + 1];
        assert_eq!(
            aligned_runs(&far, 512, u64::MAX),
            vec![0..512, MAX_BRIDGED_RUN - 512..MAX_BRIDGED_RUN + 512]
        );
    }
}
