//! The [`Communicator`] trait: point-to-point messages implemented by each backend, and the
//! collectives, written once on top of them.
//!
//! Every collective is built from tagged point-to-point messages that wait with a deadline, so
//! a rank that died or stalled becomes a [`CommError`] naming it on every rank that waits for it,
//! instead of a hang. Building them once also makes every backend compute the same bits: a sum
//! over ranks always adds the contributions in rank order.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use bytemuck::Pod;

use crate::request::{RecvRequest, SendRequest};
use crate::{CommError, Result};

/// User tags must be below this value; the rest of the tag space belongs to the collectives.
pub const TAG_LIMIT: u16 = 30_000;

/// The tag every collective message travels under. Messages between one pair of ranks with one
/// tag arrive in the order they were sent (in MPI and in the local mailboxes alike), and every
/// rank calls the collectives of a communicator in the same order, so one tag is enough.
pub(crate) const COLLECTIVE_TAG: i32 = 32_000;

/// An object shared by reference between ranks that live in one address space.
pub type Handle = Arc<dyn Any + Send + Sync>;

/// How [`Communicator::all_reduce`] combines the ranks' values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// Element-wise sum, added in rank order.
    Sum,
    /// Element-wise maximum.
    Max,
    /// Element-wise minimum.
    Min,
}

