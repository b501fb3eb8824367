//! The metrics of multi-label classification and regression, as OGB's evaluators and
//! scikit-learn define them, over one split's outputs and targets (NaN: missing).
//!
//! - ROC-AUC per label over the nodes where it is present, averaged over the labels that have
//!   both a positive and a negative (OGB's `ogbn-proteins` evaluator). Each label's AUC is the
//!   Mann-Whitney statistic with ties given their average rank, which equals scikit-learn's
//!   `roc_auc_score` (the trapezoidal area under the ROC curve).
//! - MAE and RMSE over every present target; R² per target (`1 - SS_res / SS_tot`), averaged
//!   over the targets, as scikit-learn's `r2_score` with `multioutput="uniform_average"` (a
//!   constant target scores 1 when predicted exactly, else 0).

/// The figures of one split.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ValueMetrics {
    /// Multi-label classification: the mean ROC-AUC over labels (NaN: no label with both a
    /// positive and a negative in the split).
    RocAuc(f64),
    /// Regression's errors and coefficient of determination (NaN for an empty split).
    Regression {
        /// Mean absolute error.
        mae: f64,
        /// Root mean squared error.
        rmse: f64,
        /// R², averaged over targets.
        r2: f64,
    },
}

impl ValueMetrics {
    /// The score model selection maximises: the ROC-AUC, or R² (which falls as the squared
    /// error grows).
    pub fn score(&self) -> f64 {
        match *self {
            ValueMetrics::RocAuc(auc) => auc,
            ValueMetrics::Regression { r2, .. } => r2,
        }
    }
}

/// The column `j` of `width`-wide rows of `outputs` and `targets` where the target is present,
/// as `(output, target)` pairs.
fn column(outputs: &[f32], targets: &[f32], width: usize, j: usize) -> Vec<(f64, f64)> {
    outputs
        .iter()
        .skip(j)
        .step_by(width)
        .zip(targets.iter().skip(j).step_by(width))
        .filter(|(_, y)| !y.is_nan())
        .map(|(&x, &y)| (f64::from(x), f64::from(y)))
        .collect()
}

/// The ROC-AUC of `(score, label)` pairs (labels 0 or 1), or `None` without both a positive
/// and a negative. Sorts `pairs` by score.
pub fn roc_auc(pairs: &mut [(f64, f64)]) -> Option<f64> {
    let positives = pairs.iter().filter(|p| p.1 > 0.5).count() as f64;
    let negatives = pairs.len() as f64 - positives;
    if positives == 0.0 || negatives == 0.0 {
        return None;
    }
    pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Ranks from 1; a run of tied scores shares its average rank.
    let mut positive_ranks = 0.0;
    let mut start = 0;
    while start < pairs.len() {
        let mut end = start + 1;
        while end < pairs.len() && pairs[end].0 == pairs[start].0 {
            end += 1;
        }
        let rank = (start + 1 + end) as f64 / 2.0;
        let tied_positives = pairs[start..end].iter().filter(|p| p.1 > 0.5).count();
        positive_ranks += rank * tied_positives as f64;
        start = end;
    }
    Some((positive_ranks - positives * (positives + 1.0) / 2.0) / (positives * negatives))
}

/// The mean ROC-AUC over the labels of `width`-wide rows (logits `outputs`, labels `targets`)
/// that have both a positive and a negative; NaN when none has.
pub fn mean_roc_auc(outputs: &[f32], targets: &[f32], width: usize) -> f64 {
    let aucs: Vec<f64> = (0..width)
        .filter_map(|j| roc_auc(&mut column(outputs, targets, width, j)))
        .collect();
    match aucs.len() {
        0 => f64::NAN,
        n => aucs.iter().sum::<f64>() / n as f64,
    }
}

