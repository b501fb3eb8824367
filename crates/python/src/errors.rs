//! Errors from the crates as Python exceptions: ids out of range are `IndexError`, invalid
//! arguments `ValueError`, everything else (files, communication, memory) `GraphLoomError`.

use pyo3::create_exception;
use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyValueError};
use pyo3::PyErr;

create_exception!(
    _graphloom,
    GraphLoomError,
    PyRuntimeError,
    "A failure inside GraphLoom: a file, a communication or a memory error."
);

/// A store error as the Python exception that fits it.
pub(crate) fn store(e: graphloom_store::StoreError) -> PyErr {
    use graphloom_store::StoreError;
    match e {
        StoreError::OutOfRange { .. } => PyIndexError::new_err(e.to_string()),
        StoreError::Invalid(_) | StoreError::Unsupported(_) => PyValueError::new_err(e.to_string()),
        other => GraphLoomError::new_err(other.to_string()),
    }
}

/// A communication error.
pub(crate) fn comm(e: graphloom_comm::CommError) -> PyErr {
    GraphLoomError::new_err(e.to_string())
}

/// Any other crate's error, with its message.
pub(crate) fn other(e: impl std::fmt::Display) -> PyErr {
    GraphLoomError::new_err(e.to_string())
}

/// An invalid argument.
pub(crate) fn invalid(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}
