//! [`ValueTask`]: node tasks whose targets are rows of values rather than one class: multi-label
//! classification (binary cross-entropy per label, scored by ROC-AUC) and regression (squared
//! or absolute error, scored by MAE, RMSE and R²). The dataset's [`NodeTargets`] hold the rows,
//! NaN marking a missing target, which neither the loss nor the metrics count.

pub mod metrics;

use std::sync::Arc;

use graphloom_graph::{NodeTargets, TargetKind};
use graphloom_tensor::autodiff::ops::RowLoss;
use graphloom_tensor::Tensor;

use crate::model::{Head, ModelConfig};
use crate::task::Targets;
use crate::{Error, Result};
pub use metrics::ValueMetrics;

/// Regression's loss, as front ends name it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RegressionLoss {
    /// Mean squared error (PyTorch's `MSELoss`).
    #[default]
    Mse,
    /// Mean absolute error (`L1Loss`).
    L1,
}

impl RegressionLoss {
    /// Every loss, as front ends list them.
    pub const ALL: &'static [RegressionLoss] = &[RegressionLoss::Mse, RegressionLoss::L1];

    /// The loss's name.
    pub fn name(self) -> &'static str {
        match self {
            RegressionLoss::Mse => "mse",
            RegressionLoss::L1 => "l1",
        }
    }

    /// The loss of one output against one target.
    pub fn row_loss(self) -> RowLoss {
        match self {
            RegressionLoss::Mse => RowLoss::Mse,
            RegressionLoss::L1 => RowLoss::L1,
        }
    }
}

/// A multi-label or regression task over a dataset's targets and splits.
#[derive(Clone, Copy)]
pub struct ValueTask<'a> {
    /// Every node's targets.
    pub targets: &'a NodeTargets,
    /// The loss: binary cross-entropy for multi-label classification, squared or absolute
    /// error for regression.
    pub loss: RowLoss,
    /// The training, validation and test nodes.
    pub splits: [&'a [usize]; 3],
}

impl<'a> ValueTask<'a> {
    /// The task trained with `loss` on `targets` over the splits `splits`; binary
    /// cross-entropy needs binary labels.
    pub fn new(
        targets: &'a NodeTargets,
        loss: RowLoss,
        splits: [&'a [usize]; 3],
    ) -> Result<ValueTask<'a>> {
        if loss == RowLoss::Bce && targets.kind != TargetKind::Binary {
            return Err(Error::Mismatch {
                what: "the task and the dataset's labels",
                detail: "multi-label classification needs labels of 0/1 (-1 missing); the \
                         dataset holds real targets, which regression trains on"
                    .into(),
            });
        }
        Ok(ValueTask {
            targets,
            loss,
            splits,
        })
    }

    /// The head a model of this task has.
    pub fn head(&self) -> Head {
        match self.loss {
            RowLoss::Bce => Head::NodeLabels,
            RowLoss::Mse | RowLoss::L1 => Head::NodeValues,
        }
    }

    /// Fails unless a model of `cfg` has this task's head and outputs one value per target.
    pub fn check(&self, cfg: &ModelConfig) -> Result<()> {
        if cfg.head != self.head() {
            return Err(Error::Mismatch {
                what: "the task and the model's head",
                detail: format!(
                    "{} needs a model whose head is {:?}, not {:?}",
                    self.name(),
                    self.head(),
                    cfg.head
                ),
            });
        }
        if cfg.out_dim != self.targets.width {
            return Err(Error::Mismatch {
                what: "the model's output and the targets",
                detail: format!(
                    "the model outputs {} values per node for {} targets",
                    cfg.out_dim, self.targets.width
                ),
            });
        }
        Ok(())
    }

