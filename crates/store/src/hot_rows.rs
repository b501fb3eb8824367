//! [`HotRows`]: a table in a mapped file read through a cache of its hottest rows in process
//! memory.
//!
//! A row of a feature file is a few hundred bytes, and a disk reads (and the page cache
//! keeps) 4 KiB pages: caching the page of a hot row caches fifteen cold rows beside it. A row
//! cache holds the hot rows alone, so the same memory covers many more of the rows a batch
//! asks for. Rows are admitted once, by a score given up front (the in-degree: a node sampled
//! as a neighbour is likely one many edges lead from and to); sampled batches of a large
//! graph are i.i.d. enough that a static choice needs no bookkeeping on the hot path.
//!
//! Misses are read in one of two ways ([`MissReads`]). `Direct` (the default of training
//! runs) reads a batch's missing rows, sorted and de-duplicated, with `O_DIRECT` through
//! [`DirectFile`] (io_uring, or a pread pool): no page faults on the compute threads, and no
//! page cache filled with the cold rows beside each row read. `Mapped` reads the mapped file:
//! before copying, the gather asks the kernel to start reading every missing page at once
//! (`MADV_WILLNEED`), so many reads are in flight instead of one per copying thread.

use std::sync::atomic::{AtomicU64, Ordering};

use graphloom_io::direct::{DirectFile, ReadEngine};
use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::Tensor;

use crate::copy::{gather_rows, SendPtr};
use crate::{Layout, Location, Result, RowFiles, StoreError, StoreTensor};

/// No cache slot.
const NOT_CACHED: u32 = u32::MAX;

/// How a [`HotRows`] reads the rows its cache does not hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissReads {
    /// Batched `O_DIRECT` reads through this engine (default: io_uring where the kernel
    /// grants it, else a pread pool).
    Direct(Option<ReadEngine>),
    /// Page faults on the mapped file, its pages asked for ahead of the copy.
    Mapped,
}

/// The file behind a table read with [`MissReads::Direct`].
struct DirectRows {
    file: DirectFile,
    /// Where row 0 starts in the file (after a `.npy` header).
    data_offset: u64,
}

/// A file-mapped table with its hottest rows copied into memory; see the module docs.
pub struct HotRows {
    table: StoreTensor,
    /// Cache slot of each row, or `NOT_CACHED`.
    slot: Vec<u32>,
    /// The cached rows, one after the other.
    cached: Vec<u8>,
    /// Set for [`MissReads::Direct`].
    direct: Option<DirectRows>,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Rows read from the file (a row missed twice in one batch is read once).
    rows_read: AtomicU64,
    /// Seconds the cache took to fill.
    fill_seconds: f64,
}

