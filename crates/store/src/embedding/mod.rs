//! [`Embedding`]: a table in the store that is either frozen (node features, with an optional
//! cache of remote rows) or trainable (with a sparse optimizer whose state lives on the rank
//! that owns each row).

pub(crate) mod cache;
pub(crate) mod optimizer;

use std::path::Path;
use std::sync::Arc;

use graphloom_comm::{Communicator, CommunicatorExt};
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{DType, Tensor};
use rayon::prelude::*;

use crate::copy::SendPtr;
use crate::files::part_paths;
use crate::routing::Buckets;
use crate::{Layout, Location, Result, StoreError, StoreSpec, StoreTensor};
use cache::{Cache, CacheConfig, CacheStats};
use optimizer::SparseOptimizer;

/// A table of rows in the store, frozen or trained with a sparse optimizer.
///
/// Gradients of a step go to the rank that owns each row; there duplicates are summed in a
/// canonical order (by id, then by position in the global batch, the ranks' batches taken in
/// rank order), so the sum, and the table after the step, do not depend on how the batch was
/// split over ranks. The optimizer state of a row lives with the row.
pub struct Embedding {
    table: StoreTensor,
    optimizer: Option<SparseOptimizer>,
    states: Vec<StoreTensor>,
    steps: Option<StoreTensor>,
    cache: Option<Cache>,
}

impl std::fmt::Debug for Embedding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedding")
            .field("table", &self.table)
            .field("optimizer", &self.optimizer)
            .finish()
    }
}

/// The names under which [`Embedding::save`] writes its parts.
fn component_prefix(prefix: &Path, component: &str) -> std::path::PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(format!("_{component}"));
    name.into()
}

impl Embedding {
    /// A frozen table (no optimizer): gathers only, optionally through a cache.
    pub fn frozen(table: StoreTensor) -> Embedding {
        Embedding {
            table,
            optimizer: None,
            states: Vec::new(),
            steps: None,
            cache: None,
        }
    }

    /// A trainable table of f32 rows with `optimizer`; its state is allocated beside the table
    /// (Distributed, host memory, same row partition). Collective.
    pub fn trainable(table: StoreTensor, optimizer: SparseOptimizer) -> Result<Embedding> {
        Embedding::with_state(table, optimizer, |_| Location::Host)
    }

    /// A trainable table as [`Embedding::trainable`] whose optimizer state lives in files
    /// mapped beside the table's (`{prefix}_state{k}`, `{prefix}_steps`, created zero-filled,
    /// left for the caller to remove): with the table itself mapped from a file, rows and
    /// state cost page cache, not process memory, for tables larger than memory. Collective.
    pub fn trainable_in_files(
        table: StoreTensor,
        optimizer: SparseOptimizer,
        prefix: &Path,
    ) -> Result<Embedding> {
        Embedding::with_state(table, optimizer, |component| Location::Mmap {
            path: component_prefix(prefix, component),
            writable: true,
        })
    }

    /// A trainable table whose state component `"state{k}"` or `"steps"` lives at
    /// `location(component)`, in the Distributed layout with the table's row partition.
    fn with_state(
        table: StoreTensor,
        optimizer: SparseOptimizer,
        location: impl Fn(&str) -> Location,
    ) -> Result<Embedding> {
        if table.dtype() != DType::F32 || table.shape().len() != 2 {
            return Err(StoreError::Invalid(format!(
                "a trainable embedding is a 2-D f32 table, not {} {:?}",
                table.dtype(),
                table.shape()
            )));
        }
        let state_spec = |shape: &[usize], dtype, component: &str| {
            StoreSpec::new(shape, dtype, Layout::Distributed, location(component))
                .with_rows_per_rank(table.partition().counts())
        };
        let comm = table.comm().clone();
        let states = (0..optimizer.states())
            .map(|k| {
                let spec = state_spec(table.shape(), DType::F32, &format!("state{k}"));
                StoreTensor::new(comm.clone(), spec)
            })
            .collect::<Result<Vec<_>>>()?;
        let steps = if optimizer.counts_steps() {
            Some(StoreTensor::new(
                comm,
                state_spec(&[table.rows()], DType::I64, "steps"),
            )?)
        } else {
            None
        };
        Ok(Embedding {
            table,
            optimizer: Some(optimizer),
            states,
            steps,
            cache: None,
        })
    }

