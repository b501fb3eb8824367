//! The error type of file reading and writing: every error names the file and the problem.

use std::path::PathBuf;

/// What went wrong with a file.
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
    /// Another process holds the lock of the folder ([`crate::lock_dir`]).
    #[error("{}: {msg}", path.display())]
    Busy {
        /// The folder.
        path: PathBuf,
        /// Who holds it and what to do.
        msg: String,
    },
    /// The file system has no room for a file of this size ([`crate::reserve`]).
    #[error("{}: no room for {} on its file system (No space left on device)", path.display(), crate::format_bytes(*bytes))]
    NoSpace {
        /// The file.
        path: PathBuf,
        /// The size asked for.
        bytes: u64,
    },
}

impl Error {
    /// An [`Error::Format`] for `path`.
    pub fn format(path: impl Into<PathBuf>, msg: impl Into<String>) -> Error {
        Error::Format {
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

/// The result type of file operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
