//! [`Task`]: what a workload trains its model for, beside the batching: node classification
//! over the dataset's labels and splits, or link prediction over a link split. Every batching
//! (full batch, sampled mini-batches) takes one, so each batching x task pair is a workload
//! without a forward pass of its own. A step's [`Targets`] say what its loss is over, and
//! [`Targets::loss`] is the one definition of each task's loss.

use std::sync::Arc;

use graphloom_tensor::autodiff::ops;
use graphloom_tensor::{Tape, Var};

use crate::link::LinkTask;
use crate::model::{Decoder, Head, Model, ModelConfig};
use crate::{Error, Result};

/// A task's name: the one type that names it, from the command line and the settings to a
/// model file's metadata and Python's model configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskKind {
    /// Node classification (the dataset's labels and splits).
    Node,
    /// Link prediction (the dataset's link split, `graphloom prepare link-split`).
    Link,
}

impl TaskKind {
    /// Every task, as front ends list them.
    pub const ALL: &'static [TaskKind] = &[TaskKind::Node, TaskKind::Link];

    /// The task's name.
    pub fn name(self) -> &'static str {
        match self {
            TaskKind::Node => "node",
            TaskKind::Link => "link",
        }
    }

    /// The task named `name`.
    pub fn parse(name: &str) -> Option<TaskKind> {
        TaskKind::ALL.iter().copied().find(|t| t.name() == name)
    }

    /// The task a model of `head` is trained for.
    pub fn of(head: Head) -> TaskKind {
        match head {
            Head::NodeClasses => TaskKind::Node,
            Head::Link(_) => TaskKind::Link,
        }
    }

    /// The head named by a task's name and, for link prediction, a decoder's (as model files
    /// and model configurations store them); no task names node classification, as in files
    /// written before link prediction. The error says which name is wrong.
    pub fn head(task: Option<&str>, decoder: Option<&str>) -> std::result::Result<Head, String> {
        match task.map(|t| (t, TaskKind::parse(t))) {
            None | Some((_, Some(TaskKind::Node))) => Ok(Head::NodeClasses),
            Some((_, Some(TaskKind::Link))) => match decoder {
                Some(name) => Decoder::parse(name)
                    .map(Head::Link)
                    .ok_or_else(|| format!("decoder '{name}' is not dot or mlp")),
                None => Err("task 'link' names no decoder".into()),
            },
            Some((other, None)) => Err(format!("task '{other}' is not node or link")),
        }
    }
}

/// What one training step's loss is over: rows of the model's output and their classes, or
/// pairs of output rows to score.
pub enum Targets {
    /// Node classification: the negative log-likelihood of each row's class.
    Nodes {
        /// Rows of the model's output.
        rows: Arc<[usize]>,
        /// The class of each row.
        labels: Arc<[i64]>,
        /// A weight per row (GraphSAINT's loss normalisation), or `None` for all ones.
        weights: Option<Arc<[f64]>>,
    },
    /// Link prediction: the decoder's score of each pair of output rows, against its label
    /// by binary cross-entropy.
    Pairs {
        /// The pairs' first rows.
        src: Arc<[usize]>,
        /// The pairs' second rows.
        dst: Arc<[usize]>,
        /// 1 for a positive pair, 0 for a negative one.
        labels: Arc<[f64]>,
    },
}

impl Targets {
    /// The classes of the first `labels.len()` rows of the output (a batch's seeds come first),
    /// unweighted.
    pub fn first_rows(labels: Arc<[i64]>) -> Targets {
        Targets::Nodes {
            rows: (0..labels.len()).collect(),
            labels,
            weights: None,
        }
    }

    /// The step's loss on `out`, the last layer's output of `model` with parameters `vars`:
    /// the sum of its terms over `normaliser` (the global batch's count, so that the workers'
    /// gradients sum to the gradient of the global mean).
    pub fn loss(
        self,
        model: &Model,
        tape: &mut Tape,
        out: &Var,
        vars: &[Var],
        normaliser: f64,
    ) -> Result<Var> {
        Ok(match self {
            Targets::Nodes {
                rows,
                labels,
                weights,
            } => {
                let logp = Model::log_probabilities(tape, out)?;
                match weights {
                    Some(w) => ops::weighted_nll_loss(tape, &logp, rows, labels, w, normaliser)?,
                    None => ops::nll_loss(tape, &logp, rows, labels, normaliser)?,
                }
            }
            Targets::Pairs { src, dst, labels } => {
                let scores = model.link_scores(tape, out, vars, src, dst)?;
                ops::bce_with_logits(tape, &scores, labels, normaliser)?
            }
        })
    }

    /// The labels' count: the terms of the loss.
    pub fn len(&self) -> usize {
        match self {
            Targets::Nodes { labels, .. } => labels.len(),
            Targets::Pairs { labels, .. } => labels.len(),
        }
    }

    /// Whether the loss has no terms.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_named_by_its_task_and_decoder_and_read_back() {
        for head in [
            Head::NodeClasses,
            Head::Link(Decoder::Dot),
            Head::Link(Decoder::Mlp),
        ] {
            let decoder = match head {
                Head::Link(d) => Some(d.name()),
                Head::NodeClasses => None,
            };
            let task = TaskKind::of(head).name();
            assert_eq!(TaskKind::head(Some(task), decoder), Ok(head));
        }
        assert_eq!(TaskKind::head(None, None), Ok(Head::NodeClasses));
        for (task, decoder, error) in [
            ("edge", None, "task 'edge' is not node or link"),
            ("link", None, "task 'link' names no decoder"),
            ("link", Some("cosine"), "decoder 'cosine' is not dot or mlp"),
        ] {
            assert_eq!(TaskKind::head(Some(task), decoder), Err(error.into()));
        }
    }
}
