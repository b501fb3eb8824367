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
}

impl HotRows {
    /// Caches rows `hot` of `table` (a Continuous table mapped from a file; ids distinct and in
    /// range), copied from it now, and reads the others as `reads` says. The cache's memory
    /// is charged to [`Category::Cache`].
    pub fn new(table: StoreTensor, hot: &[u32], reads: MissReads) -> Result<HotRows> {
        if table.spec().layout != Layout::Continuous
            || !matches!(table.spec().location, Location::Mmap { .. })
        {
            return Err(StoreError::Invalid(
                "a row cache reads a Continuous table mapped from a file".into(),
            ));
        }
        if hot.len() >= NOT_CACHED as usize {
            return Err(StoreError::Invalid(format!(
                "{} cached rows: at most {}",
                hot.len(),
                NOT_CACHED - 1
            )));
        }
        let rows = table.rows();
        let _g = category_scope(Category::Cache);
        let mut slot = vec![NOT_CACHED; rows];
        for (k, &v) in hot.iter().enumerate() {
            let entry = slot.get_mut(v as usize).ok_or_else(|| {
                StoreError::Invalid(format!("cached row {v} is not below {rows}"))
            })?;
            if *entry != NOT_CACHED {
                return Err(StoreError::Invalid(format!("row {v} is cached twice")));
            }
            *entry = k as u32;
        }
        let ids: Vec<i64> = hot.iter().map(|&v| i64::from(v)).collect();
        // Hot rows cluster (hubs), so their pages come in long runs: read them ahead.
        let hot_rows: Vec<usize> = hot.iter().map(|&v| v as usize).collect();
        will_need(table.local_bytes(), table.row_bytes(), &hot_rows);
        let mut cached = vec![0u8; ids.len() * table.row_bytes()];
        table.gather_into(&ids, &mut cached)?;
        let direct = match (reads, &table.spec().location) {
            (MissReads::Direct(engine), Location::Mmap { path, .. }) => {
                let row_elems = table.shape().get(1).copied().unwrap_or(1);
                let files = RowFiles::open(std::slice::from_ref(path), row_elems, table.dtype())?;
                let (_, data_offset) = files.single().expect("one file");
                Some(DirectRows {
                    file: DirectFile::open(path, engine)?,
                    data_offset,
                })
            }
            _ => None,
        };
        Ok(HotRows {
            table,
            slot,
            cached,
            direct,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            rows_read: AtomicU64::new(0),
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
                let file = self.table.local_bytes();
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
