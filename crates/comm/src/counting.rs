//! [`Counting`]: a communicator that counts the bytes its rank sends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::{Communicator, Handle, RecvRequest, Result, SendRequest};

/// Wraps a communicator and counts every byte this rank sends through it, collectives
/// included, and through the communicators split from it (they share the counter).
pub struct Counting {
    inner: Arc<dyn Communicator>,
    sent: Arc<AtomicU64>,
}

impl Counting {
    /// Counts the traffic of `inner` from zero.
    pub fn new(inner: Arc<dyn Communicator>) -> Counting {
        Counting {
            inner,
            sent: Arc::default(),
        }
    }

    /// Bytes this rank has sent so far.
    pub fn bytes_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

impl Communicator for Counting {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }
    fn set_timeout(&self, timeout: Duration) {
        self.inner.set_timeout(timeout)
    }
    fn isend_raw(&self, dest: usize, tag: i32, data: Vec<u8>) -> Result<SendRequest> {
        self.sent.fetch_add(data.len() as u64, Ordering::Relaxed);
        self.inner.isend_raw(dest, tag, data)
    }
    fn irecv_raw(&self, src: usize, tag: i32, op: &'static str) -> Result<RecvRequest> {
        self.inner.irecv_raw(src, tag, op)
    }
    fn share_handles(&self, mine: Handle) -> Result<Option<Vec<Handle>>> {
        self.inner.share_handles(mine)
    }
    fn split(&self, color: usize, key: usize) -> Result<Arc<dyn Communicator>> {
        Ok(Arc::new(Counting {
            inner: self.inner.split(color, key)?,
            sent: self.sent.clone(),
        }))
    }
    fn node(&self) -> Result<Arc<dyn Communicator>> {
        self.inner.node()
    }
    fn fail(&self, reason: &str) {
        self.inner.fail(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Local, ReduceData, ReduceOp};

    #[test]
    fn counts_point_to_point_and_collective_bytes_of_split_communicators_too() {
        for r in Local::run(2, |comm| {
            let counting = Arc::new(Counting::new(comm));
            let peer = 1 - counting.rank();
            counting.send(peer, 1, vec![0u8; 100])?;
            counting.recv(peer, 1)?;
            assert_eq!(counting.bytes_sent(), 100);
            let half = counting.split(0, counting.rank())?;
            // Splitting may or may not send messages, depending on the backend.
            let before = counting.bytes_sent();
            half.send(peer, 1, vec![0u8; 10])?;
            half.recv(peer, 1)?;
            assert_eq!(counting.bytes_sent(), before + 10);
            // 4 f64 values: each rank sends the other the half it reduces, then its reduced
            // half (and a short check that both reduce as many values).
            let mut values = [1.0f64; 4];
            counting.all_reduce(ReduceData::F64(&mut values), ReduceOp::Sum)?;
            let reduce = counting.bytes_sent() - before - 10;
            assert!((32..64).contains(&reduce), "all_reduce sent {reduce} bytes");
            Ok::<_, crate::CommError>(())
        }) {
            r.unwrap();
        }
    }
}
