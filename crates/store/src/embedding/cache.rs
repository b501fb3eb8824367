//! A read-only cache of remote rows on each rank, for frozen tables in the Distributed layout:
//! hot rows (by access frequency or by a score such as the node degree) are copied once and
//! then read locally instead of being fetched from their owner at every gather.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use rayon::prelude::*;

use crate::copy::{as_uninit, gather_rows, SendPtr};
use crate::{Result, StoreError, StoreTensor};

/// The smallest cache, as a fraction of a rank's rows (WholeGraph's lower bound).
pub(crate) const MIN_RATIO: f64 = 1.0 / 512.0;

/// Which remote rows a cache keeps.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    /// The most often gathered rows, recounted every `refresh_every` gathers (counts halve at
    /// each refresh, so the cache follows a drifting stream).
    Frequency {
        /// Gathers between refreshes.
        refresh_every: usize,
    },
    /// The rows with the highest score (the node degree, say), chosen once. One score per row
    /// of the table.
    Scores(Arc<Vec<f32>>),
}

/// How large a cache is and what it admits.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheConfig {
    /// Cache rows as a fraction of the rows a rank owns, in `[1/512, 1]`.
    pub ratio: f64,
    /// What to keep.
    pub admission: Admission,
}

/// Hit and miss counters of a cache (remote rows only: local rows are neither).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Remote rows found in the cache.
    pub hits: u64,
    /// Remote rows fetched from their owner.
    pub misses: u64,
    /// Rows the cache holds now.
    pub rows: usize,
    /// Rows it can hold.
    pub capacity: usize,
}

impl CacheStats {
    /// Hits over remote accesses (0 when there were none).
    pub fn hit_rate(&self) -> f64 {
        let total = self.hits + self.misses;
        if total == 0 {
            0.0
        } else {
            self.hits as f64 / total as f64
        }
    }
}

/// Where one gathered row comes from.
#[derive(Clone, Copy)]
enum Source {
    Local(usize),
    Cached(usize),
    Fetched(usize),
}

/// Remote accesses counted for frequency admission: one in this many.
const COUNT_EVERY: usize = 4;

/// Which cache slot holds a row: open addressing with linear probing, at most half full, so a
/// lookup is one or two probes of one cache line.
struct SlotTable {
    keys: Vec<i64>,
    slots: Vec<u32>,
    len: usize,
}

impl SlotTable {
    const EMPTY: i64 = -1;

    /// A table in which `ids[s]` is in slot `s`.
    fn new(ids: &[i64]) -> SlotTable {
        let size = (2 * ids.len()).next_power_of_two().max(2);
        let mut table = SlotTable {
            keys: vec![Self::EMPTY; size],
            slots: vec![0; size],
            len: ids.len(),
        };
        for (slot, &id) in ids.iter().enumerate() {
            let mut at = table.home(id);
            while table.keys[at] != Self::EMPTY {
                at = (at + 1) & (size - 1);
            }
            table.keys[at] = id;
            table.slots[at] = slot as u32;
        }
        table
    }

