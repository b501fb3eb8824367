//! The in-process backend: N ranks as dedicated OS threads of one process, exchanging messages
//! through mailboxes. It needs nothing installed, so it is the embedded default and runs every
//! distributed algorithm in the tests.
//!
//! Ranks are OS threads, never rayon tasks: a rank blocked in a collective inside a rayon task
//! could hold a pool thread that another rank's kernel waits for. Each rank runs its own
//! kernels on the shared rayon pool.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::communicator::{Communicator, Handle, COLLECTIVE_TAG};
use crate::deadline::Deadline;
use crate::request::{PendingRecv, RecvRequest, SendRequest};
use crate::{default_timeout, CommError, Result};

/// How often a waiting rank looks at the failure board, so it notices a failed peer quickly
/// even when no message will ever arrive.
const FAILURE_POLL: Duration = Duration::from_millis(20);

/// What one rank can send another: bytes, or (within this process) a reference to an object.
enum Payload {
    Bytes(Vec<u8>),
    Handle(Handle),
}

/// Which ranks of a job have failed, and why; shared by every communicator split from it.
#[derive(Default)]
struct FailureBoard {
    failed: Mutex<HashMap<usize, String>>,
}

impl FailureBoard {
    fn reason(&self, world_rank: usize) -> Option<String> {
        lock(&self.failed).get(&world_rank).cloned()
    }
    fn mark(&self, world_rank: usize, reason: String) {
        lock(&self.failed).entry(world_rank).or_insert(reason);
    }
}

/// One rank's incoming messages, queued by (source, tag) in arrival order.
#[derive(Default)]
struct Mailbox {
    queues: Mutex<HashMap<(usize, i32), VecDeque<Payload>>>,
    arrived: Condvar,
}

/// The state shared by the ranks of one communicator.
struct Group {
    mailboxes: Vec<Mailbox>,
    /// The job-wide rank of each rank of this group.
    world_ranks: Vec<usize>,
    board: Arc<FailureBoard>,
}

impl Group {
    fn new(world_ranks: Vec<usize>, board: Arc<FailureBoard>) -> Group {
        Group {
            mailboxes: world_ranks.iter().map(|_| Mailbox::default()).collect(),
            world_ranks,
            board,
        }
    }

    fn post(&self, src: usize, dest: usize, tag: i32, payload: Payload) {
        let mailbox = &self.mailboxes[dest];
        lock(&mailbox.queues)
            .entry((src, tag))
            .or_default()
            .push_back(payload);
        mailbox.arrived.notify_all();
    }

    /// Waits for the next payload from `src` to `me` under `tag`: fails as soon as `src` is
    /// marked failed with nothing left queued, or when `timeout` passes.
    fn take(
        &self,
        me: usize,
        src: usize,
        tag: i32,
        op: &'static str,
        timeout: Duration,
    ) -> Result<Payload> {
        let mut deadline = Deadline::start(timeout);
        let mailbox = &self.mailboxes[me];
        let mut queues = lock(&mailbox.queues);
        loop {
            if let Some(payload) = queues.get_mut(&(src, tag)).and_then(VecDeque::pop_front) {
                return Ok(payload);
            }
            if let Some(reason) = self.board.reason(self.world_ranks[src]) {
                return Err(CommError::PeerFailed { rank: src, reason });
            }
            if deadline.passed() {
                return Err(CommError::timeout(me, op, src, timeout));
            }
            let slice = deadline.left().min(FAILURE_POLL);
            queues = mailbox
                .arrived
                .wait_timeout(queues, slice)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A rank that panicked while holding a lock left consistent data (every critical section
    // here is a single push, pop or insert), so the poison flag carries no information.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One rank of an in-process job; see [`Local::run`].
pub struct LocalComm {
    group: Arc<Group>,
    rank: usize,
    timeout_ms: AtomicU64,
}

/// Starts in-process jobs.
#[derive(Debug)]
pub struct Local;

impl Local {
    /// A job of one rank that the calling thread runs itself, for front ends that own their
    /// thread (an interpreter) rather than hand a closure to [`Local::run`].
    pub fn single() -> Arc<dyn Communicator> {
        let group = Arc::new(Group::new(vec![0], Arc::new(FailureBoard::default())));
        Arc::new(LocalComm::new(&group, 0))
    }

    /// Runs `job` on `size` ranks, each a dedicated thread with its own communicator, and
    /// returns every rank's result in rank order.
    ///
    /// A rank whose job returns an error or panics is marked failed, so any rank waiting for a
    /// message from it gets [`CommError::PeerFailed`] naming it within a few milliseconds. A
    /// panic is re-raised here once every rank has finished. A rank whose thread cannot start
    /// fails the same way, with [`CommError::Invalid`] saying so.
    ///
    /// ```
    /// use graphloom_comm::{Communicator, Local, ReduceData, ReduceOp};
    ///
    /// let sums = Local::run(4, |comm| {
    ///     let mut x = [comm.rank() as f64];
    ///     comm.all_reduce(ReduceData::F64(&mut x), ReduceOp::Sum)?;
    ///     Ok::<f64, graphloom_comm::CommError>(x[0])
    /// });
    /// assert!(sums.iter().all(|s| *s.as_ref().unwrap() == 6.0));
    /// ```
    pub fn run<T, E, F>(size: usize, job: F) -> Vec<std::result::Result<T, E>>
    where
        T: Send,
        E: Send + std::fmt::Display + From<CommError>,
        F: Fn(Arc<dyn Communicator>) -> std::result::Result<T, E> + Sync,
    {
        assert!(size > 0, "a job needs at least one rank");
        let board = Arc::new(FailureBoard::default());
        let group = Arc::new(Group::new((0..size).collect(), board.clone()));
        let job = &job;
        let outcomes: Vec<std::thread::Result<std::result::Result<T, E>>> =
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..size)
                    .map(|rank| {
                        let comm: Arc<dyn Communicator> = Arc::new(LocalComm::new(&group, rank));
                        let rank_board = board.clone();
                        let started = graphloom_tensor::threads::builder().and_then(|b| {
                            b.name(format!("rank-{rank}")).spawn_scoped(scope, move || {
                                let outcome =
                                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                        job(comm)
                                    }));
                                match &outcome {
                                    Ok(Ok(_)) => {}
                                    Ok(Err(e)) => rank_board.mark(rank, e.to_string()),
                                    Err(panic) => rank_board.mark(rank, panic_message(panic)),
                                }
                                outcome
                            })
                        });
                        // A rank whose thread cannot start (no room for its stack) fails at
                        // once, like one whose job fails, so the others stop waiting for it.
                        started.map_err(|e| {
                            let reason = format!("cannot start the thread of rank {rank}: {e}");
                            board.mark(rank, reason.clone());
                            reason
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| match h {
                        Ok(h) => h.join().expect("rank threads catch their panics"),
                        Err(reason) => Ok(Err(E::from(CommError::Invalid(reason)))),
                    })
                    .collect()
            });
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    }
}

/// The text of a panic payload.
pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_string()
    }
}