/// MAE, RMSE and mean R² of `width`-wide rows of predictions `outputs` against `targets`.
pub fn regression(outputs: &[f32], targets: &[f32], width: usize) -> ValueMetrics {
    let (mut abs, mut squares, mut count) = (0.0, 0.0, 0usize);
    let mut r2 = Vec::with_capacity(width);
    for j in 0..width {
        let pairs = column(outputs, targets, width, j);
        if pairs.is_empty() {
            continue;
        }
        let mean = pairs.iter().map(|p| p.1).sum::<f64>() / pairs.len() as f64;
        let (mut residual, mut total) = (0.0, 0.0);
        for &(x, y) in &pairs {
            abs += (x - y).abs();
            squares += (x - y) * (x - y);
            residual += (x - y) * (x - y);
            total += (y - mean) * (y - mean);
        }
        count += pairs.len();
        r2.push(match (total > 0.0, residual > 0.0) {
            (true, _) => 1.0 - residual / total,
            (false, false) => 1.0,
            (false, true) => 0.0,
        });
    }
    if count == 0 {
        return ValueMetrics::Regression {
            mae: f64::NAN,
            rmse: f64::NAN,
            r2: f64::NAN,
        };
    }
    ValueMetrics::Regression {
        mae: abs / count as f64,
        rmse: (squares / count as f64).sqrt(),
        r2: r2.iter().sum::<f64>() / r2.len() as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AUC by its definition: the chance a positive outscores a negative, ties halved.
    fn pairwise_auc(scores: &[f64], labels: &[bool]) -> f64 {
        let (mut wins, mut pairs) = (0.0, 0.0);
        for (i, &si) in scores.iter().enumerate() {
            for (j, &sj) in scores.iter().enumerate() {
                if labels[i] && !labels[j] {
                    pairs += 1.0;
                    wins += if si > sj {
                        1.0
                    } else if si == sj {
                        0.5
                    } else {
                        0.0
                    };
                }
            }
        }
        wins / pairs
    }

    #[test]
    fn roc_auc_equals_the_pairwise_definition_with_ties() {
        // Scores on a coarse grid so that many tie, across positives and negatives.
        let mut state = 12345u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as u32
        };
        for trial in 0..20 {
            let n = 5 + trial * 7;
            let scores: Vec<f64> = (0..n).map(|_| (next() % 9) as f64 * 0.25).collect();
            let labels: Vec<bool> = (0..n).map(|i| (next() % 3 == 0) ^ (i == 0)).collect();
            if labels.iter().all(|&l| l) || labels.iter().all(|&l| !l) {
                continue;
            }
            let mut pairs: Vec<(f64, f64)> = scores
                .iter()
                .zip(&labels)
                .map(|(&s, &l)| (s, f64::from(u8::from(l))))
                .collect();
            let got = roc_auc(&mut pairs).unwrap();
            let want = pairwise_auc(&scores, &labels);
            assert!((got - want).abs() < 1e-12, "trial {trial}: {got} vs {want}");
        }
        assert_eq!(roc_auc(&mut [(0.3, 1.0), (0.1, 1.0)]), None);
    }

    #[test]
    fn mean_roc_auc_skips_missing_targets_and_one_class_labels() {
        // Label 0: perfect; label 1: all positive where present (skipped); label 2: inverted.
        let nan = f32::NAN;
        let outputs = [0.9, 0.1, 0.2, 0.1, 0.5, 0.8, 0.4, 0.7, 0.1];
        let targets = [1.0, 1.0, 1.0, 0.0, nan, 0.0, 0.0, 1.0, nan];
        let got = mean_roc_auc(&outputs, &targets, 3);
        assert!((got - 0.5).abs() < 1e-12, "{got}");
        assert!(mean_roc_auc(&[0.1], &[1.0], 1).is_nan());
    }

    #[test]
    fn regression_metrics_match_their_definitions() {
        let outputs = [1.0, 10.0, 2.0, 20.0, 4.0, 25.0];
        let targets = [1.5, 11.0, 2.0, f32::NAN, 3.0, 30.0];
        let ValueMetrics::Regression { mae, rmse, r2 } = regression(&outputs, &targets, 2) else {
            panic!("regression gives regression metrics")
        };
        let errors = [0.5f64, 1.0, 0.0, 1.0, 5.0];
        let want_mae = errors.iter().sum::<f64>() / 5.0;
        let want_rmse = (errors.iter().map(|e| e * e).sum::<f64>() / 5.0).sqrt();
        // Target 0: y = 1.5, 2, 3 (mean 13/6); target 1: y = 11, 30 (mean 20.5).
        let m0 = 13.0 / 6.0;
        let ss0: f64 = [1.5f64, 2.0, 3.0].iter().map(|y| (y - m0) * (y - m0)).sum();
        let r0 = 1.0 - (0.25 + 0.0 + 1.0) / ss0;
        let r1 = 1.0 - (1.0 + 25.0) / (2.0 * 9.5 * 9.5);
        assert!((mae - want_mae).abs() < 1e-12);
        assert!((rmse - want_rmse).abs() < 1e-12);
        assert!((r2 - (r0 + r1) / 2.0).abs() < 1e-12, "{r2}");
    }
}
