//! Link prediction: what a workload needs to train and evaluate a model whose head scores
//! pairs of nodes ([`crate::Head::Link`]) over a dataset's [`LinkSplit`].
//!
//! - Each epoch puts the supervision pairs (`train_pos.npy`) in an order drawn from (seed,
//!   epoch) and cuts it into global batches, each into one contiguous slice per worker
//!   ([`pair_batches`]), as node classification does with its training nodes.
//! - Every positive gets `neg_ratio` negatives ([`negatives`]): by default both ends drawn
//!   uniformly (PyG's binary negative sampling, [`NegativeSampling::Both`]), or its source kept
//!   and a destination drawn ([`NegativeSampling::Dst`]), each draw keyed by (seed, epoch, the
//!   positive's index, r), so any thread or worker count draws the same ones.
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

/// Link prediction's dropout unless told otherwise: none, as PyG's link example, OGB's
/// collab and citation2 examples and DGL's link examples train (a link predictor's embeddings
/// are compared pair by pair, and dropout on them adds noise to every score).
pub const DROPOUT: f64 = 0.0;

/// The purpose of the draws that order an epoch's supervision pairs.
const ORDER_PURPOSE: u64 = 0x4c49_4e4b;
/// The purpose of the negative destinations' draws.
const NEGATIVE_PURPOSE: u64 = 0x4e45_4741;
/// The purpose of the negative sources' draws ([`NegativeSampling::Both`]).
const NEGATIVE_SOURCE_PURPOSE: u64 = 0x4e53_5243;

/// Which ends of a pair a training negative draws.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NegativeSampling {
    /// Both ends drawn uniformly over the nodes (PyG's binary negative sampling). Every node
    /// is pushed down as either end, however the supervision pairs are oriented: a split
    /// that lists each undirected edge once (`u < v`) on a graph whose ids follow degree or
    /// age leaves many nodes on one side only, and keeping the source never scores them
    /// there (test AUC 0.59 against 0.93 on a heavy-tailed e-mail graph).
    #[default]
    Both,
    /// The positive's source kept and a destination drawn uniformly (DGL's uniform negative
    /// sampler, PyG's triplet sampling): what ranking a source's destinations trains for.
    Dst,
}

impl NegativeSampling {
    /// Every way, as front ends list them.
    pub const ALL: &'static [NegativeSampling] = &[NegativeSampling::Both, NegativeSampling::Dst];

    /// The way's name.
    pub fn name(self) -> &'static str {
        match self {
            NegativeSampling::Both => "both",
            NegativeSampling::Dst => "dst",
        }
    }
}

/// What a workload trains for besides the model: the link split and how negatives are drawn
/// and models selected.
#[derive(Clone, Copy)]
pub struct LinkTask<'a> {
    /// The split: supervision pairs, held-out pairs and their negatives.
    pub split: &'a LinkSplit,
    /// Negatives drawn per positive in training.
    pub neg_ratio: usize,
    /// Which ends of a pair its negatives draw.
    pub neg_sampling: NegativeSampling,
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

