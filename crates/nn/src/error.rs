//! The error type of the nn crate.

/// Everything that can go wrong building or training a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tensor operation failed.
    #[error(transparent)]
    Tensor(graphloom_tensor::Error),
    /// Reading or checking the graph or dataset failed.
    #[error(transparent)]
    Graph(#[from] graphloom_graph::Error),
    /// A store operation failed (a feature gather).
    #[error(transparent)]
    Store(#[from] graphloom_store::StoreError),
    /// A collective with the other workers failed; the error names the rank.
    #[error(transparent)]
    Comm(#[from] graphloom_comm::CommError),
    /// The training loss stopped being a finite number.
    #[error("the loss became {loss} at epoch {epoch}; lower the learning rate")]
    NonFiniteLoss {
        /// The epoch whose loss it was.
        epoch: usize,
        /// The loss.
        loss: f64,
    },
    /// A model or training setting is out of its domain.
    #[error("{setting}: {reason}")]
    InvalidSetting {
        /// The setting.
        setting: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// Two things that must fit each other do not (fanouts and layers, input rows and nodes,
    /// a dtype and the model's, a saved state and the model).
    #[error("{what} do not fit: {detail}")]
    Mismatch {
        /// What was matched.
        what: &'static str,
        /// How they differ.
        detail: String,
    },
    /// The dataset has no training nodes.
    #[error("the dataset has no training nodes")]
    NoTrainingNodes,
    /// The link split has no supervision pairs to train on.
    #[error("the link split has no supervision pairs (train_pos.npy is empty)")]
    NoSupervisionPairs,
    /// `--resume` found no snapshot.
    #[error("no snapshot to resume from in {}", dir.display())]
    NoSnapshot {
        /// The snapshot folder.
        dir: std::path::PathBuf,
    },
}

impl From<graphloom_tensor::Error> for Error {
    /// A communication failure inside an op (a SAR exchange, a statistics sum) keeps its type:
    /// it becomes [`Error::Comm`], so the failing rank can be matched whatever op met it.
    fn from(e: graphloom_tensor::Error) -> Error {
        match e {
            graphloom_tensor::Error::Op { op, source } => {
                let source = match source.downcast::<graphloom_comm::CommError>() {
                    Ok(comm) => return Error::Comm(*comm),
                    Err(source) => source,
                };
                // An op of this crate carried one of its own errors.
                match source.downcast::<Error>() {
                    Ok(inner) => *inner,
                    Err(source) => Error::Tensor(graphloom_tensor::Error::Op { op, source }),
                }
            }
            other => Error::Tensor(other),
        }
    }
}

impl Error {
    /// The communication failure behind this error, if one is.
    pub fn comm(&self) -> Option<&graphloom_comm::CommError> {
        match self {
            Error::Comm(e) => Some(e),
            Error::Store(graphloom_store::StoreError::Comm(e)) => Some(e),
            _ => None,
        }
    }
}

/// The result type of the nn crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