impl LocalComm {
    fn new(group: &Arc<Group>, rank: usize) -> LocalComm {
        LocalComm {
            group: group.clone(),
            rank,
            timeout_ms: AtomicU64::new(default_timeout().as_millis() as u64),
        }
    }

    fn take(&self, src: usize, tag: i32, op: &'static str) -> Result<Payload> {
        self.group.take(self.rank, src, tag, op, self.timeout())
    }
}

struct LocalRecv {
    group: Arc<Group>,
    me: usize,
    src: usize,
    tag: i32,
    op: &'static str,
    timeout: Duration,
}

impl PendingRecv for LocalRecv {
    fn wait(self: Box<Self>) -> Result<Vec<u8>> {
        match self
            .group
            .take(self.me, self.src, self.tag, self.op, self.timeout)?
        {
            Payload::Bytes(bytes) => Ok(bytes),
            Payload::Handle(_) => Err(CommError::Invalid(format!(
                "rank {}: {} got an object handle from rank {} where it expected bytes",
                self.me, self.op, self.src
            ))),
        }
    }
}

impl Communicator for LocalComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.group.world_ranks.len()
    }
    fn backend(&self) -> &'static str {
        "local"
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
        self.group.post(self.rank, dest, tag, Payload::Bytes(data));
        Ok(SendRequest::done())
    }

    fn irecv_raw(&self, src: usize, tag: i32, op: &'static str) -> Result<RecvRequest> {
        self.check_peer(src, op)?;
        Ok(RecvRequest::new(LocalRecv {
            group: self.group.clone(),
            me: self.rank,
            src,
            tag,
            op,
            timeout: self.timeout(),
        }))
    }

    fn share_handles(&self, mine: Handle) -> Result<Option<Vec<Handle>>> {
        let size = self.size();
        for peer in (0..size).filter(|&p| p != self.rank) {
            self.group.post(
                self.rank,
                peer,
                COLLECTIVE_TAG,
                Payload::Handle(mine.clone()),
            );
        }
        let mut all = Vec::with_capacity(size);
        for peer in 0..size {
            if peer == self.rank {
                all.push(mine.clone());
                continue;
            }
            match self.take(peer, COLLECTIVE_TAG, "share_handles")? {
                Payload::Handle(h) => all.push(h),
                Payload::Bytes(_) => {
                    return Err(CommError::Invalid(format!(
                        "rank {}: share_handles got bytes from rank {peer}: the ranks called \
                         different collectives",
                        self.rank
                    )))
                }
            }
        }
        Ok(Some(all))
    }

    fn split(&self, color: usize, key: usize) -> Result<Arc<dyn Communicator>> {
        use crate::CommunicatorExt;
        let all = self.all_gather_typed(&[color as u64, key as u64])?;
        let mut members: Vec<(u64, usize)> = all
            .iter()
            .enumerate()
            .filter(|(_, ck)| ck[0] == color as u64)
            .map(|(rank, ck)| (ck[1], rank))
            .collect();
        members.sort_unstable();
        let leader = members
            .iter()
            .map(|&(_, r)| r)
            .min()
            .expect("self is a member");
        // The leader of each new group builds it; every rank picks up its own leader's.
        let mine: Handle = if leader == self.rank {
            let world = members
                .iter()
                .map(|&(_, r)| self.group.world_ranks[r])
                .collect();
            Arc::new(Arc::new(Group::new(world, self.group.board.clone())))
        } else {
            Arc::new(())
        };
        let shared = self.share_handles(mine)?.expect("local ranks share memory");
        let group = shared[leader]
            .downcast_ref::<Arc<Group>>()
            .expect("leaders share a group")
            .clone();
        let new_rank = members
            .iter()
            .position(|&(_, r)| r == self.rank)
            .expect("self is a member");
        let comm = LocalComm::new(&group, new_rank);
        comm.set_timeout(self.timeout());
        Ok(Arc::new(comm))
    }

    fn node(&self) -> Result<Arc<dyn Communicator>> {
        self.split(0, self.rank)
    }

    fn fail(&self, reason: &str) {
        self.group
            .board
            .mark(self.group.world_ranks[self.rank], reason.to_string());
        for mailbox in &self.group.mailboxes {
            mailbox.arrived.notify_all();
        }
    }
}