    /// Adds a cache of remote rows. Only frozen tables in the Distributed layout have one: the
    /// other layouts read remote rows directly, and a trainable row changes at its owner, so a
    /// copy elsewhere would go stale. Collective.
    pub fn with_cache(mut self, config: CacheConfig) -> Result<Embedding> {
        if self.optimizer.is_some() {
            return Err(StoreError::Invalid(
                "caches hold frozen rows only: a trainable row changes at its owner".into(),
            ));
        }
        if self.table.spec().layout != Layout::Distributed {
            return Err(StoreError::Invalid(format!(
                "a cache helps only the distributed layout; the {} layout reads every row \
                 directly",
                self.table.spec().layout
            )));
        }
        self.cache = Some(Cache::new(&self.table, config)?);
        Ok(self)
    }

    /// Fills this rank's rows with uniform values in `[-scale, scale)`, drawn from a
    /// counter-based stream keyed by (seed, row, column): the table is the same whatever the
    /// number of ranks.
    pub fn init_uniform(&mut self, seed: u64, scale: f32) -> Result<()> {
        self.init_with(seed, |key, id, c| {
            (key.uniform(id, c) as f32 * 2.0 - 1.0) * scale
        })
    }

    /// Fills this rank's rows with normal values of mean 0 and standard deviation `std`
    /// (PyTorch's `nn.Embedding` initialises N(0, 1)), keyed as [`Embedding::init_uniform`]'s.
    pub fn init_normal(&mut self, seed: u64, std: f32) -> Result<()> {
        self.init_with(seed, |key, id, c| key.normal(id, c) as f32 * std)
    }

    /// Sets element (row, column) of this rank's rows to `value(key, row, column)`, the key
    /// drawn from `seed`. Collective.
    fn init_with(
        &mut self,
        seed: u64,
        value: impl Fn(RngKey, u64, u64) -> f32 + Sync,
    ) -> Result<()> {
        let first = self.table.local_rows().start;
        let dim = self.dim();
        let key = RngKey::new(seed, 0, 0x454d_4245);
        self.table
            .local_mut::<f32>()?
            .par_chunks_mut(dim.max(1))
            .enumerate()
            .for_each(|(i, row)| {
                let id = (first + i) as u64;
                for (c, w) in row.iter_mut().enumerate() {
                    *w = value(key, id, c as u64);
                }
            });
        self.table.barrier()
    }

    /// Sets every row from `all`, the bytes of the whole table (every rank holds a copy; a
    /// saved model's embedding, say); optimizer state is left as it is. Collective.
    pub fn fill_from_whole(&mut self, all: &[u8]) -> Result<()> {
        self.table.fill_from_whole(all)
    }

    /// The table.
    pub fn table(&self) -> &StoreTensor {
        &self.table
    }

    /// The width of a row.
    pub fn dim(&self) -> usize {
        self.table.shape().get(1).copied().unwrap_or(1)
    }

    /// The optimizer, for a trainable table.
    pub fn optimizer(&self) -> Option<&SparseOptimizer> {
        self.optimizer.as_ref()
    }

