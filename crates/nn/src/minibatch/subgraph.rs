//! Subgraph mini-batches in the [`MiniBatch`] workload: Cluster-GCN (a batch is the subgraph
//! induced by a few METIS clusters) and GraphSAINT (the subgraph induced by a node, edge or
//! random-walk sample). A batch is a small whole graph: the model computes on it what it would
//! compute on a whole graph, GCN normalised by the batch's own degrees. Only the outputs of
//! the batch's training nodes are needed, so a step runs the full-neighbour blocks around them
//! within the subgraph ([`batch_blocks`]), with the whole subgraph's normalisation and edge
//! weights: the same outputs, without the nodes beyond their reach. The loss is over the batch's training nodes: their mean, or with
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
//!
//! Data parallel over several workers, every worker draws the same batch and takes the blocks
//! of a slice of its training nodes; the loss is normalised by the whole batch and the
//! gradients summed, so the workers take the steps of one worker.

use std::sync::Arc;
use std::time::Instant;

use graphloom_graph::format::edge_features::gather_edge_rows;
use graphloom_graph::sample::{CsrSource, Sampler, SamplerKind};
use graphloom_graph::subgraph::batching::{BatchDraw, SubgraphBatching};
use graphloom_graph::subgraph::saint::SaintNorm;
use graphloom_graph::subgraph::{InducedSubgraph, NodeSet};
use graphloom_graph::{GraphData, NodeId};
use graphloom_store::RowSource;
use graphloom_tensor::Tensor;

use super::MiniBatch;
use crate::batches::{rank_slice, BatchStream};
use crate::kernels::aggregate::GcnNorm;
use crate::layers::Aggregation;
use crate::model::{Architecture, GraphInput, LayerGraph};
use crate::task::{Targets, Task};
use crate::train::{EpochLoss, Steps};
use crate::GraphView;
use crate::Result;

/// GraphSAINT's `edge_norm` of each edge of `sub`, in its CSR order.
fn edge_weights(sub: &InducedSubgraph, norm: Option<&SaintNorm>) -> Option<Vec<f32>> {
    let norm = norm?;
    let mut w = Vec::with_capacity(sub.edge_ids.len());
    for (p, &v) in sub.nodes.iter().enumerate() {
        for i in sub.csr.row_ptr[p] as usize..sub.csr.row_ptr[p + 1] as usize {
            w.push(norm.edge_norm(sub.edge_ids[i] as usize, v) as f32);
        }
    }
    Some(w)
}