/// A buffer reduced in place by [`Communicator::all_reduce`].
#[derive(Debug)]
pub enum ReduceData<'a> {
    /// f32 values.
    F32(&'a mut [f32]),
    /// f64 values.
    F64(&'a mut [f64]),
    /// i64 values.
    I64(&'a mut [i64]),
}

/// A group of ranks that exchange messages: the threads of one process ([`crate::Local`]) or
/// the processes of an MPI job (`crate::mpi`, feature `mpi`).
///
/// The required methods are the backend's point-to-point layer; the provided ones are the
/// collectives. Every rank of the communicator must call a collective, in the same order; one
/// thread per rank at a time (give a communication thread its own [`Communicator::split`]).
pub trait Communicator: Send + Sync {
    /// This rank's index, in `0..size`.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// The backend's name: `local` or `mpi`.
    fn backend(&self) -> &'static str;
    /// How long a receive waits before it fails with [`CommError::Timeout`].
    fn timeout(&self) -> Duration;
    /// Changes the deadline of this rank's receives.
    fn set_timeout(&self, timeout: Duration);

    /// Starts sending `data` to `dest` under a raw tag; completes without waiting for the
    /// receiver when the backend buffers.
    fn isend_raw(&self, dest: usize, tag: i32, data: Vec<u8>) -> Result<SendRequest>;
    /// Starts receiving the next message from `src` under a raw tag.
    fn irecv_raw(&self, src: usize, tag: i32, op: &'static str) -> Result<RecvRequest>;
    /// Exchanges references to objects between ranks that share one address space: every rank
    /// gets every rank's handle, in rank order. `None` when the ranks are separate processes.
    fn share_handles(&self, mine: Handle) -> Result<Option<Vec<Handle>>>;
    /// A new communicator of the ranks that passed the same `color`, ordered by `key` and then
    /// by rank. Collective.
    fn split(&self, color: usize, key: usize) -> Result<Arc<dyn Communicator>>;
    /// The ranks of this communicator that run on this machine (and can share memory).
    /// Collective.
    fn node(&self) -> Result<Arc<dyn Communicator>>;
    /// Tells the other ranks that this one failed, so they stop waiting for it: the local
    /// backend marks it failed, MPI prints `reason` and aborts the job.
    fn fail(&self, reason: &str);

    /// Sends `data` to `dest` under a user tag (below [`TAG_LIMIT`]).
    fn send(&self, dest: usize, tag: u16, data: Vec<u8>) -> Result<()> {
        self.isend(dest, tag, data)?.wait()
    }

    /// Receives the next message from `src` under a user tag.
    fn recv(&self, src: usize, tag: u16) -> Result<Vec<u8>> {
        self.irecv(src, tag)?.wait()
    }

    /// Starts a send under a user tag; [`SendRequest::wait`] completes it.
    fn isend(&self, dest: usize, tag: u16, data: Vec<u8>) -> Result<SendRequest> {
        check_user_tag(tag)?;
        self.check_peer(dest, "send")?;
        self.isend_raw(dest, i32::from(tag), data)
    }

    /// Starts a receive under a user tag; [`RecvRequest::wait`] returns the message.
    fn irecv(&self, src: usize, tag: u16) -> Result<RecvRequest> {
        check_user_tag(tag)?;
        self.check_peer(src, "recv")?;
        self.irecv_raw(src, i32::from(tag), "recv")
    }

    /// Fails unless `peer` is a rank of this communicator.
    fn check_peer(&self, peer: usize, op: &'static str) -> Result<()> {
        if peer >= self.size() {
            return Err(CommError::Invalid(format!(
                "{op}: rank {peer} does not exist in a communicator of {} ranks",
                self.size()
            )));
        }
        Ok(())
    }

    /// Returns once every rank has called it.
    fn barrier(&self) -> Result<()> {
        self.all_gather_v(&[]).map(drop)
    }

    /// Every rank gets `root`'s bytes; the others' `data` is ignored.
    fn broadcast(&self, root: usize, data: Vec<u8>) -> Result<Vec<u8>> {
        self.check_peer(root, "broadcast")?;
        if self.rank() == root {
            let sends = (0..self.size())
                .filter(|&peer| peer != root)
                .map(|peer| self.isend_raw(peer, COLLECTIVE_TAG, data.clone()))
                .collect::<Result<Vec<_>>>()?;
            wait_all(sends)?;
            Ok(data)
        } else {
            self.irecv_raw(root, COLLECTIVE_TAG, "broadcast")?.wait()
        }
    }

    /// Every rank gets every rank's bytes, in rank order (lengths may differ).
    fn all_gather_v(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let sends = (0..self.size()).map(|_| data.to_vec()).collect();
        self.exchange(sends, "all_gather")
    }

    /// Rank `r` sends `sends[q]` to every rank `q` and gets back what each rank sent it, in
    /// rank order.
    fn all_to_all_v(&self, sends: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
        if sends.len() != self.size() {
            return Err(CommError::Invalid(format!(
                "all_to_all_v: {} send buffers for {} ranks",
                sends.len(),
                self.size()
            )));
        }
        self.exchange(sends, "all_to_all_v")
    }

    /// The pairwise exchange under [`Communicator::all_to_all_v`] and
    /// [`Communicator::all_gather_v`]: post every send, receive from every peer, then complete
    /// the sends (so no pair of large blocking sends can wait on each other).
    #[doc(hidden)]
    fn exchange(&self, mut sends: Vec<Vec<u8>>, op: &'static str) -> Result<Vec<Vec<u8>>> {
        let (rank, size) = (self.rank(), self.size());
        let mine = std::mem::take(&mut sends[rank]);
        let mut pending = Vec::with_capacity(size.saturating_sub(1));
        // Send to the ranks after this one first, so the ranks do not all queue on rank 0.
        for step in 1..size {
            let peer = (rank + step) % size;
            pending.push(self.isend_raw(peer, COLLECTIVE_TAG, std::mem::take(&mut sends[peer]))?);
        }
        let mut received: Vec<Vec<u8>> = (0..size).map(|_| Vec::new()).collect();
        received[rank] = mine;
        for step in 1..size {
            let peer = (rank + size - step) % size;
            received[peer] = self.irecv_raw(peer, COLLECTIVE_TAG, op)?.wait()?;
        }
        wait_all(pending)?;
        Ok(received)
    }

    /// Combines `data` element-wise over all ranks, in place; every rank gets the same bits.
    ///
    /// Rank `r` reduces the `r`-th slice of the buffer, adding the contributions in rank
    /// order, and then every rank gathers the reduced slices: twice the buffer in traffic per
    /// rank, and a result that does not depend on which rank asks.
    fn all_reduce(&self, data: ReduceData<'_>, op: ReduceOp) -> Result<()> {
        match data {
            ReduceData::F32(values) => all_reduce_typed(self, values, op),
            ReduceData::F64(values) => all_reduce_typed(self, values, op),
            ReduceData::I64(values) => all_reduce_typed(self, values, op),
        }
    }

    /// Fails with [`CommError::Mismatch`] unless every rank passed the same `description` (the
    /// arguments of a collective allocation, say), naming the ranks that differ from rank 0.
    fn check_same(&self, op: &'static str, description: &str) -> Result<()> {
        let all = self.all_gather_v(description.as_bytes())?;
        let differing: Vec<String> = all
            .iter()
            .enumerate()
            .filter(|(_, d)| d.as_slice() != all[0].as_slice())
            .map(|(rank, d)| format!("rank {rank} passed {}", String::from_utf8_lossy(d)))
            .collect();
        if differing.is_empty() {
            return Ok(());
        }
        Err(CommError::Mismatch {
            op,
            detail: format!(
                "rank 0 passed {}; {}",
                String::from_utf8_lossy(&all[0]),
                differing.join("; ")
            ),
        })
    }
}

fn check_user_tag(tag: u16) -> Result<()> {
    if tag >= TAG_LIMIT {
        return Err(CommError::Invalid(format!(
            "tag {tag} is reserved: user tags are below {TAG_LIMIT}"
        )));
    }
    Ok(())
}

/// Completes every send request, returning the first error.
pub(crate) fn wait_all(requests: Vec<SendRequest>) -> Result<()> {
    let mut first = Ok(());
    for request in requests {
        let result = request.wait();
        if first.is_ok() {
            first = result;
        }
    }
    first
}

/// The element types [`Communicator::all_reduce`] combines.
trait Reducible: Pod + PartialOrd {
    fn add(self, other: Self) -> Self;
    /// Whether the value is NaN (never for integers).
    fn is_nan(self) -> bool {
        false
    }
}
impl Reducible for f32 {
    fn add(self, other: f32) -> f32 {
        self + other
    }
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
}
impl Reducible for f64 {
    fn add(self, other: f64) -> f64 {
        self + other
    }
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
}
impl Reducible for i64 {
    fn add(self, other: i64) -> i64 {
        self.wrapping_add(other)
    }
}

fn combine<T: Reducible>(acc: T, x: T, op: ReduceOp) -> T {
    match op {
        ReduceOp::Sum => acc.add(x),
        // NaN propagates: a comparison with NaN is false, so NaN in `x` wins and NaN in `acc`
        // stays.
        ReduceOp::Max => {
            if x > acc || x.is_nan() {
                x
            } else {
                acc
            }
        }
        ReduceOp::Min => {
            if x < acc || x.is_nan() {
                x
            } else {
                acc
            }
        }
    }
}

/// The slice of `len` elements that rank `r` of `size` reduces.
fn reduce_slice(len: usize, size: usize, r: usize) -> std::ops::Range<usize> {
    len * r / size..len * (r + 1) / size
}

fn all_reduce_typed<C: Communicator + ?Sized, T: Reducible>(
    comm: &C,
    values: &mut [T],
    op: ReduceOp,
) -> Result<()> {
    let size = comm.size();
    if size == 1 {
        return Ok(());
    }
    comm.check_same("all_reduce", &format!("{} elements", values.len()))?;
    let sends = (0..size)
        .map(|r| bytemuck::cast_slice(&values[reduce_slice(values.len(), size, r)]).to_vec())
        .collect();
    let parts = comm.exchange(sends, "all_reduce")?;
    let mine = reduce_slice(values.len(), size, comm.rank());
    let mut acc: Vec<T> = bytemuck::pod_collect_to_vec(&parts[0]);
    for part in &parts[1..] {
        let part: Vec<T> = bytemuck::pod_collect_to_vec(part);
        for (a, &x) in acc.iter_mut().zip(&part) {
            *a = combine(*a, x, op);
        }
    }
    debug_assert_eq!(acc.len(), mine.len());
    let reduced = comm.all_gather_v(bytemuck::cast_slice(&acc))?;
    for (r, part) in reduced.iter().enumerate() {
        let range = reduce_slice(values.len(), size, r);
        bytemuck::cast_slice_mut(&mut values[range]).copy_from_slice(part);
    }
    Ok(())
}

/// Typed forms of the byte collectives, for any plain-old-data element type.
pub trait CommunicatorExt: Communicator {
    /// [`Communicator::all_gather_v`] of typed slices.
    fn all_gather_typed<T: Pod>(&self, data: &[T]) -> Result<Vec<Vec<T>>> {
        let all = self.all_gather_v(bytemuck::cast_slice(data))?;
        Ok(all
            .iter()
            .map(|b| bytemuck::pod_collect_to_vec(b))
            .collect())
    }

    /// [`Communicator::all_to_all_v`] of typed slices.
    fn all_to_all_typed<T: Pod>(&self, sends: &[Vec<T>]) -> Result<Vec<Vec<T>>> {
        let bytes = sends
            .iter()
            .map(|s| bytemuck::cast_slice(s).to_vec())
            .collect();
        let all = self.all_to_all_v(bytes)?;
        Ok(all
            .iter()
            .map(|b| bytemuck::pod_collect_to_vec(b))
            .collect())
    }

    /// [`Communicator::broadcast`] of a typed vector.
    fn broadcast_typed<T: Pod>(&self, root: usize, data: &[T]) -> Result<Vec<T>> {
        let bytes = self.broadcast(root, bytemuck::cast_slice(data).to_vec())?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// One value from every rank, in rank order.
    fn all_gather_one<T: Pod>(&self, value: T) -> Result<Vec<T>> {
        Ok(self
            .all_gather_typed(&[value])?
            .into_iter()
            .map(|v| v[0])
            .collect())
    }

    /// Turns one rank's failure in a step that every rank takes into an error on every rank,
    /// before any of them goes on to the next collective: the failing rank gets its own error
    /// back, the others a [`CommError::PeerFailed`] naming the first rank that failed.
    /// Collective.
    fn agree<E: From<CommError>>(
        &self,
        result: std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let ok = self.all_gather_one(u8::from(result.is_ok()))?;
        result?;
        match ok.iter().position(|&o| o == 0) {
            Some(rank) => Err(CommError::PeerFailed {
                rank,
                reason: "its part of this collective step failed (its own error says why)".into(),
            }
            .into()),
            None => Ok(()),
        }
    }
}

impl<C: Communicator + ?Sized> CommunicatorExt for C {}
