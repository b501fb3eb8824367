//! The job this process belongs to: one rank by default, the ranks of an `mpirun` job (built
//! with the `mpi` feature), or the processes of a torchrun job ([`TorchComm`]). [`init`] starts it once per process; [`finalize`] ends it
//! (under MPI, after the Python half has closed every table).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use graphloom_comm::{Communicator, Local, ReduceData, ReduceOp};
use pyo3::prelude::*;

use crate::buffers::Held;
use crate::errors::{self, invalid};
use crate::process::{check_pool, Owner};
use crate::torch_comm::TorchComm;

/// The started job.
struct Job {
    world: Arc<dyn Communicator>,
    node: Arc<dyn Communicator>,
    /// The process that started it: a forked child inherits the job but not its threads.
    owner: Owner,
    /// Keeps MPI initialised; dropped last, which finalises it.
    #[cfg(feature = "mpi")]
    _runtime: Option<graphloom_comm::mpi::MpiRuntime>,
}

static JOB: Mutex<Option<Job>> = Mutex::new(None);

/// Counts started jobs: a communicator of an ended job refuses work.
static GENERATION: AtomicU64 = AtomicU64::new(0);

fn job() -> std::sync::MutexGuard<'static, Option<Job>> {
    JOB.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A communicator of the job: the ranks that a table is spread over and that reduce together.
#[pyclass(module = "graphloom._graphloom", frozen)]
pub(crate) struct Comm {
    /// Weak: the job owns its communicators, so they are freed before MPI is finalised even
    /// while Python still holds this object.
    inner: Weak<dyn Communicator>,
    generation: u64,
    rank: usize,
    size: usize,
    backend: &'static str,
    owner: Owner,
}

impl Comm {
    fn new(inner: &Arc<dyn Communicator>, owner: Owner) -> Comm {
        Comm {
            owner,
            inner: Arc::downgrade(inner),
            generation: GENERATION.load(Ordering::SeqCst),
            rank: inner.rank(),
            size: inner.size(),
            backend: inner.backend(),
        }
    }

    /// The communicator, unless its job has ended.
    pub(crate) fn get(&self) -> PyResult<Arc<dyn Communicator>> {
        self.owner.check("this communicator")?;
        match self.inner.upgrade() {
            Some(comm) if GENERATION.load(Ordering::SeqCst) == self.generation => Ok(comm),
            _ => Err(errors::failure(
                "this communicator's job was finalized: call graphloom.init() again and make \
                 new tables",
            )),
        }
    }
}

#[pymethods]
impl Comm {
    /// This process's rank in the communicator.
    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    #[getter]
    fn size(&self) -> usize {
        self.size
    }

    /// `local`, `mpi` or `torch`.
    #[getter]
    fn backend(&self) -> &'static str {
        self.backend
    }

    /// Waits for every rank.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        let comm = self.get()?;
        py.detach(|| comm.barrier()).map_err(errors::raise)
    }

    /// Reduces a contiguous writable array in place over the ranks (`op`: sum, max or min;
    /// `dtype`: f32, f64 or i64, the array's element type). Every rank gets the same bits:
    /// slices are summed in rank order.
    fn all_reduce(
        &self,
        py: Python<'_>,
        array: &Bound<'_, PyAny>,
        dtype: &str,
        op: &str,
    ) -> PyResult<()> {
        let comm = self.get()?;
        let op = match op {
            "sum" => ReduceOp::Sum,
            "max" => ReduceOp::Max,
            "min" => ReduceOp::Min,
            other => {
                return Err(invalid(format!(
                    "all_reduce: op '{other}' is not sum, max or min"
                )))
            }
        };
        match dtype {
            "f32" => {
                let mut held = Held::<f32>::new_mut(array, "all_reduce")?;
                let data = held.slice_mut();
                py.detach(|| comm.all_reduce(ReduceData::F32(data), op))
            }
            "f64" => {
                let mut held = Held::<f64>::new_mut(array, "all_reduce")?;
                let data = held.slice_mut();
                py.detach(|| comm.all_reduce(ReduceData::F64(data), op))
            }
            "i64" => {
                let mut held = Held::<i64>::new_mut(array, "all_reduce")?;
                let data = held.slice_mut();
                py.detach(|| comm.all_reduce(ReduceData::I64(data), op))
            }
            other => {
                return Err(invalid(format!(
                    "all_reduce: dtype {other} is not float32, float64 or int64"
                )))
            }
        }
        .map_err(errors::raise)
    }

    fn __repr__(&self) -> String {
        format!(
            "Comm(rank={}, size={}, backend={})",
            self.rank, self.size, self.backend
        )
    }
}

