//! Planted targets: multi-label labels or regression targets that a two-layer GCN can learn
//! exactly, for checking multi-label classification and regression end to end.
//!
//! The signal is `Z = S^2 X W`, with `S = D^-1/2 (A + I) D^-1/2` (GCN's propagation, `D` the
//! in-degrees plus one), `X` the features and `W` a `[feat_dim, T]` Gaussian projection; each
//! column of `Z` is standardised. Regression's targets are `Z + noise * N(0, 1)`; multi-label
//! labels are `Z + noise * N(0, 1) > c_j`, with thresholds `c_j = 0.4 (j mod 4)` so that the
//! labels' positive rates differ (about 50%, 34%, 21%, 12% at low noise). A 2-layer GCN
//! represents `S^2 X W` exactly (`S relu(S X [W, -W]) [I; -I]`), so the noise alone bounds
//! what it reaches: at noise 0.3, R² about 0.92.

use graphloom_graph::{Dataset, NodeTargets, TargetKind};
use graphloom_tensor::rng::RngKey;
use rayon::prelude::*;

/// The purpose of the draws of planted targets.
const TARGETS_PURPOSE: u64 = 0x5441_5247;

/// What targets to plant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlantedTargets {
    /// Binary labels (multi-label) or real targets (regression).
    pub kind: TargetKind,
    /// Targets per node.
    pub width: usize,
    /// Standard deviation of the noise added to the standardised signal.
    pub noise: f64,
    /// Share of the targets past each node's first left missing (-1, or NaN); the first is
    /// always present, so every node has a target and may be in a split.
    pub missing: f64,
}

/// Replaces the classes of `ds` by targets planted as `planted` says, drawn from `seed`; its
/// `meta.json`'s `num_classes` becomes their width.
pub fn plant(ds: &mut Dataset, planted: &PlantedTargets, seed: u64) {
    let (n, d, t) = (ds.graph.num_nodes(), ds.meta.feat_dim, planted.width);
    let key = RngKey::new(seed, 0, TARGETS_PURPOSE);
    let projection = key.derive(0);
    let scale = 1.0 / (d.max(1) as f64).sqrt();
    let w: Vec<f64> = (0..d * t)
        .map(|i| scale * projection.normal((i / t) as u64, (i % t) as u64))
        .collect();
    let x = ds.features.to_vec_f64();
    let mut z = vec![0f64; n * t];
    z.par_chunks_mut(t).enumerate().for_each(|(v, out)| {
        for (k, &xv) in x[v * d..(v + 1) * d].iter().enumerate() {
            for (o, wk) in out.iter_mut().zip(&w[k * t..(k + 1) * t]) {
                *o += xv * wk;
            }
        }
    });
    let g = &ds.graph;
    let inv_sqrt: Vec<f64> = (0..n)
        .map(|v| 1.0 / ((g.row_ptr[v + 1] - g.row_ptr[v] + 1) as f64).sqrt())
        .collect();
    for _ in 0..2 {
        let mut next = vec![0f64; n * t];
        next.par_chunks_mut(t).enumerate().for_each(|(v, out)| {
            let sources = g.col_idx[g.row_ptr[v] as usize..g.row_ptr[v + 1] as usize].iter();
            for u in sources.map(|&u| u as usize).chain([v]) {
                let c = inv_sqrt[u] * inv_sqrt[v];
                for (o, zu) in out.iter_mut().zip(&z[u * t..(u + 1) * t]) {
                    *o += c * zu;
                }
            }
        });
        z = next;
    }
    for j in 0..t {
        let column = || z.iter().skip(j).step_by(t);
        let mean = column().sum::<f64>() / n as f64;
        let var = column().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let sd = var.sqrt().max(f64::MIN_POSITIVE);
        for v in 0..n {
            z[v * t + j] = (z[v * t + j] - mean) / sd;
        }
    }
    let (noise, missing) = (key.derive(1), key.derive(2));
    let values = z
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let (v, j) = ((i / t) as u64, (i % t) as u64);
            if j > 0 && missing.uniform(v, j) < planted.missing {
                return f32::NAN;
            }
            let y = s + planted.noise * noise.normal(v, j);
            match planted.kind {
                TargetKind::Real => y as f32,
                TargetKind::Binary => f32::from(u8::from(y > 0.4 * (j % 4) as f64)),
            }
        })
        .collect();
    let targets = NodeTargets {
        width: t,
        values,
        kind: planted.kind,
    };
    ds.labels = targets.markers();
    ds.targets = Some(targets);
    ds.meta.num_classes = t;
}
