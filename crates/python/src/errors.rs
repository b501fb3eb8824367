//! Errors from the crates as Python exceptions, mapped here once, by kind, through
//! [`raise`]: an invalid argument is `ValueError`, an id out of range `IndexError`, a missing
//! file `FileNotFoundError` (a refused one `PermissionError`, any other I/O failure `OSError`),
//! a run that would not fit in memory `MemoryError`, and a failure inside GraphLoom (a failed
//! or silent rank, which the message names; ranks that disagree; a file it cannot read; a loss
//! that stopped being finite) `GraphLoomError`. Errors wrap one another (a plan error holds the
//! nn error that holds the store error, ...): the innermost decides.

use graphloom_comm::CommError;
use graphloom_plan::PlanError;
use graphloom_store::StoreError;
use pyo3::create_exception;
use pyo3::exceptions::{
    PyFileNotFoundError, PyIndexError, PyMemoryError, PyOSError, PyPermissionError, PyRuntimeError,
    PyValueError,
};
use pyo3::PyErr;

// Named as the package exports it, so that it pickles (from a worker process to its parent).
create_exception!(
    graphloom,
    GraphLoomError,
    PyRuntimeError,
    "A failure inside GraphLoom: a failed rank (the message names it), ranks that disagree, a \
     file GraphLoom cannot read, a closed job, a handle used in a forked child."
);

/// The Python exception an error becomes.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// An argument out of its domain: `ValueError`.
    Argument,
    /// An id out of range: `IndexError`.
    Index,
    /// A file or directory that does not exist: `FileNotFoundError`.
    Missing,
    /// A file the process may not read or write: `PermissionError`.
    Denied,
    /// Any other I/O failure: `OSError`.
    Os,
    /// More memory than the machine has: `MemoryError`.
    Memory,
    /// A failure inside GraphLoom: `GraphLoomError`.
    Failure,
}

impl Kind {
    fn exception(self, message: String) -> PyErr {
        match self {
            Kind::Argument => PyValueError::new_err(message),
            Kind::Index => PyIndexError::new_err(message),
            Kind::Missing => PyFileNotFoundError::new_err(message),
            Kind::Denied => PyPermissionError::new_err(message),
            Kind::Os => PyOSError::new_err(message),
            Kind::Memory => PyMemoryError::new_err(message),
            Kind::Failure => GraphLoomError::new_err(message),
        }
    }

    fn of_io(e: &std::io::Error) -> Kind {
        match e.kind() {
            std::io::ErrorKind::NotFound => Kind::Missing,
            std::io::ErrorKind::PermissionDenied => Kind::Denied,
            _ => Kind::Os,
        }
    }

    /// The kind of an error some op carried as its source (`graphloom_tensor::Error::Op`).
    fn of_source(e: &(dyn std::error::Error + 'static)) -> Kind {
        if let Some(e) = e.downcast_ref::<CommError>() {
            e.kind()
        } else if let Some(e) = e.downcast_ref::<StoreError>() {
            e.kind()
        } else if let Some(e) = e.downcast_ref::<graphloom_graph::Error>() {
            e.kind()
        } else if let Some(e) = e.downcast_ref::<graphloom_nn::Error>() {
            e.kind()
        } else {
            Kind::Failure
        }
    }
}

/// An error of one of the crates, which knows its [`Kind`] and its message for Python.
pub(crate) trait Classify: std::fmt::Display {
    /// Which Python exception it is.
    fn kind(&self) -> Kind;

