//! [`Task`]: what a workload trains its model for, beside the batching: node classification
//! over the dataset's labels and splits, or link prediction over a link split. Every batching
//! (full batch, sampled mini-batches) takes one, so each batching x task pair is a workload
//! without a forward pass of its own. A step's [`Targets`] say what its loss is over, and
//! [`Targets::loss`] is the one definition of each task's loss.

use std::sync::Arc;

use graphloom_graph::{LinkSet, NodeId};
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::{Tape, Tensor, Var};

use crate::batches::epoch_batches;
use crate::link::{self, pair_batches, supervision_pairs, LinkTask, PairBatch};
use crate::model::{Decoder, Head, Model, ModelConfig};
use crate::train::{Evaluation, SplitCounts};
use crate::values::ValueTask;
use crate::{Error, Result};
use graphloom_tensor::autodiff::ops::RowLoss;

/// A task's name: the one type that names it, from the command line and the settings to a
/// model file's metadata and Python's model configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskKind {
    /// Node classification (the dataset's labels and splits).
    Node,
    /// Link prediction (the dataset's link split, `graphloom prepare link-split`).
    Link,
    /// Multi-label classification (the dataset's binary labels, [`NodeTargets`]).
    Multilabel,
    /// Regression (the dataset's real targets, [`NodeTargets`]).
    Regression,
}

