//! GraphSAINT's samplers and normalisation (Zeng et al., ICLR 2020), as PyG's
//! `GraphSAINTNodeSampler`, `GraphSAINTEdgeSampler` and `GraphSAINTRandomWalkSampler` draw
//! them. A sample is a set of nodes; its batch is the subgraph they induce.
//!
//! - Node sampler: `budget` draws, with replacement, of the destination of an edge drawn
//!   uniformly, so a node is drawn in proportion to its in-degree (PyG draws the source of a
//!   uniform edge, the same on a symmetric graph).
//! - Edge sampler: `budget` edges drawn with replacement, edge `u -> v` with probability
//!   proportional to `1/deg(u) + 1/deg(v)` (the paper's; `deg` is the in-degree, at least 1),
//!   and both ends of each. PyG's code weighs by `deg(u) + deg(v)` instead, which the paper
//!   does not.
//! - Random-walk sampler: `roots` roots drawn uniformly among all nodes, each walking `length`
//!   steps to a uniform in-neighbour (staying where there is none), every node visited kept.
//!
//! [`SaintNorm`] estimates the normalisation by sampling ahead until the samples hold
//! `coverage` times the graph's node count (PyG's `sample_coverage`): with `C_v` the samples
//! holding node `v`, `C_e` those holding edge `e` and `M` the number of samples,
//! `node_norm[v] = M / (C_v * N)` (with `C_v = 0.1` for a node never drawn) and
//! `edge_norm[e = u -> v] = C_v / C_e`, clamped to `[0, 10^4]`, 0.1 where `0/0`. Both are PyG's
//! formulas, except that PyG divides by the count of the edge's source (`edge_index[0]`) where
//! the paper (`alpha_{u,v} = p_{u,v} / p_v`, `v` aggregating) and this module use its
//! destination, the node that aggregates over the edge; on a symmetric graph PyG's coefficient
//! of `u -> v` is this module's of `v -> u`. Every draw is keyed by (seed, epoch, sample), so a
//! sample is the same for any number of threads or workers.

use graphloom_tensor::rng::RngKey;

use super::NodeSet;
use crate::sample::below;
use crate::{Error, GraphData, NodeId, Result};

/// The purpose of a sample's draws.
const SAMPLE_PURPOSE: u64 = 0x5341_494e;

/// The epoch of the draws that estimate the normalisation: no training epoch reaches it.
const NORM_EPOCH: u64 = u64::MAX - 1;

/// Which GraphSAINT sampler, and its budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaintSampler {
    /// `budget` nodes drawn with replacement in proportion to their in-degree.
    Node {
        /// Draws per sample.
        budget: usize,
    },
    /// `budget` edges drawn with replacement in proportion to `1/deg(u) + 1/deg(v)`.
    Edge {
        /// Draws per sample.
        budget: usize,
    },
    /// `roots` random walks of `length` steps.
    RandomWalk {
        /// Walks per sample.
        roots: usize,
        /// Steps per walk.
        length: usize,
    },
}

impl SaintSampler {
    /// The sampler's name, as PyG's class names it.
    pub fn describe(&self) -> String {
        match self {
            SaintSampler::Node { budget } => format!("GraphSAINT node samples of {budget} draws"),
            SaintSampler::Edge { budget } => format!("GraphSAINT edge samples of {budget} edges"),
            SaintSampler::RandomWalk { roots, length } => {
                format!("GraphSAINT random walks from {roots} roots of {length} steps")
            }
        }
    }

    /// The most nodes a sample holds (draws and walk steps, before repeats are removed): the
    /// default number of samples per epoch covers the graph's nodes about once with them.
    pub fn nodes_drawn(&self) -> usize {
        match *self {
            SaintSampler::Node { budget } => budget,
            SaintSampler::Edge { budget } => budget.saturating_mul(2),
            SaintSampler::RandomWalk { roots, length } => {
                roots.saturating_mul(length.saturating_add(1))
            }
        }
    }
}

/// A sampler ready to draw from one graph (the edge sampler's weights summed per destination).
#[derive(Clone, Debug)]
pub struct Saint {
    sampler: SaintSampler,
    /// Edge sampler: the running sum over destinations of their in-edges' weights.
    cumulative: Vec<f64>,
}

