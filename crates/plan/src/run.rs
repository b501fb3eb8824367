//! Running a plan: the workers, the store layout of their inputs, and the workload of the
//! plan's mode under the one training loop.

use std::sync::{Arc, Mutex};

use graphloom_comm::{Communicator, Counting, ReduceData, ReduceOp};
use graphloom_graph::parts::Part;
use graphloom_graph::MappedNpy;
use graphloom_nn::minibatch::{Inputs, MiniBatch, StageSeconds};
use graphloom_nn::train::{fit, EpochRecord, FullBatch, TrainReport, Workload};
use graphloom_sar::Sar;
use graphloom_store::{
    Embedding, HotRows, Layout, Location, SparseOptimizer, StoreSpec, StoreTensor,
};
use graphloom_tensor::memory::{category_scope, set_thread_tracker, Category, MemoryTracker};
use graphloom_tensor::{DType, RssReport};

use crate::{
    run_job, FeaturesLocation, Plan, PlanData, PlanError, Result, TrainMode, WorkerFigures,
};

/// A mapped feature file of either dtype, as bytes.
enum FileBytes {
    U16(MappedNpy<u16>),
    F32(MappedNpy<f32>),
}

impl FileBytes {
    fn as_bytes(&self) -> &[u8] {
        match self {
            FileBytes::U16(m) => m.as_bytes(),
            FileBytes::F32(m) => m.as_bytes(),
        }
    }
}

/// Rows a cache served and rows it did not.
type HitsAndMisses = (u64, u64);

/// A mini-batch job's feature rows: a store table, or one behind a cache of hot rows.
enum FeatureRows {
    Table(StoreTensor),
    Cached(HotRows),
}

/// What a run produced, on the worker that reports it.
pub struct RunOutcome {
    /// The loop's records and the best parameters.
    pub report: TrainReport,
    /// Whether this process reports the job's results (rank 0 of the job).
    pub root: bool,
    /// Mini-batch: seconds per pipeline stage.
    pub stages: Option<StageSeconds>,
    /// SAR: every worker's figures (on the root).
    pub workers: Option<Vec<WorkerFigures>>,
    /// Mini-batch with a feature cache: rows read from the cache and from the file.
    pub cache_hits_and_misses: Option<HitsAndMisses>,
}

impl Plan {
    /// Trains as planned, calling `on_epoch` on the reporting worker (rank 0) after every
    /// epoch. Collective under MPI: every rank of the job calls it.
    pub fn run(&self, on_epoch: impl FnMut(&EpochRecord) + Send) -> Result<RunOutcome> {
        self.run_with_progress(on_epoch, |_, _| {})
    }

    /// [`Plan::run`], also calling `on_batch(done, total)` on the reporting worker after each
    /// step of a mini-batch epoch.
    pub fn run_with_progress(
        &self,
        on_epoch: impl FnMut(&EpochRecord) + Send,
        on_batch: impl Fn(usize, usize) + Sync,
    ) -> Result<RunOutcome> {
        let on_epoch = Mutex::new(on_epoch);
        // Only rank 0 reports; the lock is taken per call, never held across collectives.
        let report = |rank: usize| {
            let on_epoch = &on_epoch;
            move |r: &EpochRecord| {
                if rank == 0 {
                    (on_epoch.lock().unwrap_or_else(|e| e.into_inner()))(r)
                }
            }
        };
        match self.mode {
            TrainMode::FullBatch => {
                let Some(PlanData::Loaded(ds)) = &self.data else {
                    unreachable!("Plan::new loads a full-batch dataset")
                };
                let mut workload = FullBatch::new(ds, self.model.clone(), self.train.seed)?;
                self.start_from_saved(&mut workload)?;
                Ok(RunOutcome {
                    report: fit(&mut workload, &self.train, report(0))?,
                    root: true,
                    stages: None,
                    workers: None,
                    cache_hits_and_misses: None,
                })
            }
            TrainMode::MiniBatch => run_job(self.backend, self.workers, |comm| {
                let rank = comm.rank();
                let on_batch = |done, total| {
                    if rank == 0 {
                        on_batch(done, total)
                    }
                };
                let (report, stages, cache) = self.mini_batch(comm, report(rank), on_batch)?;
                Ok(RunOutcome {
                    report,
                    root: rank == 0,
                    stages: Some(stages),
                    workers: None,
                    cache_hits_and_misses: cache,
                })
            }),
            TrainMode::Sar => run_job(self.backend, self.workers, |comm| {
                let rank = comm.rank();
                self.sar(comm, report(rank))
            }),
        }
    }

