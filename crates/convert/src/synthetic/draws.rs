//! The draws of the synthetic graph: its parameters, and every edge, feature, label and
//! split as a pure function of the seed and an index; [`generate`] builds the dataset in
//! memory from them (`write.rs` streams the same draws to disk).

use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{bf16, DType, Tensor};
use rayon::prelude::*;

use graphloom_graph::{random_split, Csr, Dataset, Error, Meta, NodeId, Result, UNLABELLED};

/// The parameters of [`generate`] and [`write()`](super::write()).
#[derive(Clone, Debug)]
pub struct SyntheticConfig {
    /// Number of nodes.
    pub nodes: usize,
    /// Average in-degree of an undirected graph: `nodes * avg_degree / 2` pairs are drawn and
    /// stored in both directions. Ignored when `edges` is given.
    pub avg_degree: usize,
    /// A directed graph of exactly this many CSR entries (edges), no reverse pairs added.
    pub edges: Option<usize>,
    /// Feature width.
    pub feat_dim: usize,
    /// Number of classes: node `v` has class `v mod classes`.
    pub classes: usize,
    /// Share of edges whose two ends are of one class (SBM: drawn so; R-MAT: the source is
    /// moved to the nearest id of the destination's class). The rest carry no class signal.
    pub homophily: f64,
    /// Norm of the class signal in the features, relative to unit Gaussian noise per column.
    pub signal: f64,
    /// Feature dtype: f32 or bf16.
    pub feat_dtype: DType,
    /// Seed of every draw.
    pub seed: u64,
    /// How the edges are drawn.
    pub edge_model: EdgeModel,
    /// How the nodes are split.
    pub split: SplitSizes,
}

/// How a synthetic graph's edges are drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EdgeModel {
    /// A stochastic block model: a share `homophily` of the pairs join two nodes of one class,
    /// the rest join uniform pairs. Degrees are close to Poisson.
    #[default]
    Sbm,
    /// R-MAT with the Graph500 quadrant probabilities (0.57, 0.19, 0.19, 0.05): a power-law
    /// degree distribution with hubs at the low ids. A share `homophily` of the edges have
    /// their source moved to the nearest id of the destination's class (less than `classes`
    /// ids away, so the degree distribution keeps its shape).
    Rmat,
    /// A Chung-Lu graph of power-law expected degrees, shaped like a citation graph stored in
    /// both directions (ogbn-papers100M's training graph): both ends of a pair are drawn with
    /// probability proportional to `(rank + n / 1000)^-(1 / 1.2)` (degree exponent 2.2, the
    /// offset keeping the largest hubs to a few thousand edges at 111M nodes), ranks spread
    /// over the ids by a bijection so hubs are not clustered at low ids. At an average degree
    /// of 29 the top 1% of nodes hold about 23% of the edges and almost no node is isolated.
    /// Homophily moves the source as for R-MAT, to a node of random rank: at homophily 0.5
    /// over many classes the top 1% hold about 18%.
    PowerLaw,
    /// [`EdgeModel::PowerLaw`]'s degrees with the ranks as the ids: the hubs at the low ids
    /// and degree falling with the id, as numbering nodes by first appearance (an e-mail
    /// archive, a co-authorship record, a crawl) leaves real collections. Supervision pairs
    /// listed as `u < v` then put a node's edges mostly on one side: what link prediction
    /// must be checked on.
    PowerLawOrdered,
}

/// The power-law draw of [`EdgeModel::PowerLaw`]: an endpoint's rank is the inverse of the
/// continuous distribution of density `(x + offset)^-alpha` on `[0, n)` at a uniform draw,
/// and its id `rank * multiplier mod n`.
#[derive(Clone, Copy, Debug)]
struct PowerLawDraw {
    /// `1 - alpha`.
    one_minus_alpha: f64,
    offset: f64,
    /// `offset^(1 - alpha)`.
    low: f64,
    /// `(n + offset)^(1 - alpha) - low`.
    span: f64,
    /// Coprime with `n`: multiplying by it permutes `0..n`.
    multiplier: u64,
}