/// The full-neighbour blocks of `layers` layers around the batch positions `rows` within the
/// subgraph `sub` (drawn with `sampler`, which takes every neighbour), each with GraphSAINT's
/// edge weights when `norm` is given and, for GCN, the normalisation of the whole subgraph, so
/// that the blocks' outputs (for `rows`, in that order) are the whole subgraph's. The rows are
/// keyed by their node ids, so dropout draws each node's own mask. `edge_features`, a row per
/// edge of `sub` in its order, give each block its edges' rows (GINE's). Returns the blocks
/// with the node id of each input row.
pub fn batch_blocks(
    arch: Architecture,
    layers: usize,
    sub: &InducedSubgraph,
    norm: Option<&SaintNorm>,
    rows: &[usize],
    sampler: &mut Sampler,
    edge_features: Option<&Tensor>,
) -> Result<(Vec<LayerGraph>, Vec<i64>)> {
    let seeds: Vec<NodeId> = rows.iter().map(|&p| p as NodeId).collect();
    let all = vec![-1; layers];
    let source = CsrSource::new(&sub.csr);
    let blocks = sampler.sample(&source, &seeds, &all, SamplerKind::Uniform, 0, 0)?;
    let weights = edge_weights(sub, norm);
    let gcn_norm: Option<GcnNorm> = (arch.aggregation() == Aggregation::Gcn).then(|| {
        (0..sub.nodes.len())
            .map(|p| {
                let (lo, hi) = (sub.csr.row_ptr[p] as usize, sub.csr.row_ptr[p + 1] as usize);
                let degree = match &weights {
                    Some(w) => w[lo..hi].iter().map(|&x| f64::from(x)).sum(),
                    None => (hi - lo) as f64,
                };
                GcnNorm::of(degree, sub.csr.col_idx[lo..hi].contains(&(p as NodeId)))
            })
            .collect()
    });
    let self_loops = arch.aggregation().needs_self_loops();
    let mut graphs = Vec::with_capacity(blocks.len());
    for block in &blocks {
        let csr = block.to_csr();
        let mut view = GraphView::new(&csr, false);
        if let Some(w) = &weights {
            let own: Vec<f32> = block.edge_ids.iter().map(|&e| w[e as usize]).collect();
            view = view.with_edge_weight(own.into())?;
        }
        let own = match edge_features {
            Some(f) => Some(gather_edge_rows(f, &block.edge_ids, f.dtype())?),
            None => None,
        };
        let looped = match self_loops {
            true => Some(Arc::new(GraphView::looped(&csr, own.as_ref())?)),
            false => None,
        };
        if let Some(own) = own {
            view = view.with_edge_features(Arc::new(own))?;
        }
        let positions: Vec<usize> = block.src_nodes.iter().map(|&p| p as usize).collect();
        graphs.push(LayerGraph {
            view: Arc::new(view),
            looped,
            num_dst: block.num_dst,
            src_ids: positions.iter().map(|&p| i64::from(sub.nodes[p])).collect(),
            gcn_norm: gcn_norm.as_ref().map(|n| Arc::new(n.select(&positions))),
        });
    }
    let ids = graphs.first().map_or_else(Vec::new, |g| g.src_ids.to_vec());
    Ok((graphs, ids))
}

/// One prepared subgraph batch.
pub(super) struct SubgraphBatch {
    /// The node id of each row.
    ids: Vec<i64>,
    /// The blocks of this worker's training nodes.
    graphs: Vec<LayerGraph>,
    /// The input rows, when gathered from a feature table.
    x: Option<Tensor>,
    /// The loss's terms: the rows of the batch's training nodes, with their labels or targets
    /// and loss weights.
    targets: Targets,
    /// What the loss's sum is divided by.
    normaliser: f64,
    /// The loss's terms of the batch over every worker (its training nodes, or their present
    /// targets): its weight in the epoch's loss.
    global_terms: usize,
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
    /// What the model trains for.
    task: Task<'d>,
    /// The loss's terms over every training node (GraphSAINT's normaliser).
    train_terms: usize,
    arch: Architecture,
    layers: usize,
    dtype: graphloom_tensor::DType,
    seed: u64,
    epoch: u64,
    /// This worker's rank, of `ranks`.
    rank: usize,
    ranks: usize,
}