impl TaskKind {
    /// Every task, as front ends list them.
    pub const ALL: &'static [TaskKind] = &[
        TaskKind::Node,
        TaskKind::Link,
        TaskKind::Multilabel,
        TaskKind::Regression,
    ];

    /// The task's name.
    pub fn name(self) -> &'static str {
        match self {
            TaskKind::Node => "node",
            TaskKind::Link => "link",
            TaskKind::Multilabel => "multilabel",
            TaskKind::Regression => "regression",
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
            Head::NodeLabels => TaskKind::Multilabel,
            Head::NodeValues => TaskKind::Regression,
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
            Some((_, Some(TaskKind::Multilabel))) => Ok(Head::NodeLabels),
            Some((_, Some(TaskKind::Regression))) => Ok(Head::NodeValues),
            Some((other, None)) => Err(format!(
                "task '{other}' is not node, link, multilabel or regression"
            )),
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
    /// Multi-label classification or regression: the loss of rows of the model's output
    /// against rows of targets, missing ones (NaN) left out.
    Values {
        /// Rows of the model's output.
        rows: Arc<[usize]>,
        /// `[rows, T]` targets, row-major.
        targets: Arc<[f32]>,
        /// A weight per row (GraphSAINT's loss normalisation), or `None` for all ones.
        weights: Option<Arc<[f64]>>,
        /// The loss of one output against one target.
        loss: RowLoss,
        /// The present targets: the terms of the loss.
        terms: usize,
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
            Targets::Values {
                rows,
                targets,
                weights,
                loss,
                ..
            } => ops::row_target_loss(tape, out, rows, targets, weights, loss, normaliser)?,
        })
    }

    /// The labels' count: the terms of the loss.
    pub fn len(&self) -> usize {
        match self {
            Targets::Nodes { labels, .. } => labels.len(),
            Targets::Pairs { labels, .. } => labels.len(),
            Targets::Values { terms, .. } => *terms,
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
    /// Multi-label classification or regression over rows of targets.
    Values(ValueTask<'a>),
}

impl<'a> Task<'a> {
    /// Fails unless a model of `cfg` has the head this task needs, and link prediction has
    /// supervision pairs to train on.
    pub fn check(&self, cfg: &ModelConfig) -> Result<()> {
        match (self, cfg.head) {
            (Task::Link(t), Head::Link(_))
                if t.split.pairs(graphloom_graph::LinkSet::TrainPos).is_empty() =>
            {
                Err(Error::NoSupervisionPairs)
            }
            (Task::Values(t), _) => t.check(cfg),
            (Task::Node, Head::NodeClasses) | (Task::Link(_), Head::Link(_)) => Ok(()),
            (Task::Node, _) => Err(Error::Mismatch {
                what: "the task and the model's head",
                detail: format!(
                    "node classification needs a model that outputs classes, not {:?}",
                    cfg.head
                ),
            }),
            (Task::Link(_), _) => Err(Error::Mismatch {
                what: "the task and the model's head",
                detail: "link prediction needs a model with a link decoder".into(),
            }),
        }
    }

    /// The batches of epoch `epoch` for worker `rank` of `ranks`: each step's items of this
    /// worker (training nodes `train`, or indices of supervision pairs), drawn in an order
    /// keyed by (`seed`, `epoch`) and cut into global batches of `batch_size`. `None` takes
    /// every item in one step: node classification's in their order (full batch's one step),
    /// link prediction's drawn as with a size.
    pub fn epoch(
        &self,
        train: &[usize],
        seed: u64,
        epoch: u64,
        batch_size: Option<usize>,
        rank: usize,
        ranks: usize,
    ) -> EpochBatches {
        // Nodes' terms: 1 a node for its class, or its present targets.
        let terms = |nodes: &mut dyn ExactSizeIterator<Item = usize>| match self {
            Task::Values(t) => t.present(nodes),
            _ => nodes.len(),
        };
        match self {
            Task::Node | Task::Values(_) => {
                let Some(size) = batch_size else {
                    return EpochBatches {
                        mine: vec![train.to_vec()],
                        weights: vec![terms(&mut train.iter().copied())],
                        global: Vec::new(),
                    };
                };
                let to_usize = |b: Vec<NodeId>| b.into_iter().map(|v| v as usize).collect();
                let mine = epoch_batches(train, seed, epoch, size, rank, ranks);
                let all = epoch_batches(train, seed, epoch, size, 0, 1);
                EpochBatches {
                    mine: mine.into_iter().map(to_usize).collect(),
                    weights: all
                        .iter()
                        .map(|b| terms(&mut b.iter().map(|&v| v as usize)))
                        .collect(),
                    global: Vec::new(),
                }
            }
            Task::Link(task) => {
                // `Task::check` refused a split without supervision pairs.
                let pairs = task.split.pairs(LinkSet::TrainPos).len();
                let size = batch_size.unwrap_or(pairs);
                let (mine, sizes) = pair_batches(pairs, seed, epoch, size, rank, ranks);
                let global = match task.exclude_supervision {
                    true => pair_batches(pairs, seed, epoch, size, 0, 1).0,
                    false => Vec::new(),
                };
                let scored = 1 + task.neg_ratio;
                let weights = sizes.into_iter().map(|n| n * scored).collect();
                EpochBatches {
                    mine,
                    weights,
                    global,
                }
            }
        }
    }

    /// What step `step` of `batches` trains on: its training nodes, or its supervision pairs
    /// with their negatives (drawn among `num_nodes`, keyed by `seed` and `epoch`) and, when
    /// the task hides them, the global batch's positives.
    pub fn batch(
        &self,
        batches: &EpochBatches,
        step: usize,
        num_nodes: usize,
        seed: u64,
        epoch: u64,
    ) -> TaskBatch<'a> {
        let items = &batches.mine[step];
        let nodes = || items.iter().map(|&v| v as NodeId).collect();
        match self {
            Task::Node => TaskBatch::Nodes(nodes()),
            Task::Values(task) => TaskBatch::Values {
                nodes: nodes(),
                task: *task,
            },
            Task::Link(task) => TaskBatch::Pairs {
                batch: PairBatch::new(task, items, num_nodes, seed, epoch),
                hidden: batches
                    .global
                    .get(step)
                    .map(|global| supervision_pairs(task.split, global)),
            },
        }
    }

    /// What the model measures with parameters `params`, evaluated through `source`:
    /// node classification's accuracies from the splits' correct predictions, link
    /// prediction's metrics from every node's output rows.
    pub fn evaluate(
        &self,
        params: &[Tensor],
        source: &mut impl EvaluationSource,
    ) -> Result<Evaluation> {
        Ok(match self {
            Task::Node => Evaluation::Node(source.split_counts(params)?.accuracy()),
            Task::Link(task) => {
                let h = source.embeddings(params)?;
                Evaluation::Link(link::evaluate(source.model(), &h, params, task)?)
            }
            Task::Values(task) => Evaluation::Values(task.evaluate(&source.embeddings(params)?)?),
        })
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
            Task::Values(t) => t.describe(),
        }
    }
}

/// What a workload computes for a task's evaluation ([`Task::evaluate`]), each with
/// parameters `params` and dropout off, over the job's workers.
pub trait EvaluationSource {
    /// The model evaluated.
    fn model(&self) -> &Model;
    /// Correct predictions on the three splits.
    fn split_counts(&mut self, params: &[Tensor]) -> Result<SplitCounts>;
    /// Every node's output rows (the last layer's, before any head).
    fn embeddings(&mut self, params: &[Tensor]) -> Result<Tensor>;
}

