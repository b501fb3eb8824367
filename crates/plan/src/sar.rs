//! [`SarPlan`]: full-batch training over the parts of a partitioned dataset, one part per
//! worker, each loading its own part only.

use std::path::PathBuf;
use std::sync::Arc;

use graphloom_comm::{Communicator, Counting, ReduceData, ReduceOp};
use graphloom_graph::parts::{Part, PartitionMeta};
use graphloom_nn::train::{fit, EpochRecord, TrainConfig, TrainReport};
use graphloom_sar::{Sar, SarMode};
use graphloom_tensor::memory::{category_scope, set_thread_tracker, Category, MemoryTracker};
use graphloom_tensor::RssReport;

use crate::budget::{self, RunShape};
use crate::checks::check_local_workers;
use crate::plan::{check_sizes, Common, PlannedModel, RootReport};
use crate::values::{value_loss, value_task};
use crate::{run_job, Backend, MemoryPlan, PlanError, Result, TrainSettings, WorkerFigures};

/// The threads of a SAR worker: its own, and the senders of two rounds of its ring exchange
/// (the next one starts while the last one is aggregated).
const WORKER_THREADS: usize = 3;

/// A SAR run.
pub struct SarPlan {
    /// Settings, model and loop.
    pub common: Common,
    /// Workers of an in-process job (one per part by default).
    pub workers: usize,
    /// How the workers talk.
    pub backend: Backend,
    /// How halos travel.
    pub sar_mode: SarMode,
    /// The predicted peak memory of this process by part, checked against `memory_gib`.
    pub memory: MemoryPlan,
    /// The partitioned directory.
    dir: PathBuf,
}

/// What a SAR run produced, on the worker that reports it.
pub struct SarOutcome {
    /// The loop's records and the best parameters.
    pub report: TrainReport,
    /// Whether this process reports the job's results (rank 0 of the job).
    pub root: bool,
    /// Every worker's figures (on the root).
    pub workers: Option<Vec<WorkerFigures>>,
}

impl SarPlan {
    pub(crate) fn new(
        settings: TrainSettings,
        train: TrainConfig,
        model: PlannedModel,
    ) -> Result<SarPlan> {
        let Some(dir) = settings.dataset.clone() else {
            return Err(PlanError::invalid(
                "dataset",
                "SAR trains a partitioned dataset: give its directory",
            ));
        };
        let partition = PartitionMeta::load(&dir)?;
        let backend = settings.comm.unwrap_or(Backend::Local);
        // One in-process worker per part unless told otherwise; an MPI job's processes hold
        // one part each (an in-process job's workers share one machine's memory).
        let workers = settings.workers.unwrap_or(partition.parts);
        let parts_set_it = settings.workers.is_none().then_some(partition.parts);
        check_local_workers(backend, workers, WORKER_THREADS, parts_set_it)?;
        let rows_per_process = match backend {
            Backend::Mpi => partition.nodes.iter().copied().max().unwrap_or(0),
            Backend::Local => partition.dataset.num_nodes,
        };
        let sar_mode = settings.sar_mode.unwrap_or(SarMode::Sar);
        let common = model.common(settings, train, partition.dataset.clone())?;
        check_sizes(&common.model, rows_per_process)?;
        let memory = budget::sar(
            &RunShape::of(&common)?,
            &partition,
            backend == Backend::Local,
        )?;
        Ok(SarPlan {
            common,
            workers,
            backend,
            sar_mode,
            memory,
            dir,
        })
    }

    /// Trains on every worker of the job; returns what rank 0 reports.
    pub(crate) fn run<F: FnMut(&EpochRecord) + Send>(
        &self,
        on_epoch: &RootReport<F>,
    ) -> Result<SarOutcome> {
        run_job(self.backend, self.workers, |comm| {
            let rank = comm.rank();
            self.run_worker(comm, on_epoch.of_rank(rank))
        })
    }

    /// One worker of the job: loads its part only, trains, and gathers every worker's figures
    /// on rank 0.
    fn run_worker(
        &self,
        comm: Arc<dyn Communicator>,
        on_epoch: impl FnMut(&EpochRecord),
    ) -> Result<SarOutcome> {
        let c = &self.common;
        let (rank, size) = (comm.rank(), comm.size());
        // Each worker's memory is its own: the rank thread charges a tracker of its own.
        set_thread_tracker(MemoryTracker::new());
        let mut part = {
            let _g = category_scope(Category::Features);
            Part::load(&self.dir, rank)?
        };
        let counting = Arc::new(Counting::new(comm.clone()));
        let splits = [&part.train_idx[..], &part.valid_idx, &part.test_idx];
        // Every part holds the same kind of labels: every worker decides alike.
        value_task(&c.settings, part.targets.as_ref(), splits)?;
        let workload = Sar::new(
            counting.clone(),
            &mut part,
            c.model.clone(),
            c.train.seed,
            self.sar_mode,
        )?;
        let mut workload = match value_loss(&c.settings) {
            Some(loss) => workload.with_values(loss)?,
            None => workload,
        };
        c.start_from_saved(&mut workload)?;
        let report = fit(&mut workload, &c.train, on_epoch)?;
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
        Ok(SarOutcome {
            report,
            root: rank == 0,
            workers: (rank == 0).then_some(figures),
        })
    }
}
