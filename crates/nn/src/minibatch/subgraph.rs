//! Subgraph mini-batches in the [`MiniBatch`] workload: Cluster-GCN (a batch is the subgraph
//! induced by a few METIS clusters) and GraphSAINT (the subgraph induced by a node, edge or
//! random-walk sample). A batch is a small whole graph: the model runs on it with its own
//! operators ([`GraphInput::Nodes`]), every layer over the same nodes, GCN normalised by the
//! batch's own degrees. The loss is over the batch's training nodes: their mean, or with
//! GraphSAINT's normalisation the sum of their losses weighted by `node_norm` (PyG's
//! `M / (C_v N)`) and scaled by `N / N_train`, so that it estimates the mean loss over the
//! training nodes (the paper's loss, over its graph of training nodes) as the other losses are
//! means and weight decay keeps its weight beside it; each edge is weighted by `edge_norm` in
//! the aggregation (GCN's and GraphSAGE's degrees are then the sums
//! of those weights, which estimate the whole graph's; GAT's attention takes no edge weights).
//!
//! The producer of the batch stream draws each batch's nodes, induces its subgraph, gathers
//! its input rows and builds its operators while the compute runs the step before.
//! Evaluation is the workload's own (exact inference over the whole graph, or sampled).

use std::sync::Arc;
use std::time::Instant;

use graphloom_comm::{ReduceData, ReduceOp};
use graphloom_graph::sample::Sampler;
use graphloom_graph::subgraph::clusters::Clusters;
use graphloom_graph::subgraph::saint::{Saint, SaintNorm};
use graphloom_graph::subgraph::{InducedSubgraph, NodeSet};
use graphloom_graph::{GraphData, NodeId};
use graphloom_store::RowSource;
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::Tensor;

use super::MiniBatch;
use crate::batches::BatchStream;
use crate::model::{Architecture, GraphInput, Model, NodeGraph};
use crate::train::Steps;
use crate::{Error, Result};

/// How the nodes of subgraph batches are drawn.
#[derive(Clone, Debug)]
pub enum SubgraphBatching {
    /// Cluster-GCN: an epoch takes every cluster once, in an order drawn from (seed, epoch),
    /// `per_batch` clusters per batch (PyG's `ClusterLoader` with `shuffle=True`).
    Cluster {
        /// The clusters.
        clusters: Arc<Clusters>,
        /// Clusters per batch.
        per_batch: usize,
    },
    /// GraphSAINT: `steps` samples per epoch, each keyed by (seed, epoch, step).
    Saint {
        /// The sampler.
        saint: Arc<Saint>,
        /// The normalisation (`None`: a plain mean loss and unweighted aggregation, as PyG
        /// trains with `sample_coverage=0`).
        norm: Option<Arc<SaintNorm>>,
        /// Samples per epoch.
        steps: usize,
    },
}

impl SubgraphBatching {
    /// The batching, in words (for the snapshot check and reports).
    pub fn describe(&self) -> String {
        match self {
            SubgraphBatching::Cluster {
                clusters,
                per_batch,
            } => format!(
                "Cluster-GCN batches of {per_batch} of {} clusters",
                clusters.count()
            ),
            SubgraphBatching::Saint { saint, norm, steps } => format!(
                "{}, {steps} per epoch, {}",
                saint.sampler().describe(),
                match norm {
                    Some(n) => format!("normalised from {} samples", n.samples()),
                    None => "not normalised".into(),
                }
            ),
        }
    }

    /// The batches of epoch `epoch`: for each, what draws its nodes.
    pub fn epoch(&self, seed: u64, epoch: u64) -> Vec<BatchDraw> {
        match self {
            SubgraphBatching::Cluster {
                clusters,
                per_batch,
            } => clusters
                .epoch_groups(*per_batch, seed, epoch)
                .into_iter()
                .map(BatchDraw::Clusters)
                .collect(),
            SubgraphBatching::Saint { steps, .. } => {
                (0..*steps as u64).map(BatchDraw::Sample).collect()
            }
        }
    }

    /// The nodes of the batch `draw` of `epoch`, in increasing order.
    pub fn nodes(
        &self,
        data: GraphData<'_>,
        draw: &BatchDraw,
        seed: u64,
        epoch: u64,
    ) -> Vec<NodeId> {
        match (self, draw) {
            (SubgraphBatching::Cluster { clusters, .. }, BatchDraw::Clusters(group)) => {
                clusters.batch_nodes(group)
            }
            (SubgraphBatching::Saint { saint, .. }, BatchDraw::Sample(index)) => {
                saint.sample(data, seed, epoch, *index)
            }
            _ => Vec::new(),
        }
    }

