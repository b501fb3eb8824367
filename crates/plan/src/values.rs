//! The plan of multi-label classification and regression: the loss a run's settings choose,
//! and the task over the dataset's targets, checked against the labels the dataset holds.

use graphloom_graph::{NodeTargets, TargetKind};
use graphloom_nn::task::TaskKind;
use graphloom_nn::values::ValueTask;
use graphloom_tensor::autodiff::ops::RowLoss;

use crate::{PlanError, Result, TrainSettings};

/// The loss of multi-label classification or regression, or `None` for another task.
pub(crate) fn value_loss(s: &TrainSettings) -> Option<RowLoss> {
    match s.task {
        Some(TaskKind::Multilabel) => Some(RowLoss::Bce),
        Some(TaskKind::Regression) => Some(s.loss.unwrap_or_default().row_loss()),
        _ => None,
    }
}

/// The multi-label or regression task of settings `s` over `targets` (the dataset's, when it
/// holds targets rather than classes) and the splits, or `None` for node classification and
/// link prediction. Refuses a task the dataset's labels cannot train, in one line that says
/// which task they can.
pub(crate) fn value_task<'a>(
    s: &TrainSettings,
    targets: Option<&'a NodeTargets>,
    splits: [&'a [usize]; 3],
) -> Result<Option<ValueTask<'a>>> {
    let hint = |t: &NodeTargets| match t.kind {
        TargetKind::Binary => "multilabel",
        TargetKind::Real => "regression",
    };
    match (value_loss(s), targets) {
        (Some(loss), Some(targets)) => Ok(Some(ValueTask::new(targets, loss, splits)?)),
        (Some(_), None) => Err(PlanError::invalid(
            "task",
            "needs node_label.npy to hold targets: [N, T] labels of 0/1 (-1 missing) for \
             multilabel, float targets [N] or [N, T] (NaN missing) for regression; the dataset \
             holds one class per node",
        )),
        (None, Some(t)) if s.task != Some(TaskKind::Link) => Err(PlanError::invalid(
            "task",
            format!(
                "node classification needs one class per node; the dataset's node_label.npy \
                 holds {} {}, so train it with `task` {}",
                t.width,
                t.kind.describe(),
                hint(t)
            ),
        )),
        (None, _) => Ok(None),
    }
}
