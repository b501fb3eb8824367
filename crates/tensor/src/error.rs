//! The error type of the tensor crate.

use crate::DType;

/// Everything that can go wrong in a tensor operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operation received a tensor of a dtype it cannot handle.
    #[error("{op}: unsupported dtype {dtype}")]
    UnsupportedDType {
        /// The operation.
        op: &'static str,
        /// The dtype that was passed.
        dtype: DType,
    },
    /// Two operands of one operation have different dtypes.
    #[error("{op}: dtype mismatch, {lhs} vs {rhs}")]
    DTypeMismatch {
        /// The operation.
        op: &'static str,
        /// The first dtype.
        lhs: DType,
        /// The second dtype.
        rhs: DType,
    },
    /// Operand shapes do not fit together.
    #[error("{op}: shape mismatch, {lhs:?} vs {rhs:?}")]
    ShapeMismatch {
        /// The operation.
        op: &'static str,
        /// The first shape.
        lhs: Vec<usize>,
        /// The second shape.
        rhs: Vec<usize>,
    },
    /// A buffer's length does not match the number of elements of the requested shape.
    #[error("buffer of {len} elements cannot have shape {shape:?}")]
    BadLength {
        /// Elements in the buffer.
        len: usize,
        /// The requested shape.
        shape: Vec<usize>,
    },
    /// An index (a label, a node id) is out of range.
    #[error("{op}: index {index} out of range 0..{bound}")]
    IndexOutOfRange {
        /// The operation.
        op: &'static str,
        /// The bad index.
        index: i64,
        /// The exclusive upper bound.
        bound: usize,
    },
    /// An autodiff operation has no backward pass, or the tape was misused.
    #[error("autodiff: {0}")]
    Autodiff(String),
    /// A custom op failed for a reason of its own (a collective with other workers, a
    /// layer's error), kept as the source so callers can match its type.
    #[error("{op}: {source}")]
    Op {
        /// The op that failed.
        op: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The result type of the tensor crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
