//! The MPI backend (feature `mpi`): the processes of an `mpirun` job, over the system's OpenMPI
//! through the `mpi` crate.
//!
//! Blocking MPI calls cannot time out, so every wait here is a non-blocking operation polled
//! until a deadline: a receive probes for a matching message, a send tests its request. A rank
//! that panics or calls [`Communicator::fail`] prints what happened and aborts the whole job
//! with `MPI_Abort`, so no rank is left waiting for it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use mpi::datatype::Equivalence;
use mpi::point_to_point::{Destination, Source};
use mpi::request::{Request, StaticScope};
use mpi::topology::{Color, Communicator as _, SimpleCommunicator};
use mpi::Threading;

use crate::communicator::{Communicator, Handle};
use crate::deadline::Deadline;
use crate::request::{PendingRecv, PendingSend, RecvRequest, SendRequest};
use crate::{default_timeout, CommError, Result};

/// Messages longer than this travel in pieces: MPI counts elements in a 32-bit int.
const MAX_PIECE: usize = 1 << 30;

/// The world rank of this process, for the panic hook.
static WORLD_RANK: OnceLock<usize> = OnceLock::new();

/// Keeps MPI initialised; finalises it when dropped. Drop every communicator first.
pub struct MpiRuntime {
    _universe: mpi::environment::Universe,
}

impl std::fmt::Debug for MpiRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MpiRuntime")
    }
}

/// Whether this process was started by `mpirun` (OpenMPI sets `OMPI_COMM_WORLD_SIZE`) or by
/// another MPI launcher that sets `PMI_SIZE`.
pub fn launched_by_mpirun() -> bool {
    std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() || std::env::var_os("PMI_SIZE").is_some()
}

/// Initialises MPI with full thread support and returns the world communicator, with the guard
/// that finalises MPI. Installs a panic hook that aborts the job, so a panicking rank never
/// leaves the others waiting.
pub fn init() -> Result<(MpiRuntime, Arc<dyn Communicator>)> {
    let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
        .ok_or_else(|| CommError::Mpi("MPI was already initialised".into()))?;
    if threading < Threading::Multiple {
        return Err(CommError::Mpi(format!(
            "the MPI library gives thread level {threading:?}; GraphLoom needs Multiple"
        )));
    }
    let world = universe.world();
    let rank = world.rank() as usize;
    let _ = WORLD_RANK.set(rank);
    install_abort_on_panic();
    let comm = wrap(world, default_timeout());
    Ok((
        MpiRuntime {
            _universe: universe,
        },
        comm,
    ))
}

fn install_abort_on_panic() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let rank = WORLD_RANK.get().copied().unwrap_or(usize::MAX);
        eprintln!("rank {rank} failed: {info}");
        default_hook(info);
        abort_job();
    }));
}

fn abort_job() -> ! {
    // SAFETY: MPI is initialised (the hook is installed after it) and MPI_Abort never returns.
    unsafe {
        mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, 1);
    }
    std::process::abort()
}

/// One process's view of an MPI communicator.
pub struct MpiComm {
    comm: SimpleCommunicator,
    rank: usize,
    size: usize,
    timeout_ms: AtomicU64,
}

// SAFETY: MPI is initialised with MPI_THREAD_MULTIPLE (checked in `init`), so any thread may
// call into it on the same communicator.
unsafe impl Send for MpiComm {}
// SAFETY: as above.
unsafe impl Sync for MpiComm {}

impl MpiComm {
    fn new(comm: SimpleCommunicator) -> MpiComm {
        MpiComm {
            rank: comm.rank() as usize,
            size: comm.size() as usize,
            comm,
            timeout_ms: AtomicU64::new(default_timeout().as_millis() as u64),
        }
    }
}

/// Sleeps a little longer each time a poll finds nothing, up to a millisecond: ranks may share
/// few cores, and a spinning rank would slow the very peer it waits for.
struct Backoff {
    polls: u32,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff { polls: 0 }
    }
    fn snooze(&mut self) {
        self.polls += 1;
        if self.polls < 16 {
            std::thread::yield_now();
        } else {
            let micros = (1u64 << (self.polls - 16).min(10)).min(1000);
            std::thread::sleep(Duration::from_micros(micros));
        }
    }
}

