//! The error type of the graph crate: every error names the file and the problem.

use std::path::PathBuf;

/// Everything that can go wrong reading, converting or checking a graph or dataset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error (shown in the message, so not chained as a source).
        error: std::io::Error,
    },
    /// The file is not in the expected format (truncated, wrong dtype, bad header).
    #[error("{}: {msg}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// The contents are well-formed but inconsistent (an id out of range, NaN features).
    #[error("{}: {msg}", path.display())]
    Invalid {
        /// The file the bad value came from.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A tensor operation failed.
    #[error(transparent)]
    Tensor(#[from] graphloom_tensor::Error),
}

impl Error {
    /// A [`Error::Format`] for `path`.
    pub fn format(path: impl Into<PathBuf>, msg: impl Into<String>) -> Error {
        Error::Format {
            path: path.into(),
            msg: msg.into(),
        }
    }
    /// An [`Error::Invalid`] for `path`.
    pub fn invalid(path: impl Into<PathBuf>, msg: impl Into<String>) -> Error {
        Error::Invalid {
            path: path.into(),
            msg: msg.into(),
        }
    }
    /// An [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            error,
        }
    }
}

impl From<graphloom_io::Error> for Error {
    fn from(e: graphloom_io::Error) -> Error {
        match e {
            graphloom_io::Error::Io { path, error } => Error::Io { path, error },
            graphloom_io::Error::Format { path, msg } => Error::Format { path, msg },
            other => Error::Format {
                path: Default::default(),
                msg: other.to_string(),
            },
        }
    }
}

/// The result type of the graph crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
