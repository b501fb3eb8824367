//! The error type of the store.

use std::path::PathBuf;

/// Everything that can go wrong creating, filling or reading a store tensor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A communication call failed (a peer failed, a deadline passed, ranks disagreed).
    #[error(transparent)]
    Comm(#[from] graphloom_comm::CommError),
    /// A file could not be read or written, or is not in the expected format.
    #[error(transparent)]
    File(#[from] graphloom_io::Error),
    /// The layout cannot live in that location on this job (see [`crate::check_support`]).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A row id is outside the tensor.
    #[error("{op}: row id {id} out of range 0..{rows}")]
    OutOfRange {
        /// The operation.
        op: &'static str,
        /// The bad id.
        id: i64,
        /// The number of rows.
        rows: usize,
    },
    /// Arguments that cannot work: wrong shapes or dtypes, a bad partition, a bad ratio.
    #[error("{0}")]
    Invalid(String),
    /// Shared memory or a memory map could not be set up.
    #[error("{what}: {error}")]
    Memory {
        /// What was being set up.
        what: String,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// A tensor operation failed.
    #[error(transparent)]
    Tensor(#[from] graphloom_tensor::Error),
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>, error: std::io::Error) -> StoreError {
        StoreError::File(graphloom_io::Error::io(path, error))
    }
    pub(crate) fn format(path: impl Into<PathBuf>, msg: impl Into<String>) -> StoreError {
        StoreError::File(graphloom_io::Error::format(path, msg))
    }
    pub(crate) fn memory(what: impl Into<String>, error: std::io::Error) -> StoreError {
        StoreError::Memory {
            what: what.into(),
            error,
        }
    }
}

/// The result type of the store.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
