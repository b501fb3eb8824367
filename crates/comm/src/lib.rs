//! Communicators: the ranks of a GraphLoom job and the messages between them.
//!
//! - [`Communicator`]: point-to-point messages (blocking and non-blocking, tagged) and the
//!   collectives built on them: barrier, broadcast, all-reduce, all-gather, all-to-all-v,
//!   split. Every wait has a deadline, and a failed rank is named in the error of every rank
//!   that waits for it.
//! - [`Local`]: N ranks as threads of one process, the embedded default.
//! - `mpi` (feature `mpi`): the processes of an MPI job, over the system's OpenMPI.
#![deny(missing_docs)]

mod communicator;
mod counting;
mod deadline;
mod error;
pub mod launch;
mod local;
#[cfg(feature = "mpi")]
pub mod mpi;
mod request;

use std::time::Duration;

pub use communicator::{Communicator, CommunicatorExt, Handle, ReduceData, ReduceOp, TAG_LIMIT};
pub use counting::Counting;
pub use error::{CommError, Result};
pub use local::{Local, LocalComm};
pub use request::{PendingRecv, PendingSend, RecvRequest, SendRequest};

/// The environment variable that sets the default receive deadline, in seconds.
pub const TIMEOUT_ENV: &str = "GRAPHLOOM_COMM_TIMEOUT";

/// The deadline of a receive unless [`Communicator::set_timeout`] changes it: the value of
/// `GRAPHLOOM_COMM_TIMEOUT` in seconds, or ten minutes. It is long because eight ranks on two
/// cores are slow, not dead.
pub fn default_timeout() -> Duration {
    std::env::var(TIMEOUT_ENV)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(Duration::from_secs(600))
}
