//! [`Evaluation`]: what an evaluation measured, by task, and everything a run reports of it
//! (the epoch's line, the result, the JSON keys, the model-selection note), decided here once
//! for every task so that the front ends (the command line, Python) do not branch on it.

use crate::link::metrics::{LinkEvaluation, LinkMetric, LinkMetrics, HITS_AT};
use crate::train::{Accuracy, EpochRecord};
use crate::values::{ValueEvaluation, ValueMetrics};

/// What an evaluation measured, by task.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Evaluation {
    /// Node classification: accuracies of the three splits.
    Node(Accuracy),
    /// Link prediction: the metrics of the validation and test splits.
    Link(LinkEvaluation),
    /// Multi-label classification or regression: the metrics of the three splits.
    Values(ValueEvaluation),
}

impl Evaluation {
    /// The score model selection maximises: the validation accuracy, or the selected link
    /// metric on the validation split.
    pub fn validation(&self) -> f64 {
        match self {
            Evaluation::Node(a) => a.val,
            Evaluation::Link(l) => l.valid.get(l.metric),
            Evaluation::Values(v) => v.splits[1].score(),
        }
    }

    /// The same score on the test split.
    pub fn test(&self) -> f64 {
        match self {
            Evaluation::Node(a) => a.test,
            Evaluation::Link(l) => l.test.get(l.metric),
            Evaluation::Values(v) => v.splits[2].score(),
        }
    }

    /// The accuracies, for node classification.
    pub fn accuracy(&self) -> Option<Accuracy> {
        match self {
            Evaluation::Node(a) => Some(*a),
            Evaluation::Link(_) | Evaluation::Values(_) => None,
        }
    }

