//! How halos travel: [`SarMode`], and [`Exchange`], which runs one pass of messages between the
//! parts, either as N ring rounds with the next round's messages in flight on a communication
//! thread, or as one all-to-all.

use std::borrow::Cow;
use std::sync::Arc;
use std::thread::ScopedJoinHandle;

use bytemuck::Pod;
use graphloom_comm::{CommError, Communicator};
use graphloom_tensor::memory::{category_scope, set_thread_tracker, thread_tracker, Charge};
use graphloom_tensor::Category;

use crate::PartGraph;

/// The tag of the ring rounds' messages on the exchange communicator (messages between two
/// ranks with one tag arrive in order, and the passes of a step run one after the other).
const RING_TAG: u16 = 7_001;

/// How a layer gets the rows of the other parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SarMode {
    /// Sequential aggregation and rematerialization: one halo at a time in ring rounds, freed
    /// after use; operators that need the halo in the backward pass (GAT) fetch it again.
    Sar,
    /// Sequential aggregation: ring rounds, but every halo is kept for the backward pass.
    Sa,
    /// One all-to-all of every halo at once, kept for the backward pass.
    Osa,
}

impl SarMode {
    /// Parses `sar`, `sa` or `osa`.
    pub fn parse(name: &str) -> Option<SarMode> {
        Some(match name {
            "sar" => SarMode::Sar,
            "sa" => SarMode::Sa,
            "osa" => SarMode::Osa,
            _ => return None,
        })
    }

    /// The lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            SarMode::Sar => "sar",
            SarMode::Sa => "sa",
            SarMode::Osa => "osa",
        }
    }

    /// Whether the forward pass keeps the halos it receives.
    pub(crate) fn keeps_halos(self) -> bool {
        self != SarMode::Sar
    }
}

/// Which way the messages of a pass go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Rows to the parts that need them: in round r, send to part rank + r and receive from
    /// part rank - r.
    Out,
    /// Gradients of received rows back to their owners: in round r, send to part rank - r and
    /// receive from part rank + r.
    Back,
}

/// A received or outgoing message, charged to the worker's tracker (category
/// [`Category::Comm`]) while it is held.
pub(crate) struct Message {
    bytes: Vec<u8>,
    _charge: Charge,
}

impl Message {
    /// Charges `bytes` to this thread's tracker.
    pub(crate) fn new(bytes: Vec<u8>) -> Message {
        let _g = category_scope(Category::Comm);
        let charge = Charge::new(bytes.len());
        Message {
            bytes,
            _charge: charge,
        }
    }

    /// The empty message a worker "sends" itself: operators read their own rows in place.
    pub(crate) fn empty() -> Message {
        Message::new(Vec::new())
    }

    /// The message of `len` values given as slices, written straight into its bytes.
    pub(crate) fn of_slices<'a, T: Pod>(
        len: usize,
        slices: impl IntoIterator<Item = &'a [T]>,
    ) -> Message {
        let mut bytes = Vec::with_capacity(len * std::mem::size_of::<T>());
        for s in slices {
            bytes.extend_from_slice(bytemuck::cast_slice(s));
        }
        Message::new(bytes)
    }

    /// The message of `len` values, written straight into its bytes.
    pub(crate) fn of_values<T: Pod>(len: usize, values: impl IntoIterator<Item = T>) -> Message {
        let mut bytes = Vec::with_capacity(len * std::mem::size_of::<T>());
        for v in values {
            bytes.extend_from_slice(bytemuck::bytes_of(&v));
        }
        Message::new(bytes)
    }

    /// The values, borrowed when the buffer is aligned for `T` (allocators align it), copied
    /// otherwise.
    pub(crate) fn values<T: Pod>(&self) -> Cow<'_, [T]> {
        match bytemuck::try_cast_slice(&self.bytes) {
            Ok(v) => Cow::Borrowed(v),
            Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(&self.bytes)),
        }
    }
}

/// A message of a ring round: this worker's own (round 0) or one on its way.
enum Round<'scope> {
    Ready(Message),
    InFlight(ScopedJoinHandle<'scope, Result<Message, CommError>>),
}

impl Round<'_> {
    fn finish(self) -> Result<Message, CommError> {
        match self {
            Round::Ready(m) => Ok(m),
            Round::InFlight(h) => h.join().unwrap_or_else(|_| {
                Err(CommError::Invalid(
                    "the SAR communication thread panicked".into(),
                ))
            }),
        }
    }
}

/// The messages of one worker's SAR operators.
pub struct Exchange {
    /// The worker's communicator, for the all-to-all of [`SarMode::Osa`] and for messages the
    /// worker's own thread sends.
    pub(crate) comm: Arc<dyn Communicator>,
    /// A communicator of its own for the communication thread.
    ring_comm: Arc<dyn Communicator>,
    /// The worker's part of the graph.
    pub(crate) graph: Arc<PartGraph>,
    /// How halos travel.
    pub(crate) mode: SarMode,
}