    /// Its message; the error's own unless it speaks in the command line's terms.
    fn message(&self) -> String {
        self.to_string()
    }
}

/// An error of one of the crates as the Python exception of its kind.
pub(crate) fn raise(e: impl Classify) -> PyErr {
    e.kind().exception(e.message())
}

/// An invalid argument found by the extension itself.
pub(crate) fn invalid(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

/// A failure inside GraphLoom found by the extension itself.
pub(crate) fn failure(message: impl Into<String>) -> PyErr {
    GraphLoomError::new_err(message.into())
}

impl Classify for CommError {
    fn kind(&self) -> Kind {
        match self {
            CommError::Invalid(_) => Kind::Argument,
            CommError::PeerFailed { .. }
            | CommError::Timeout { .. }
            | CommError::Mismatch { .. }
            | CommError::Mpi(_) => Kind::Failure,
        }
    }
}

impl Classify for graphloom_io::Error {
    fn kind(&self) -> Kind {
        match self {
            graphloom_io::Error::Io { error, .. } => Kind::of_io(error),
            // A file that is there but is not what it should be: not the caller's argument.
            _ => Kind::Failure,
        }
    }
}

impl Classify for graphloom_tensor::Error {
    fn kind(&self) -> Kind {
        use graphloom_tensor::Error;
        match self {
            Error::IndexOutOfRange { .. } => Kind::Index,
            Error::UnsupportedDType { .. }
            | Error::DTypeMismatch { .. }
            | Error::ShapeMismatch { .. }
            | Error::BadLength { .. } => Kind::Argument,
            Error::Op { source, .. } => Kind::of_source(source.as_ref()),
            _ => Kind::Failure,
        }
    }
}

impl Classify for StoreError {
    fn kind(&self) -> Kind {
        match self {
            StoreError::Comm(e) => e.kind(),
            StoreError::File(e) => e.kind(),
            StoreError::Tensor(e) => e.kind(),
            StoreError::OutOfRange { .. } => Kind::Index,
            StoreError::Invalid(_) | StoreError::Unsupported(_) => Kind::Argument,
            StoreError::Memory { error, .. } => Kind::of_io(error),
            _ => Kind::Failure,
        }
    }
}

impl Classify for graphloom_graph::Error {
    fn kind(&self) -> Kind {
        use graphloom_graph::Error;
        match self {
            Error::File(e) => e.kind(),
            Error::Tensor(e) => e.kind(),
            Error::Store(e) => e.kind(),
            // A path of the caller's that the call cannot use, an argument out of its domain.
            Error::Argument { .. } | Error::Path { .. } => Kind::Argument,
            // Contents of a file that contradict each other.
            _ => Kind::Failure,
        }
    }
}

impl Classify for graphloom_nn::Error {
    fn kind(&self) -> Kind {
        use graphloom_nn::Error;
        match self {
            Error::Tensor(e) => e.kind(),
            Error::Graph(e) => e.kind(),
            Error::Store(e) => e.kind(),
            Error::Comm(e) => e.kind(),
            Error::InvalidSetting { .. }
            | Error::Mismatch { .. }
            | Error::NoTrainingNodes
            | Error::NoSupervisionPairs => Kind::Argument,
            Error::NoSnapshot { .. } => Kind::Missing,
            _ => Kind::Failure,
        }
    }
}

impl Classify for graphloom_sar::Error {
    fn kind(&self) -> Kind {
        use graphloom_sar::Error;
        match self {
            Error::Graph(e) => e.kind(),
            Error::Train(e) => e.kind(),
            Error::Comm(e) => e.kind(),
            Error::WorkerCount { .. } => Kind::Argument,
            _ => Kind::Failure,
        }
    }
}

impl Classify for PlanError {
    fn kind(&self) -> Kind {
        match self {
            PlanError::NotApplicable { .. } | PlanError::Invalid { .. } | PlanError::NoClasses => {
                Kind::Argument
            }
            PlanError::TooLarge { .. } => Kind::Memory,
            PlanError::Graph(e) => e.kind(),
            PlanError::Train(e) => e.kind(),
            PlanError::Store(e) => e.kind(),
            PlanError::Comm(e) => e.kind(),
            PlanError::Sar(e) => e.kind(),
            _ => Kind::Failure,
        }
    }

    /// The plan names settings neutrally (`` `nodes` ``): Python spells each as its keyword
    /// argument; a link predictor's node embeddings are `predict`'s `layer`.
    fn message(&self) -> String {
        let hint = match self {
            PlanError::NoClasses => "; take its node embeddings with predict(..., layer=k)",
            _ => "",
        };
        self.render(&|setting: &str| setting.to_string()) + hint
    }
}
