//! The error type of the nn crate.

/// Everything that can go wrong building or training a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tensor operation failed.
    #[error(transparent)]
    Tensor(#[from] graphloom_tensor::Error),
    /// Reading or checking the graph or dataset failed.
    #[error(transparent)]
    Graph(#[from] graphloom_graph::Error),
    /// A store operation failed (a feature gather).
    #[error(transparent)]
    Store(#[from] graphloom_store::StoreError),
    /// A model or training setting is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// The result type of the nn crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