    /// The task's name in a run's summary (`"node"`, `"link"`).
    pub fn task_name(&self) -> &'static str {
        match self {
            Evaluation::Node(_) => "node",
            Evaluation::Link(_) => "link",
            Evaluation::Values(v) => match v.splits[0] {
                ValueMetrics::RocAuc(_) => "multilabel",
                ValueMetrics::Regression { .. } => "regression",
            },
        }
    }

    /// The epoch line's figures. `present` says which of the train, validation and test splits
    /// hold nodes: an empty split's accuracy is "n/a", not 0.
    pub fn epoch_text(&self, present: [bool; 3]) -> String {
        match self {
            Evaluation::Node(a) => {
                let [train, val, test] = split_values(a, present).map(shown);
                format!("train {train:>6}  val {val:>6}  test {test:>6}")
            }
            Evaluation::Link(l) => format!("val {}  test {}", brief(&l.valid), brief(&l.test)),
            Evaluation::Values(v) => {
                let [train, val, test] = std::array::from_fn(|s| {
                    if present[s] {
                        values_brief(&v.splits[s])
                    } else {
                        "n/a".into()
                    }
                });
                format!("train {train}  val {val}  test {test}")
            }
        }
    }

    /// The run's result as the evaluation that selected the model gives it: the test figure
    /// and the best validation score (`present` as in [`Evaluation::epoch_text`]).
    pub fn result_text(&self, present: [bool; 3], test: f64, val: f64) -> (String, String) {
        match self {
            Evaluation::Node(_) => (
                match present[2] {
                    true => format!("test accuracy {}", shown(Some(test))),
                    false => "test accuracy n/a (no test nodes)".into(),
                },
                shown(present[1].then_some(val)),
            ),
            Evaluation::Link(l) => (
                format!(
                    "test {} {test:.4} (auc {:.4}, hits@50 {:.4}{})",
                    l.metric.name(),
                    l.test.auc,
                    l.test.hits[1],
                    l.test
                        .mrr
                        .map_or(String::new(), |m| format!(", mrr {m:.4}"))
                ),
                format!("{val:.4}"),
            ),
            Evaluation::Values(v) => (
                match present[2] {
                    true => format!("test {}", values_brief(&v.splits[2])),
                    false => format!("test {} n/a (no test nodes)", v.metric_name()),
                },
                shown(present[1].then_some(val)),
            ),
        }
    }

    /// The figures under JSON keys: node classification's `train_acc` (with `val` = "val_",
    /// in histories), `{val}acc` and `{test}acc` (null for an empty split), link prediction's
    /// `{val}auc`, `{val}hits_at_20/50/100`, `{val}mrr` and the same with `{test}`,
    /// multi-label classification's `{val}rocauc`, regression's `{val}mae`, `{val}rmse` and
    /// `{val}r2` (both with `train_` in histories; null for an empty or undefined split).
    pub fn fields(
        &self,
        present: [bool; 3],
        val: &str,
        test: &str,
    ) -> serde_json::Map<String, serde_json::Value> {
        use serde_json::json;
        let mut m = serde_json::Map::new();
        match self {
            Evaluation::Node(a) => {
                let [train, v, t] = split_values(a, present);
                if val == "val_" {
                    m.insert("train_acc".into(), json!(train));
                }
                m.insert(format!("{val}acc"), json!(v));
                m.insert(format!("{test}acc"), json!(t));
            }
            Evaluation::Link(l) => {
                for (prefix, metrics) in [(val, &l.valid), (test, &l.test)] {
                    m.insert(format!("{prefix}auc"), json!(metrics.auc));
                    for (k, h) in HITS_AT.iter().zip(metrics.hits) {
                        m.insert(format!("{prefix}hits_at_{k}"), json!(h));
                    }
                    m.insert(format!("{prefix}mrr"), json!(metrics.mrr));
                }
            }
            Evaluation::Values(v) => {
                let prefixes = [(val == "val_").then_some("train_"), Some(val), Some(test)];
                for ((prefix, metrics), present) in prefixes.iter().zip(&v.splits).zip(present) {
                    let Some(prefix) = prefix else { continue };
                    let figure = |x: f64| json!(present.then_some(x).filter(|x| x.is_finite()));
                    match *metrics {
                        ValueMetrics::RocAuc(auc) => {
                            m.insert(format!("{prefix}rocauc"), figure(auc));
                        }
                        ValueMetrics::Regression { mae, rmse, r2 } => {
                            m.insert(format!("{prefix}mae"), figure(mae));
                            m.insert(format!("{prefix}rmse"), figure(rmse));
                            m.insert(format!("{prefix}r2"), figure(r2));
                        }
                    }
                }
            }
        }
        m
    }

    /// The keys that say which task a summary is of: `task` and `metric` of link prediction,
    /// multi-label classification (`rocauc`) and regression (`r2`) (a summary without them is
    /// node classification's, as before link prediction).
    pub fn task_fields(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        match self {
            Evaluation::Link(l) => {
                m.insert("task".into(), self.task_name().into());
                m.insert("metric".into(), l.metric.name().into());
            }
            Evaluation::Values(v) => {
                m.insert("task".into(), self.task_name().into());
                m.insert("metric".into(), v.metric_name().into());
            }
            Evaluation::Node(_) => {}
        }
        m
    }

    /// What a training curve draws of this evaluation: the panel's title and its figures,
    /// named, in the order they are drawn (node classification's accuracies of the three
    /// splits; link prediction's validation AUC, Hits@20/50/100 and MRR when the split ranks;
    /// the three splits' ROC-AUC or R²).
    pub fn curves(&self) -> (&'static str, Vec<(&'static str, f64)>) {
        match self {
            Evaluation::Node(a) => (
                "accuracy",
                vec![("train", a.train), ("valid", a.val), ("test", a.test)],
            ),
            Evaluation::Link(l) => {
                debug_assert_eq!(HITS_AT, [20, 50, 100], "the names say these cut-offs");
                let v = &l.valid;
                let mut figures = vec![
                    ("val auc", v.auc),
                    ("val hits@20", v.hits[0]),
                    ("val hits@50", v.hits[1]),
                    ("val hits@100", v.hits[2]),
                ];
                if let Some(mrr) = v.mrr {
                    figures.push(("val mrr", mrr));
                }
                ("validation metrics", figures)
            }
            Evaluation::Values(v) => (
                v.metric_name(),
                vec![
                    ("train", v.splits[0].score()),
                    ("valid", v.splits[1].score()),
                    ("test", v.splits[2].score()),
                ],
            ),
        }
    }

    /// A link predictor's validation metrics that, at the selected epoch `best_epoch` (whose
    /// evaluation this is), stand well below their own best over `epochs` (more than 0.05
    /// under it, and under 90% of it): a model selected by one metric may rank random pairs
    /// above true links by another. One line naming them and `--metric`, or `None`.
    pub fn selection_note(&self, epochs: &[EpochRecord], best_epoch: usize) -> Option<String> {
        let Evaluation::Link(chosen) = self else {
            return None;
        };
        let mut below = Vec::new();
        for metric in LinkMetric::ALL.iter().copied() {
            if metric == chosen.metric || (metric == LinkMetric::Mrr && chosen.valid.mrr.is_none())
            {
                continue;
            }
            let at = |e: &EpochRecord| match e.evaluation {
                Some(Evaluation::Link(l)) => Some((e.epoch, l.valid.get(metric))),
                _ => None,
            };
            let Some((epoch, best)) = epochs.iter().filter_map(at).fold(
                None,
                |b: Option<(usize, f64)>, (e, v)| match b {
                    Some((_, bv)) if bv >= v => b,
                    _ => Some((e, v)),
                },
            ) else {
                continue;
            };
            let now = chosen.valid.get(metric);
            if now < best - 0.05 && now < 0.9 * best {
                below.push(format!(
                    "{} {now:.4} (best {best:.4} at epoch {epoch})",
                    metric.name()
                ));
            }
        }
        (!below.is_empty()).then(|| {
            format!(
                "note: epoch {} was selected by validation {}; there validation {}: --metric \
                 chooses the selecting metric",
                best_epoch,
                chosen.metric.name(),
                below.join(", ")
            )
        })
    }
}