    /// Gives the workload's model the saved parameters, when the run starts from a saved model
    /// (whose shape `Plan::new` checked).
    fn start_from_saved(&self, workload: &mut dyn Workload) -> Result<()> {
        let Some(saved) = &self.init else {
            return Ok(());
        };
        workload.model_mut().set_params(&saved.params)?;
        Ok(())
    }

    /// One worker of a data-parallel mini-batch job; returns the row cache's hits and misses
    /// too, when there is one.
    fn mini_batch(
        &self,
        comm: Arc<dyn Communicator>,
        on_epoch: impl FnMut(&EpochRecord),
        on_batch: impl FnMut(usize, usize) + Send,
    ) -> Result<(TrainReport, StageSeconds, Option<HitsAndMisses>)> {
        let data = self.data.as_ref().expect("opened by Plan::new");
        let meta = data.meta();
        let mb = self
            .batches
            .as_ref()
            .expect("a mini-batch plan has batches");
        let seed = self.train.seed;
        let mut table;
        let features = match self.embedding_dim {
            Some(_) => None,
            None => Some(self.feature_rows(data, comm.clone())?),
        };
        let inputs = match (self.embedding_dim, &features) {
            (Some(dim), _) => {
                let shape = [meta.num_nodes, dim];
                let spec = StoreSpec::new(&shape, DType::F32, Layout::Distributed, Location::Host);
                table = Embedding::trainable(
                    StoreTensor::new(comm, spec)?,
                    SparseOptimizer::lazy_adam(),
                )?;
                table.init_uniform(seed, 1.0 / (dim as f32).sqrt())?;
                Inputs::Embedding {
                    table: &mut table,
                    lr: self.settings.embedding_lr.unwrap_or(0.01),
                }
            }
            (None, Some(FeatureRows::Table(t))) => Inputs::Features(t),
            (None, Some(FeatureRows::Cached(c))) => Inputs::Features(c),
            (None, None) => unreachable!("features are made without an embedding"),
        };
        let mut workload = MiniBatch::new(data.graph_data(), inputs, self.model.clone(), seed, mb)?;
        workload.on_batch(on_batch);
        self.start_from_saved(&mut workload)?;
        if let Some(rows) = self.init.as_ref().and_then(|m| m.input_embedding.as_ref()) {
            workload.set_input_embedding(rows)?;
        }
        let report = fit(&mut workload, &self.train, on_epoch)?;
        let stages = workload.stages();
        drop(workload);
        let cache = match &features {
            Some(FeatureRows::Cached(c)) => Some(c.hits_and_misses()),
            _ => None,
        };
        Ok((report, stages, cache))
    }

    /// The feature rows of a mini-batch job: the store table, behind a cache of the rows of
    /// the nodes of highest in-degree when `--feature-cache-gib` asks for one.
    fn feature_rows(&self, data: &PlanData, comm: Arc<dyn Communicator>) -> Result<FeatureRows> {
        let table = self.feature_table(data, comm)?;
        let mapped = self.features_location == FeaturesLocation::Mmap;
        Ok(match (self.settings.feature_cache_gib, data) {
            (Some(gib), PlanData::Mapped(ds)) if mapped => {
                let rows = (gib * (1u64 << 30) as f64) as usize / table.row_bytes().max(1);
                let hot = ds.data().highest_in_degree(rows);
                FeatureRows::Cached(HotRows::new(table, &hot)?)
            }
            _ => FeatureRows::Table(table),
        })
    }

