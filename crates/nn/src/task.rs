//! [`Task`]: what a workload trains its model for, beside the batching: node classification
//! over the dataset's labels and splits, or link prediction over a link split. Every batching
//! (full batch, sampled mini-batches) takes one, so each batching x task pair is a workload
//! without a forward pass of its own.

use crate::link::LinkTask;
use crate::model::{Head, ModelConfig};
use crate::{Error, Result};

/// What a workload trains for.
#[derive(Clone, Copy)]
pub enum Task<'a> {
    /// Node classification: log-probabilities of the labelled nodes' classes.
    Node,
    /// Link prediction: the decoder's scores of pairs of nodes.
    Link(LinkTask<'a>),
}

impl Task<'_> {
    /// Fails unless a model of `cfg` has the head this task needs, and link prediction has
    /// supervision pairs to train on.
    pub fn check(&self, cfg: &ModelConfig) -> Result<()> {
        match (self, cfg.head) {
            (Task::Link(t), Head::Link(_))
                if t.split.pairs(graphloom_graph::LinkSet::TrainPos).is_empty() =>
            {
                Err(Error::NoSupervisionPairs)
            }
            (Task::Node, Head::NodeClasses) | (Task::Link(_), Head::Link(_)) => Ok(()),
            (Task::Node, Head::Link(_)) => Err(Error::Mismatch {
                what: "the task and the model's head",
                detail: "node classification needs a model that outputs classes, not a link \
                         decoder"
                    .into(),
            }),
            (Task::Link(_), Head::NodeClasses) => Err(Error::Mismatch {
                what: "the task and the model's head",
                detail: "link prediction needs a model with a link decoder".into(),
            }),
        }
    }

    /// How the task is described in a snapshot's fingerprint.
    pub(crate) fn describe(&self) -> String {
        match self {
            Task::Node => "node classification".into(),
            Task::Link(t) => format!(
                "link prediction on {} supervision pairs, {} negatives each drawing {}{}, \
                 selected by {}",
                t.split.pairs(graphloom_graph::LinkSet::TrainPos).len(),
                t.neg_ratio,
                match t.neg_sampling {
                    crate::link::NegativeSampling::Both => "both ends",
                    crate::link::NegativeSampling::Dst => "the destination",
                },
                if t.exclude_supervision {
                    ", supervision hidden from blocks"
                } else {
                    ""
                },
                t.metric.name()
            ),
        }
    }
}
