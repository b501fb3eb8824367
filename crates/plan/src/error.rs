//! The error type of the plan.

use crate::TrainMode;

/// Everything that can stop a plan: settings that do not fit together, and the errors of the
/// crates it runs, each keeping its type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// An option was given that the chosen mode or model does not use.
    #[error("{option} does not apply to {context}: {hint}")]
    NotApplicable {
        /// The option, as the command line spells it.
        option: &'static str,
        /// The mode or model that does not use it.
        context: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// An option has a value that cannot work.
    #[error("{option} {reason}")]
    Invalid {
        /// The option, as the command line spells it.
        option: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// The run would need more memory than the machine has.
    #[error("the model and its activations need about {needed_gib:.1} GiB, more than this machine's {available_gib:.1} GiB: use a narrower model, or split the graph over the machines of an MPI job (graphloom partition)")]
    TooLarge {
        /// Estimated need.
        needed_gib: f64,
        /// The machine's memory.
        available_gib: f64,
    },
    /// The MPI backend was asked for in a build without it.
    #[error("this graphloom was built without MPI: build with --features mpi")]
    NoMpi,
    /// Reading or checking the dataset failed.
    #[error(transparent)]
    Graph(#[from] graphloom_graph::Error),
    /// Building or training the model failed.
    #[error(transparent)]
    Train(#[from] graphloom_nn::Error),
    /// A store operation failed (laying out the features).
    #[error(transparent)]
    Store(#[from] graphloom_store::StoreError),
    /// A collective with the other workers failed; the error names the rank.
    #[error(transparent)]
    Comm(#[from] graphloom_comm::CommError),
}

impl PlanError {
    pub(crate) fn not_applicable(
        option: &'static str,
        mode: TrainMode,
        hint: &'static str,
    ) -> PlanError {
        PlanError::NotApplicable {
            option,
            context: mode.describe(),
            hint,
        }
    }

    /// The communication failure behind this error, if one is, through every layer.
    pub fn comm(&self) -> Option<&graphloom_comm::CommError> {
        match self {
            PlanError::Comm(e) => Some(e),
            PlanError::Store(graphloom_store::StoreError::Comm(e)) => Some(e),
            PlanError::Train(e) => e.comm(),
            _ => None,
        }
    }
}

/// The result type of the plan.
pub type Result<T, E = PlanError> = std::result::Result<T, E>;
