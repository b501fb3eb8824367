//! Starting the workers of a job: threads of this process, or this process's rank of an MPI job.

use std::sync::Arc;

use graphloom_comm::{Communicator, Local};

use crate::{Backend, PlanError, Result};

/// What one worker of a SAR job used: its peak tracked bytes, its process's peak RSS (the
/// same process for every in-process worker) and the bytes it sent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkerFigures {
    /// The most tracked bytes the worker held at once.
    pub peak_tracked_bytes: u64,
    /// The peak resident set of the worker's process.
    pub peak_rss_bytes: u64,
    /// Bytes the worker sent.
    pub bytes_sent: u64,
}

/// Runs `job` on `workers` in-process ranks (returning rank 0's result) or as this process's
/// rank of an MPI job.
pub fn run_job<T: Send>(
    backend: Backend,
    workers: usize,
    job: impl Fn(Arc<dyn Communicator>) -> Result<T> + Sync,
) -> Result<T> {
    match backend {
        Backend::Local => {
            let mut results = Local::run(workers.max(1), job);
            results.swap_remove(0)
        }
        Backend::Mpi => run_under_mpi(job),
    }
}

#[cfg(feature = "mpi")]
fn run_under_mpi<T>(job: impl FnOnce(Arc<dyn Communicator>) -> Result<T>) -> Result<T> {
    let mut out = None;
    graphloom_comm::mpi::run_rank(|comm| {
        out = Some(job(comm)?);
        Ok::<(), PlanError>(())
    })?;
    Ok(out.expect("run_rank aborts the job on error"))
}

#[cfg(not(feature = "mpi"))]
fn run_under_mpi<T>(_job: impl FnOnce(Arc<dyn Communicator>) -> Result<T>) -> Result<T> {
    Err(PlanError::NoMpi)
}