    /// The normalisation, when the batching has one.
    pub fn norm(&self) -> Option<&SaintNorm> {
        match self {
            SubgraphBatching::Saint { norm, .. } => norm.as_deref(),
            SubgraphBatching::Cluster { .. } => None,
        }
    }
}

/// What draws one batch's nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchDraw {
    /// These clusters.
    Clusters(Vec<usize>),
    /// The sample of this index.
    Sample(u64),
}

/// The operators a model of `arch` runs over the induced subgraph `sub` of `data`: its own
/// degrees, each edge weighted by GraphSAINT's `edge_norm` when `norm` is given; the rows keyed
/// by their node ids (so dropout draws each node's own mask, as over the whole graph).
pub fn batch_graph(
    arch: Architecture,
    sub: &InducedSubgraph,
    norm: Option<&SaintNorm>,
) -> Result<NodeGraph> {
    let weights: Option<Arc<[f32]>> = norm.map(|norm| {
        let mut w = Vec::with_capacity(sub.edge_ids.len());
        for (p, &v) in sub.nodes.iter().enumerate() {
            for i in sub.csr.row_ptr[p] as usize..sub.csr.row_ptr[p + 1] as usize {
                w.push(norm.edge_norm(sub.edge_ids[i] as usize, v) as f32);
            }
        }
        w.into()
    });
    let ids: Arc<[i64]> = sub.nodes.iter().map(|&v| i64::from(v)).collect();
    Ok(NodeGraph::in_memory(arch, &sub.csr, weights)?.with_row_ids(ids))
}

/// One prepared subgraph batch.
pub(super) struct SubgraphBatch {
    /// The node id of each row.
    ids: Vec<i64>,
    /// The batch's operators.
    graph: NodeGraph,
    /// The input rows, when gathered from a feature table.
    x: Option<Tensor>,
    /// The rows of the batch's training nodes, with their labels and loss weights.
    rows: Arc<[usize]>,
    labels: Arc<[i64]>,
    weights: Option<Arc<[f64]>>,
    /// What the loss's sum is divided by.
    normaliser: f64,
    sample_seconds: f64,
    gather_seconds: f64,
}

/// What a producer needs to prepare subgraph batches.
struct Preparer<'d> {
    data: GraphData<'d>,
    features: Option<&'d dyn RowSource>,
    batching: &'d SubgraphBatching,
    /// Whether each node is a training node.
    train: &'d [bool],
    arch: Architecture,
    dtype: graphloom_tensor::DType,
    seed: u64,
    epoch: u64,
}

impl Preparer<'_> {
    /// Draws, induces and gathers batch `draw` (`None`: it holds no training node, so there is
    /// nothing to learn from it).
    fn prepare(&self, set: &mut NodeSet, draw: &BatchDraw) -> Result<Option<SubgraphBatch>> {
        let start = Instant::now();
        let nodes = self.batching.nodes(self.data, draw, self.seed, self.epoch);
        let rows: Arc<[usize]> = nodes
            .iter()
            .enumerate()
            .filter(|&(_, &v)| self.train[v as usize])
            .map(|(p, _)| p)
            .collect();
        if rows.is_empty() {
            return Ok(None);
        }
        let sub = set.members(&nodes).induced(self.data);
        let sampled = Instant::now();
        let norm = self.batching.norm();
        let graph = batch_graph(self.arch, &sub, norm)?;
        let ids: Vec<i64> = nodes.iter().map(|&v| i64::from(v)).collect();
        let x = match self.features {
            Some(f) => Some(f.gather(&ids)?.cast(self.dtype)?),
            None => None,
        };
        let labels = rows
            .iter()
            .map(|&p| self.data.labels[nodes[p] as usize])
            .collect();
        let weights = norm.map(|n| rows.iter().map(|&p| n.node_norm(nodes[p])).collect());
        let normaliser = match norm {
            Some(_) => self.data.train_idx.len() as f64 / self.data.num_nodes() as f64,
            None => rows.len() as f64,
        };
        Ok(Some(SubgraphBatch {
            ids,
            graph,
            x,
            rows,
            labels,
            weights,
            normaliser,
            sample_seconds: (sampled - start).as_secs_f64(),
            gather_seconds: sampled.elapsed().as_secs_f64(),
        }))
    }
}