impl PowerLawDraw {
    /// The degree exponent: `alpha = 1 / (exponent - 1)`.
    const EXPONENT: f64 = 2.2;
    /// The rank offset, as a share of the nodes.
    const OFFSET_SHARE: f64 = 1e-3;

    /// The draw over `n` nodes; `spread` scatters the ranks over the ids, else rank `r` is
    /// node `r`.
    fn new(n: usize, spread: bool) -> PowerLawDraw {
        let one_minus_alpha = 1.0 - 1.0 / (Self::EXPONENT - 1.0);
        let offset = (n as f64 * Self::OFFSET_SHARE).max(1.0);
        let low = offset.powf(one_minus_alpha);
        let span = (n as f64 + offset).powf(one_minus_alpha) - low;
        // Near n times the golden ratio's fraction, made odd and coprime with n.
        let mut multiplier = if spread {
            ((n as f64 * 0.618_033_988_75) as u64) | 1
        } else {
            1
        };
        while gcd(multiplier, n as u64) != 1 {
            multiplier += 2;
        }
        PowerLawDraw {
            one_minus_alpha,
            offset,
            low,
            span,
            multiplier,
        }
    }

    /// The node of uniform draw `u` in `[0, 1)` among `n`.
    #[inline]
    fn node(&self, u: f64, n: usize) -> usize {
        let x = (self.low + u * self.span).powf(1.0 / self.one_minus_alpha) - self.offset;
        let rank = (x.max(0.0) as usize).min(n - 1);
        ((rank as u128 * self.multiplier as u128) % n as u128) as usize
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// How the nodes are split into train, validation and test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SplitSizes {
    /// Shares of all nodes (every node labelled).
    Fractions(f64, f64, f64),
    /// Exact node counts; the nodes in no split are unlabelled (-1), as most of
    /// ogbn-papers100M's are.
    Counts(usize, usize, usize),
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        SyntheticConfig {
            edge_model: EdgeModel::Sbm,
            nodes: 10_000,
            avg_degree: 10,
            edges: None,
            feat_dim: 64,
            classes: 8,
            homophily: 0.5,
            signal: 2.0,
            feat_dtype: DType::F32,
            seed: 0,
            split: SplitSizes::Fractions(0.6, 0.2, 0.2),
        }
    }
}

/// The most CSR entries (edges) a synthetic graph may have: as many 8-byte values as memory
/// or a file addresses. Whether they fit on the disk is checked as they are written.
pub const MAX_ENTRIES: u64 = isize::MAX as u64 / 8;

/// The checked sizes and keys every draw of a configuration uses.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Draws {
    pub(crate) n: usize,
    pub(crate) classes: usize,
    /// Pairs drawn; each is one CSR entry (directed) or two (undirected).
    pub(crate) pairs: u64,
    pub(crate) directed: bool,
    homophily: f64,
    model: EdgeModel,
    levels: u32,
    power_law: PowerLawDraw,
    key: RngKey,
}