impl Preparer<'_> {
    /// Draws, induces and gathers batch `draw`, with its loss terms over every worker (its
    /// training nodes, or their present targets; `None`: it holds no training node, so there is
    /// nothing to learn from it; a batch of `None`: this worker's slice of them is empty).
    fn prepare(
        &self,
        set: &mut NodeSet,
        sampler: &mut Sampler,
        draw: &BatchDraw,
    ) -> Result<Option<(usize, Option<SubgraphBatch>)>> {
        let start = Instant::now();
        let nodes = self
            .batching
            .nodes(self.data, draw, self.seed, self.epoch)?;
        let all_rows: Vec<usize> = nodes
            .iter()
            .enumerate()
            .filter(|&(_, &v)| self.train[v as usize])
            .map(|(p, _)| p)
            .collect();
        if all_rows.is_empty() {
            return Ok(None);
        }
        // The batch's terms over every worker: its training nodes, or their present targets.
        let node_of = |&p: &usize| nodes[p] as usize;
        let global_terms = match self.task {
            Task::Values(task) => task.present(all_rows.iter().map(node_of)),
            _ => all_rows.len(),
        };
        let mine = rank_slice(&all_rows, self.rank, self.ranks);
        if mine.is_empty() {
            // A distributed table's gather is collective: take part with no rows.
            if let Some(f) = self.features.filter(|f| f.collective()) {
                f.gather(&[])?;
            }
            return Ok(Some((global_terms, None)));
        }
        let sub = set.members(&nodes).induced(self.data);
        let norm = self.batching.norm();
        // GINE's edge rows, those of the subgraph's edges in its order.
        let edge_features = match self.data.edge_features {
            Some(all) if self.arch.reads_edge_features() => {
                Some(gather_edge_rows(all, &sub.edge_ids, self.dtype)?)
            }
            _ => None,
        };
        let (graphs, ids) = batch_blocks(
            self.arch,
            self.layers,
            &sub,
            norm,
            mine,
            sampler,
            edge_features.as_ref(),
        )?;
        // The blocks' outputs are this worker's training nodes, in order.
        let rows: Arc<[usize]> = (0..mine.len()).collect();
        let sampled = Instant::now();
        let x = match self.features {
            Some(f) => Some(f.gather(&ids)?.cast(self.dtype)?),
            None => None,
        };
        let weights = norm.map(|n| mine.iter().map(|&p| n.node_norm(nodes[p])).collect());
        let targets = match self.task {
            Task::Values(task) => {
                let mine: Vec<usize> = mine.iter().map(node_of).collect();
                task.targets_of(&mine, rows, weights)
            }
            _ => Targets::Nodes {
                rows,
                labels: mine.iter().map(|p| self.data.labels[node_of(p)]).collect(),
                weights,
            },
        };
        let normaliser = match norm {
            Some(_) => self.train_terms as f64 / self.data.num_nodes() as f64,
            None => global_terms as f64,
        };
        Ok(Some((
            global_terms,
            Some(SubgraphBatch {
                ids,
                graphs,
                x,
                targets,
                normaliser,
                global_terms,
                sample_seconds: (sampled - start).as_secs_f64(),
                gather_seconds: sampled.elapsed().as_secs_f64(),
            }),
        )))
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
            task: self.task,
            train_terms: match self.task {
                Task::Values(task) => task.present(self.data.train_idx.iter().copied()),
                _ => self.data.train_idx.len(),
            },
            arch: self.model.cfg.arch,
            layers: self.model.cfg.layers,
            dtype: self.model.cfg.dtype,
            seed: self.seed,
            epoch,
            rank: self.comm.rank(),
            ranks: self.comm.size(),
        };
        let loss = std::thread::scope(|scope| -> Result<EpochLoss> {
            let make =
                |sampler: &mut Sampler, i: usize| preparer.prepare(&mut set, sampler, &draws[i]);
            let stream = BatchStream::scoped(scope, settings, make)?;
            self.run_stream(
                stream,
                draws.len(),
                steps,
                |this, steps, batch, _| match batch {
                    Some((global, Some(b))) => {
                        this.subgraph_step(b, steps).map(|l| Some((l, global)))
                    }
                    // This worker's slice is empty: it still takes part in the step.
                    Some((global, None)) => this.step(None, 0, steps).map(|_| Some((0.0, global))),
                    None => Ok(None),
                },
            )
        })?;
        state.set = Some(set);
        loss.mean_over(self.comm.as_ref())
    }

    /// The step of one subgraph batch; returns this worker's share of its loss times the
    /// batch's terms over every worker.
    fn subgraph_step(&mut self, batch: SubgraphBatch, steps: &mut Steps<'_>) -> Result<f64> {
        self.stages.sample += batch.sample_seconds;
        self.stages.gather += batch.gather_seconds;
        let SubgraphBatch {
            ids,
            graphs,
            x,
            targets,
            normaliser,
            global_terms,
            ..
        } = batch;
        let input = GraphInput::Blocks(&graphs);
        let loss = self.run_step(x, &ids, input, steps, targets, normaliser)?;
        Ok(loss * global_terms as f64)
    }
}
