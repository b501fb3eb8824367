//! Link-prediction metrics, exactly as OGB's evaluators define them, so figures compare with
//! its leaderboards:
//!
//! - AUC: the probability that a positive scores above a negative, ties counting one half
//!   (the area under the ROC curve; `sklearn.metrics.roc_auc_score`).
//! - Hits@K (`ogbl-collab`, `ogbl-ddi`): the share of positives scoring strictly above the
//!   K-th highest negative score; 1 when there are fewer than K negatives.
//! - MRR (`ogbl-citation2`): each positive against its own negatives, rank
//!   `0.5 * (optimistic + pessimistic) + 1` where the optimistic rank counts negatives scoring
//!   strictly above it and the pessimistic one those scoring at least as high; the mean of
//!   `1 / rank`.

/// The K of the Hits@K figures reported.
pub const HITS_AT: [usize; 3] = [20, 50, 100];

/// The metrics of one split.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkMetrics {
    /// Area under the ROC curve of the positives against the negatives.
    pub auc: f64,
    /// Hits@20, Hits@50 and Hits@100 against the negatives.
    pub hits: [f64; 3],
    /// Mean reciprocal rank against each positive's own negatives, when the split has them.
    pub mrr: Option<f64>,
}

impl LinkMetrics {
    /// The metrics of positive scores `pos` against negative scores `neg`, and, when given,
    /// each positive's own negatives (`neg_dst[i]` for positive `i`).
    pub fn of(pos: &[f64], neg: &[f64], neg_dst: Option<&[Vec<f64>]>) -> LinkMetrics {
        LinkMetrics {
            auc: auc(pos, neg),
            hits: HITS_AT.map(|k| hits_at_k(pos, neg, k)),
            mrr: neg_dst.map(|n| mrr(pos, n)),
        }
    }

    /// The value of `metric`.
    pub fn get(&self, metric: LinkMetric) -> f64 {
        match metric {
            LinkMetric::Auc => self.auc,
            LinkMetric::Hits20 => self.hits[0],
            LinkMetric::Hits50 => self.hits[1],
            LinkMetric::Hits100 => self.hits[2],
            LinkMetric::Mrr => self.mrr.unwrap_or(f64::NAN),
        }
    }
}

/// The metric model selection maximises on the validation split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LinkMetric {
    /// Area under the ROC curve.
    Auc,
    /// Hits@20.
    Hits20,
    /// Hits@50.
    Hits50,
    /// Hits@100.
    Hits100,
    /// Mean reciprocal rank (needs negative destinations per positive).
    Mrr,
}

impl LinkMetric {
    /// Every metric, as front ends list them.
    pub const ALL: &'static [LinkMetric] = &[
        LinkMetric::Auc,
        LinkMetric::Mrr,
        LinkMetric::Hits20,
        LinkMetric::Hits50,
        LinkMetric::Hits100,
    ];

    /// The metric's name, as front ends and OGB spell it.
    pub fn name(self) -> &'static str {
        match self {
            LinkMetric::Auc => "auc",
            LinkMetric::Hits20 => "hits@20",
            LinkMetric::Hits50 => "hits@50",
            LinkMetric::Hits100 => "hits@100",
            LinkMetric::Mrr => "mrr",
        }
    }
}

/// Validation and test metrics of one evaluation, and the metric that selects the model.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkEvaluation {
    /// On the validation split.
    pub valid: LinkMetrics,
    /// On the test split.
    pub test: LinkMetrics,
    /// The metric model selection maximises.
    pub metric: LinkMetric,
}

/// The area under the ROC curve of `pos` against `neg`: the Mann-Whitney statistic with
/// average ranks for ties, divided by `|pos| |neg|` (0.5 when either is empty).
pub fn auc(pos: &[f64], neg: &[f64]) -> f64 {
    if pos.is_empty() || neg.is_empty() {
        return 0.5;
    }
    let mut all: Vec<(f64, bool)> = pos
        .iter()
        .map(|&s| (s, true))
        .chain(neg.iter().map(|&s| (s, false)))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    // The sum of the positives' ranks (from 1), ties sharing their average rank.
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j < all.len() && all[j].0 == all[i].0 {
            j += 1;
        }
        let average = (i + 1 + j) as f64 / 2.0;
        rank_sum += average * all[i..j].iter().filter(|x| x.1).count() as f64;
        i = j;
    }
    let (p, n) = (pos.len() as f64, neg.len() as f64);
    (rank_sum - p * (p + 1.0) / 2.0) / (p * n)
}