impl Exchange {
    /// The exchange of this worker (`comm.rank()` is its part). Collective: the communication
    /// thread gets a communicator split from `comm`.
    pub fn new(
        comm: Arc<dyn Communicator>,
        graph: Arc<PartGraph>,
        mode: SarMode,
    ) -> Result<Exchange, CommError> {
        if graph.index != comm.rank() || graph.shards.len() != comm.size() {
            return Err(CommError::Invalid(format!(
                "rank {} of {} holds part {} of {}",
                comm.rank(),
                comm.size(),
                graph.index,
                graph.shards.len()
            )));
        }
        let ring_comm = comm.split(0, comm.rank())?;
        Ok(Exchange {
            comm,
            ring_comm,
            graph,
            mode,
        })
    }

    /// The parts this worker sends to and receives from in round `r`.
    pub(crate) fn peers(&self, dir: Direction, r: usize) -> (usize, usize) {
        let (rank, size) = (self.comm.rank(), self.comm.size());
        let ahead = (rank + r) % size;
        let behind = (rank + size - r % size) % size;
        match dir {
            Direction::Out => (ahead, behind),
            Direction::Back => (behind, ahead),
        }
    }

    /// One pass: every part `q` gets `produce(q)` and this worker consumes every part's message
    /// with `consume(q, message)`, in round order. Its own part comes first, with the message
    /// `produce(rank)` returned (operators return [`Message::empty`] and read their own rows in
    /// place), while the first message of another part travels. Ring rounds hold at most two
    /// received messages at a time (the one consumed and the next in flight); [`SarMode::Osa`]
    /// holds all of them.
    pub(crate) fn pass(
        &self,
        dir: Direction,
        produce: impl FnMut(usize) -> Result<Message, CommError>,
        consume: impl FnMut(usize, Message) -> Result<(), CommError>,
    ) -> Result<(), CommError> {
        match self.mode {
            SarMode::Osa => self.all_at_once(dir, produce, consume),
            SarMode::Sar | SarMode::Sa => self.rounds(dir, produce, consume),
        }
    }

    fn all_at_once(
        &self,
        dir: Direction,
        mut produce: impl FnMut(usize) -> Result<Message, CommError>,
        mut consume: impl FnMut(usize, Message) -> Result<(), CommError>,
    ) -> Result<(), CommError> {
        let size = self.comm.size();
        let outgoing = (0..size)
            .map(&mut produce)
            .collect::<Result<Vec<Message>, _>>()?;
        // The outgoing messages stay charged until the all-to-all has sent them.
        let (bytes, charges): (Vec<Vec<u8>>, Vec<Charge>) =
            outgoing.into_iter().map(|m| (m.bytes, m._charge)).unzip();
        let received = self.comm.all_to_all_v(bytes)?;
        drop(charges);
        let mut received: Vec<Option<Message>> = received
            .into_iter()
            .map(|b| Some(Message::new(b)))
            .collect();
        for r in 0..size {
            let from = self.peers(dir, r).1;
            let message = received[from].take().expect("each part once");
            consume(from, message)?;
        }
        Ok(())
    }

    fn rounds(
        &self,
        dir: Direction,
        mut produce: impl FnMut(usize) -> Result<Message, CommError>,
        mut consume: impl FnMut(usize, Message) -> Result<(), CommError>,
    ) -> Result<(), CommError> {
        let tracker = thread_tracker();
        std::thread::scope(|scope| {
            let mut previous: Option<(usize, Round)> = None;
            for r in 0..self.comm.size() {
                let (to, from) = self.peers(dir, r);
                let outgoing = produce(to)?;
                let current = if r == 0 {
                    Round::Ready(outgoing)
                } else {
                    let comm = self.ring_comm.clone();
                    let tracker = tracker.clone();
                    let travel = move || {
                        set_thread_tracker(tracker);
                        swap(comm.as_ref(), to, from, outgoing)
                    };
                    let handle = graphloom_tensor::threads::builder()
                        .and_then(|b| b.spawn_scoped(scope, travel))
                        .map_err(|e| {
                            CommError::Invalid(format!(
                                "cannot start the SAR communication thread: {e}"
                            ))
                        })?;
                    Round::InFlight(handle)
                };
                // The previous round is aggregated while this one travels.
                if let Some((from, round)) = previous.take() {
                    consume(from, round.finish()?)?;
                }
                previous = Some((from, current));
            }
            match previous {
                Some((from, round)) => consume(from, round.finish()?),
                None => Ok(()),
            }
        })
    }

    /// Sends `outgoing` to `to` and receives `from`'s message, on this worker's own thread
    /// (the communication thread uses a communicator of its own).
    pub(crate) fn swap_now(
        &self,
        to: usize,
        from: usize,
        outgoing: Message,
    ) -> Result<Message, CommError> {
        if to == self.comm.rank() {
            return Ok(outgoing);
        }
        swap(self.comm.as_ref(), to, from, outgoing)
    }
}

/// Sends `outgoing` to `to` and receives `from`'s message; the outgoing bytes stay charged
/// until the send completes.
fn swap(
    comm: &dyn Communicator,
    to: usize,
    from: usize,
    outgoing: Message,
) -> Result<Message, CommError> {
    let Message { bytes, _charge } = outgoing;
    let sent = comm.isend(to, RING_TAG, bytes)?;
    let received = Message::new(comm.recv(from, RING_TAG)?);
    sent.wait()?;
    Ok(received)
}