impl Draws {
    /// Checks `cfg` and derives its sizes.
    pub(crate) fn new(cfg: &SyntheticConfig) -> Result<Draws> {
        if !(0.0..=1.0).contains(&cfg.homophily) {
            return Err(Error::argument(
                "homophily",
                format!("{} is not a share: give a value in [0, 1]", cfg.homophily),
            ));
        }
        if !(cfg.signal.is_finite() && cfg.signal >= 0.0) {
            return Err(Error::argument(
                "signal",
                format!(
                    "{} is not a signal strength: give a finite value >= 0",
                    cfg.signal
                ),
            ));
        }
        if cfg.nodes > u32::MAX as usize {
            return Err(Error::argument(
                "nodes",
                format!(
                    "{} nodes: node ids are 32-bit, at most {}",
                    cfg.nodes,
                    u32::MAX
                ),
            ));
        }
        let n = cfg.nodes.max(2);
        // In u128: a count given as any usize, times a degree, overflows no wider type.
        let (entries, directed) = match cfg.edges {
            Some(e) => (e as u128, true),
            None => (n as u128 * cfg.avg_degree as u128 / 2 * 2, false),
        };
        if entries > MAX_ENTRIES as u128 {
            let (setting, asked) = match cfg.edges {
                Some(e) => ("edges", format!("{e} edges")),
                None => (
                    "avg_degree",
                    format!("{n} nodes of average degree {}", cfg.avg_degree),
                ),
            };
            return Err(Error::argument(
                setting,
                format!("{asked} are more than the {MAX_ENTRIES} a dataset addresses"),
            ));
        }
        let pairs = if directed { entries } else { entries / 2 } as u64;
        let row = cfg.feat_dim.checked_mul(cfg.feat_dtype.size_in_bytes());
        if row
            .and_then(|r| r.checked_mul(n))
            .is_none_or(|bytes| bytes > isize::MAX as usize)
        {
            return Err(Error::argument(
                "feat_dim",
                format!(
                    "{n} nodes of {} features are more bytes than memory or a file addresses",
                    cfg.feat_dim
                ),
            ));
        }
        if let SplitSizes::Counts(a, b, c) = cfg.split {
            if a.saturating_add(b).saturating_add(c) > n {
                return Err(Error::argument(
                    "split",
                    format!("{a} + {b} + {c} split nodes, but the graph has {n} nodes"),
                ));
            }
        }
        Ok(Draws {
            n,
            classes: cfg.classes.clamp(1, n),
            pairs,
            directed,
            homophily: cfg.homophily,
            model: cfg.edge_model,
            levels: n.next_power_of_two().trailing_zeros(),
            power_law: PowerLawDraw::new(n, cfg.edge_model != EdgeModel::PowerLawOrdered),
            key: RngKey::new(cfg.seed, 0, 0x5717),
        })
    }

    /// The number of CSR entries.
    pub(crate) fn num_edges(&self) -> u64 {
        if self.directed {
            self.pairs
        } else {
            2 * self.pairs
        }
    }

    /// CSR entry `i` (in `0..num_edges`) as `(source, destination)`: pair `i` for a directed
    /// graph; pair `i mod pairs`, reversed in the second half, for an undirected one.
    #[inline]
    pub(crate) fn edge(&self, i: u64) -> (NodeId, NodeId) {
        if self.directed || i < self.pairs {
            self.pair(i)
        } else {
            let (u, v) = self.pair(i - self.pairs);
            (v, u)
        }
    }

