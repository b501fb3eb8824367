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
//! [`SaintNorm`] estimates the normalisation by sampling ahead, in rounds of an epoch's
//! samples as PyG does, until the samples hold `coverage` times the graph's node count (PyG's
//! `sample_coverage`): with `C_v` the samples
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
    /// Exact for a sampler [`Saint::new`] accepted; saturated otherwise.
    pub fn nodes_drawn(&self) -> usize {
        self.checked_nodes_drawn().unwrap_or(usize::MAX)
    }

    /// [`SaintSampler::nodes_drawn`], `None` where the count overflows.
    fn checked_nodes_drawn(&self) -> Option<usize> {
        match *self {
            SaintSampler::Node { budget } => Some(budget),
            SaintSampler::Edge { budget } => budget.checked_mul(2),
            SaintSampler::RandomWalk { roots, length } => roots.checked_mul(length.checked_add(1)?),
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
    /// `sampler` over `data`; fails on a budget or walk length of 0, on a graph without
    /// edges for the node and edge samplers, which draw edges, on a budget beyond what it
    /// draws from (the graph's edges for the edge sampler, its nodes otherwise) or a walk
    /// longer than the graph's nodes, which only draw the same nodes again, and on a sample
    /// that would not fit in the memory this process may use.
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
        let (n, edges) = (data.num_nodes(), data.num_edges());
        if n == 0 || (draws_edges && edges == 0) {
            return Err(Error::argument(
                "batching",
                format!(
                    "{}: the sampler draws edges, and the graph has none",
                    sampler.describe()
                ),
            ));
        }
        let (budget, most, what) = match sampler {
            SaintSampler::Edge { budget } => (budget, edges, "edges"),
            SaintSampler::Node { budget } => (budget, n, "nodes"),
            SaintSampler::RandomWalk { roots, .. } => (roots, n, "nodes"),
        };
        if budget > most {
            return Err(Error::argument(
                "saint_budget",
                format!("{budget} is more than the graph's {most} {what}: give at most {most}"),
            ));
        }
        if let SaintSampler::RandomWalk { length, .. } = sampler {
            if length > n {
                return Err(Error::argument(
                    "walk_length",
                    format!("{length} steps are more than the graph's {n} nodes: give at most {n}"),
                ));
            }
        }
        check_sample_fits(sampler)?;
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

/// Fails on an epoch of `steps` samples (`batches_per_epoch`) of 0 or more than `data`'s
/// nodes: each sample holds a node at least, so such an epoch draws the graph over and over
/// (more epochs train longer), and an epoch lists its samples before drawing them.
pub fn check_steps(data: GraphData<'_>, steps: usize) -> Result<()> {
    let n = data.num_nodes();
    if (1..=n.max(1)).contains(&steps) {
        return Ok(());
    }
    Err(Error::argument(
        "batches_per_epoch",
        format!(
            "{steps} samples per epoch: give 1 to the graph's {n} nodes (more epochs train \
             longer)"
        ),
    ))
}

/// Fails when a sample of `sampler` (every node it draws, before repeats are removed) would
/// not fit in the memory this process may use, or its size overflows.
fn check_sample_fits(sampler: SaintSampler) -> Result<()> {
    use graphloom_tensor::memory::{usable_memory_bytes, MemoryMeasure};
    let drawn = sampler.checked_nodes_drawn();
    let bytes = drawn.and_then(|d| d.checked_mul(std::mem::size_of::<NodeId>()));
    let usable = usable_memory_bytes(MemoryMeasure::Total);
    match (bytes, usable) {
        (Some(b), Some(u)) if b as u64 <= u => return Ok(()),
        (Some(_), None) => return Ok(()),
        _ => {}
    }
    let drawn = drawn.map_or("more than a count holds".into(), |d| d.to_string());
    let (setting, lower) = match sampler {
        SaintSampler::RandomWalk { roots, length } => (
            format!("{roots} with `walk_length` {length}"),
            "lower `saint_budget` or `walk_length`",
        ),
        SaintSampler::Node { budget } | SaintSampler::Edge { budget } => {
            (budget.to_string(), "lower `saint_budget`")
        }
    };
    let size = match (bytes, usable) {
        (Some(b), Some(u)) => format!(
            "{}, more than the {} this process may use",
            graphloom_io::format_bytes(b as u64),
            graphloom_io::format_bytes(u)
        ),
        _ => "more bytes than memory addresses".into(),
    };
    Err(Error::argument(
        "saint_budget",
        format!("{setting} draws {drawn} nodes per sample ({size}): {lower}"),
    ))
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

/// The most pre-sampling rounds per node that [`SaintNorm::estimate`] takes.
pub const MAX_COVERAGE: usize = 10_000;

/// The smallest count PyG gives a node never sampled, so its `node_norm` stays finite.
const UNSEEN_COUNT: f64 = 0.1;
/// The bound of `edge_norm`, as PyG clamps it.
const MAX_EDGE_NORM: f64 = 1e4;
/// `edge_norm` where neither the edge nor its destination was sampled (`0/0`), as PyG sets it.
const UNSEEN_EDGE_NORM: f64 = 0.1;

impl SaintNorm {
    /// The normalisation of `saint` on `data`, from samples drawn ahead (keyed by `seed`, apart
    /// from every training epoch's) in rounds of `steps` (an epoch's samples), as PyG draws
    /// them, until they hold `coverage` times the node count. Fails on a coverage of 0 or
    /// above [`MAX_COVERAGE`].
    pub fn estimate(
        saint: &Saint,
        data: GraphData<'_>,
        coverage: usize,
        steps: usize,
        seed: u64,
    ) -> Result<SaintNorm> {
        if coverage == 0 || coverage > MAX_COVERAGE {
            return Err(Error::argument(
                "saint_coverage",
                format!("must be in 1..={MAX_COVERAGE}, not {coverage}"),
            ));
        }
        let target = data.num_nodes().saturating_mul(coverage);
        let steps = steps.max(1) as u64;
        let (mut drawn, mut next) = (0usize, 0u64);
        // Whole rounds: the check is made only between them.
        let samples = std::iter::from_fn(|| {
            if next.is_multiple_of(steps) && drawn >= target {
                return None;
            }
            let nodes = saint.sample(data, seed, NORM_EPOCH, next);
            next += 1;
            drawn += nodes.len();
            Some(nodes)
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
    use crate::testing::random_dataset;

    fn graph() -> crate::Dataset {
        random_dataset(200, 5, 5)
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
    fn sizes_beyond_the_graph_or_memory_are_refused() {
        let ds = graph();
        let data = ds.data();
        let (n, e) = (data.num_nodes(), data.num_edges());
        let refused = |s| Saint::new(s, data).unwrap_err().to_string();
        let walk = |roots, length| SaintSampler::RandomWalk { roots, length };
        for (sampler, says) in [
            (
                SaintSampler::Node { budget: n + 1 },
                format!("saint_budget: {} is more than the graph's {n} nodes", n + 1),
            ),
            (
                SaintSampler::Edge { budget: e + 1 },
                format!("the graph's {e} edges"),
            ),
            (
                walk(4_294_967_296, 4_294_967_296),
                format!("the graph's {n} nodes: give at most {n}"),
            ),
            (
                walk(n, 1_000_000_000_000),
                format!("walk_length: 1000000000000 steps are more than the graph's {n}"),
            ),
        ] {
            let err = refused(sampler);
            assert!(err.contains(&says), "{err}");
        }
        Saint::new(SaintSampler::Node { budget: n }, data).unwrap();
        Saint::new(walk(n, n), data).unwrap();
        // A sample's size overflows: refused without allocating.
        let huge = walk(usize::MAX / 2, 3);
        assert!(check_sample_fits(huge)
            .unwrap_err()
            .to_string()
            .contains("more bytes than memory addresses"));
        assert!(check_steps(data, n).is_ok());
        for steps in [0, n + 1, 1 << 40] {
            let err = check_steps(data, steps).unwrap_err().to_string();
            assert!(
                err.contains("batches_per_epoch") && err.contains("give 1 to"),
                "{err}"
            );
        }
    }

    /// A directed graph without self-loops or reciprocal edges, so that a pair of nodes names
    /// one edge: 12 nodes, each `v` with in-edges from `v+1 .. v+1+(v % 4)` (mod 12), skipping
    /// pairs already joined the other way.
    fn one_way_graph() -> (crate::Csr, crate::Meta) {
        let n = 12u32;
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        for v in 0..n {
            for k in 1..=(v % 4) {
                let u = (v + k) % n;
                if !pairs.contains(&(v, u)) {
                    pairs.push((u, v));
                }
            }
        }
        let (src, dst): (Vec<u32>, Vec<u32>) = pairs.into_iter().unzip();
        let g = crate::Csr::from_edges(n as usize, &src, &dst);
        let meta = crate::Meta {
            name: "one-way".into(),
            num_nodes: n as usize,
            num_edges: g.num_edges(),
            feat_dim: 0,
            feat_dtype: "f32".into(),
            num_classes: 0,
            directed: true,
        };
        (g, meta)
    }

    fn data_of<'a>(g: &'a crate::Csr, meta: &'a crate::Meta) -> GraphData<'a> {
        GraphData {
            meta,
            row_ptr: &g.row_ptr,
            col_idx: &g.col_idx,
            labels: &[],
            train_idx: &[],
            valid_idx: &[],
            test_idx: &[],
        }
    }

    /// Pearson's statistic of `counts` against probabilities `p` (summing to 1); with fixed
    /// seeds, compared with a bound far in the tail (about six standard deviations of the
    /// chi-square distribution of `counts.len() - 1` degrees of freedom).
    fn assert_chi_square(counts: &[f64], p: &[f64], what: &str) {
        let total: f64 = counts.iter().sum();
        let stat: f64 = counts
            .iter()
            .zip(p)
            .map(|(&c, &q)| (c - total * q).powi(2) / (total * q))
            .sum();
        let df = (counts.len() - 1) as f64;
        assert!(
            stat < df + 6.0 * (2.0 * df).sqrt(),
            "{what}: chi-square {stat} on {df} df"
        );
        // And not suspiciously perfect (a sampler that returned expected counts).
        assert!(stat > 0.0, "{what}");
    }

    /// The graph's edges as (source, destination, edge id).
    fn edges(data: GraphData<'_>) -> Vec<(NodeId, NodeId, usize)> {
        let mut all = Vec::new();
        for v in 0..data.num_nodes() as NodeId {
            let lo = data.row_ptr[v as usize] as usize;
            for (k, &u) in data.in_neighbors(v).iter().enumerate() {
                all.push((u, v, lo + k));
            }
        }
        all
    }

    #[test]
    fn each_sampler_draws_with_its_probabilities() {
        let (g, meta) = one_way_graph();
        let data = data_of(&g, &meta);
        let n = data.num_nodes();
        let all = edges(data);
        let indeg = |v: NodeId| data.in_neighbors(v).len() as f64;
        let draws = 30_000u64;
        // Node sampler, one draw: node v with probability indeg(v) / E.
        let saint = Saint::new(SaintSampler::Node { budget: 1 }, data).unwrap();
        let mut counts = vec![0.0; n];
        for i in 0..draws {
            counts[saint.sample(data, 3, 0, i)[0] as usize] += 1.0;
        }
        let p: Vec<f64> = (0..n as NodeId)
            .map(|v| indeg(v) / all.len() as f64)
            .collect();
        let drawn: Vec<usize> = (0..n).filter(|&v| p[v] > 0.0).collect();
        assert!(drawn.iter().map(|&v| counts[v]).sum::<f64>() == draws as f64);
        assert_chi_square(
            &drawn.iter().map(|&v| counts[v]).collect::<Vec<_>>(),
            &drawn.iter().map(|&v| p[v]).collect::<Vec<_>>(),
            "node sampler",
        );
        // Edge sampler, one edge: u -> v with probability proportional to
        // 1/deg(u) + 1/deg(v), deg the in-degree counted as at least 1.
        let deg = |v: NodeId| indeg(v).max(1.0);
        let saint = Saint::new(SaintSampler::Edge { budget: 1 }, data).unwrap();
        let weight: Vec<f64> = all
            .iter()
            .map(|&(u, v, _)| 1.0 / deg(u) + 1.0 / deg(v))
            .collect();
        let sum: f64 = weight.iter().sum();
        let mut counts = vec![0.0; all.len()];
        for i in 0..draws {
            let s = saint.sample(data, 4, 0, i);
            let k = all
                .iter()
                .position(|&(u, v, _)| s == [u.min(v), u.max(v)])
                .expect("a sample of one edge is its two ends");
            counts[k] += 1.0;
        }
        let p: Vec<f64> = weight.iter().map(|w| w / sum).collect();
        assert_chi_square(&counts, &p, "edge sampler");
        // Random walk of one step from one root: the root uniform, then a uniform in-neighbour
        // (a root without one stays alone).
        let walk = SaintSampler::RandomWalk {
            roots: 1,
            length: 1,
        };
        let saint = Saint::new(walk, data).unwrap();
        let mut outcomes: Vec<(Vec<NodeId>, f64)> = Vec::new();
        for v in 0..n as NodeId {
            if indeg(v) == 0.0 {
                outcomes.push((vec![v], 1.0 / n as f64));
            }
        }
        for &(u, v, _) in &all {
            outcomes.push((vec![u.min(v), u.max(v)], 1.0 / n as f64 / indeg(v)));
        }
        let mut counts = vec![0.0; outcomes.len()];
        for i in 0..draws {
            let s = saint.sample(data, 5, 0, i);
            counts[outcomes.iter().position(|o| o.0 == s).unwrap()] += 1.0;
        }
        let p: Vec<f64> = outcomes.iter().map(|o| o.1).collect();
        assert_chi_square(&counts, &p, "random walk");
    }

    #[test]
    fn the_normalisation_is_pygs_formulas_over_the_samples_counted() {
        let ds = graph();
        let data = ds.data();
        let walk = SaintSampler::RandomWalk {
            roots: 15,
            length: 2,
        };
        let saint = Saint::new(walk, data).unwrap();
        let (coverage, steps) = (3, 4);
        let norm = SaintNorm::estimate(&saint, data, coverage, steps, 9).unwrap();
        // Whole rounds of `steps` samples, the last one reaching the coverage.
        let m = norm.samples();
        assert_eq!(m % steps as u64, 0);
        let samples: Vec<Vec<NodeId>> = (0..m)
            .map(|i| saint.sample(data, 9, NORM_EPOCH, i))
            .collect();
        let held = |k: usize| samples[..k].iter().map(Vec::len).sum::<usize>();
        let target = coverage * data.num_nodes();
        assert!(held(m as usize) >= target && held(m as usize - steps) < target);
        // The counts, naively: a node per sample holding it, an edge per sample holding both
        // of its ends.
        let n = data.num_nodes();
        let all = edges(data);
        let mut node_count = vec![0.0f64; n];
        let mut edge_count = vec![0.0f64; all.len()];
        for s in &samples {
            for &v in s {
                node_count[v as usize] += 1.0;
            }
            for &(u, v, e) in &all {
                if s.contains(&u) && s.contains(&v) {
                    edge_count[e] += 1.0;
                }
            }
        }
        // PyG: node_norm = M / count / N with an unseen node counted 0.1; edge_norm =
        // count[node] / count[edge] clamped to [0, 1e4], NaN (0/0) set to 0.1; the node being
        // the edge's destination here (the one that aggregates over it).
        for v in 0..n {
            let c = if node_count[v] == 0.0 {
                0.1
            } else {
                node_count[v]
            };
            assert_eq!(
                norm.node_norm(v as NodeId),
                m as f64 / c / n as f64,
                "node {v}"
            );
        }
        for &(_, v, e) in &all {
            let mut want = (node_count[v as usize] / edge_count[e]).clamp(0.0, 1e4);
            if want.is_nan() {
                want = 0.1;
            }
            assert_eq!(norm.edge_norm(e, v), want, "edge {e}");
        }
        // The fixed sample exercises the clamped case too.
        assert!(all
            .iter()
            .any(|&(_, v, e)| edge_count[e] == 0.0 && node_count[v as usize] > 0.0));
        // Bad coverage is refused.
        let err = |c| {
            SaintNorm::estimate(&saint, data, c, steps, 9)
                .unwrap_err()
                .to_string()
        };
        assert!(err(0).contains("saint_coverage"));
        assert!(err(MAX_COVERAGE + 1).contains("saint_coverage"));
    }
}