/// The subgraph batching's state in the workload: its node table (a slot per node, made once
/// and lent to each epoch's producer) and which nodes train.
pub(super) struct SubgraphState {
    batching: SubgraphBatching,
    set: Option<NodeSet>,
    train: Vec<bool>,
}

impl SubgraphState {
    /// The state of `batching` over `data`.
    pub(super) fn new(batching: SubgraphBatching, data: GraphData<'_>) -> SubgraphState {
        let mut train = vec![false; data.num_nodes()];
        for &v in data.train_idx {
            train[v] = true;
        }
        SubgraphState {
            batching,
            set: None,
            train,
        }
    }
}

impl MiniBatch<'_> {
    /// The steps of epoch `epoch` over subgraph batches; returns the epoch's loss (the mean of
    /// its batches' losses, each weighted by its training nodes).
    pub(super) fn train_subgraph_epoch(
        &mut self,
        state: &mut SubgraphState,
        epoch: u64,
        steps: &mut Steps<'_>,
    ) -> Result<f64> {
        if self.comm.size() > 1 {
            return Err(Error::InvalidSetting {
                setting: "workers",
                reason: "subgraph batches train on one worker".into(),
            });
        }
        let mut draws = state.batching.epoch(self.seed, epoch);
        draws.truncate(self.mb.batches_per_epoch.unwrap_or(usize::MAX));
        let settings = self.stream_settings(draws.len());
        let mut set = state
            .set
            .take()
            .unwrap_or_else(|| NodeSet::new(self.data.num_nodes()));
        let preparer = Preparer {
            data: self.data,
            features: self.inputs.features(),
            batching: &state.batching,
            train: &state.train,
            arch: self.model.cfg.arch,
            dtype: self.model.cfg.dtype,
            seed: self.seed,
            epoch,
        };
        let (mut loss_sum, mut seen) = (0.0, 0usize);
        std::thread::scope(|scope| -> Result<()> {
            let make = |_: &mut Sampler, i: usize| preparer.prepare(&mut set, &draws[i]);
            let mut stream = BatchStream::scoped(scope, settings, make)?;
            let total = draws.len();
            let mut result = Ok(());
            for done in 0..total {
                let Some(batch) = stream.next() else { break };
                let compute = Instant::now();
                let step = batch.and_then(|b| match b {
                    Some(b) => self.subgraph_step(b, steps).map(Some),
                    None => Ok(None),
                });
                match step {
                    Ok(Some((loss, rows))) => {
                        loss_sum += loss * rows as f64;
                        seen += rows;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
                self.stages.compute += compute.elapsed().as_secs_f64();
                if let Some(report) = &mut self.on_batch {
                    report(done + 1, total);
                }
            }
            self.sampler = Some(stream.finish()?);
            result
        })?;
        state.set = Some(set);
        let mut total = [loss_sum];
        self.comm
            .all_reduce(ReduceData::F64(&mut total), ReduceOp::Sum)?;
        Ok(total[0] / seen.max(1) as f64)
    }

    /// The step of one subgraph batch; returns its loss and its training nodes.
    fn subgraph_step(
        &mut self,
        batch: SubgraphBatch,
        steps: &mut Steps<'_>,
    ) -> Result<(f64, usize)> {
        self.stages.sample += batch.sample_seconds;
        self.stages.gather += batch.gather_seconds;
        let SubgraphBatch {
            ids,
            graph,
            x,
            rows,
            labels,
            weights,
            normaliser,
            ..
        } = batch;
        let count = rows.len();
        // Sparse features (bag-of-words) take the first layer's sparse product, as in a
        // whole-graph pass.
        let graph = match &x {
            Some(x) => graph.with_sparse_input(self.model.sparse_input(x)),
            None => graph,
        };
        let loss = self.run_step(
            x,
            &ids,
            GraphInput::Nodes(&graph),
            steps,
            |_, tape, out, _| {
                let logp = Model::log_probabilities(tape, out)?;
                Ok(match weights {
                    Some(w) => ops::weighted_nll_loss(tape, &logp, rows, labels, w, normaliser)?,
                    None => ops::nll_loss(tape, &logp, rows, labels, normaliser)?,
                })
            },
        )?;
        Ok((loss, count))
    }
}