impl HotRows {
    /// Caches rows `hot` of `table` (a Continuous table mapped from a file; ids distinct and in
    /// range), copied from it now, and reads the others as `reads` says. The cache's memory
    /// is charged to [`Category::Cache`].
    pub fn new(table: StoreTensor, hot: &[u32], reads: MissReads) -> Result<HotRows> {
        let refused = || {
            StoreError::Invalid("a row cache reads a Continuous table mapped from a file".into())
        };
        let Location::Mmap { path, .. } = &table.spec().location else {
            return Err(refused());
        };
        if table.spec().layout != Layout::Continuous || table.whole_bytes().is_none() {
            return Err(refused());
        }
        if hot.len() >= NOT_CACHED as usize {
            return Err(StoreError::Invalid(format!(
                "{} cached rows: at most {}",
                hot.len(),
                NOT_CACHED - 1
            )));
        }
        let rows = table.rows();
        let rb = table.row_bytes();
        let _g = category_scope(Category::Cache);
        // Slots in file order, so the fill reads the file front to back into the cache.
        let mut sorted = hot.to_vec();
        sorted.sort_unstable();
        if let Some(&bad) = sorted.last().filter(|&&v| v as usize >= rows) {
            return Err(StoreError::Invalid(format!(
                "cached row {bad} is not below {rows}"
            )));
        }
        if let Some(twice) = sorted.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(StoreError::Invalid(format!(
                "row {} is cached twice",
                twice[0]
            )));
        }
        let mut slot = vec![NOT_CACHED; rows];
        for (k, &v) in sorted.iter().enumerate() {
            slot[v as usize] = k as u32;
        }
        let row_elems = table.shape().get(1).copied().unwrap_or(1);
        let files = RowFiles::open(std::slice::from_ref(path), row_elems, table.dtype())?;
        let (_, data_offset) = files.single().expect("one file");
        let engine = match reads {
            MissReads::Direct(engine) => engine,
            MissReads::Mapped => None,
        };
        let file = DirectFile::open(path, engine)?;
        let started = std::time::Instant::now();
        let mut cached = vec![0u8; sorted.len() * rb];
        fill_rows(&file, data_offset, rb, &sorted, &mut cached)?;
        let fill_seconds = started.elapsed().as_secs_f64();
        let direct =
            matches!(reads, MissReads::Direct(_)).then_some(DirectRows { file, data_offset });
        Ok(HotRows {
            table,
            slot,
            cached,
            direct,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            rows_read: AtomicU64::new(0),
            fill_seconds,
        })
    }

    /// How misses are read: the engine of direct reads, or `None` for page faults on the map.
    pub fn direct_engine(&self) -> Option<ReadEngine> {
        self.direct.as_ref().map(|d| d.file.engine())
    }

    /// The table behind the cache.
    pub fn table(&self) -> &StoreTensor {
        &self.table
    }

    /// Rows held in memory.
    pub fn cached_rows(&self) -> usize {
        self.cached.len() / self.table.row_bytes().max(1)
    }

    /// Row reads served from memory and from the file so far.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// Seconds the cache took to fill when it was made.
    pub fn fill_seconds(&self) -> f64 {
        self.fill_seconds
    }

    /// Distinct rows read from the file so far (each batch reads a missing row once, however
    /// often it asks for it).
    pub fn rows_read(&self) -> u64 {
        self.rows_read.load(Ordering::Relaxed)
    }

    /// Gathers rows `ids` (any order, repeats allowed) into a new `[ids.len(), columns]`
    /// tensor: cached rows from memory, the others from the file, whose pages are all asked
    /// for before any is copied.
    pub fn gather(&self, ids: &[i64]) -> Result<Tensor> {
        let rows = self.table.rows();
        if let Some(&bad) = ids.iter().find(|&&i| i < 0 || i as usize >= rows) {
            return Err(StoreError::Invalid(format!(
                "gather: row {bad} is not below {rows}"
            )));
        }
        let rb = self.table.row_bytes();
        let mut misses: Vec<usize> = ids
            .iter()
            .map(|&i| i as usize)
            .filter(|&i| self.slot[i] == NOT_CACHED)
            .collect();
        self.hits
            .fetch_add((ids.len() - misses.len()) as u64, Ordering::Relaxed);
        self.misses
            .fetch_add(misses.len() as u64, Ordering::Relaxed);
        misses.sort_unstable();
        misses.dedup();
        self.rows_read
            .fetch_add(misses.len() as u64, Ordering::Relaxed);
        // Where each missing row's bytes are: read into `read` (sorted as `misses`) directly,
        // or in the mapped file, whose pages are asked for first.
        let (read, file) = match &self.direct {
            Some(d) => {
                let ranges: Vec<_> = misses
                    .iter()
                    .map(|&v| {
                        let at = d.data_offset + (v * rb) as u64;
                        at..at + rb as u64
                    })
                    .collect();
                let mut read = vec![0u8; misses.len() * rb];
                d.file.read_ranges(&ranges, &mut read)?;
                (read, None)
            }
            None => {
                // Every row of the file: a row's place is its id on every rank. (This rank's
                // own rows are a slice of it; read through them, rank 1 of 2 read row v + n/2
                // for row v, and past the map's end for the upper half.)
                let file = self
                    .table
                    .whole_bytes()
                    .expect("HotRows::new took a Continuous table, mapped whole");
                will_need(file, rb, &misses);
                (Vec::new(), Some(SendPtr(file.as_ptr().cast_mut())))
            }
        };
        let misses = &misses;
        let mut shape = self.table.shape().to_vec();
        shape[0] = ids.len();
        let (cache, read) = (
            SendPtr(self.cached.as_ptr().cast_mut()),
            SendPtr(read.as_ptr().cast_mut()),
        );
        // SAFETY: every id is in range, so its cache slot, its place among the rows read or its
        // file row lies inside the cache, `read` or the mapped file; gather_rows writes every
        // row of the output.
        unsafe {
            Tensor::from_fill(&shape, self.table.dtype(), |out| {
                gather_rows(out, rb, |k| {
                    let v = ids[k] as usize;
                    match (self.slot[v], file) {
                        (NOT_CACHED, Some(file)) => file.get().add(v * rb).cast_const(),
                        (NOT_CACHED, None) => {
                            let at = misses.binary_search(&v).expect("a missing row was read");
                            read.get().add(at * rb).cast_const()
                        }
                        (s, _) => cache.get().add(s as usize * rb).cast_const(),
                    }
                });
                Ok::<(), StoreError>(())
            })
        }
    }
}

