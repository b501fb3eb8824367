//! What training records: node classification's accuracies and correct-prediction counts of
//! the splits (what an [`Evaluation`] holds for that task), the record of each epoch and the
//! report of a run.

use graphloom_comm::{Communicator, ReduceData, ReduceOp};
use graphloom_graph::Dataset;
use graphloom_tensor::memory::MemoryReport;
use graphloom_tensor::{with_float, Float, Real, RssReport, Tensor};

use super::Evaluation;
use crate::model::Param;
use crate::Result;

/// Accuracies of the three splits.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Accuracy {
    /// On the training nodes.
    pub train: f64,
    /// On the validation nodes.
    pub val: f64,
    /// On the test nodes.
    pub test: f64,
}

/// Correct predictions and node counts of the three splits (train, validation, test), summed
/// over the job's workers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SplitCounts {
    /// Correct predictions per split.
    pub correct: [f64; 3],
    /// Nodes per split.
    pub total: [f64; 3],
}

/// How many rows of `logp` (class scores, one row per label) predict their label.
pub fn correct_predictions(logp: &Tensor, labels: &[i64]) -> f64 {
    predictions(logp, &mut (0..labels.len()))
        .into_iter()
        .zip(labels)
        .filter(|&(class, &label)| class as i64 == label)
        .count() as f64
}

/// The class each row of `logp` predicts.
pub(crate) fn predicted_classes(logp: &Tensor) -> Vec<usize> {
    let (n, _) = logp.dims2();
    predictions(logp, &mut (0..n))
}

/// The class each row `rows` of `logp` predicts, read in the tensor's own dtype a row at a
/// time: a copy of every score widened to f64 would hold twice the scores' memory (four times
/// in bf16), hundreds of megabytes over a large graph's nodes.
fn predictions(logp: &Tensor, rows: &mut dyn Iterator<Item = usize>) -> Vec<usize> {
    let (_, c) = logp.dims2();
    let mut row = vec![0f64; c];
    let classes: graphloom_tensor::Result<Vec<usize>> = with_float!(logp.dtype(), "predictions", T => {
        logp.as_slice::<T>().map(|v| {
            rows.map(|i| {
                for (r, x) in row.iter_mut().zip(&v[i * c..(i + 1) * c]) {
                    *r = x.to_acc().to_f64();
                }
                predicted_class(&row)
            })
            .collect()
        })
    });
    classes.unwrap_or_else(|_| {
        let scores = logp.to_vec_f64();
        rows.map(|i| predicted_class(&scores[i * c..(i + 1) * c]))
            .collect()
    })
}

impl SplitCounts {
    /// The counts of `logp` (one row per node of `labels`) on the splits `idx`.
    pub fn of(logp: &Tensor, labels: &[i64], idx: [&[usize]; 3]) -> SplitCounts {
        let mut counts = SplitCounts::default();
        for (s, rows) in idx.iter().enumerate() {
            counts.correct[s] = predictions(logp, &mut rows.iter().copied())
                .into_iter()
                .zip(rows.iter())
                .filter(|&(class, &i)| class as i64 == labels[i])
                .count() as f64;
            counts.total[s] = rows.len() as f64;
        }
        counts
    }

    /// The counts of `classes` (the class predicted for each node of `labels`) on the splits
    /// `idx`.
    pub fn of_classes(classes: &[i64], labels: &[i64], idx: [&[usize]; 3]) -> SplitCounts {
        let mut counts = SplitCounts::default();
        for (s, rows) in idx.iter().enumerate() {
            counts.correct[s] = rows.iter().filter(|&&i| classes[i] == labels[i]).count() as f64;
            counts.total[s] = rows.len() as f64;
        }
        counts
    }

    /// The counts of a whole dataset's splits.
    pub fn of_dataset(logp: &Tensor, ds: &Dataset) -> SplitCounts {
        SplitCounts::of(
            logp,
            &ds.labels,
            [&ds.train_idx, &ds.valid_idx, &ds.test_idx],
        )
    }

    /// Adds up the counts of every worker of `comm`, in place. Collective.
    pub fn sum_over(&mut self, comm: &dyn Communicator) -> Result<()> {
        let mut v = [0.0; 6];
        v[..3].copy_from_slice(&self.correct);
        v[3..].copy_from_slice(&self.total);
        comm.all_reduce(ReduceData::F64(&mut v), ReduceOp::Sum)?;
        self.correct.copy_from_slice(&v[..3]);
        self.total.copy_from_slice(&v[3..]);
        Ok(())
    }

    /// The accuracies (0 for an empty split).
    pub fn accuracy(&self) -> Accuracy {
        let share = |s: usize| {
            if self.total[s] > 0.0 {
                self.correct[s] / self.total[s]
            } else {
                0.0
            }
        };
        Accuracy {
            train: share(0),
            val: share(1),
            test: share(2),
        }
    }
}

/// What one epoch measured.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpochRecord {
    /// Epoch number, from 1.
    pub epoch: usize,
    /// Training loss of the epoch (mean over its steps' training nodes, with dropout).
    pub loss: f64,
    /// What the evaluation after the epoch measured, with dropout off; `None` on epochs that
    /// were not evaluated.
    pub evaluation: Option<Evaluation>,
    /// Seconds of the training steps (forward, backward, update), without evaluation.
    pub seconds: f64,
    /// The most tracked bytes held at once so far.
    pub peak_bytes: usize,
}

/// The outcome of a run.
pub struct TrainReport {
    /// One record per epoch run.
    pub epochs: Vec<EpochRecord>,
    /// The epoch of the best validation score (the first of equals).
    pub best_epoch: usize,
    /// What its evaluation measured.
    pub best: Evaluation,
    /// Its validation score ([`Evaluation::validation`]: the accuracy for node
    /// classification).
    pub best_val_score: f64,
    /// Its test score ([`Evaluation::test`]).
    pub test_score: f64,
    /// The parameters after the best epoch.
    pub best_params: Vec<Param>,
    /// The learnt input table after the best epoch, for workloads that train one.
    pub best_input_embedding: Option<Tensor>,
    /// Whether patience ran out before the last epoch.
    pub stopped_early: bool,
    /// Tracked memory of this worker: current and peak bytes per category.
    pub memory: MemoryReport,
    /// The process's resident memory at the end.
    pub rss: RssReport,
}

impl TrainReport {
    /// Mean seconds of the training step over the epochs, leaving out the first (warm-up)
    /// when there are more than one.
    pub fn mean_epoch_seconds(&self) -> f64 {
        let timed = if self.epochs.len() > 1 {
            &self.epochs[1..]
        } else {
            &self.epochs[..]
        };
        timed.iter().map(|e| e.seconds).sum::<f64>() / timed.len().max(1) as f64
    }
}

/// The class a row of scores predicts: its largest entry (the first of equals).
pub fn predicted_class(row: &[f64]) -> usize {
    let mut best = 0;
    for j in 1..row.len() {
        if row[j] > row[best] {
            best = j;
        }
    }
    best
}
