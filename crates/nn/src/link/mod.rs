//! Link prediction: what a workload needs to train and evaluate a model whose head scores
//! pairs of nodes ([`crate::Head::Link`]) over a dataset's [`LinkSplit`].
//!
//! - Each epoch puts the supervision pairs (`train_pos.npy`) in an order drawn from (seed,
//!   epoch) and cuts it into global batches, each into one contiguous slice per worker
//!   ([`pair_batches`]), as node classification does with its training nodes.
//! - Every positive gets `neg_ratio` negatives that keep its source and take a destination
//!   drawn uniformly from (seed, epoch, the positive's index, r) ([`negatives`]), so any
//!   thread or worker count draws the same ones.
//! - The loss is the binary cross-entropy of the scores of a batch's positives (label 1) and
//!   negatives (label 0), divided by the global number of pairs of the step.
//! - Evaluation scores the held-out positives, their negatives and each positive's negative
//!   destinations from every node's encoder output ([`evaluate`]), with OGB's metrics.

pub mod metrics;

use std::collections::HashMap;
use std::sync::Arc;

use graphloom_graph::sample::Block;
use graphloom_graph::{LinkSet, LinkSplit, NodeId};
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{Tape, Tensor, Var};

use crate::model::Model;
use crate::Result;
use metrics::{LinkEvaluation, LinkMetric, LinkMetrics};

/// Link prediction's weight decay unless told otherwise: none, as PyG's and OGB's link
/// examples train (weight decay on node embeddings that a dot product compares lowers
/// Cora's test AUC from about 0.92 to 0.80).
pub const WEIGHT_DECAY: f64 = 0.0;

/// The purpose of the draws that order an epoch's supervision pairs.
const ORDER_PURPOSE: u64 = 0x4c49_4e4b;
/// The purpose of the negative destinations' draws.
const NEGATIVE_PURPOSE: u64 = 0x4e45_4741;

/// What a workload trains for besides the model: the link split and how negatives are drawn
/// and models selected.
#[derive(Clone, Copy)]
pub struct LinkTask<'a> {
    /// The split: supervision pairs, held-out pairs and their negatives.
    pub split: &'a LinkSplit,
    /// Negatives drawn per positive in training.
    pub neg_ratio: usize,
    /// The validation metric model selection maximises.
    pub metric: LinkMetric,
    /// Hide each batch's own positive edges (both directions) from its sampled blocks, so the
    /// model cannot read the answer off the graph.
    pub exclude_supervision: bool,
}

/// The supervision pairs of each step of an epoch for worker `rank` of `ranks`, as indices
/// into `train_pos.npy`: their order drawn from (seed, epoch), cut into global batches of
/// `batch_size`, each into `ranks` contiguous slices. Also each global batch's size.
pub fn pair_batches(
    pairs: usize,
    seed: u64,
    epoch: u64,
    batch_size: usize,
    rank: usize,
    ranks: usize,
) -> (Vec<Vec<usize>>, Vec<usize>) {
    let key = RngKey::new(seed, epoch, ORDER_PURPOSE);
    let mut order: Vec<(u64, usize)> = (0..pairs).map(|i| (key.bits(i as u64, 0), i)).collect();
    order.sort_unstable();
    let order: Vec<usize> = order.into_iter().map(|(_, i)| i).collect();
    let global = order.chunks(batch_size.max(1));
    let sizes = global.clone().map(<[usize]>::len).collect();
    let slices = global
        .map(|g| crate::batches::rank_slice(g, rank, ranks).to_vec())
        .collect();
    (slices, sizes)
}

/// The negatives of the positives `(src[i], _)` whose indices in `train_pos.npy` are
/// `index[i]`: `ratio` per positive, each keeping its source, with a destination drawn
/// uniformly among `num_nodes` from (seed, epoch, index, r). As `(src, dst)`, positive by
/// positive.
pub fn negatives(
    src: &[NodeId],
    index: &[usize],
    num_nodes: usize,
    ratio: usize,
    seed: u64,
    epoch: u64,
) -> (Vec<NodeId>, Vec<NodeId>) {
    let key = RngKey::new(seed, epoch, NEGATIVE_PURPOSE);
    let n = num_nodes.max(1) as u64;
    let mut out = (Vec::new(), Vec::new());
    for (&u, &i) in src.iter().zip(index) {
        for r in 0..ratio {
            out.0.push(u);
            out.1.push((key.bits(i as u64, r as u64) % n) as NodeId);
        }
    }
    out
}

/// One step's pairs, scored by label: positives then negatives.
pub struct PairBatch {
    /// Sources of the pairs.
    pub src: Vec<NodeId>,
    /// Destinations of the pairs.
    pub dst: Vec<NodeId>,
    /// 1 for a positive, 0 for a negative.
    pub labels: Arc<[f64]>,
}

impl PairBatch {
    /// The pairs of the supervision pairs `index` (into `train_pos.npy`) and their negatives.
    pub fn new(
        task: &LinkTask<'_>,
        index: &[usize],
        num_nodes: usize,
        seed: u64,
        epoch: u64,
    ) -> PairBatch {
        let (src, dst) = supervision_pairs(task.split, index).into_iter().unzip();
        PairBatch::of_positives(src, dst, index, num_nodes, task.neg_ratio, seed, epoch)
    }

