//! The plan of a link-prediction run: the dataset's link split and how training draws
//! negatives and selects the model, shared by the full-batch and mini-batch plans.

use std::path::Path;

use graphloom_graph::{GraphData, LinkSet, LinkSplit};
use graphloom_nn::link::metrics::LinkMetric;
use graphloom_nn::link::{LinkTask, NegativeSampling};
use graphloom_nn::task::Task;

use crate::budget::LinkPairs;
use crate::{PlanError, Result, TaskName, TrainSettings};

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
        if s.task != Some(TaskName::Link) {
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