/// The accuracies of the splits that hold nodes (`present`).
fn split_values(a: &Accuracy, present: [bool; 3]) -> [Option<f64>; 3] {
    let all = [a.train, a.val, a.test];
    std::array::from_fn(|s| present[s].then_some(all[s]))
}

/// An accuracy to four places, or n/a for an empty split.
fn shown(accuracy: Option<f64>) -> String {
    accuracy.map_or("n/a".into(), |a| format!("{a:.4}"))
}

/// A multi-label split's ROC-AUC, or a regression split's R² and RMSE, in one short run of text.
fn values_brief(m: &ValueMetrics) -> String {
    match *m {
        ValueMetrics::RocAuc(auc) => format!("rocauc {}", shown(auc.is_finite().then_some(auc))),
        ValueMetrics::Regression { rmse, r2, .. } => format!("r2 {r2:.4} rmse {rmse:.4}"),
    }
}

/// A link evaluation's AUC, Hits@50 and MRR (when the split ranks) in one short run of text.
fn brief(m: &LinkMetrics) -> String {
    let mrr = m.mrr.map_or(String::new(), |v| format!(" mrr {v:.4}"));
    format!("auc {:.4} hits@50 {:.4}{mrr}", m.auc, m.hits[1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::metrics::LinkEvaluation;

    /// A link predictor's epoch whose validation AUC is `auc` and MRR `mrr`.
    fn epoch(epoch: usize, auc: f64, mrr: f64) -> EpochRecord {
        let m = LinkMetrics {
            auc,
            hits: [0.1; 3],
            mrr: Some(mrr),
        };
        EpochRecord {
            epoch,
            loss: 0.5,
            evaluation: Some(Evaluation::Link(LinkEvaluation {
                valid: m,
                test: m,
                metric: LinkMetric::Mrr,
            })),
            seconds: 0.1,
            peak_bytes: 0,
        }
    }

    #[test]
    fn a_selected_epoch_whose_other_metrics_collapsed_is_noted() {
        // AUC rises to 0.76 at epoch 2, then falls to 0.58 while MRR rises.
        let epochs = vec![
            epoch(1, 0.70, 0.30),
            epoch(2, 0.76, 0.40),
            epoch(3, 0.58, 0.47),
        ];
        let best = epochs[2].evaluation.unwrap();
        let note = best.selection_note(&epochs, 3).expect("a note");
        assert!(
            note.contains("selected by validation mrr")
                && note.contains("auc 0.5800 (best 0.7600 at epoch 2)")
                && note.contains("--metric"),
            "{note}"
        );
        assert!(!note.contains("hits"), "the hits did not move: {note}");
        // A fall within 0.05 of the best is noise, not a collapse.
        let epochs = vec![epoch(1, 0.76, 0.40), epoch(2, 0.72, 0.47)];
        let best = epochs[1].evaluation.unwrap();
        assert_eq!(best.selection_note(&epochs, 2), None);
    }
}
