//! What the loop carries from one epoch to the next ([`LoopState`]), model selection among
//! them: what a snapshot holds.

use graphloom_tensor::Tensor;

use super::{EpochRecord, Evaluation};
use crate::optim::Optimizer;

/// Model selection: keeps the parameters of the evaluation with the best validation score
/// (the first of equals) and says when patience has run out.
#[derive(Default)]
pub(crate) struct Selection {
    pub(crate) best: Option<Best>,
    pub(crate) evaluations_since_best: usize,
}

/// The best evaluation so far.
pub(crate) struct Best {
    pub(crate) epoch: usize,
    pub(crate) evaluation: Evaluation,
    pub(crate) params: Vec<Tensor>,
    pub(crate) input_embedding: Option<Tensor>,
}

impl Selection {
    /// Whether an evaluation with `acc` is better than the best so far.
    pub(crate) fn improves(&self, e: &Evaluation) -> bool {
        self.best
            .as_ref()
            .is_none_or(|b| e.validation() > b.evaluation.validation())
    }

    /// Records an evaluated epoch (`best` when it improves); returns whether patience has run
    /// out.
    pub(crate) fn observe(&mut self, best: Option<Best>, patience: Option<usize>) -> bool {
        match best {
            Some(b) => {
                self.best = Some(b);
                self.evaluations_since_best = 0;
            }
            None => self.evaluations_since_best += 1,
        }
        patience.is_some_and(|p| self.evaluations_since_best >= p)
    }
}

/// Everything the loop carries from one epoch to the next: what a snapshot holds.
pub(crate) struct LoopState {
    /// Epochs done.
    pub(crate) epoch: usize,
    /// Steps done (part of every dropout key).
    pub(crate) step: u64,
    /// The parameters.
    pub(crate) values: Vec<Tensor>,
    /// The optimizer and its state.
    pub(crate) opt: Optimizer,
    /// Model selection so far.
    pub(crate) selection: Selection,
    /// The records of the epochs done.
    pub(crate) records: Vec<EpochRecord>,
    /// Whether patience ran out.
    pub(crate) stopped: bool,
}