/// A send in flight: the MPI requests of its pieces and the buffer they read, which is freed
/// only once every piece completed.
struct MpiSend {
    requests: Vec<Request<'static, [u8], StaticScope>>,
    buffer: *mut [u8],
    me: usize,
    dest: usize,
    timeout: Duration,
}

// SAFETY: the buffer is owned by this struct (leaked from a Box, reclaimed in `finish`), and MPI
// runs with MPI_THREAD_MULTIPLE, so the requests may be completed from any thread.
unsafe impl Send for MpiSend {}

impl MpiSend {
    fn finish(&mut self) -> Result<()> {
        let mut deadline = Deadline::start(self.timeout);
        let mut backoff = Backoff::new();
        while let Some(request) = self.requests.pop() {
            match request.test() {
                Ok(_) => backoff = Backoff::new(),
                Err(pending) => {
                    if deadline.passed() {
                        // MPI may still read the buffer: leak it and the requests.
                        std::mem::forget(pending);
                        std::mem::forget(std::mem::take(&mut self.requests));
                        self.buffer = std::ptr::slice_from_raw_parts_mut(std::ptr::null_mut(), 0);
                        return Err(CommError::timeout(self.me, "send", self.dest, self.timeout));
                    }
                    self.requests.push(pending);
                    backoff.snooze();
                }
            }
        }
        if !self.buffer.is_null() {
            // SAFETY: the buffer came from Box::leak in `isend_raw`, and every request reading
            // it has completed.
            let buffer = unsafe { Box::from_raw(self.buffer) };
            graphloom_tensor::alloc::recycle(buffer.into_vec());
            self.buffer = std::ptr::slice_from_raw_parts_mut(std::ptr::null_mut(), 0);
        }
        Ok(())
    }
}

impl PendingSend for MpiSend {
    fn wait(mut self: Box<Self>) -> Result<()> {
        self.finish()
    }
}

impl Drop for MpiSend {
    /// A send dropped without a wait belongs to a path that is already failing (an error
    /// elsewhere returned early): waiting again for the full deadline would only delay the
    /// report of that error. Completed pieces free the buffer; otherwise MPI may still read
    /// it, so it is leaked.
    fn drop(&mut self) {
        let mut pending = Vec::new();
        while let Some(request) = self.requests.pop() {
            if let Err(request) = request.test() {
                pending.push(request);
            }
        }
        if pending.is_empty() && !self.buffer.is_null() {
            // SAFETY: the buffer came from Box::leak in `isend_raw`, and every request reading
            // it has completed.
            let buffer = unsafe { Box::from_raw(self.buffer) };
            graphloom_tensor::alloc::recycle(buffer.into_vec());
        }
        std::mem::forget(pending);
    }
}

struct MpiRecv {
    comm: Arc<MpiComm>,
    src: usize,
    tag: i32,
    op: &'static str,
}

impl MpiRecv {
    fn piece(&self, deadline: &mut Deadline, timeout: Duration) -> Result<Vec<u8>> {
        let process = self.comm.comm.process_at_rank(self.src as i32);
        let mut backoff = Backoff::new();
        loop {
            if let Some((message, status)) = process.immediate_matched_probe_with_tag(self.tag) {
                let count = status.count(u8::equivalent_datatype()) as usize;
                // A reused, huge-page backed buffer: a fresh one would be faulted in 4 KiB at
                // a time while the message streams in.
                let mut buffer = graphloom_tensor::alloc::with_capacity::<u8>(count);
                buffer.resize(count, 0);
                message.matched_receive_into(&mut buffer[..]);
                return Ok(buffer);
            }
            if deadline.passed() {
                return Err(CommError::timeout(
                    self.comm.rank,
                    self.op,
                    self.src,
                    timeout,
                ));
            }
            backoff.snooze();
        }
    }
}

impl PendingRecv for MpiRecv {
    fn wait(self: Box<Self>) -> Result<Vec<u8>> {
        let timeout = self.comm.timeout();
        let mut deadline = Deadline::start(timeout);
        let mut data = self.piece(&mut deadline, timeout)?;
        let mut last = data.len();
        while last == MAX_PIECE {
            let piece = self.piece(&mut deadline, timeout)?;
            last = piece.len();
            data.extend_from_slice(&piece);
        }
        Ok(data)
    }
}

/// A communicator shared with the receive requests it starts.
struct SharedMpi(Arc<MpiComm>);