/// The batches of an epoch as [`Task::epoch`] draws them for one worker.
pub struct EpochBatches {
    /// Each step's items of this worker: node ids, or indices of supervision pairs.
    pub mine: Vec<Vec<usize>>,
    /// Each step's weight over every worker (its loss's normaliser): the nodes, or the pairs
    /// with their negatives, of its global batch.
    pub weights: Vec<usize>,
    /// Link prediction hiding supervision edges: each global batch's pair indices.
    pub global: Vec<Vec<usize>>,
}

impl EpochBatches {
    /// Keeps the first `steps` steps.
    pub fn truncate(&mut self, steps: usize) {
        self.mine.truncate(steps);
        self.weights.truncate(steps);
        self.global.truncate(steps);
    }
}

/// What one step trains on, as [`Task::batch`] makes it.
pub enum TaskBatch<'a> {
    /// Training nodes.
    Nodes(Vec<NodeId>),
    /// Training nodes of a multi-label or regression task.
    Values {
        /// The nodes.
        nodes: Vec<NodeId>,
        /// Their task, which holds their targets.
        task: ValueTask<'a>,
    },
    /// Supervision pairs and their negatives.
    Pairs {
        /// The pairs and their labels.
        batch: PairBatch,
        /// The edges to hide from a sampled batch's blocks (the global batch's positives),
        /// when the task hides them.
        hidden: Option<Vec<(NodeId, NodeId)>>,
    },
}

impl TaskBatch<'_> {
    /// The nodes whose output rows the step needs: the training nodes, or every end of the
    /// pairs (sorted, once each). A sampled batch's seeds.
    pub fn nodes(&self) -> Vec<NodeId> {
        match self {
            TaskBatch::Nodes(nodes) | TaskBatch::Values { nodes, .. } => nodes.clone(),
            TaskBatch::Pairs { batch, .. } => batch.nodes(),
        }
    }

    /// The edges to hide from a sampled batch's blocks, when the task hides them.
    pub fn hidden(&self) -> Option<&[(NodeId, NodeId)]> {
        match self {
            TaskBatch::Pairs {
                hidden: Some(hidden),
                ..
            } => Some(hidden),
            _ => None,
        }
    }

    /// The step's targets over output rows whose nodes are `rows` (a sampled batch's seeds,
    /// first in its output), the nodes' classes read from `labels`.
    pub fn targets_of_rows(&self, rows: &[NodeId], labels: &[i64]) -> Targets {
        match self {
            TaskBatch::Nodes(_) => {
                Targets::first_rows(rows.iter().map(|&v| labels[v as usize]).collect())
            }
            TaskBatch::Values { nodes, task } => {
                // A node batch's seeds are its nodes, in order.
                let nodes: Vec<usize> = nodes.iter().map(|&v| v as usize).collect();
                task.targets_of(&nodes, (0..nodes.len()).collect(), None)
            }
            TaskBatch::Pairs { batch, .. } => {
                let (src, dst) = batch.rows_of(rows);
                Targets::Pairs {
                    src,
                    dst,
                    labels: batch.labels.clone(),
                }
            }
        }
    }

    /// The step's targets over an output of one row per node of the graph (full batch).
    pub fn targets_of_graph(&self, labels: &[i64]) -> Targets {
        match self {
            TaskBatch::Nodes(nodes) => Targets::Nodes {
                rows: nodes.iter().map(|&v| v as usize).collect(),
                labels: nodes.iter().map(|&v| labels[v as usize]).collect(),
                weights: None,
            },
            TaskBatch::Values { nodes, task } => {
                let nodes: Vec<usize> = nodes.iter().map(|&v| v as usize).collect();
                task.targets_of(&nodes, nodes.clone().into(), None)
            }
            TaskBatch::Pairs { batch, .. } => Targets::Pairs {
                src: batch.src.iter().map(|&v| v as usize).collect(),
                dst: batch.dst.iter().map(|&v| v as usize).collect(),
                labels: batch.labels.clone(),
            },
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
            Head::NodeLabels,
            Head::NodeValues,
            Head::Link(Decoder::Dot),
            Head::Link(Decoder::Mlp),
        ] {
            let decoder = match head {
                Head::Link(d) => Some(d.name()),
                _ => None,
            };
            let task = TaskKind::of(head).name();
            assert_eq!(TaskKind::head(Some(task), decoder), Ok(head));
        }
        assert_eq!(TaskKind::head(None, None), Ok(Head::NodeClasses));
        for (task, decoder, error) in [
            (
                "edge",
                None,
                "task 'edge' is not node, link, multilabel or regression",
            ),
            ("link", None, "task 'link' names no decoder"),
            ("link", Some("cosine"), "decoder 'cosine' is not dot or mlp"),
        ] {
            assert_eq!(TaskKind::head(Some(task), decoder), Err(error.into()));
        }
    }
}
