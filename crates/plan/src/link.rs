//! The plan of a link-prediction run: the dataset's link split and how training draws
//! negatives and selects the model, shared by the full-batch and mini-batch plans.

use std::path::Path;

use graphloom_graph::{format_bytes, GraphData, LinkSet, LinkSplit};
use graphloom_nn::link::metrics::LinkMetric;
use graphloom_nn::link::{LinkTask, NegativeSampling};
use graphloom_nn::task::Task;
use graphloom_nn::ModelConfig;

use crate::budget::LinkPairs;
use crate::plan::available_memory_bytes;
use crate::{PlanError, Result, TaskKind, TrainSettings};

/// A link-prediction run's split and settings.
pub(crate) struct LinkPlan {
    split: LinkSplit,
    neg_ratio: usize,
    neg_sampling: NegativeSampling,
    metric: LinkMetric,
    exclude_supervision: bool,
}

/// Negatives per positive unless told otherwise.
pub const NEG_RATIO: usize = 1;

/// The validation metric that selects the model unless told otherwise: AUC, as PyG's link
/// examples select. It scores every held-out pair against every negative pair, so it falls
/// when a model ranks random pairs above true links; MRR against each positive's own negative
/// destinations can keep rising then (a source's edges ranked above its non-edges while
/// pairs of other sources are not), and selecting by it picked an epoch of test AUC 0.49
/// against 0.78 on a heavy-tailed graph.
pub const METRIC: LinkMetric = LinkMetric::Auc;

impl LinkPlan {
    /// The link plan of `s` over the dataset in `dir` (whose graph is `graph`), `None` when
    /// the run classifies nodes.
    pub(crate) fn open(
        s: &TrainSettings,
        dir: Option<&Path>,
        graph: GraphData<'_>,
    ) -> Result<Option<LinkPlan>> {
        if s.task != Some(TaskKind::Link) {
            return Ok(None);
        }
        let Some(dir) = dir.filter(|d| LinkSplit::exists(d)) else {
            return Err(PlanError::invalid(
                "task",
                "link needs a dataset with a link split (`dataset` with link_split/train_pos.npy): \
                 make one with graphloom prepare link-split",
            ));
        };
        let split = LinkSplit::open(dir, graph)?;
        let metric = match s.metric {
            Some(LinkMetric::Mrr) if split.neg_dst(false).is_none() => {
                return Err(PlanError::invalid(
                    "metric",
                    "mrr ranks each validation positive against its own negatives, and this \
                     split has no valid_neg_dst.npy: choose auc or a hits@K",
                ))
            }
            Some(m) => m,
            None => METRIC,
        };
        Ok(Some(LinkPlan {
            split,
            neg_ratio: s.neg_ratio.unwrap_or(NEG_RATIO),
            neg_sampling: s.neg_sampling.unwrap_or_default(),
            metric,
            exclude_supervision: s.excludes_supervision(),
        }))
    }

    /// The supervision pairs (`train_pos.npy`).
    pub(crate) fn supervision_pairs(&self) -> usize {
        self.split.pairs(LinkSet::TrainPos).len()
    }

    /// Both ends of every supervision pair, sources then destinations.
    pub(crate) fn supervision_ends(&self) -> Vec<usize> {
        let pos = self.split.pairs(LinkSet::TrainPos);
        pos.src()
            .iter()
            .chain(pos.dst())
            .map(|&v| v as usize)
            .collect()
    }

    /// The pairs a run scores when a step takes `positives` supervision pairs (at most all of
    /// them), for the memory plan.
    pub(crate) fn pairs(&self, positives: usize) -> LinkPairs {
        let positives = positives.min(self.supervision_pairs()) as u64;
        let held_out = |pos: LinkSet, neg: LinkSet, test: bool| {
            let p = self.split.pairs(pos).len() as u64;
            let k = self.split.neg_dst(test).map_or(0, |d| d.per_positive()) as u64;
            p + self.split.pairs(neg).len() as u64 + p * k
        };
        LinkPairs {
            step: positives.saturating_mul(1 + self.neg_ratio as u64),
            eval: held_out(LinkSet::ValidPos, LinkSet::ValidNeg, false).max(held_out(
                LinkSet::TestPos,
                LinkSet::TestNeg,
                true,
            )),
        }
    }

    /// Refuses a training step whose pairs cannot fit in memory with a decoder of `model`:
    /// `batch_size` supervision pairs at a time (every one when `None`, a full batch), each
    /// with its `neg_ratio` negatives, each pair holding its [`PAIR_BYTES`] and its ends'
    /// rows of the decoder's input (measured: a GCN of out_dim 16 held 160 bytes a pair at
    /// its peak, these 32 and 128).
    pub(crate) fn check_step(&self, model: &ModelConfig, batch_size: Option<usize>) -> Result<()> {
        let decoder = 2 * (model.out_dim as u64).saturating_mul(model.dtype.size_in_bytes() as u64);
        check_step_pairs(
            self.split.pairs(LinkSet::TrainPos).len(),
            batch_size,
            self.neg_ratio as f64,
            PAIR_BYTES.saturating_add(decoder),
        )
    }

    /// The task of a workload over this plan.
    pub(crate) fn task(&self) -> Task<'_> {
        Task::Link(LinkTask {
            split: &self.split,
            neg_ratio: self.neg_ratio,
            neg_sampling: self.neg_sampling,
            metric: self.metric,
            exclude_supervision: self.exclude_supervision,
        })
    }
}

/// The bytes a scored pair of a step holds at least, besides the decoder's rows: its ends
/// (`u32` each), its label (`f64`) and its ends' rows among the step's nodes (`usize` each).
pub const PAIR_BYTES: u64 = 32;

/// Refuses a step of link prediction whose pairs cannot fit in the memory this process may
/// use: `batch_size` of the `supervision` pairs (every one when `None`), each with `neg_ratio`
/// negatives (a fraction for PyG's loader), every pair taking `pair_bytes`. The error names
/// `neg_ratio` and `batch_size`.
pub fn check_step_pairs(
    supervision: usize,
    batch_size: Option<usize>,
    neg_ratio: f64,
    pair_bytes: u64,
) -> Result<()> {
    let positives = batch_size.map_or(supervision, |b| b.min(supervision));
    // In floating point: the counts only need comparing, and a product past every integer
    // type is then a large number, not an overflow.
    let pairs = (positives as f64 * neg_ratio).ceil() + positives as f64;
    let needed = pairs * pair_bytes as f64;
    let available = available_memory_bytes();
    if available == 0 || needed <= available as f64 {
        return Ok(());
    }
    let (step, lower) = match batch_size {
        Some(_) => (
            format!("{positives} supervision pairs a step (`batch_size`)"),
            "lower `neg_ratio` or `batch_size`",
        ),
        None => (
            format!("all {positives} supervision pairs in one step (no `batch_size`)"),
            "lower `neg_ratio`, or give `batch_size`",
        ),
    };
    Err(PlanError::invalid(
        "neg_ratio",
        format!(
            "{} with {step} makes {pairs:.0} pairs to score, at least {}, more than the {} this \
             process may use: {lower}",
            crate::budget::short_number(neg_ratio),
            format_bytes(needed.min(u64::MAX as f64) as u64),
            format_bytes(available)
        ),
    ))
}
