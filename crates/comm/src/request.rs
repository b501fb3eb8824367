//! Non-blocking sends and receives: start one, compute, then wait for it.

use crate::Result;

/// A started send. [`SendRequest::wait`] returns once the data has left this rank's hands
/// (buffered or received); dropping an unfinished request waits for it.
#[must_use = "a send request does nothing useful unless waited on"]
pub struct SendRequest(Box<dyn PendingSend>);

/// A started receive. [`RecvRequest::wait`] returns the message, or an error naming the peer
/// when it failed or the deadline passed.
#[must_use = "a receive request must be waited on to get its message"]
pub struct RecvRequest(Box<dyn PendingRecv>);

/// The backend's part of a send in flight (public so that a backend outside this crate, such
/// as the Python package's torch.distributed one, can implement [`crate::Communicator`]).
pub trait PendingSend: Send {
    /// Waits until the send completes.
    fn wait(self: Box<Self>) -> Result<()>;
}

/// The backend's part of a receive in flight.
pub trait PendingRecv: Send {
    /// Waits for the message, up to the communicator's deadline.
    fn wait(self: Box<Self>) -> Result<Vec<u8>>;
}

impl SendRequest {
    /// A send in flight, completed by `pending`.
    pub fn new(pending: impl PendingSend + 'static) -> SendRequest {
        SendRequest(Box::new(pending))
    }

    /// A send that already completed (a backend that buffers the message at once).
    pub(crate) fn done() -> SendRequest {
        struct Done;
        impl PendingSend for Done {
            fn wait(self: Box<Self>) -> Result<()> {
                Ok(())
            }
        }
        SendRequest::new(Done)
    }

    /// Waits until the send completes.
    pub fn wait(self) -> Result<()> {
        self.0.wait()
    }
}

impl RecvRequest {
    /// A receive in flight, completed by `pending`.
    pub fn new(pending: impl PendingRecv + 'static) -> RecvRequest {
        RecvRequest(Box::new(pending))
    }

    /// Waits for the message, up to the communicator's deadline.
    pub fn wait(self) -> Result<Vec<u8>> {
        self.0.wait()
    }
}

impl std::fmt::Debug for SendRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SendRequest")
    }
}

impl std::fmt::Debug for RecvRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecvRequest")
    }
}
