//! The error type of the SAR crate.

/// Everything that can stop a SAR job: a part that does not fit the job, and the errors of
/// the crates it runs on, each keeping its type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A worker was given a part of a partition into another number of parts.
    #[error(
        "rank {rank} of a job of {workers} workers got part {part} of a partition into {parts} \
         parts: partition again or change the worker count"
    )]
    WorkerCount {
        /// The worker.
        rank: usize,
        /// Workers in the job.
        workers: usize,
        /// The part it loaded.
        part: usize,
        /// Parts of the partition.
        parts: usize,
    },
    /// A part's arrays are inconsistent (a degree that disagrees with its shards, say).
    #[error(transparent)]
    Graph(#[from] graphloom_graph::Error),
    /// Building or training the model failed.
    #[error(transparent)]
    Train(#[from] graphloom_nn::Error),
    /// A collective with the other workers failed; the error names the rank.
    #[error(transparent)]
    Comm(#[from] graphloom_comm::CommError),
}

impl From<graphloom_tensor::Error> for Error {
    /// A tensor error keeps a communication failure's type, as the nn crate's does.
    fn from(e: graphloom_tensor::Error) -> Error {
        Error::Train(e.into())
    }
}

impl Error {
    /// The communication failure behind this error, if one is.
    pub fn comm(&self) -> Option<&graphloom_comm::CommError> {
        match self {
            Error::Comm(e) => Some(e),
            Error::Train(e) => e.comm(),
            _ => None,
        }
    }
}

/// The result type of the SAR crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
