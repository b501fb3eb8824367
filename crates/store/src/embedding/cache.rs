//! A read-only cache of remote rows on each rank, for frozen tables in the Distributed layout:
//! hot rows (by access frequency or by a score such as the node degree) are copied once and
//! then read locally instead of being fetched from their owner at every gather.

use std::collections::HashMap;
use std::sync::Arc;

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

/// The cached rows: sorted ids and their bytes.
pub(crate) struct Cache {
    config: CacheConfig,
    capacity: usize,
    ids: Vec<i64>,
    rows: Vec<u8>,
    counts: HashMap<i64, u32>,
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
            ids: Vec::new(),
            rows: Vec::new(),
            counts: HashMap::new(),
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
            cache.fill(table, remote)?;
        }
        Ok(cache)
    }

    /// Replaces the cached rows with `ids` (fetched from their owners). Collective.
    fn fill(&mut self, table: &StoreTensor, mut ids: Vec<i64>) -> Result<()> {
        ids.sort_unstable();
        let mut rows = vec![0u8; ids.len() * table.row_bytes()];
        table.gather_into(&ids, &mut rows)?;
        self.ids = ids;
        self.rows = rows;
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
        let mut fetch = Vec::new();
        let mut fetch_positions = Vec::new();
        for (pos, &id) in ids.iter().enumerate() {
            if id >= 0 && local.contains(&(id as usize)) {
                let start = (id as usize - local.start) * rb;
                out[pos * rb..(pos + 1) * rb]
                    .copy_from_slice(&table.local_bytes()[start..start + rb]);
                continue;
            }
            if let Admission::Frequency { .. } = self.config.admission {
                *self.counts.entry(id).or_insert(0) += 1;
            }
            match self.ids.binary_search(&id) {
                Ok(at) => {
                    self.hits += 1;
                    out[pos * rb..(pos + 1) * rb]
                        .copy_from_slice(&self.rows[at * rb..(at + 1) * rb]);
                }
                Err(_) => {
                    self.misses += 1;
                    fetch.push(id);
                    fetch_positions.push(pos);
                }
            }
        }
        let mut fetched = vec![0u8; fetch.len() * rb];
        table.gather_into(&fetch, &mut fetched)?;
        for (k, &pos) in fetch_positions.iter().enumerate() {
            out[pos * rb..(pos + 1) * rb].copy_from_slice(&fetched[k * rb..(k + 1) * rb]);
        }
        self.gathers += 1;
        if let Admission::Frequency { refresh_every } = self.config.admission {
            // Every rank gathers the same number of times, so all refresh together.
            if self.gathers % refresh_every == 0 {
                self.refresh(table)?;
            }
        }
        Ok(())
    }

    /// Keeps the most frequently gathered remote rows, then halves the counts.
    fn refresh(&mut self, table: &StoreTensor) -> Result<()> {
        let mut hot: Vec<(u32, i64)> = self.counts.iter().map(|(&id, &c)| (c, id)).collect();
        hot.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        hot.truncate(self.capacity);
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
            rows: self.ids.len(),
            capacity: self.capacity,
        }
    }
}