    /// The cache's counters, when there is a cache.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.cache.as_ref().map(Cache::stats)
    }

    /// Gathers rows `ids`, through the cache when there is one. Collective for the
    /// Distributed layout.
    pub fn gather(&mut self, ids: &[i64]) -> Result<Tensor> {
        let Some(cache) = self.cache.as_mut() else {
            return self.table.gather(ids);
        };
        // Collective (a cache belongs to a distributed table): every rank learns of bad ids.
        self.table
            .comm()
            .agree(self.table.check_ids("gather", ids))?;
        let mut shape = self.table.shape().to_vec();
        shape[0] = ids.len();
        // SAFETY: a successful cache gather writes every row of the output.
        unsafe {
            Tensor::from_fill(&shape, self.table.dtype(), |out| {
                cache.gather(&self.table, ids, out)
            })
        }
    }

    /// Applies one optimizer step with learning rate `lr` from the gradients `grads` (f32 or
    /// bf16, `[ids.len(), dim]`) of rows `ids`, which may repeat and may belong to any rank.
    /// Only the rows in some rank's `ids` change. Collective.
    pub fn apply_gradients(&mut self, ids: &[i64], grads: &Tensor, lr: f32) -> Result<()> {
        let Some(optimizer) = self.optimizer else {
            return Err(StoreError::Invalid(
                "apply_gradients: the embedding is frozen (no optimizer)".into(),
            ));
        };
        let dim = self.dim();
        let checked = self.check_gradients(ids, grads);
        let comm = self.table.comm().clone();
        comm.agree(checked)?;
        let grads = grads.cast(DType::F32)?;
        let grads = grads.as_slice::<f32>()?;
        if comm.size() == 1 {
            // One rank owns every row: nothing to route, and each gradient's global position
            // is its own. (Routing copied the gradients three times, each into memory the
            // kernel zeroes first: a third of a sampled R-GCN epoch.)
            let positions: Vec<i64> = (0..ids.len() as i64).collect();
            self.apply_owned(&optimizer, ids, &positions, grads, lr)?;
            return self.table.barrier();
        }

        // Global positions: this rank's batch follows the lower ranks' batches.
        let counts = comm.all_gather_one(ids.len() as u64)?;
        let offset: u64 = counts[..comm.rank()].iter().sum();
        let buckets = Buckets::by_owner(self.table.partition(), ids);
        let send_ids = buckets.collect(|p| ids[p]);
        let send_positions = buckets.collect(|p| (offset + p as u64) as i64);
        let send_grads: Vec<Vec<f32>> = buckets
            .collect(|p| &grads[p * dim..(p + 1) * dim])
            .into_iter()
            .map(|rows| rows.concat())
            .collect();
        let ids: Vec<i64> = comm.all_to_all_typed(&send_ids)?.concat();
        let positions: Vec<i64> = comm.all_to_all_typed(&send_positions)?.concat();
        let grads: Vec<f32> = comm.all_to_all_typed(&send_grads)?.concat();
        self.apply_owned(&optimizer, &ids, &positions, &grads, lr)?;
        self.table.barrier()
    }

    /// Applies the gradients `grads` of rows `ids` (all owned by this rank, in any order and
    /// repeated) at global batch positions `positions`: each row's gradients summed in
    /// canonical order (by id, then by position), then the optimizer's update.
    fn apply_owned(
        &mut self,
        optimizer: &SparseOptimizer,
        ids: &[i64],
        positions: &[i64],
        grads: &[f32],
        lr: f32,
    ) -> Result<()> {
        // Canonical order: by id, then by global position.
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_unstable_by_key(|&k| (ids[k], positions[k]));
        let mut unique: Vec<(i64, std::ops::Range<usize>)> = Vec::new();
        let mut start = 0;
        while start < order.len() {
            let id = ids[order[start]];
            let mut end = start + 1;
            while end < order.len() && ids[order[end]] == id {
                end += 1;
            }
            unique.push((id, start..end));
            start = end;
        }
        self.update_rows(optimizer, &unique, &order, grads, lr)
    }

    fn check_gradients(&self, ids: &[i64], grads: &Tensor) -> Result<()> {
        let dim = self.dim();
        if grads.shape() != [ids.len(), dim] || !matches!(grads.dtype(), DType::F32 | DType::BF16) {
            return Err(StoreError::Invalid(format!(
                "apply_gradients: gradients are {} {:?}, {} ids need f32 or bf16 [{}, {dim}]",
                grads.dtype(),
                grads.shape(),
                ids.len(),
                ids.len()
            )));
        }
        self.table.check_ids("apply_gradients", ids)
    }

    /// Sums each unique row's gradients in canonical order and applies the optimizer to it.
    fn update_rows(
        &mut self,
        optimizer: &SparseOptimizer,
        unique: &[(i64, std::ops::Range<usize>)],
        order: &[usize],
        grads: &[f32],
        lr: f32,
    ) -> Result<()> {
        let dim = self.dim();
        let first = self.table.local_rows().start;
        let table = SendPtr(self.table.local_mut::<f32>()?.as_mut_ptr().cast());
        let states: Vec<SendPtr> = self
            .states
            .iter_mut()
            .map(|s| Ok(SendPtr(s.local_mut::<f32>()?.as_mut_ptr().cast())))
            .collect::<Result<_>>()?;
        let steps = match self.steps.as_mut() {
            Some(s) => Some(SendPtr(s.local_mut::<i64>()?.as_mut_ptr().cast())),
            None => None,
        };
        unique.par_iter().for_each(|(id, range)| {
            let row = *id as usize - first;
            let mut sum = vec![0f32; dim];
            for &k in &order[range.clone()] {
                for (s, &g) in sum.iter_mut().zip(&grads[k * dim..(k + 1) * dim]) {
                    *s += g;
                }
            }
            // SAFETY: ids are unique and owned by this rank (routed by the partition), so each
            // task touches its own row of the table, of every state and of the step counts.
            unsafe {
                let w =
                    std::slice::from_raw_parts_mut(table.get().cast::<f32>().add(row * dim), dim);
                let mut state_rows: Vec<&mut [f32]> = states
                    .iter()
                    .map(|s| {
                        std::slice::from_raw_parts_mut(s.get().cast::<f32>().add(row * dim), dim)
                    })
                    .collect();
                let step = match steps {
                    Some(s) => {
                        let count = &mut *s.get().cast::<i64>().add(row);
                        *count += 1;
                        *count
                    }
                    None => 1,
                };
                optimizer.update_row(w, &sum, &mut state_rows, step, lr);
            }
        });
        Ok(())
    }

    /// Saves the table and the optimizer state, one file per rank and component:
    /// `{prefix}_table_part_{i}_of_{n}`, `{prefix}_state{k}_part_...`, `{prefix}_steps_part_...`.
    /// Collective.
    pub fn save(&self, prefix: &Path) -> Result<()> {
        self.table.save(&component_prefix(prefix, "table"))?;
        for (k, state) in self.states.iter().enumerate() {
            state.save(&component_prefix(prefix, &format!("state{k}")))?;
        }
        if let Some(steps) = &self.steps {
            steps.save(&component_prefix(prefix, "steps"))?;
        }
        Ok(())
    }

    /// Refills this table and its optimizer state from what [`Embedding::save`] wrote under
    /// `prefix` in a job of `saved_ranks` ranks (any number: each rank reads its own rows).
    /// Collective.
    pub fn restore(&mut self, prefix: &Path, saved_ranks: usize) -> Result<()> {
        let dim = self.dim();
        let parts = |component: &str| part_paths(&component_prefix(prefix, component), saved_ranks);
        let table = crate::RowFiles::open(&parts("table"), dim, DType::F32)?;
        self.table.fill_from(&table)?;
        for (k, state) in self.states.iter_mut().enumerate() {
            let files = crate::RowFiles::open(&parts(&format!("state{k}")), dim, DType::F32)?;
            state.fill_from(&files)?;
        }
        if let Some(steps) = self.steps.as_mut() {
            let files = crate::RowFiles::open(&parts("steps"), 1, DType::I64)?;
            steps.fill_from(&files)?;
        }
        Ok(())
    }

    /// Loads an embedding of rows `dim` wide saved by a job of `saved_ranks` ranks (any
    /// number: each rank reads its own rows), into `layout` and `location`, with `optimizer`
    /// (the one it was saved with) or frozen. Collective.
    pub fn load(
        comm: Arc<dyn Communicator>,
        prefix: &Path,
        saved_ranks: usize,
        dim: usize,
        layout: Layout,
        location: Location,
        optimizer: Option<SparseOptimizer>,
    ) -> Result<Embedding> {
        let parts = |component: &str| part_paths(&component_prefix(prefix, component), saved_ranks);
        let table_files = parts("table");
        let table =
            StoreTensor::from_files(comm, &table_files, &[dim], DType::F32, layout, location)?;
        let Some(optimizer) = optimizer else {
            return Ok(Embedding::frozen(table));
        };
        let mut embedding = Embedding::trainable(table, optimizer)?;
        for (k, state) in embedding.states.iter_mut().enumerate() {
            let files = crate::RowFiles::open(&parts(&format!("state{k}")), dim, DType::F32)?;
            state.fill_from(&files)?;
        }
        if let Some(steps) = embedding.steps.as_mut() {
            let files = crate::RowFiles::open(&parts("steps"), 1, DType::I64)?;
            steps.fill_from(&files)?;
        }
        Ok(embedding)
    }
}
