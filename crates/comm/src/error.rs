//! The one error type of every communicator.

use std::time::Duration;

/// Why a communication call failed. Every variant names the ranks involved, so a failure in a
/// job of many workers points at the worker that caused it.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    /// A peer rank failed (returned an error, panicked or exited) before sending what this rank
    /// waits for.
    #[error("rank {rank} failed: {reason}")]
    PeerFailed {
        /// The rank that failed.
        rank: usize,
        /// What it reported.
        reason: String,
    },
    /// No message arrived within the deadline: the rank waited for is taken to have failed
    /// (hung, stopped or cut off), and the message names it as a failed peer's would.
    #[error(
        "rank {peer} failed: no answer to {op} within {secs:.1} s (rank {me} was waiting for it)"
    )]
    Timeout {
        /// The rank that waited.
        me: usize,
        /// The operation that waited.
        op: &'static str,
        /// The rank it waited for.
        peer: usize,
        /// The deadline, in seconds.
        secs: f64,
    },
    /// The ranks passed different arguments to one collective call.
    #[error("{op}: ranks disagree: {detail}")]
    Mismatch {
        /// The collective.
        op: &'static str,
        /// Which ranks passed what.
        detail: String,
    },
    /// A call was made with arguments that cannot work on this communicator.
    #[error("{0}")]
    Invalid(String),
    /// The MPI library reported an error or could not start.
    #[error("MPI: {0}")]
    Mpi(String),
}

impl CommError {
    /// Rank `me` waited `limit` for `peer` in `op`, in vain.
    pub fn timeout(me: usize, op: &'static str, peer: usize, limit: Duration) -> CommError {
        CommError::Timeout {
            me,
            op,
            peer,
            secs: limit.as_secs_f64(),
        }
    }
}

/// The result of a communication call.
pub type Result<T> = std::result::Result<T, CommError>;
