//! The error type of the graph crate: every error names the file and the problem.

use std::path::PathBuf;

/// Everything that can go wrong reading, converting or checking a graph or dataset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be read or written, or is not in the expected format (truncated,
    /// wrong dtype, bad header).
    #[error(transparent)]
    File(#[from] graphloom_io::Error),
    /// The contents are well-formed but inconsistent (an id out of range, NaN features).
    #[error("{}: {msg}", path.display())]
    Invalid {
        /// The file the bad value came from.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A path given to a call is not one it can use (a file where a dataset directory is
    /// read, a folder of the user's or an input where an output is written).
    #[error("{}: {msg}", path.display())]
    Path {
        /// The path given.
        path: PathBuf,
        /// Why it cannot be used.
        msg: String,
    },
    /// An argument of a call is out of its domain (seeds, fanouts, a generator's setting, a
    /// part count); the error names the argument.
    #[error("{name}: {msg}")]
    Argument {
        /// The argument.
        name: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// A tensor operation failed.
    #[error(transparent)]
    Tensor(#[from] graphloom_tensor::Error),
    /// A store operation failed (a gather, a collective, a file of the store).
    #[error(transparent)]
    Store(#[from] graphloom_store::StoreError),
}

impl Error {
    /// A format error for `path`.
    pub fn format(path: impl Into<PathBuf>, msg: impl Into<String>) -> Error {
        Error::File(graphloom_io::Error::format(path, msg))
    }
    /// An [`Error::Invalid`] for `path`.
    pub fn invalid(path: impl Into<PathBuf>, msg: impl Into<String>) -> Error {
        Error::Invalid {
            path: path.into(),
            msg: msg.into(),
        }
    }
    /// An [`Error::Path`] for the path given, `path`.
    pub fn path(path: impl Into<PathBuf>, msg: impl Into<String>) -> Error {
        Error::Path {
            path: path.into(),
            msg: msg.into(),
        }
    }
    /// An [`Error::Argument`] for argument `name`.
    pub fn argument(name: &'static str, msg: impl Into<String>) -> Error {
        Error::Argument {
            name,
            msg: msg.into(),
        }
    }
    /// An I/O error for `path`.
    pub fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Error {
        Error::File(graphloom_io::Error::io(path, error))
    }
}

impl From<graphloom_comm::CommError> for Error {
    fn from(e: graphloom_comm::CommError) -> Error {
        Error::Store(e.into())
    }
}

/// The result type of the graph crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