    fn home(&self, id: i64) -> usize {
        let hash = (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (hash >> (64 - self.keys.len().trailing_zeros())) as usize
    }

    fn get(&self, id: i64) -> Option<usize> {
        let mask = self.keys.len() - 1;
        let mut at = self.home(id);
        loop {
            match self.keys[at] {
                key if key == id => return Some(self.slots[at] as usize),
                Self::EMPTY => return None,
                _ => at = (at + 1) & mask,
            }
        }
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// A hasher for row ids: one multiply, enough for counting accesses (SipHash costs more than
/// the lookup it protects).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_i64(&mut self, id: i64) {
        self.0 = (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// The cached rows: sorted ids and their bytes.
pub(crate) struct Cache {
    config: CacheConfig,
    capacity: usize,
    slots: SlotTable,
    rows: Vec<u8>,
    counts: HashMap<i64, u32, BuildHasherDefault<IdHasher>>,
    gathers: usize,
    /// Remote accesses so far; every `COUNT_EVERY`-th is counted.
    remote_seen: usize,
    hits: u64,
    misses: u64,
}

impl Cache {
    /// A cache for `table`, filled at once for score admission. Collective.
    pub(crate) fn new(table: &StoreTensor, config: CacheConfig) -> Result<Cache> {
        if !(MIN_RATIO..=1.0).contains(&config.ratio) {
            return Err(StoreError::Invalid(format!(
                "cache ratio {} is outside [1/512, 1]",
                config.ratio
            )));
        }
        if let Admission::Scores(scores) = &config.admission {
            if scores.len() != table.rows() {
                return Err(StoreError::Invalid(format!(
                    "{} cache scores for a table of {} rows",
                    scores.len(),
                    table.rows()
                )));
            }
        }
        if let Admission::Frequency { refresh_every: 0 } = config.admission {
            return Err(StoreError::Invalid(
                "refresh_every must be at least 1".into(),
            ));
        }
        let capacity = (config.ratio * table.local_rows().len() as f64).ceil() as usize;
        let mut cache = Cache {
            config,
            capacity,
            slots: SlotTable::new(&[]),
            rows: Vec::new(),
            counts: HashMap::default(),
            gathers: 0,
            remote_seen: 0,
            hits: 0,
            misses: 0,
        };
        if let Admission::Scores(scores) = cache.config.admission.clone() {
            let local = table.local_rows();
            let mut remote: Vec<i64> = (0..table.rows() as i64)
                .filter(|&i| !local.contains(&(i as usize)))
                .collect();
            // Highest score first, ties by id, so every run keeps the same rows.
            remote.sort_by(|&a, &b| {
                scores[b as usize]
                    .total_cmp(&scores[a as usize])
                    .then(a.cmp(&b))
            });
            remote.truncate(capacity);
            cache.fill(table, remote)?;
        }
        Ok(cache)
    }

    /// Replaces the cached rows with `ids`: rows the cache holds already are copied from it,
    /// the others fetched from their owners (a refresh of a steady stream fetches few).
    /// Collective.
    fn fill(&mut self, table: &StoreTensor, ids: Vec<i64>) -> Result<()> {
        let rb = table.row_bytes();
        let old_slots: Vec<Option<usize>> = ids.par_iter().map(|&id| self.slots.get(id)).collect();
        let fetch: Vec<i64> = ids
            .iter()
            .zip(&old_slots)
            .filter(|(_, slot)| slot.is_none())
            .map(|(&id, _)| id)
            .collect();
        let fetched = gathered_uninit(table, &fetch)?;
        let old = SendPtr(self.rows.as_ptr() as *mut u8);
        let new = SendPtr(fetched.as_ptr() as *mut u8);
        // Where each new row comes from: its old slot, or its place among the fetched rows.
        let mut next_fetched = 0;
        let sources: Vec<SendPtr> = old_slots
            .iter()
            .map(|slot| match slot {
                // SAFETY: old slots index the old rows; fetched rows are counted in order.
                Some(s) => SendPtr(unsafe { old.get().add(s * rb) }),
                None => {
                    next_fetched += 1;
                    SendPtr(unsafe { new.get().add((next_fetched - 1) * rb) })
                }
            })
            .collect();
        let mut rows = graphloom_tensor::alloc::with_capacity::<u8>(ids.len() * rb);
        // SAFETY: every source points at one whole row of the old or the fetched rows.
        unsafe {
            gather_rows(&mut rows.spare_capacity_mut()[..ids.len() * rb], rb, |i| {
                sources[i].get()
            });
            rows.set_len(ids.len() * rb);
        }
        graphloom_tensor::alloc::recycle(fetched);
        self.slots = SlotTable::new(&ids);
        graphloom_tensor::alloc::recycle(std::mem::replace(&mut self.rows, rows));
        Ok(())
    }

    /// Gathers `ids` into `out`: local rows directly, cached rows from the cache, the rest from
    /// their owners. Collective (the misses are fetched by a Distributed gather).
    pub(crate) fn gather(
        &mut self,
        table: &StoreTensor,
        ids: &[i64],
        out: &mut [u8],
    ) -> Result<()> {
        let rb = table.row_bytes();
        let local = table.local_rows();
        // Where each row comes from, found in parallel: the slot lookups are random reads of
        // a table several times the size of the core's caches.
        let slots = &self.slots;
        let mut sources: Vec<Source> = ids
            .par_iter()
            .map(|&id| {
                let row = id as usize;
                if local.contains(&row) {
                    Source::Local(row - local.start)
                } else {
                    slots.get(id).map_or(Source::Fetched(0), Source::Cached)
                }
            })
            .collect();
        let mut fetch = Vec::new();
        let mut hits = 0;
        for (source, &id) in sources.iter_mut().zip(ids) {
            match source {
                Source::Local(_) => {}
                Source::Cached(_) => hits += 1,
                Source::Fetched(f) => {
                    *f = fetch.len();
                    fetch.push(id);
                }
            }
        }
        let remote = hits + fetch.len();
        self.hits += hits as u64;
        self.misses += fetch.len() as u64;
        if let Admission::Frequency { .. } = self.config.admission {
            self.count_sample(ids, &sources, remote);
        }
        let fetched = gathered_uninit(table, &fetch)?;
        let chunk = SendPtr(table.local_bytes().as_ptr() as *mut u8);
        let cached = SendPtr(self.rows.as_ptr() as *mut u8);
        let fetched_ptr = SendPtr(fetched.as_ptr() as *mut u8);
        // SAFETY: every source row lies inside its buffer (local rows in the chunk, slots in
        // the cache, fetched rows in `fetched`), and `out` holds ids.len() rows.
        unsafe {
            gather_rows(as_uninit(out), rb, |i| match sources[i] {
                Source::Local(r) => chunk.get().add(r * rb),
                Source::Cached(s) => cached.get().add(s * rb),
                Source::Fetched(f) => fetched_ptr.get().add(f * rb),
            })
        };
        graphloom_tensor::alloc::recycle(fetched);
        self.gathers += 1;
        if let Admission::Frequency { refresh_every } = self.config.admission {
            // Every rank gathers the same number of times, so all refresh together.
            if self.gathers % refresh_every == 0 {
                self.refresh(table)?;
            }
        }
        Ok(())
    }

    /// Counts one in every `COUNT_EVERY` of this gather's `remote` accesses: a sample is
    /// enough to find the hot rows, at a fraction of the cost of counting every one.
    fn count_sample(&mut self, ids: &[i64], sources: &[Source], remote: usize) {
        // The remote accesses numbered (from 1, over the cache's life) by multiples of
        // COUNT_EVERY are counted.
        let first = COUNT_EVERY - 1 - self.remote_seen % COUNT_EVERY;
        let remote_ids = ids
            .iter()
            .zip(sources)
            .filter(|(_, s)| !matches!(s, Source::Local(_)))
            .map(|(&id, _)| id);
        for id in remote_ids.skip(first).step_by(COUNT_EVERY) {
            *self.counts.entry(id).or_insert(0) += 1;
        }
        self.remote_seen += remote;
    }

    /// Keeps the most frequently gathered remote rows, then halves the counts.
    fn refresh(&mut self, table: &StoreTensor) -> Result<()> {
        let mut hot: Vec<(u32, i64)> = self.counts.iter().map(|(&id, &c)| (c, id)).collect();
        // Most counted first, ties by id, so every run keeps the same rows; only the kept
        // rows need sorting.
        let order = |a: &(u32, i64), b: &(u32, i64)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        if hot.len() > self.capacity {
            hot.select_nth_unstable_by(self.capacity, order);
            hot.truncate(self.capacity);
        }
        hot.sort_unstable_by(order);
        self.fill(table, hot.into_iter().map(|(_, id)| id).collect())?;
        self.counts.retain(|_, c| {
            *c /= 2;
            *c > 0
        });
        Ok(())
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits,
            misses: self.misses,
            rows: self.slots.len(),
            capacity: self.capacity,
        }
    }
}

/// Rows `ids` of `table` in a buffer from the reuse cache, written once by a gather (no
/// zeroing pass). Collective for the Distributed layout.
fn gathered_uninit(table: &StoreTensor, ids: &[i64]) -> Result<Vec<u8>> {
    let len = ids.len() * table.row_bytes();
    let mut rows = graphloom_tensor::alloc::with_capacity::<u8>(len);
    table.gather_uninit(ids, &mut rows.spare_capacity_mut()[..len])?;
    // SAFETY: a successful gather writes every byte of the rows.
    unsafe { rows.set_len(len) };
    Ok(rows)
}
