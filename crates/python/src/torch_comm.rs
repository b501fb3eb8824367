//! The processes of a torchrun job (or any torch.distributed job) as the store's communicator:
//! the point-to-point layer of [`Communicator`] over torch.distributed's tagged sends and
//! receives (gloo), which `graphloom._torch_transport` makes; the collectives are the trait's
//! own, so tables spread over a torchrun job's processes exactly as over an MPI job's.
//!
//! Every communicator of the job sends under its own block of wire tags (`slot * 32768 +
//! tag`: the trait's tags, user and collective, are below 32768), so the messages of a
//! communicator made by [`Communicator::split`] never meet another's. The transport's waits
//! release the interpreter lock, so a thread waiting here never holds up another that must
//! call Python to send what it waits for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use graphloom_comm::{
    CommError, Communicator, Handle, PendingRecv, PendingSend, RecvRequest, Result, SendRequest,
};
use pyo3::exceptions::{PyConnectionError, PyTimeoutError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Wire tags per communicator: every tag of the trait is below it.
const TAGS_PER_COMM: i64 = 32_768;
/// The number of wire-tag blocks: `SLOTS * TAGS_PER_COMM` stays below gloo's `i32` tags.
const SLOTS: u64 = 65_535;
/// The world's block; the node communicator of [`TorchComm::node_of`] takes the next.
const WORLD_SLOT: i64 = 0;

/// A communicator over torch.distributed: this process's rank among `members` (world ranks).
pub(crate) struct TorchComm {
    transport: Arc<Py<PyAny>>,
    members: Arc<[usize]>,
    rank: usize,
    slot: i64,
    timeout_ms: Arc<AtomicU64>,
    /// Communicators made from this one so far: every member makes them in the same order,
    /// so the count names the next one alike on every rank.
    made: AtomicU64,
}

impl TorchComm {
    /// Rank `rank` of the job's `size` processes, messages through `transport`.
    pub(crate) fn world(transport: Py<PyAny>, rank: usize, size: usize) -> TorchComm {
        TorchComm::new(Arc::new(transport), (0..size).collect(), rank, WORLD_SLOT)
    }

    /// The ranks of `world` on this machine, `local_rank` of `local_size` of them, without any
    /// message: torchrun numbers a machine's processes consecutively.
    pub(crate) fn node_of(world: &TorchComm, local_rank: usize, local_size: usize) -> TorchComm {
        let first = world.rank - local_rank;
        TorchComm::new(
            Arc::clone(&world.transport),
            (first..first + local_size).collect(),
            local_rank,
            WORLD_SLOT + 1,
        )
    }

    fn new(transport: Arc<Py<PyAny>>, members: Vec<usize>, rank: usize, slot: i64) -> TorchComm {
        TorchComm {
            transport,
            members: members.into(),
            rank,
            slot,
            timeout_ms: Arc::new(AtomicU64::new(
                graphloom_comm::default_timeout().as_millis() as u64,
            )),
            made: AtomicU64::new(0),
        }
    }

    /// The wire tag of the trait's `tag` on this communicator.
    fn wire_tag(&self, tag: i32) -> i64 {
        self.slot * TAGS_PER_COMM + i64::from(tag)
    }

    /// The next communicator made from this one, of `members` (world ranks) with this rank at
    /// `rank`: its tag block is drawn from this one's, the count and `color`.
    fn derived(&self, members: Vec<usize>, rank: usize, color: u64) -> TorchComm {
        let made = self.made.fetch_add(1, Ordering::SeqCst);
        let mixed = graphloom_tensor::rng::combine(
            graphloom_tensor::rng::combine(self.slot as u64, made),
            color,
        );
        // Slots 0 and 1 are the world's and the node's.
        let slot = 2 + (graphloom_tensor::rng::mix64(mixed) % (SLOTS - 2)) as i64;
        let comm = TorchComm::new(Arc::clone(&self.transport), members, rank, slot);
        comm.set_timeout(self.timeout());
        comm
    }

    /// The ranks of this communicator grouped by `color`, ordered by `key` then rank: a
    /// collective exchange of every rank's pair.
    fn group(&self, color: u64, key: u64) -> Result<TorchComm> {
        let mut mine = color.to_le_bytes().to_vec();
        mine.extend_from_slice(&key.to_le_bytes());
        let all = self.all_gather_v(&mine)?;
        let pair = |bytes: &[u8]| -> (u64, u64) {
            let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8"));
            (word(0), word(8))
        };
        let mut same: Vec<(u64, usize)> = all
            .iter()
            .enumerate()
            .filter_map(|(r, b)| {
                let (c, k) = pair(b);
                (c == color).then_some((k, r))
            })
            .collect();
        same.sort_unstable();
        let rank = same
            .iter()
            .position(|&(_, r)| r == self.rank)
            .expect("this rank is in its own group");
        let members = same.iter().map(|&(_, r)| self.members[r]).collect();
        Ok(self.derived(members, rank, color))
    }

    /// The error of a failed call to `peer` (a rank of this communicator) in `op`.
    fn failure(&self, peer: usize, op: &'static str, err: PyErr) -> CommError {
        Python::attach(|py| transport_error(py, &err, peer, op, || self.timeout_of(peer, op)))
    }

    fn timeout_of(&self, peer: usize, op: &'static str) -> CommError {
        CommError::timeout(self.rank, op, peer, self.timeout())
    }
}

/// What the transport's exception `err` means: a deadline passed (`timeout`), the connection
/// to `peer` failed (the peer is taken to have failed), or the job cannot send at all (no
/// process group: said as torch.distributed says it).
fn transport_error(
    py: Python<'_>,
    err: &PyErr,
    peer: usize,
    op: &'static str,
    timeout: impl FnOnce() -> CommError,
) -> CommError {
    if err.is_instance_of::<PyTimeoutError>(py) {
        timeout()
    } else if err.is_instance_of::<PyConnectionError>(py) {
        CommError::PeerFailed {
            rank: peer,
            reason: format!("{op} through torch.distributed: {}", err.value(py)),
        }
    } else {
        CommError::Invalid(err.value(py).to_string())
    }
}

/// A send in flight: the transport's handle, waited on by [`PendingSend::wait`].
struct TorchSend {
    transport: Arc<Py<PyAny>>,
    handle: Py<PyAny>,
    peer: usize,
}

impl PendingSend for TorchSend {
    fn wait(self: Box<Self>) -> Result<()> {
        Python::attach(|py| {
            self.transport
                .call_method1(py, "wait", (self.handle.clone_ref(py),))
                .map(drop)
                .map_err(|err| {
                    transport_error(py, &err, self.peer, "send", || CommError::PeerFailed {
                        rank: self.peer,
                        reason: "send through torch.distributed timed out".into(),
                    })
                })
        })
    }
}

/// A receive, made when it is waited on (a message's length comes first).
struct TorchRecv {
    comm: TorchComm,
    src: usize,
    wire_tag: i64,
    op: &'static str,
}

impl PendingRecv for TorchRecv {
    fn wait(self: Box<Self>) -> Result<Vec<u8>> {
        let c = &self.comm;
        let seconds = c.timeout().as_secs_f64();
        Python::attach(|py| -> PyResult<Vec<u8>> {
            let got = c.transport.call_method1(
                py,
                "recv",
                (c.members[self.src], self.wire_tag, seconds),
            )?;
            got.extract::<Vec<u8>>(py)
        })
        .map_err(|err| c.failure(self.src, self.op, err))
    }
}

impl Clone for TorchComm {
    fn clone(&self) -> TorchComm {
        TorchComm {
            transport: Arc::clone(&self.transport),
            members: Arc::clone(&self.members),
            rank: self.rank,
            slot: self.slot,
            timeout_ms: Arc::clone(&self.timeout_ms),
            made: AtomicU64::new(self.made.load(Ordering::SeqCst)),
        }
    }
}

impl Communicator for TorchComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.members.len()
    }

    fn backend(&self) -> &'static str {
        "torch"
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.load(Ordering::Relaxed))
    }

    fn set_timeout(&self, timeout: Duration) {
        self.timeout_ms
            .store(timeout.as_millis() as u64, Ordering::Relaxed);
    }

    fn isend_raw(&self, dest: usize, tag: i32, data: Vec<u8>) -> Result<SendRequest> {
        self.check_peer(dest, "send")?;
        let handle = Python::attach(|py| {
            self.transport.call_method1(
                py,
                "isend",
                (
                    self.members[dest],
                    self.wire_tag(tag),
                    PyBytes::new(py, &data),
                ),
            )
        })
        .map_err(|err| self.failure(dest, "send", err))?;
        Ok(SendRequest::new(TorchSend {
            transport: Arc::clone(&self.transport),
            handle,
            peer: dest,
        }))
    }

    fn irecv_raw(&self, src: usize, tag: i32, op: &'static str) -> Result<RecvRequest> {
        self.check_peer(src, op)?;
        Ok(RecvRequest::new(TorchRecv {
            comm: self.clone(),
            src,
            wire_tag: self.wire_tag(tag),
            op,
        }))
    }

    fn share_handles(&self, mine: Handle) -> Result<Option<Vec<Handle>>> {
        // Separate processes share no objects; one rank shares with itself.
        Ok((self.size() == 1).then(|| vec![mine]))
    }

    fn split(&self, color: usize, key: usize) -> Result<Arc<dyn Communicator>> {
        Ok(Arc::new(self.group(color as u64, key as u64)?))
    }

    fn node(&self) -> Result<Arc<dyn Communicator>> {
        // The ranks whose machine has this one's name, numbered by rank.
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let names = self.all_gather_v(name.trim().as_bytes())?;
        let first = names
            .iter()
            .position(|n| *n == names[self.rank])
            .expect("this rank's own name");
        Ok(Arc::new(self.group(first as u64, self.rank as u64)?))
    }

    fn fail(&self, reason: &str) {
        // The other processes see this one's sends stop: their receives name it when their
        // deadline passes, or at once when the process exits and its connections close.
        let rank = self.members[self.rank];
        if reason.starts_with("rank ") && reason.contains(" failed: ") {
            eprintln!("{reason}");
        } else {
            eprintln!("rank {rank} failed: {reason}");
        }
    }
}