/// The share of `pos` scoring strictly above the `k`-th highest of `neg` (1 when there are
/// fewer than `k` negatives, as OGB's evaluator has it; 0 without positives).
pub fn hits_at_k(pos: &[f64], neg: &[f64], k: usize) -> f64 {
    if neg.len() < k {
        return 1.0;
    }
    if pos.is_empty() || k == 0 {
        return 0.0;
    }
    let mut sorted = neg.to_vec();
    sorted.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
    let kth = sorted[k - 1];
    pos.iter().filter(|&&s| s > kth).count() as f64 / pos.len() as f64
}

/// The mean reciprocal rank of each of `pos` among its own negatives `neg[i]`, rank
/// `0.5 * (optimistic + pessimistic) + 1` (0 without positives).
pub fn mrr(pos: &[f64], neg: &[Vec<f64>]) -> f64 {
    if pos.is_empty() {
        return 0.0;
    }
    let total: f64 = pos
        .iter()
        .zip(neg)
        .map(|(&p, negatives)| {
            let optimistic = negatives.iter().filter(|&&s| s > p).count() as f64;
            let pessimistic = negatives.iter().filter(|&&s| s >= p).count() as f64;
            1.0 / (0.5 * (optimistic + pessimistic) + 1.0)
        })
        .sum();
    total / pos.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AUC by its definition: over every (positive, negative) pair, 1 when the positive
    /// scores higher, one half on a tie.
    fn auc_by_pairs(pos: &[f64], neg: &[f64]) -> f64 {
        let mut total = 0.0;
        for &p in pos {
            for &n in neg {
                total += if p > n {
                    1.0
                } else if p == n {
                    0.5
                } else {
                    0.0
                };
            }
        }
        total / (pos.len() * neg.len()) as f64
    }

    fn scores(n: usize, salt: u64, levels: u64) -> Vec<f64> {
        let key = graphloom_tensor::rng::RngKey::new(salt, 0, 0);
        (0..n as u64)
            .map(|i| (key.bits(i, 0) % levels) as f64 / levels as f64)
            .collect()
    }

    #[test]
    fn auc_is_the_share_of_pairs_ordered_right_with_ties_as_halves() {
        for (levels, salt) in [(5, 1), (1000, 2), (3, 3)] {
            let (pos, neg) = (scores(37, salt, levels), scores(53, salt + 10, levels));
            let (got, want) = (auc(&pos, &neg), auc_by_pairs(&pos, &neg));
            assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        }
        assert_eq!(auc(&[1.0, 2.0], &[0.0]), 1.0);
        assert_eq!(auc(&[0.0], &[1.0, 2.0]), 0.0);
    }

    #[test]
    fn hits_and_mrr_follow_ogb() {
        // The 2nd highest negative is 0.8: positives strictly above it count.
        let neg = [0.1, 0.9, 0.8, 0.3];
        assert_eq!(hits_at_k(&[0.85, 0.8, 0.95, 0.2], &neg, 2), 0.5);
        // Fewer negatives than K: every positive is a hit.
        assert_eq!(hits_at_k(&[0.0], &neg, 20), 1.0);
        // Ranks: 0.5 with negatives [0.7, 0.5, 0.1]: one above, two at least as high, rank
        // 0.5 * 3 + 1 = 2.5; 0.9 above all: rank 1.
        let m = mrr(&[0.5, 0.9], &[vec![0.7, 0.5, 0.1], vec![0.1, 0.2, 0.3]]);
        assert!((m - (1.0 / 2.5 + 1.0) / 2.0).abs() < 1e-12);
    }
}