/// Rows read per call of the fill: a few MiB of ranges at a time, however many rows are hot.
const FILL_ROWS: usize = 1 << 16;

/// The fill's calls in flight at once: a call waits for its last read before copying out,
/// and a second call keeps the disk busy meanwhile.
const FILL_STREAMS: usize = 2;

/// The longest gap between two hot rows that the fill reads through rather than skips: a
/// read of its own costs about what reading 32 KiB more does on a disk of 1 GB/s and 40k
/// reads per second (bench/history/2026-11-29-to-2026-12-03.md), and most disks trade the two alike.
const FILL_GAP: u64 = 32 << 10;

/// Reads rows `sorted` (ascending) of `file`, whose row 0 starts at `data_offset`, into
/// `out` one after the other: long sequential reads past the page cache, where the hot rows
/// lie close together, instead of a page fault or a short read per row.
fn fill_rows(
    file: &DirectFile,
    data_offset: u64,
    row_bytes: usize,
    sorted: &[u32],
    out: &mut [u8],
) -> Result<()> {
    let chunks = std::sync::Mutex::new(
        sorted
            .chunks(FILL_ROWS)
            .zip(out.chunks_mut(FILL_ROWS * row_bytes.max(1))),
    );
    let read_chunks = || -> Result<()> {
        loop {
            let next = chunks.lock().unwrap_or_else(|e| e.into_inner()).next();
            let Some((rows, out)) = next else {
                return Ok(());
            };
            let ranges: Vec<_> = rows
                .iter()
                .map(|&v| {
                    let at = data_offset + v as u64 * row_bytes as u64;
                    at..at + row_bytes as u64
                })
                .collect();
            file.read_ranges_bridging(&ranges, out, FILL_GAP)?;
        }
    };
    std::thread::scope(|s| {
        // Each stream takes the next chunk until none is left, so any number of them fills
        // every row; with none started (no room for a stack), this thread fills them.
        let streams: Vec<_> = (0..FILL_STREAMS)
            .filter_map(|_| {
                graphloom_tensor::threads::builder()
                    .and_then(|b| b.spawn_scoped(s, read_chunks))
                    .ok()
            })
            .collect();
        if streams.is_empty() {
            return read_chunks();
        }
        // The scope joins any stream left when one fails.
        streams
            .into_iter()
            .try_for_each(|t| t.join().expect("a fill thread panicked"))
    })
}

/// Asks the kernel to start reading the pages of rows `rows` of the mapped `file` (rows of
/// `row_bytes`), each run of consecutive pages in one call; returns at once.
fn will_need(file: &[u8], row_bytes: usize, rows: &[usize]) {
    let base = file.as_ptr() as usize;
    let runs = graphloom_io::pages::page_runs(
        rows.iter()
            .map(|r| base + r * row_bytes..base + (r + 1) * row_bytes),
    );
    for run in runs {
        // SAFETY: advice only, on whole pages of the mapping that hold the rows.
        unsafe {
            libc::madvise(
                run.start as *mut libc::c_void,
                run.end - run.start,
                libc::MADV_WILLNEED,
            );
        }
    }
}