impl Communicator for SharedMpi {
    fn rank(&self) -> usize {
        self.0.rank
    }
    fn size(&self) -> usize {
        self.0.size
    }
    fn backend(&self) -> &'static str {
        "mpi"
    }
    fn timeout(&self) -> Duration {
        self.0.timeout()
    }
    fn set_timeout(&self, timeout: Duration) {
        self.0
            .timeout_ms
            .store(timeout.as_millis() as u64, Ordering::Relaxed);
    }

    fn isend_raw(&self, dest: usize, tag: i32, data: Vec<u8>) -> Result<SendRequest> {
        self.check_peer(dest, "send")?;
        let len = data.len();
        let buffer: &'static mut [u8] = Box::leak(data.into_boxed_slice());
        let raw: *mut [u8] = buffer;
        // SAFETY: `raw` stays valid until `MpiSend::finish` frees it after every request
        // completed; MPI only reads it.
        let shared: &'static [u8] = unsafe { &*raw };
        let process = self.0.comm.process_at_rank(dest as i32);
        let mut requests = Vec::new();
        let mut start = 0;
        loop {
            let end = (start + MAX_PIECE).min(len);
            requests.push(process.immediate_send_with_tag(StaticScope, &shared[start..end], tag));
            // A message that is a whole number of full pieces ends with an empty one, so the
            // receiver knows when to stop.
            if end - start < MAX_PIECE {
                break;
            }
            start = end;
        }
        // Complete the pieces in order of posting (finish pops from the back).
        requests.reverse();
        Ok(SendRequest::new(MpiSend {
            requests,
            buffer: raw,
            me: self.0.rank,
            dest,
            timeout: self.timeout(),
        }))
    }

    fn irecv_raw(&self, src: usize, tag: i32, op: &'static str) -> Result<RecvRequest> {
        self.check_peer(src, op)?;
        Ok(RecvRequest::new(MpiRecv {
            comm: self.0.clone(),
            src,
            tag,
            op,
        }))
    }

    fn share_handles(&self, mine: Handle) -> Result<Option<Vec<Handle>>> {
        Ok((self.0.size == 1).then(|| vec![mine]))
    }

    fn split(&self, color: usize, key: usize) -> Result<Arc<dyn Communicator>> {
        let color = i32::try_from(color)
            .map_err(|_| CommError::Invalid(format!("split: color {color} is too large")))?;
        let key = i32::try_from(key)
            .map_err(|_| CommError::Invalid(format!("split: key {key} is too large")))?;
        let comm = self
            .0
            .comm
            .split_by_color_with_key(Color::with_value(color), key)
            .ok_or_else(|| CommError::Mpi("split returned no communicator".into()))?;
        Ok(wrap(comm, self.timeout()))
    }

    fn node(&self) -> Result<Arc<dyn Communicator>> {
        Ok(wrap(
            self.0.comm.split_shared(self.0.rank as i32),
            self.timeout(),
        ))
    }

    fn fail(&self, reason: &str) {
        let rank = WORLD_RANK.get().copied().unwrap_or(self.0.rank);
        // A peer's failure seen from here already names the rank that failed.
        if reason.starts_with("rank ") && reason.contains(" failed: ") {
            eprintln!("{reason}");
        } else {
            eprintln!("rank {rank} failed: {reason}");
        }
        abort_job();
    }
}

impl MpiComm {
    fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.load(Ordering::Relaxed))
    }
}

fn wrap(comm: SimpleCommunicator, timeout: Duration) -> Arc<dyn Communicator> {
    let comm = SharedMpi(Arc::new(MpiComm::new(comm)));
    comm.set_timeout(timeout);
    Arc::new(comm)
}

/// Runs `job` as this process's rank of an MPI job: initialises MPI, runs the job on the world
/// communicator and finalises MPI. An error aborts the whole job after printing
/// `rank R failed: ...`, so no other rank waits for this one.
pub fn run_rank<E: std::fmt::Display>(
    job: impl FnOnce(Arc<dyn Communicator>) -> std::result::Result<(), E>,
) -> Result<()> {
    let (runtime, comm) = init()?;
    if let Err(e) = job(comm.clone()) {
        comm.fail(&e.to_string());
    }
    drop(comm);
    drop(runtime);
    Ok(())
}