/// `count` negatives of the positives whose sources are `src` and whose indices in their list
/// of supervision pairs are `index`: negative `j` is draw `j / P` of positive `j % P` (`P`
/// positives), so `ratio * P` negatives give each positive `ratio`, round by round. Each end
/// the way `sampling` draws is uniform among `num_nodes`, keyed by (seed, epoch, the
/// positive's index, its draw); a kept end is the positive's source. As `(src, dst)`.
pub fn negatives(
    src: &[NodeId],
    index: &[usize],
    num_nodes: usize,
    count: usize,
    sampling: NegativeSampling,
    seed: u64,
    epoch: u64,
) -> (Vec<NodeId>, Vec<NodeId>) {
    let dst_key = RngKey::new(seed, epoch, NEGATIVE_PURPOSE);
    let src_key = RngKey::new(seed, epoch, NEGATIVE_SOURCE_PURPOSE);
    let n = num_nodes.max(1) as u64;
    let positives = src.len();
    if positives == 0 {
        return (Vec::new(), Vec::new());
    }
    (0..count)
        .map(|j| {
            let (p, r) = (j % positives, (j / positives) as u64);
            let i = index[p] as u64;
            let u = match sampling {
                NegativeSampling::Both => (src_key.bits(i, r) % n) as NodeId,
                NegativeSampling::Dst => src[p],
            };
            (u, (dst_key.bits(i, r) % n) as NodeId)
        })
        .unzip()
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
        let count = index.len() * task.neg_ratio;
        let sampling = task.neg_sampling;
        PairBatch::of_positives(src, dst, index, num_nodes, count, sampling, seed, epoch)
    }

    /// The positives `(src[i], dst[i])`, whose indices in their list of supervision pairs are
    /// `index[i]`, followed by `count` negatives drawn by `sampling` ([`negatives`]).
    pub fn of_positives(
        mut src: Vec<NodeId>,
        mut dst: Vec<NodeId>,
        index: &[usize],
        num_nodes: usize,
        count: usize,
        sampling: NegativeSampling,
        seed: u64,
        epoch: u64,
    ) -> PairBatch {
        let (ns, nd) = negatives(&src, index, num_nodes, count, sampling, seed, epoch);
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

/// The bytes of pair products an evaluation pass holds at once, at most: 65,536 pairs of
/// 2,000-wide embeddings would hold 500 MiB.
const EVAL_CHUNK_BYTES: usize = 32 << 20;
/// Pairs scored per pass of evaluation at most.
const EVAL_CHUNK: usize = 1 << 16;

/// Pairs scored per pass of evaluation over embeddings `width` wide in `dtype`: as many as
/// keep the pass's pair products within [`EVAL_CHUNK_BYTES`], 1,024 at least.
pub fn eval_chunk(width: usize, dtype: graphloom_tensor::DType) -> usize {
    let pair = width.max(1).saturating_mul(dtype.size_in_bytes());
    (EVAL_CHUNK_BYTES / pair).clamp(1 << 10, EVAL_CHUNK)
}

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
    let chunk = eval_chunk(h.shape().get(1).copied().unwrap_or(1), h.dtype());
    let h = Var::constant(h.clone());
    let mut out = Vec::with_capacity(src.len());
    for (s, d) in src.chunks(chunk).zip(dst.chunks(chunk)) {
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
        // A positive draws the same negatives wherever it is, round by round.
        for sampling in NegativeSampling::ALL.iter().copied() {
            let (a, b) = (
                negatives(&[1, 2], &[7, 9], 50, 6, sampling, 1, 1),
                negatives(&[2], &[9], 50, 3, sampling, 1, 1),
            );
            let second = |v: &[NodeId]| [v[1], v[3], v[5]];
            assert_eq!(second(&a.0), &b.0[..]);
            assert_eq!(second(&a.1), &b.1[..]);
            assert!(a.0.iter().chain(&a.1).all(|&v| v < 50));
        }
        // Both ways draw the same destinations; only `Both` draws the sources anew.
        let both = negatives(&[1, 2], &[7, 9], 50, 6, NegativeSampling::Both, 1, 1);
        let dst = negatives(&[1, 2], &[7, 9], 50, 6, NegativeSampling::Dst, 1, 1);
        assert_eq!(both.1, dst.1);
        assert_eq!(dst.0, [1, 2, 1, 2, 1, 2]);
        assert_ne!(both.0, dst.0);
    }

    /// Chi-squared statistic of `counts` against a uniform expectation.
    fn chi_squared(counts: &[usize]) -> f64 {
        let total: usize = counts.iter().sum();
        let expected = total as f64 / counts.len() as f64;
        counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum()
    }

    #[test]
    fn both_ends_of_a_negative_are_uniform_and_independent() {
        // 20 nodes, 40,000 negatives of one positive: each end's counts over the nodes and
        // the pairs' counts over the 400 cells must pass a chi-squared test (the 0.999
        // quantiles: 43.8 with 19 degrees of freedom, 510.9 with 399).
        let n = 20;
        let (src, dst) = negatives(&[3], &[11], n, 40_000, NegativeSampling::Both, 7, 2);
        let mut ends = (vec![0; n], vec![0; n], vec![0; n * n]);
        for (&u, &v) in src.iter().zip(&dst) {
            ends.0[u as usize] += 1;
            ends.1[v as usize] += 1;
            ends.2[u as usize * n + v as usize] += 1;
        }
        assert!(
            chi_squared(&ends.0) < 43.8,
            "sources {}",
            chi_squared(&ends.0)
        );
        assert!(
            chi_squared(&ends.1) < 43.8,
            "destinations {}",
            chi_squared(&ends.1)
        );
        assert!(
            chi_squared(&ends.2) < 510.9,
            "pairs {}",
            chi_squared(&ends.2)
        );
    }
}