/// Starts the job once per process and returns (global, node-local) communicators. `backend`
/// is `auto` (MPI when launched by mpirun, else one rank), `local`, `mpi` or `torch` (the
/// processes of a torch.distributed job: `torch_world` is `(rank, size, local_rank,
/// local_size)` and `transport` the Python half's sender and receiver). A second call returns
/// the running job's communicators.
#[pyfunction]
#[pyo3(signature = (backend = "auto", torch_world = None, transport = None))]
pub(crate) fn init(
    py: Python<'_>,
    backend: &str,
    torch_world: Option<(usize, usize, usize, usize)>,
    transport: Option<Py<PyAny>>,
) -> PyResult<(Comm, Comm)> {
    enum Start {
        Local,
        Mpi,
        Torch(TorchComm, TorchComm),
    }
    let start = match (backend, torch_world, transport) {
        ("local", _, _) => Start::Local,
        ("mpi", _, _) => Start::Mpi,
        ("auto", _, _) if launched_by_mpirun() => Start::Mpi,
        ("auto", _, _) => Start::Local,
        ("torch", Some((rank, size, local_rank, local_size)), Some(transport)) => {
            if rank >= size || local_rank > rank || local_rank >= local_size || local_size > size {
                return Err(invalid(format!(
                    "init: rank {rank} of {size} (local rank {local_rank} of {local_size}) is \
                     not a rank of the job"
                )));
            }
            let world = TorchComm::world(transport, rank, size);
            let node = TorchComm::node_of(&world, local_rank, local_size);
            Start::Torch(world, node)
        }
        ("torch", _, _) => {
            return Err(invalid(
                "init: backend 'torch' needs torch_world and transport (the Python half's)",
            ))
        }
        (other, _, _) => {
            return Err(invalid(format!(
                "init: backend '{other}' is not auto, local, mpi or torch"
            )))
        }
    };
    check_pool()?;
    // The job's lock is only ever held with the interpreter lock released, and never across
    // a wait for it.
    py.detach(|| {
        let mut guard = job();
        if guard.is_none() {
            let started = match start {
                Start::Local => start_local(),
                Start::Mpi => start_mpi()?,
                Start::Torch(world, node) => Job {
                    world: Arc::new(world),
                    node: Arc::new(node),
                    owner: Owner::here(),
                    #[cfg(feature = "mpi")]
                    _runtime: None,
                },
            };
            GENERATION.fetch_add(1, Ordering::SeqCst);
            *guard = Some(started);
        }
        let running = guard.as_ref().expect("started above");
        Ok((
            Comm::new(&running.world, running.owner),
            Comm::new(&running.node, running.owner),
        ))
    })
}

/// Whether a job is running.
#[pyfunction]
pub(crate) fn is_initialized(py: Python<'_>) -> bool {
    py.detach(|| job().is_some())
}

/// Ends the job: waits for every rank and, under MPI, finalises it. Tables must be closed
/// first (the Python half does so). In a forked child it does nothing: the job is the
/// parent's.
#[pyfunction]
pub(crate) fn finalize(py: Python<'_>) -> PyResult<()> {
    py.detach(|| {
        let mut guard = job();
        if guard.as_ref().is_none_or(|j| !j.owner.is_here()) {
            return Ok(());
        }
        let ended = guard.take().expect("checked above");
        drop(guard);
        GENERATION.fetch_add(1, Ordering::SeqCst);
        // MPI is finalised once every rank is done; a torchrun job's messages go through
        // torch.distributed, whose process group may be gone by the time the process exits.
        if ended.world.backend() != "torch" {
            ended.world.barrier().map_err(errors::raise)?;
        }
        drop(ended);
        Ok(())
    })
}

/// The number of ranks of the job on this machine (1 before the job starts).
/// (Called with the interpreter lock released.)
pub(crate) fn node_ranks() -> usize {
    job().as_ref().map_or(1, |j| j.node.size())
}

fn launched_by_mpirun() -> bool {
    std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() || std::env::var_os("PMI_SIZE").is_some()
}

fn start_local() -> Job {
    let world = Local::single();
    Job {
        node: world.clone(),
        world,
        owner: Owner::here(),
        #[cfg(feature = "mpi")]
        _runtime: None,
    }
}

#[cfg(feature = "mpi")]
fn start_mpi() -> PyResult<Job> {
    let (runtime, world) = graphloom_comm::mpi::init().map_err(errors::raise)?;
    let node = world.node().map_err(errors::raise)?;
    Ok(Job {
        world,
        node,
        owner: Owner::here(),
        _runtime: Some(runtime),
    })
}

#[cfg(not(feature = "mpi"))]
fn start_mpi() -> PyResult<Job> {
    Err(errors::failure(
        "this process was started by mpirun (or asked for MPI), but this build of graphloom \
         has no MPI backend: reinstall it with MPI (scripts/python-install.sh --mpi)",
    ))
}
