//! A synthetic node-classification graph of any size whose labels are learnable: a stochastic
//! block model with class-dependent Gaussian features.

use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{bf16, DType, Tensor};
use rayon::prelude::*;

use crate::{random_split, Csr, Dataset, Error, Meta, NodeId, Result};

/// The parameters of [`generate`].
#[derive(Clone, Debug)]
pub struct SyntheticConfig {
    /// Number of nodes.
    pub nodes: usize,
    /// Average in-degree (edges = nodes * avg_degree, counting both directions).
    pub avg_degree: usize,
    /// Feature width.
    pub feat_dim: usize,
    /// Number of classes.
    pub classes: usize,
    /// Share of edges that join two nodes of one class (the rest join uniform pairs).
    pub homophily: f64,
    /// Norm of the class signal in the features, relative to unit Gaussian noise per column.
    pub signal: f64,
    /// Feature dtype: f32 or bf16.
    pub feat_dtype: DType,
    /// Seed of every draw.
    pub seed: u64,
    /// How the edges are drawn.
    pub edges: EdgeModel,
}

/// How a synthetic graph's edges are drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EdgeModel {
    /// A stochastic block model: a share `homophily` of the pairs join two nodes of one class,
    /// the rest join uniform pairs. Degrees are close to Poisson.
    #[default]
    Sbm,
    /// R-MAT with the Graph500 quadrant probabilities (0.57, 0.19, 0.19, 0.05): a power-law
    /// degree distribution with hubs; the classes only shape the features.
    Rmat,
}

/// One R-MAT pair for draw `e` over `2^levels` ids folded onto `0..n`: at each level, pick a
/// quadrant with probabilities (a, b, c, d) = (0.57, 0.19, 0.19, 0.05).
fn rmat_pair(key: RngKey, e: u64, attempt: u64, levels: u32, n: usize) -> (usize, usize) {
    let (mut u, mut v) = (0usize, 0usize);
    for level in 0..levels {
        let r = key.uniform(e, u64::from(level) + 64 * attempt);
        let (du, dv) = if r < 0.57 {
            (0, 0)
        } else if r < 0.76 {
            (0, 1)
        } else if r < 0.95 {
            (1, 0)
        } else {
            (1, 1)
        };
        u = 2 * u + du;
        v = 2 * v + dv;
    }
    (u % n, v % n)
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        SyntheticConfig {
            edges: EdgeModel::Sbm,
            nodes: 10_000,
            avg_degree: 10,
            feat_dim: 64,
            classes: 8,
            homophily: 0.5,
            signal: 2.0,
            feat_dtype: DType::F32,
            seed: 0,
        }
    }
}

/// Generates the dataset: node `v` has class `v mod classes`; `nodes * avg_degree / 2` pairs
/// are drawn (by `cfg.edges`) and stored in both directions; features are
/// a per-class mean plus unit noise; a 60/20/20 random split. Every draw is keyed by ids, so
/// the result does not depend on the thread count.
pub fn generate(cfg: &SyntheticConfig) -> Result<Dataset> {
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
    let n = cfg.nodes.max(2);
    let c = cfg.classes.clamp(1, n);
    let pairs = n * cfg.avg_degree / 2;
    let key = RngKey::new(cfg.seed, 0, 0x5717);
    let edges: Vec<(NodeId, NodeId)> = (0..pairs as u64)
        .into_par_iter()
        .map(|e| {
            if cfg.edges == EdgeModel::Rmat {
                let levels = n.next_power_of_two().trailing_zeros();
                for attempt in 0..64 {
                    let (u, v) = rmat_pair(key, e, attempt, levels, n);
                    if u != v || attempt == 63 {
                        return (u as NodeId, v as NodeId);
                    }
                }
            }
            let u = (key.bits(e, 0) % n as u64) as usize;
            let mut k = 1;
            loop {
                let v = if key.uniform(e, 1) < cfg.homophily {
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
        })
        .collect();
    let (mut src, mut dst): (Vec<NodeId>, Vec<NodeId>) = edges.into_iter().unzip();
    let (s2, d2) = (dst.clone(), src.clone());
    src.extend(s2);
    dst.extend(d2);
    let graph = {
        let _g = category_scope(Category::Graph);
        Csr::from_edges(n, &src, &dst)
    };
    drop((src, dst));
    let d = cfg.feat_dim;
    let mean_key = key.derive(1);
    let noise_key = key.derive(2);
    let scale = cfg.signal / (d.max(1) as f64).sqrt();
    let value = |i: usize| {
        let (v, j) = (i / d, i % d);
        let class = (v % c) as u64;
        scale * mean_key.normal(class, j as u64) + noise_key.normal(v as u64, j as u64)
    };
    let features = {
        let _g = category_scope(Category::Features);
        match cfg.feat_dtype {
            DType::BF16 => Tensor::from_vec(
                (0..n * d)
                    .into_par_iter()
                    .map(|i| bf16::from_f64(value(i)))
                    .collect::<Vec<_>>(),
                &[n, d],
            )?,
            _ => Tensor::from_vec(
                (0..n * d)
                    .into_par_iter()
                    .map(|i| value(i) as f32)
                    .collect::<Vec<_>>(),
                &[n, d],
            )?,
        }
    };
    let labels = (0..n).map(|v| (v % c) as i64).collect();
    let (train_idx, valid_idx, test_idx) = random_split(n, 0.6, 0.2, 0.2, cfg.seed);
    Ok(Dataset {
        meta: Meta {
            name: format!("synthetic-{n}"),
            num_nodes: n,
            num_edges: graph.num_edges(),
            feat_dim: d,
            feat_dtype: features.dtype().name().into(),
            num_classes: c,
            directed: false,
        },
        graph,
        features,
        labels,
        train_idx,
        valid_idx,
        test_idx,
        edge_weight: None,
    })
}
