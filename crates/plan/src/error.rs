//! The error type of the plan. Settings are named neutrally, by their [`crate::TrainSettings`]
//! field names written between backticks (`` `batch_size` ``), so that each front end spells
//! them its own way with [`PlanError::render`]: `--batch-size` on the command line,
//! `batch_size` in Python.

use graphloom_graph::format_bytes;

use crate::TrainMode;

/// Everything that can stop a plan: settings that do not fit together, and the errors of the
/// crates it runs, each keeping its type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A setting was given that the chosen mode or model does not use.
    #[error("`{setting}` does not apply to {context}: {hint}")]
    NotApplicable {
        /// The setting.
        setting: &'static str,
        /// The mode or model that does not use it.
        context: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// A setting has a value that cannot work.
    #[error("`{setting}` {reason}")]
    Invalid {
        /// The setting.
        setting: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// The run would need more memory than this process may use.
    #[error("the model and its activations need about {}, more than the {} this process may use: use a narrower model, or split the graph over the machines of an MPI job (graphloom partition)", format_bytes(*needed_bytes), format_bytes(*available_bytes))]
    TooLarge {
        /// Estimated need, in bytes.
        needed_bytes: u64,
        /// The memory this process may use, in bytes.
        available_bytes: u64,
    },
    /// A link predictor was asked for the classes of nodes: front ends say how to take what
    /// it gives instead (scores of pairs, node embeddings), each in its own terms.
    #[error("`model` is a link predictor (trained with `task` link): it has no classes")]
    NoClasses,
    /// The MPI backend was asked for in a build without it.
    #[error(
        "this graphloom was built without MPI: build it with `cargo build --release -p \
         graphloom --features mpi` (OpenMPI installed), or use --workers N in one process"
    )]
    NoMpi,
    /// Reading or checking the dataset failed.
    #[error(transparent)]
    Graph(#[from] graphloom_graph::Error),
    /// Building or training the model failed.
    #[error(transparent)]
    Train(#[from] graphloom_nn::Error),
    /// A SAR job failed.
    #[error(transparent)]
    Sar(#[from] graphloom_sar::Error),
    /// A store operation failed (laying out the features).
    #[error(transparent)]
    Store(#[from] graphloom_store::StoreError),
    /// A collective with the other workers failed; the error names the rank.
    #[error(transparent)]
    Comm(#[from] graphloom_comm::CommError),
}

impl PlanError {
    pub(crate) fn not_applicable(
        setting: &'static str,
        mode: TrainMode,
        hint: &'static str,
    ) -> PlanError {
        PlanError::NotApplicable {
            setting,
            context: mode.describe(),
            hint,
        }
    }

    pub(crate) fn invalid(setting: &'static str, reason: impl Into<String>) -> PlanError {
        PlanError::Invalid {
            setting,
            reason: reason.into(),
        }
    }

    /// The communication failure behind this error, if one is, through every layer.
    pub fn comm(&self) -> Option<&graphloom_comm::CommError> {
        match self {
            PlanError::Comm(e) => Some(e),
            PlanError::Store(graphloom_store::StoreError::Comm(e)) => Some(e),
            PlanError::Train(e) => e.comm(),
            PlanError::Sar(e) => e.comm(),
            _ => None,
        }
    }

    /// The message with every setting name (a field name between backticks) spelt by
    /// `spell`, as a front end writes its options.
    pub fn render(&self, spell: &dyn Fn(&str) -> String) -> String {
        render_settings(&self.to_string(), spell)
    }
}

/// `text` with every `` `name` `` (a lower-case identifier between backticks) replaced by
/// `spell(name)`; other text, and backticks around anything else, are kept.
pub fn render_settings(text: &str, spell: &dyn Fn(&str) -> String) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('`') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('`') {
            Some(close)
                if close > 0
                    && after[..close]
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b == b'_') =>
            {
                out.push_str(&spell(&after[..close]));
                rest = &after[close + 1..];
            }
            _ => {
                out.push('`');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The result type of the plan.
pub type Result<T, E = PlanError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_spelt_by_the_front_end() {
        let e = PlanError::invalid("batch_size", "needs `fanouts` and not `x1`");
        let flag = |s: &str| format!("--{}", s.replace('_', "-"));
        assert_eq!(e.render(&flag), "--batch-size needs --fanouts and not `x1`");
        assert_eq!(
            e.render(&|s: &str| s.to_string()),
            "batch_size needs fanouts and not `x1`"
        );
        assert_eq!(render_settings("a ` b", &flag), "a ` b");
    }

    #[test]
    fn small_sizes_stay_visible() {
        let e = PlanError::TooLarge {
            needed_bytes: 3 << 20,
            available_bytes: 1536,
        };
        assert!(
            e.to_string()
                .contains("need about 3.0 MiB, more than the 1.5 KiB this process may use"),
            "{e}"
        );
    }
}