impl Saint {
    /// `sampler` over `data`; fails on a budget or walk length of 0, and on a graph without
    /// edges for the node and edge samplers, which draw edges.
    pub fn new(sampler: SaintSampler, data: GraphData<'_>) -> Result<Saint> {
        let zero = |name, what| Err(Error::argument(name, format!("{what} must be at least 1")));
        match sampler {
            SaintSampler::Node { budget: 0 } | SaintSampler::Edge { budget: 0 } => {
                return zero("saint_budget", "the budget")
            }
            SaintSampler::RandomWalk { roots: 0, .. } => return zero("saint_budget", "the roots"),
            SaintSampler::RandomWalk { length: 0, .. } => {
                return zero("walk_length", "the walk length")
            }
            _ => {}
        }
        let draws_edges = !matches!(sampler, SaintSampler::RandomWalk { .. });
        if data.num_nodes() == 0 || (draws_edges && data.num_edges() == 0) {
            return Err(Error::argument(
                "batching",
                format!(
                    "{} draws edges, and the graph has none",
                    sampler.describe()
                ),
            ));
        }
        let cumulative = match sampler {
            SaintSampler::Edge { .. } => {
                let mut sum = 0.0;
                (0..data.num_nodes())
                    .map(|v| {
                        sum += row_weights(data, v as NodeId).sum::<f64>();
                        sum
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        Ok(Saint {
            sampler,
            cumulative,
        })
    }

    /// The sampler.
    pub fn sampler(&self) -> SaintSampler {
        self.sampler
    }

    /// The nodes of sample `index` of `epoch` (draws keyed by `seed`), distinct and in
    /// increasing order.
    pub fn sample(&self, data: GraphData<'_>, seed: u64, epoch: u64, index: u64) -> Vec<NodeId> {
        let draws = RngKey::new(seed, epoch, SAMPLE_PURPOSE).row(index);
        let n = data.num_nodes();
        let mut nodes = Vec::with_capacity(self.sampler.nodes_drawn());
        match self.sampler {
            SaintSampler::Node { budget } => {
                for j in 0..budget as u64 {
                    let e = below(data.num_edges(), draws.bits(j));
                    nodes.push(destination(data, e));
                }
            }
            SaintSampler::Edge { budget } => {
                let total = *self.cumulative.last().unwrap_or(&0.0);
                for j in 0..budget as u64 {
                    let r = uniform(draws.bits(j)) * total;
                    let v = self.cumulative.partition_point(|&c| c <= r).min(n - 1);
                    let before = if v == 0 { 0.0 } else { self.cumulative[v - 1] };
                    nodes.push(v as NodeId);
                    nodes.push(pick_in_row(data, v as NodeId, r - before));
                }
            }
            SaintSampler::RandomWalk { roots, length } => {
                let stride = length as u64 + 1;
                for r in 0..roots as u64 {
                    let mut at = below(n, draws.bits(r * stride)) as NodeId;
                    nodes.push(at);
                    for s in 1..stride {
                        let row = data.in_neighbors(at);
                        if !row.is_empty() {
                            at = row[below(row.len(), draws.bits(r * stride + s))];
                        }
                        nodes.push(at);
                    }
                }
            }
        }
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }
}

/// A uniform draw in `[0, 1)` from 64 random bits.
fn uniform(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The destination of edge `e` (the row of `col_idx[e]`).
fn destination(data: GraphData<'_>, e: usize) -> NodeId {
    (data.row_ptr.partition_point(|&o| o as usize <= e) - 1) as NodeId
}

/// The in-degree of `v`, at least 1: the edge sampler's `deg`.
fn degree(data: GraphData<'_>, v: NodeId) -> f64 {
    let v = v as usize;
    (data.row_ptr[v + 1] - data.row_ptr[v]).max(1) as f64
}

/// The edge sampler's weight of each in-edge of `v`, in row order.
fn row_weights<'a>(data: GraphData<'a>, v: NodeId) -> impl Iterator<Item = f64> + 'a {
    let own = 1.0 / degree(data, v);
    data.in_neighbors(v)
        .iter()
        .map(move |&u| 1.0 / degree(data, u) + own)
}

/// The source of the in-edge of `v` at which the running sum of the row's weights passes `r`.
fn pick_in_row(data: GraphData<'_>, v: NodeId, mut r: f64) -> NodeId {
    let row = data.in_neighbors(v);
    for (&u, w) in row.iter().zip(row_weights(data, v)) {
        if r < w {
            return u;
        }
        r -= w;
    }
    // Rounding left the draw past the last weight: the last edge.
    *row.last().unwrap_or(&v)
}

/// GraphSAINT's normalisation, from the counts of a set of samples (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct SaintNorm {
    /// The samples holding each node.
    node_count: Vec<u32>,
    /// The samples holding each edge (by its position in the graph's `col_idx`).
    edge_count: Vec<u32>,
    /// The number of samples.
    samples: u64,
}

/// The smallest count PyG gives a node never sampled, so its `node_norm` stays finite.
const UNSEEN_COUNT: f64 = 0.1;
/// The bound of `edge_norm`, as PyG clamps it.
const MAX_EDGE_NORM: f64 = 1e4;
/// `edge_norm` where neither the edge nor its destination was sampled (`0/0`), as PyG sets it.
const UNSEEN_EDGE_NORM: f64 = 0.1;

impl SaintNorm {
    /// The normalisation of `saint` on `data`, from samples drawn ahead (keyed by `seed`, apart
    /// from every training epoch's) until they hold `coverage` times the node count.
    pub fn estimate(
        saint: &Saint,
        data: GraphData<'_>,
        coverage: usize,
        seed: u64,
    ) -> Result<SaintNorm> {
        if coverage == 0 {
            return Err(Error::argument("saint_coverage", "must be at least 1"));
        }
        let target = data.num_nodes().saturating_mul(coverage);
        let mut drawn = 0usize;
        let samples = (0u64..)
            .map(|i| saint.sample(data, seed, NORM_EPOCH, i))
            .take_while(|s| {
                let go = drawn < target;
                drawn += s.len();
                go
            });
        Ok(SaintNorm::from_samples(data, samples))
    }

    /// The normalisation counted over `samples` (each a sample's nodes, distinct).
    pub fn from_samples(
        data: GraphData<'_>,
        samples: impl IntoIterator<Item = Vec<NodeId>>,
    ) -> SaintNorm {
        let mut norm = SaintNorm {
            node_count: vec![0; data.num_nodes()],
            edge_count: vec![0; data.num_edges()],
            samples: 0,
        };
        let mut set = NodeSet::new(data.num_nodes());
        for nodes in samples {
            let sub = set.members(&nodes).induced(data);
            for &v in &nodes {
                norm.node_count[v as usize] += 1;
            }
            for &e in &sub.edge_ids {
                norm.edge_count[e as usize] += 1;
            }
            norm.samples += 1;
        }
        norm
    }

    /// The number of samples counted.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// `node_norm[v] = M / (C_v * N)`: PyG's weight of node `v`'s loss.
    pub fn node_norm(&self, v: NodeId) -> f64 {
        let count = match self.node_count[v as usize] {
            0 => UNSEEN_COUNT,
            c => f64::from(c),
        };
        self.samples as f64 / count / self.node_count.len() as f64
    }

    /// `edge_norm[e] = C_dst / C_e` of edge `e` (a position in the graph's `col_idx`) into
    /// `dst`, clamped to `[0, 10^4]`, 0.1 where both counts are 0.
    pub fn edge_norm(&self, e: usize, dst: NodeId) -> f64 {
        let (node, edge) = (
            f64::from(self.node_count[dst as usize]),
            f64::from(self.edge_count[e]),
        );
        if node == 0.0 && edge == 0.0 {
            return UNSEEN_EDGE_NORM;
        }
        (node / edge).clamp(0.0, MAX_EDGE_NORM)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::synthetic::{generate, SyntheticConfig};

    fn graph() -> crate::Dataset {
        generate(&SyntheticConfig {
            nodes: 200,
            avg_degree: 5,
            seed: 5,
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn samples_are_keyed_distinct_and_sorted() {
        let ds = graph();
        let data = ds.data();
        for sampler in [
            SaintSampler::Node { budget: 50 },
            SaintSampler::Edge { budget: 30 },
            SaintSampler::RandomWalk {
                roots: 20,
                length: 3,
            },
        ] {
            let saint = Saint::new(sampler, data).unwrap();
            let a = saint.sample(data, 1, 2, 3);
            assert!(!a.is_empty() && a.len() <= sampler.nodes_drawn());
            assert!(a.windows(2).all(|w| w[0] < w[1]), "{sampler:?}");
            assert_eq!(a, saint.sample(data, 1, 2, 3));
            assert_ne!(a, saint.sample(data, 1, 2, 4));
        }
        let zero = |s| Saint::new(s, data).unwrap_err().to_string();
        assert!(zero(SaintSampler::Node { budget: 0 }).contains("saint_budget"));
        let walk = SaintSampler::RandomWalk {
            roots: 3,
            length: 0,
        };
        assert!(zero(walk).contains("walk_length"));
    }

    #[test]
    fn the_edge_samplers_draws_follow_their_weights() {
        // A star into node 0 from 1..=4, and 4 -> 1: in-degrees 4, 1, 0, 0, 0 (counted as 1).
        let g = crate::Csr::from_edges(5, &[1, 2, 3, 4, 4], &[0, 0, 0, 0, 1]);
        let meta = crate::Meta::default();
        let data = GraphData {
            meta: &meta,
            row_ptr: &g.row_ptr,
            col_idx: &g.col_idx,
            labels: &[],
            train_idx: &[],
            valid_idx: &[],
            test_idx: &[],
        };
        let saint = Saint::new(SaintSampler::Edge { budget: 1 }, data).unwrap();
        // Weights 1/deg(u) + 1/deg(v): edges into 0 weigh 1 + 1/4 (u = 1 weighs 1/1 too),
        // the edge into 1 weighs 1 + 1.
        let draws = 40_000;
        let mut into_one = 0;
        for i in 0..draws {
            if saint.sample(data, 0, 0, i) == [1, 4] {
                into_one += 1;
            }
        }
        let p = 2.0 / (4.0 * 1.25 + 2.0);
        let sd = (p * (1.0 - p) / draws as f64).sqrt();
        let observed = into_one as f64 / draws as f64;
        assert!((observed - p).abs() < 5.0 * sd, "{observed} vs {p}");
    }
}