    /// The positives `(src[i], dst[i])`, whose indices in their list of supervision pairs are
    /// `index[i]`, and `ratio` negatives per positive ([`negatives`]).
    pub fn of_positives(
        mut src: Vec<NodeId>,
        mut dst: Vec<NodeId>,
        index: &[usize],
        num_nodes: usize,
        ratio: usize,
        seed: u64,
        epoch: u64,
    ) -> PairBatch {
        let (ns, nd) = negatives(&src, index, num_nodes, ratio, seed, epoch);
        let labels = std::iter::repeat_n(1.0, src.len())
            .chain(std::iter::repeat_n(0.0, ns.len()))
            .collect();
        src.extend(ns);
        dst.extend(nd);
        PairBatch { src, dst, labels }
    }

    /// The distinct nodes of the pairs, sorted: a sampled batch's seeds.
    pub fn nodes(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = self.src.iter().chain(&self.dst).copied().collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// The pairs as indices into `rows` (the node of each row, every pair's ends among them).
    pub fn rows_of(&self, rows: &[NodeId]) -> (Arc<[usize]>, Arc<[usize]>) {
        let position: HashMap<NodeId, usize> =
            rows.iter().enumerate().map(|(i, &v)| (v, i)).collect();
        let map = |ends: &[NodeId]| ends.iter().map(|v| position[v]).collect();
        (map(&self.src), map(&self.dst))
    }
}

/// The supervision pairs `index` (indices into `train_pos.npy`).
pub fn supervision_pairs(split: &LinkSplit, index: &[usize]) -> Vec<(NodeId, NodeId)> {
    let pos = split.pairs(LinkSet::TrainPos);
    index.iter().map(|&i| pos.get(i)).collect()
}

/// Removes the edges `pairs`, in both directions, from `blocks`: a step hides the positives of
/// its whole global batch (not only of a worker's slice of it), so any worker count samples
/// the same blocks.
pub fn exclude_pairs(blocks: &mut [Block], pairs: &[(NodeId, NodeId)]) {
    let hidden: std::collections::HashSet<(NodeId, NodeId)> =
        pairs.iter().flat_map(|&(u, v)| [(u, v), (v, u)]).collect();
    for block in blocks {
        block.retain_edges(|u, v| !hidden.contains(&(u, v)));
    }
}

/// Pairs scored per pass of evaluation, so the pairs' products stay small.
const EVAL_CHUNK: usize = 1 << 16;

/// The scores of pairs `(src[i], dst[i])` (node ids, which are rows of `h`: every node's
/// encoder output) by `model`'s decoder with `params`, in chunks.
pub fn score(
    model: &Model,
    h: &Tensor,
    params: &[Tensor],
    src: &[i64],
    dst: &[i64],
) -> Result<Vec<f64>> {
    let vars: Vec<Var> = params.iter().map(|v| Var::constant(v.clone())).collect();
    let h = Var::constant(h.clone());
    let mut out = Vec::with_capacity(src.len());
    for (s, d) in src.chunks(EVAL_CHUNK).zip(dst.chunks(EVAL_CHUNK)) {
        let mut tape = Tape::no_grad();
        let s: Arc<[usize]> = s.iter().map(|&v| v as usize).collect();
        let d: Arc<[usize]> = d.iter().map(|&v| v as usize).collect();
        out.extend(
            model
                .link_scores(&mut tape, &h, &vars, s, d)?
                .value()
                .to_vec_f64(),
        );
    }
    Ok(out)
}

/// The metrics of the validation and test splits from `h`, every node's encoder output.
pub fn evaluate(
    model: &Model,
    h: &Tensor,
    params: &[Tensor],
    task: &LinkTask<'_>,
) -> Result<LinkEvaluation> {
    let split = task.split;
    let metrics = |pos: LinkSet, neg: LinkSet, test: bool| -> Result<LinkMetrics> {
        let (p, q) = (split.pairs(pos), split.pairs(neg));
        let pos_scores = score(model, h, params, p.src(), p.dst())?;
        let neg_scores = score(model, h, params, q.src(), q.dst())?;
        let per_positive = match split.neg_dst(test) {
            Some(neg_dst) => {
                let k = neg_dst.per_positive();
                let src: Vec<i64> = p
                    .src()
                    .iter()
                    .flat_map(|&u| std::iter::repeat_n(u, k))
                    .collect();
                let dst: Vec<i64> = (0..p.len())
                    .flat_map(|i| neg_dst.of(i).iter().copied())
                    .collect();
                let s = score(model, h, params, &src, &dst)?;
                Some(s.chunks(k.max(1)).map(<[f64]>::to_vec).collect::<Vec<_>>())
            }
            None => None,
        };
        Ok(LinkMetrics::of(
            &pos_scores,
            &neg_scores,
            per_positive.as_deref(),
        ))
    };
    Ok(LinkEvaluation {
        valid: metrics(LinkSet::ValidPos, LinkSet::ValidNeg, false)?,
        test: metrics(LinkSet::TestPos, LinkSet::TestNeg, true)?,
        metric: task.metric,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_split_each_global_batch_of_pairs_and_negatives_are_keyed() {
        let (one, sizes) = pair_batches(103, 4, 2, 10, 0, 1);
        assert_eq!(sizes.len(), 11);
        for ranks in [2, 3] {
            let parts: Vec<_> = (0..ranks)
                .map(|r| pair_batches(103, 4, 2, 10, r, ranks).0)
                .collect();
            for (step, batch) in one.iter().enumerate() {
                let joined: Vec<usize> = parts.iter().flat_map(|p| p[step].clone()).collect();
                assert_eq!(&joined, batch);
            }
        }
        // A positive draws the same negatives wherever it is.
        let (a, b) = (
            negatives(&[1, 2], &[7, 9], 50, 3, 1, 1),
            negatives(&[2], &[9], 50, 3, 1, 1),
        );
        assert_eq!(&a.1[3..], &b.1[..]);
        assert!(a.1.iter().all(|&v| v < 50));
    }
}