    /// Pair `e`, without self-loops (up to 64 redraws).
    fn pair(&self, e: u64) -> (NodeId, NodeId) {
        let (n, c) = (self.n, self.classes);
        match self.model {
            EdgeModel::Rmat | EdgeModel::PowerLaw | EdgeModel::PowerLawOrdered => {
                let row = self.key.row(e);
                for attempt in 0..64 {
                    let (mut u, v) = if self.model == EdgeModel::Rmat {
                        self.rmat_pair(row, attempt)
                    } else {
                        let unit =
                            |k: u64| (row.bits(k) >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
                        let draw = &self.power_law;
                        (
                            draw.node(unit(2000 + 2 * attempt), n),
                            draw.node(unit(2001 + 2 * attempt), n),
                        )
                    };
                    let draw =
                        (row.bits(1000 + attempt) >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
                    if draw < self.homophily {
                        // The nearest id of v's class at or below u (or above, at the end).
                        u = u - u % c + v % c;
                        if u >= n {
                            u -= c;
                        }
                    }
                    if u != v || attempt == 63 {
                        return (u as NodeId, v as NodeId);
                    }
                }
                unreachable!("the last attempt returns")
            }
            EdgeModel::Sbm => {
                let key = self.key;
                let u = (key.bits(e, 0) % n as u64) as usize;
                let mut k = 1;
                loop {
                    let v = if key.uniform(e, 1) < self.homophily {
                        // Another node of u's class: u mod c + c * j.
                        let members = (n - u % c).div_ceil(c);
                        u % c + c * (key.bits(e, 2 * k) % members as u64) as usize
                    } else {
                        (key.bits(e, 2 * k + 1) % n as u64) as usize
                    };
                    if v != u || k > 64 {
                        return (u as NodeId, v as NodeId);
                    }
                    k += 1;
                }
            }
        }
    }

    /// One R-MAT pair over `2^levels` ids folded onto `0..n`: at each level a quadrant with
    /// probabilities (0.57, 0.19, 0.19, 0.05), four levels per 64-bit draw (16 bits each).
    #[inline]
    fn rmat_pair(&self, row: graphloom_tensor::rng::RowKey, attempt: u64) -> (usize, usize) {
        const A: u64 = 37_355; // 0.57 * 2^16
        const AB: u64 = 49_807; // 0.76 * 2^16
        const ABC: u64 = 62_259; // 0.95 * 2^16
        let (mut u, mut v) = (0usize, 0usize);
        let mut bits = 0u64;
        for level in 0..self.levels {
            if level % 4 == 0 {
                bits = row.bits(16 * attempt + u64::from(level / 4));
            }
            let r = bits & 0xFFFF;
            bits >>= 16;
            let (du, dv) = if r < A {
                (0, 0)
            } else if r < AB {
                (0, 1)
            } else if r < ABC {
                (1, 0)
            } else {
                (1, 1)
            };
            u = 2 * u + du;
            v = 2 * v + dv;
        }
        (u % self.n, v % self.n)
    }

    /// The class of node `v`.
    pub(crate) fn class(&self, v: usize) -> i64 {
        (v % self.classes) as i64
    }
}

/// Feature values: a per-class mean of norm `signal` (Gaussian directions, drawn once per
/// class) plus noise of unit variance per column. The noise is a sum of four uniform draws
/// (Irwin-Hall, scaled to unit variance, within +-3.5): close to Gaussian and one hash per
/// value, which matters at billions of values.
#[derive(Clone)]
pub(crate) struct FeatureDraws {
    /// `classes x dim` class means, already scaled.
    means: Vec<f64>,
    noise: RngKey,
    dim: usize,
}

impl FeatureDraws {
    pub(crate) fn new(cfg: &SyntheticConfig, draws: &Draws) -> FeatureDraws {
        let key = RngKey::new(cfg.seed, 0, 0x5717);
        let mean = key.derive(1);
        let d = cfg.feat_dim;
        let scale = cfg.signal / (d.max(1) as f64).sqrt();
        let means = (0..draws.classes * d)
            .map(|i| scale * mean.normal((i / d) as u64, (i % d) as u64))
            .collect();
        FeatureDraws {
            means,
            noise: key.derive(2),
            dim: d,
        }
    }

    /// Column `j` of node `v` of class `class`.
    #[inline]
    pub(crate) fn value(&self, v: usize, class: i64, j: usize) -> f64 {
        let bits = self.noise.bits(v as u64, j as u64);
        let sum: u64 = (0..4).map(|k| (bits >> (16 * k)) & 0xFFFF).sum();
        // Four uniforms on [0, 1) sum to mean 2, variance 1/3.
        let noise = (sum as f64 / 65536.0 - 2.0) * 3f64.sqrt();
        self.means[class as usize * self.dim + j] + noise
    }

    /// Rows `rows` into `out` (`rows.len() * dim` elements), each value stored as `store`
    /// makes it (f32, or bf16 bits).
    pub(crate) fn fill<E: Send>(
        &self,
        draws: &Draws,
        rows: std::ops::Range<usize>,
        out: &mut [E],
        store: impl Fn(f64) -> E + Sync,
    ) {
        out.par_chunks_mut(self.dim.max(1))
            .zip(rows.into_par_iter())
            .for_each(|(row, v)| {
                let class = draws.class(v);
                for (j, x) in row.iter_mut().enumerate() {
                    *x = store(self.value(v, class, j));
                }
            });
    }
}

/// A feature value as f32.
pub(crate) fn as_f32(v: f64) -> f32 {
    v as f32
}

/// A feature value as bf16 bits, as bf16 features are stored.
pub(crate) fn as_bf16_bits(v: f64) -> u16 {
    bf16::from_f64(v).to_bits()
}

/// The train, validation and test ids (each sorted).
pub(crate) fn split_ids(cfg: &SyntheticConfig, n: usize) -> [Vec<usize>; 3] {
    match cfg.split {
        SplitSizes::Fractions(a, b, c) => {
            let (train, valid, test) = random_split(n, a, b, c, cfg.seed);
            [train, valid, test]
        }
        SplitSizes::Counts(a, b, c) => {
            // Distinct nodes drawn one by one (a bit per node marks those taken): memory of
            // n / 8 bytes plus the split itself, whatever the graph's size.
            let key = RngKey::new(cfg.seed, 0, 0x5918);
            let mut taken = vec![0u64; n.div_ceil(64)];
            let mut chosen = Vec::with_capacity(a + b + c);
            let mut i = 0u64;
            while chosen.len() < a + b + c {
                let v = (key.bits(i, 0) % n as u64) as usize;
                i += 1;
                if taken[v / 64] & (1 << (v % 64)) == 0 {
                    taken[v / 64] |= 1 << (v % 64);
                    chosen.push(v);
                }
            }
            let sorted = |s: &[usize]| {
                let mut v = s.to_vec();
                v.sort_unstable();
                v
            };
            [
                sorted(&chosen[..a]),
                sorted(&chosen[a..a + b]),
                sorted(&chosen[a + b..]),
            ]
        }
    }
}

/// Whether nodes outside the splits are unlabelled.
pub(crate) fn unlabelled_outside_splits(cfg: &SyntheticConfig) -> bool {
    matches!(cfg.split, SplitSizes::Counts(..))
}

/// The dataset's `meta.json`.
pub(crate) fn meta(cfg: &SyntheticConfig, draws: &Draws) -> Meta {
    Meta {
        name: format!("synthetic-{}", draws.n),
        num_nodes: draws.n,
        num_edges: draws.num_edges() as usize,
        feat_dim: cfg.feat_dim,
        feat_dtype: if cfg.feat_dtype == DType::BF16 {
            "bf16"
        } else {
            "f32"
        }
        .into(),
        num_classes: draws.classes,
        directed: draws.directed,
    }
}

/// Generates the dataset in memory: node `v` has class `v mod classes` (or -1 outside the
/// splits, for split counts); the edges are drawn by `cfg.edge_model`; features are a
/// per-class mean plus unit noise. [`write()`](super::write()) streams the same dataset to disk.
pub fn generate(cfg: &SyntheticConfig) -> Result<Dataset> {
    let draws = Draws::new(cfg)?;
    let n = draws.n;
    let (src, dst): (Vec<NodeId>, Vec<NodeId>) = (0..draws.num_edges())
        .into_par_iter()
        .map(|i| draws.edge(i))
        .unzip();
    let graph = {
        let _g = category_scope(Category::Graph);
        Csr::from_edges(n, &src, &dst)
    };
    drop((src, dst));
    let d = cfg.feat_dim;
    let values = FeatureDraws::new(cfg, &draws);
    let features = {
        let _g = category_scope(Category::Features);
        if cfg.feat_dtype == DType::BF16 {
            let mut bits = vec![0u16; n * d];
            values.fill(&draws, 0..n, &mut bits, as_bf16_bits);
            Tensor::from_vec(
                bits.into_iter().map(bf16::from_bits).collect::<Vec<_>>(),
                &[n, d],
            )?
        } else {
            let mut v = vec![0f32; n * d];
            values.fill(&draws, 0..n, &mut v, as_f32);
            Tensor::from_vec(v, &[n, d])?
        }
    };
    let [train_idx, valid_idx, test_idx] = split_ids(cfg, n);
    let mut labels: Vec<i64> = (0..n).map(|v| draws.class(v)).collect();
    if unlabelled_outside_splits(cfg) {
        let mut keep = vec![false; n];
        for &v in train_idx.iter().chain(&valid_idx).chain(&test_idx) {
            keep[v] = true;
        }
        for (v, l) in labels.iter_mut().enumerate() {
            if !keep[v] {
                *l = UNLABELLED;
            }
        }
    }
    Ok(Dataset {
        meta: meta(cfg, &draws),
        graph,
        features,
        labels,
        targets: None,
        train_idx,
        valid_idx,
        test_idx,
        edge_weight: None,
        edge_features: None,
    })
}