    /// The task's name.
    pub fn name(&self) -> &'static str {
        match self.loss {
            RowLoss::Bce => "multi-label classification",
            RowLoss::Mse | RowLoss::L1 => "regression",
        }
    }

    /// The count of present targets of `nodes`: the terms of their loss.
    pub fn present(&self, nodes: impl IntoIterator<Item = usize>) -> usize {
        nodes.into_iter().map(|v| self.targets.present(v)).sum()
    }

    /// The targets of `nodes` over the output rows `rows` (one per node), weighted by
    /// `weights` (`None`: 1 each).
    pub fn targets_of(
        &self,
        nodes: &[usize],
        rows: Arc<[usize]>,
        weights: Option<Arc<[f64]>>,
    ) -> Targets {
        Targets::Values {
            rows,
            targets: self.targets.rows_of(nodes.iter().copied()).into(),
            weights,
            loss: self.loss,
            terms: self.present(nodes.iter().copied()),
        }
    }

    /// The metrics of every split from `out`, the model's output of every node.
    pub fn evaluate(&self, out: &Tensor) -> Result<ValueEvaluation> {
        let width = self.targets.width;
        if out.shape() != [self.targets.num_nodes(), width] {
            return Err(Error::Mismatch {
                what: "the outputs and the targets",
                detail: format!(
                    "outputs of shape {:?} for {} nodes of {width} targets",
                    out.shape(),
                    self.targets.num_nodes()
                ),
            });
        }
        let all = out.to_vec_f64();
        let splits = self.splits.map(|nodes| {
            let outputs: Vec<f32> = nodes
                .iter()
                .flat_map(|&v| all[v * width..(v + 1) * width].iter().map(|&x| x as f32))
                .collect();
            let targets = self.targets.rows_of(nodes.iter().copied());
            split_metrics(self.loss, &outputs, &targets, width)
        });
        ValueEvaluation::new(splits, self.splits[1].len())
    }

    /// How the task is described in a snapshot's fingerprint.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} of {} targets by {:?} loss",
            self.name(),
            self.targets.width,
            self.loss
        )
    }
}

/// The metrics of a task trained with `loss` on one split: the model's outputs `outputs` of its
/// nodes against their `targets`, `width` per node.
pub fn split_metrics(
    loss: RowLoss,
    outputs: &[f32],
    targets: &[f32],
    width: usize,
) -> ValueMetrics {
    match loss {
        RowLoss::Bce => ValueMetrics::RocAuc(metrics::mean_roc_auc(outputs, targets, width)),
        RowLoss::Mse | RowLoss::L1 => metrics::regression(outputs, targets, width),
    }
}

/// What a multi-label or regression evaluation measured on the training, validation and test
/// splits.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ValueEvaluation {
    /// The metrics of the training, validation and test nodes.
    pub splits: [ValueMetrics; 3],
}

impl ValueEvaluation {
    /// The metrics `splits` of the training, validation and test nodes, `validation_nodes` of
    /// them validation nodes. Fails when validation nodes score no figure: none of their labels
    /// has both a positive and a negative, so the ROC-AUC that selects the model is undefined
    /// (OGB's evaluator refuses it too), where selection would otherwise keep the first epoch.
    pub fn new(splits: [ValueMetrics; 3], validation_nodes: usize) -> Result<ValueEvaluation> {
        if validation_nodes > 0 && splits[1].score().is_nan() {
            return Err(Error::InvalidSetting {
                setting: "dataset",
                reason: format!(
                    "its {validation_nodes} validation nodes have no label with both a positive \
                     and a negative, so the ROC-AUC that selects the model is undefined: give \
                     a validation split that holds both"
                ),
            });
        }
        Ok(ValueEvaluation { splits })
    }

    /// The name of the score that selects the model: `rocauc` or `r2`.
    pub fn metric_name(&self) -> &'static str {
        match self.splits[0] {
            ValueMetrics::RocAuc(_) => "rocauc",
            ValueMetrics::Regression { .. } => "r2",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undefined_validation_score_is_refused_unless_the_split_is_empty() {
        let auc = ValueMetrics::RocAuc;
        let e = ValueEvaluation::new([auc(0.7), auc(f64::NAN), auc(0.6)], 40).unwrap_err();
        assert!(e.to_string().contains("40 validation nodes"), "{e}");
        assert!(ValueEvaluation::new([auc(0.7), auc(f64::NAN), auc(0.6)], 0).is_ok());
        assert!(ValueEvaluation::new([auc(0.7), auc(0.8), auc(f64::NAN)], 40).is_ok());
    }
}