    /// The features of `ds` in the store at the plan's location: one table the threads share
    /// (Continuous), or each process's own rows (Distributed) under MPI, or the mapped file.
    fn feature_table(&self, data: &PlanData, comm: Arc<dyn Communicator>) -> Result<StoreTensor> {
        let layout = if comm.backend() == "mpi" && comm.size() > 1 {
            Layout::Distributed
        } else {
            Layout::Continuous
        };
        Ok(match (self.features_location, data) {
            (FeaturesLocation::Mmap, PlanData::Mapped(ds)) => {
                let dtype =
                    DType::parse(&ds.meta.feat_dtype).ok_or_else(|| PlanError::Invalid {
                        option: "--dataset",
                        reason: format!("has an unknown feature dtype '{}'", ds.meta.feat_dtype),
                    })?;
                let location = Location::Mmap {
                    path: ds.features_path(),
                    writable: false,
                };
                let shape = [ds.meta.num_nodes, ds.meta.feat_dim];
                StoreTensor::new(comm, StoreSpec::new(&shape, dtype, layout, location))?
            }
            (host_or_shared, PlanData::Mapped(ds)) => {
                // Copied from the mapped file into the store, in the file's dtype (a batch's
                // rows are cast to the compute dtype as they are gathered).
                let dtype =
                    DType::parse(&ds.meta.feat_dtype).ok_or_else(|| PlanError::Invalid {
                        option: "--dataset",
                        reason: format!("has an unknown feature dtype '{}'", ds.meta.feat_dtype),
                    })?;
                let location = if host_or_shared == FeaturesLocation::Host {
                    Location::Host
                } else {
                    Location::SharedHost
                };
                let shape = [ds.meta.num_nodes, ds.meta.feat_dim];
                let mut t =
                    StoreTensor::new(comm, StoreSpec::new(&shape, dtype, layout, location))?;
                let path = ds.features_path();
                let bytes = match dtype {
                    DType::BF16 => MappedNpy::<u16>::open(&path).map(FileBytes::U16),
                    _ => MappedNpy::<f32>::open(&path).map(FileBytes::F32),
                }
                .map_err(graphloom_graph::Error::from)?;
                t.fill_from_whole(bytes.as_bytes())?;
                t
            }
            (host_or_shared, PlanData::Loaded(ds)) => {
                let location = if host_or_shared == FeaturesLocation::Host {
                    Location::Host
                } else {
                    Location::SharedHost
                };
                let spec =
                    StoreSpec::new(ds.features.shape(), ds.features.dtype(), layout, location);
                let mut t = StoreTensor::new(comm, spec)?;
                t.fill_from_whole(ds.features.as_bytes())?;
                t
            }
        })
    }

    /// One worker of a SAR job: loads its part only, trains, and gathers every worker's
    /// figures on rank 0.
    fn sar(
        &self,
        comm: Arc<dyn Communicator>,
        on_epoch: impl FnMut(&EpochRecord),
    ) -> Result<RunOutcome> {
        let dir = self
            .settings
            .dataset
            .as_ref()
            .expect("a partitioned dataset has a path");
        let (rank, size) = (comm.rank(), comm.size());
        // Each worker's memory is its own: the rank thread charges a tracker of its own.
        set_thread_tracker(MemoryTracker::new());
        let mut part = {
            let _g = category_scope(Category::Features);
            Part::load(dir, rank)?
        };
        let counting = Arc::new(Counting::new(comm.clone()));
        let mut workload = Sar::new(
            counting.clone(),
            &mut part,
            self.model.clone(),
            self.train.seed,
            self.sar_mode,
        )?;
        self.start_from_saved(&mut workload)?;
        let report = fit(&mut workload, &self.train, on_epoch)?;
        drop(workload);
        // Every worker's figures, gathered by a sum into each worker's own slots.
        let mut figures = vec![0f64; 3 * size];
        figures[3 * rank] = report.memory.total_peak as f64;
        figures[3 * rank + 1] = RssReport::read().peak_bytes as f64;
        figures[3 * rank + 2] = counting.bytes_sent() as f64;
        comm.all_reduce(ReduceData::F64(&mut figures), ReduceOp::Sum)?;
        let figures = figures
            .chunks(3)
            .map(|f| WorkerFigures {
                peak_tracked_bytes: f[0] as u64,
                peak_rss_bytes: f[1] as u64,
                bytes_sent: f[2] as u64,
            })
            .collect();
        Ok(RunOutcome {
            report,
            root: rank == 0,
            stages: None,
            workers: (rank == 0).then_some(figures),
            cache_hits_and_misses: None,
        })
    }
}
