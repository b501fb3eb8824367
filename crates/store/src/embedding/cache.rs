//! A read-only cache of remote rows on each rank, for frozen tables in the Distributed layout:
//! hot rows (by access frequency or by a score such as the node degree) are copied once and
//! then read locally instead of being fetched from their owner at every gather.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use graphloom_tensor::rng::mix64;
use rayon::prelude::*;

use crate::copy::{prefetch as prefetch_row, SendPtr};
use crate::{Result, StoreError, StoreTensor};

/// The smallest cache, as a fraction of a rank's rows (WholeGraph's lower bound).
pub(crate) const MIN_RATIO: f64 = 1.0 / 512.0;

/// Which remote rows a cache keeps.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    /// The most often gathered rows, recounted every `refresh_every` gathers (counts halve at
    /// each refresh, so the cache follows a drifting stream). A row whose count falls to zero
    /// stays until a counted row needs its slot.
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

/// Remote accesses counted for frequency admission: about one in this many, chosen by a hash
/// of the position and the gather, so the sample is the same in every run.
const COUNT_EVERY: u64 = 4;

/// How many times a row not in the cache must have been counted (with the halving at each
/// refresh) to take the slot of a cached row: a row sampled once is most likely from the long
/// tail of the stream, and swapping it in costs a fetch for little gain.
const DISPLACE_COUNT: u32 = 2;

/// Ids looked up per parallel task of a gather: the sources of a task's rows stay in the
/// core's cache between the lookup and the copy.
const IDS_PER_TASK: usize = 2048;

/// How many ids ahead of the lookup the slot table's entry is prefetched.
const LOOKUP_AHEAD: usize = 16;

/// How many rows ahead of the copy the source row is prefetched.
const COPY_AHEAD: usize = 16;

/// A row's count and its id.
type Counted = (u32, i64);

/// A slot that holds no row.
const EMPTY: i64 = -1;

/// One entry of the slot table: a row id and its cache slot, side by side so a lookup reads
/// one cache line.
#[derive(Clone, Copy)]
struct Entry {
    id: i64,
    slot: u32,
}

/// Which cache slot holds a row: open addressing with linear probing, at most half full, so a
/// lookup is one or two probes of one cache line. A refresh updates the rows that change
/// rather than rebuilding it.
struct SlotTable {
    entries: Vec<Entry>,
}

impl SlotTable {
    /// An empty table for up to `capacity` rows.
    fn with_capacity(capacity: usize) -> SlotTable {
        let size = (2 * capacity).next_power_of_two().max(2);
        SlotTable {
            entries: vec![Entry { id: EMPTY, slot: 0 }; size],
        }
    }

    fn mask(&self) -> usize {
        self.entries.len() - 1
    }

    /// Records that `slot` holds row `id` (which the table does not hold yet).
    fn insert(&mut self, id: i64, slot: usize) {
        let mut at = self.home(id);
        while self.entries[at].id != EMPTY {
            at = (at + 1) & self.mask();
        }
        self.entries[at] = Entry {
            id,
            slot: slot as u32,
        };
    }

    /// Forgets row `id` (which the table holds), moving back the entries after it that would
    /// otherwise no longer be found (backward-shift deletion: no tombstones, so lookups stay
    /// as short as in a freshly built table).
    fn remove(&mut self, id: i64) {
        let mask = self.mask();
        let mut hole = self.home(id);
        while self.entries[hole].id != id {
            if self.entries[hole].id == EMPTY {
                debug_assert!(false, "removing row {id}, which the table does not hold");
                return;
            }
            hole = (hole + 1) & mask;
        }
        let mut next = (hole + 1) & mask;
        while self.entries[next].id != EMPTY {
            let home = self.home(self.entries[next].id);
            // The entry may fill the hole when the hole lies between its home and where it
            // sits now (cyclically).
            if next.wrapping_sub(home) & mask >= next.wrapping_sub(hole) & mask {
                self.entries[hole] = self.entries[next];
                hole = next;
            }
            next = (next + 1) & mask;
        }
        self.entries[hole].id = EMPTY;
    }

    #[inline(always)]
    fn home(&self, id: i64) -> usize {
        let hash = (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (hash >> (64 - self.entries.len().trailing_zeros())) as usize
    }

    /// Asks the processor for the entry where a lookup of `id` starts.
    #[inline(always)]
    fn prefetch(&self, id: i64) {
        graphloom_tensor::prefetch::prefetch_at(&self.entries, self.home(id));
    }

    #[inline(always)]
    fn get(&self, id: i64) -> Option<usize> {
        let mask = self.entries.len() - 1;
        let mut at = self.home(id);
        loop {
            match self.entries[at] {
                Entry { id: key, slot } if key == id => return Some(slot as usize),
                Entry { id: EMPTY, .. } => return None,
                _ => at = (at + 1) & mask,
            }
        }
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

/// What one parallel task of a gather found besides the rows it copied.
#[derive(Default)]
struct TaskFindings {
    /// Positions of the ids neither local nor cached, in order.
    misses: Vec<usize>,
    /// Remote ids sampled for counting, in order.
    sampled: Vec<i64>,
    /// Remote ids found in the cache.
    hits: u64,
}

/// The cached rows: slot `s` holds row `slot_ids[s]` (or nothing), its bytes at
/// `rows[s * row_bytes..]`. A refresh keeps the rows that stay in their slots and writes only
/// the new ones.
pub(crate) struct Cache {
    config: CacheConfig,
    capacity: usize,
    slots: SlotTable,
    slot_ids: Vec<i64>,
    rows: Vec<u8>,
    counts: HashMap<i64, u32, BuildHasherDefault<IdHasher>>,
    gathers: usize,
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
            slots: SlotTable::with_capacity(capacity),
            slot_ids: vec![EMPTY; capacity],
            // Zeroed lazily by the system: only the slots a refresh fills become resident.
            rows: vec![0; capacity * table.row_bytes()],
            counts: HashMap::default(),
            gathers: 0,
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
            cache.fill(table, &remote)?;
        }
        Ok(cache)
    }

    /// Makes the cache hold rows `ids` (at most its capacity, most wanted first): the rows it
    /// holds already stay in their slots, the others are fetched from their owners into empty
    /// slots, then into the slots of rows not in `ids`, last slot first. Rows not in `ids`
    /// stay while no new row needs their slot: a row that left the counts is still more
    /// likely to be asked for than an empty slot. Collective.
    fn fill(&mut self, table: &StoreTensor, ids: &[i64]) -> Result<()> {
        debug_assert!(ids.len() <= self.capacity, "more rows than the cache holds");
        let rb = table.row_bytes();
        let mut kept = vec![false; self.capacity];
        let mut fetch = Vec::new();
        for &id in ids {
            match self.slots.get(id) {
                Some(slot) => kept[slot] = true,
                None => fetch.push(id),
            }
        }
        // Slots to write: the empty ones, then those of rows not wanted now. There are enough:
        // kept + new = ids.len() <= capacity.
        let (empty, unwanted): (Vec<usize>, Vec<usize>) = (0..self.capacity)
            .filter(|&s| !kept[s])
            .partition(|&s| self.slot_ids[s] == EMPTY);
        let free: Vec<usize> = empty
            .into_iter()
            .chain(unwanted.into_iter().rev())
            .take(fetch.len())
            .collect();
        let base = SendPtr(self.rows.as_mut_ptr());
        let start = Instant::now();
        // SAFETY: the table checks the ids; each free slot is a distinct whole row of `rows`.
        unsafe {
            table.gather_distributed_to(&fetch, |k| base.get().add(free[k] * rb))?;
        }
        table.record_gather(fetch.len(), start);
        for (&id, &slot) in fetch.iter().zip(&free) {
            if self.slot_ids[slot] != EMPTY {
                self.slots.remove(self.slot_ids[slot]);
            }
            self.slots.insert(id, slot);
            self.slot_ids[slot] = id;
        }
        Ok(())
    }

    /// Gathers `ids` (checked to be in range) into `out`: local rows directly, cached rows
    /// from the cache, the rest from their owners. Collective (the misses are fetched by a
    /// Distributed gather).
    pub(crate) fn gather(
        &mut self,
        table: &StoreTensor,
        ids: &[i64],
        out: &mut [MaybeUninit<u8>],
    ) -> Result<()> {
        let rb = table.row_bytes();
        let counting = matches!(self.config.admission, Admission::Frequency { .. });
        let out_base = SendPtr(out.as_mut_ptr().cast());
        // One pass, in parallel: look up where each row is and copy the local and cached ones.
        let findings: Vec<TaskFindings> = (0..ids.len().div_ceil(IDS_PER_TASK))
            .into_par_iter()
            .map(|task| {
                let positions = task * IDS_PER_TASK..((task + 1) * IDS_PER_TASK).min(ids.len());
                // SAFETY: each task writes the rows of its own positions, inside `out`, which
                // holds ids.len() rows.
                unsafe { self.copy_found(table, ids, positions, out_base, counting) }
            })
            .collect();
        let mut misses = Vec::new();
        for task in findings {
            misses.extend_from_slice(&task.misses);
            self.hits += task.hits;
            for id in task.sampled {
                *self.counts.entry(id).or_insert(0) += 1;
            }
        }
        self.misses += misses.len() as u64;
        let fetch: Vec<i64> = misses.iter().map(|&p| ids[p]).collect();
        let start = Instant::now();
        // SAFETY: the misses are distinct positions, each a whole row of `out`, which no task
        // writes any more.
        unsafe {
            table.gather_distributed_to(&fetch, |k| out_base.get().add(misses[k] * rb))?;
        }
        table.record_gather(fetch.len(), start);
        self.gathers += 1;
        if let Admission::Frequency { refresh_every } = self.config.admission {
            // Every rank gathers the same number of times, so all refresh together.
            if self.gathers % refresh_every == 0 {
                self.refresh(table)?;
            }
        }
        Ok(())
    }

    /// Copies the rows at `positions` of `ids` that are local or cached into their places in
    /// the output at `out`; reports the others, and samples remote ids for counting.
    ///
    /// # Safety
    /// The output must hold a row for every position of `ids`, and no one else may write
    /// the rows of `positions` during the call.
    unsafe fn copy_found(
        &self,
        table: &StoreTensor,
        ids: &[i64],
        positions: Range<usize>,
        out: SendPtr,
        counting: bool,
    ) -> TaskFindings {
        let rb = table.row_bytes();
        let local = table.local_rows();
        let chunk = table.local_bytes().as_ptr();
        let cached = self.rows.as_ptr();
        let seed = mix64(self.gathers as u64);
        let mut findings = TaskFindings::default();
        // First where each row is, prefetching the slot entries ahead (random reads of a
        // table larger than the core's caches); then the copies, prefetching the rows ahead.
        let mut sources: Vec<*const u8> = Vec::with_capacity(positions.len());
        for p in positions.clone() {
            if let Some(&ahead) = ids.get(p + LOOKUP_AHEAD) {
                if !local.contains(&(ahead as usize)) {
                    self.slots.prefetch(ahead);
                }
            }
            let id = ids[p];
            let row = id as usize;
            let source = if local.contains(&row) {
                // SAFETY: a local row lies inside this rank's chunk.
                unsafe { chunk.add((row - local.start) * rb) }
            } else {
                if counting && mix64(seed ^ p as u64) % COUNT_EVERY == 0 {
                    findings.sampled.push(id);
                }
                match self.slots.get(id) {
                    Some(slot) => {
                        findings.hits += 1;
                        // SAFETY: every slot is a whole row of the cached rows.
                        unsafe { cached.add(slot * rb) }
                    }
                    None => {
                        findings.misses.push(p);
                        std::ptr::null()
                    }
                }
            };
            sources.push(source);
        }
        for (k, p) in positions.enumerate() {
            if let Some(&ahead) = sources.get(k + COPY_AHEAD) {
                prefetch_row(ahead, rb);
            }
            if !sources[k].is_null() {
                // SAFETY: the source is a whole row (above); the destination is this
                // position's row of the output, the caller's to write.
                unsafe { std::ptr::copy_nonoverlapping(sources[k], out.get().add(p * rb), rb) };
            }
        }
        findings
    }

    /// Keeps the most frequently gathered remote rows, then halves the counts.
    fn refresh(&mut self, table: &StoreTensor) -> Result<()> {
        let mut hot: Vec<Counted> = self.counts.iter().map(|(&id, &c)| (c, id)).collect();
        // Most counted first, ties by id, so every run keeps the same rows.
        let order = |a: &Counted, b: &Counted| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        if hot.len() > self.capacity {
            hot.select_nth_unstable_by(self.capacity, order);
            hot.truncate(self.capacity);
        }
        // Rows the cache holds stay, and so do new rows counted often enough (they take empty
        // slots first, then those of rows no longer counted); other new rows only fill the
        // empty slots left, the most counted first. No sort: every row counted often enough
        // fits (kept + new <= capacity).
        let empty = self.slot_ids.iter().filter(|&&id| id == EMPTY).count();
        let (mut ids, mut rare): (Vec<Counted>, Vec<Counted>) = hot
            .into_iter()
            .partition(|&(count, id)| count >= DISPLACE_COUNT || self.slots.get(id).is_some());
        let strong_new = ids
            .iter()
            .filter(|&&(_, id)| self.slots.get(id).is_none())
            .count();
        let room = empty.saturating_sub(strong_new);
        if rare.len() > room {
            rare.select_nth_unstable_by(room, order);
            rare.truncate(room);
        }
        ids.append(&mut rare);
        let ids: Vec<i64> = ids.into_iter().map(|(_, id)| id).collect();
        self.fill(table, &ids)?;
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
            rows: self.slot_ids.iter().filter(|&&id| id != EMPTY).count(),
            capacity: self.capacity,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_table_agrees_with_a_map_through_inserts_and_removals() {
        // Ids crowded into few home positions, so removals must move back long runs.
        let mut table = SlotTable::with_capacity(64);
        let mut reference: HashMap<i64, usize> = HashMap::new();
        let mut state = 1u64;
        for step in 0..20_000usize {
            state = mix64(state);
            let id = (state % 96) as i64 * 1024;
            match reference.get(&id) {
                Some(_) => {
                    table.remove(id);
                    reference.remove(&id);
                }
                None if reference.len() < 64 => {
                    table.insert(id, step % 64);
                    reference.insert(id, step % 64);
                }
                None => {}
            }
            for probe in (0..96).map(|k| k * 1024) {
                assert_eq!(
                    table.get(probe),
                    reference.get(&probe).copied(),
                    "step {step}"
                );
            }
        }
    }
}
