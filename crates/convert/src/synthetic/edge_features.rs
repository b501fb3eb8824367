//! A synthetic graph's edge features with a planted signal: each edge carries its
//! destination's class as a direction of its own, so a model that reads edge features (GINE)
//! can tell a node's class from its in-edges alone, where the graph and the node features may
//! say little (`--homophily 0`, a weak `--signal`).

use graphloom_graph::Dataset;
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::Tensor;
use rayon::prelude::*;

/// The purpose of the draws of planted edge features.
const EDGE_FEATURES_PURPOSE: u64 = 0x4544_4745;

/// What edge features to plant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlantedEdgeFeatures {
    /// Columns per edge.
    pub dim: usize,
    /// Norm of the class direction relative to unit Gaussian noise per column.
    pub signal: f64,
}

/// `[num_edges, dim]` f32 features for the edges of `ds` in CSR order, drawn from `seed`: edge
/// `u -> v` is `signal` times a unit direction drawn for `v`'s class plus standard Gaussian
/// noise per column (an unlabelled destination's edges are noise alone).
pub fn plant_edge_features(ds: &Dataset, planted: &PlantedEdgeFeatures, seed: u64) -> Tensor {
    let (d, g) = (planted.dim, &ds.graph);
    let key = RngKey::new(seed, 0, EDGE_FEATURES_PURPOSE);
    let classes = ds.meta.num_classes.max(1);
    let directions: Vec<f64> = (0..classes)
        .flat_map(|c| {
            let raw: Vec<f64> = (0..d)
                .map(|j| key.derive(1).normal(c as u64, j as u64))
                .collect();
            let norm = raw.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
            raw.into_iter().map(move |x| planted.signal * x / norm)
        })
        .collect();
    let noise = key.derive(2);
    let mut values = vec![0f32; g.num_edges() * d];
    values
        .par_chunks_mut(d.max(1))
        .enumerate()
        .for_each(|(e, row)| {
            let v = g.row_ptr.partition_point(|&p| p as usize <= e) - 1;
            let class = ds.labels[v];
            for (j, out) in row.iter_mut().enumerate() {
                let signal = if class >= 0 {
                    directions[class as usize * d + j]
                } else {
                    0.0
                };
                *out = (signal + noise.normal(e as u64, j as u64)) as f32;
            }
        });
    Tensor::from_vec(values, &[g.num_edges(), d]).expect("the shape holds the values")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{generate, SyntheticConfig};

    #[test]
    fn edges_carry_their_destination_s_class() {
        let ds = generate(&SyntheticConfig {
            nodes: 400,
            avg_degree: 6,
            feat_dim: 4,
            classes: 3,
            seed: 2,
            ..Default::default()
        })
        .unwrap();
        let planted = PlantedEdgeFeatures {
            dim: 5,
            signal: 3.0,
        };
        let f = plant_edge_features(&ds, &planted, 7);
        assert_eq!(f.shape(), &[ds.graph.num_edges(), 5]);
        let values = f.to_vec_f64();
        // Per class, the mean edge row of its destinations is the class direction, of norm
        // `signal` (noise averages out over about 800 edges a class: a standard error of
        // 0.035 per column), and different classes' means differ.
        let mut sums = [[0f64; 5]; 3];
        let mut counts = [0usize; 3];
        for v in 0..ds.graph.num_nodes() {
            let c = ds.labels[v] as usize;
            for e in ds.graph.row_ptr[v] as usize..ds.graph.row_ptr[v + 1] as usize {
                counts[c] += 1;
                for j in 0..5 {
                    sums[c][j] += values[e * 5 + j];
                }
            }
        }
        let means: Vec<Vec<f64>> = (0..3)
            .map(|c| sums[c].iter().map(|s| s / counts[c] as f64).collect())
            .collect();
        for m in &means {
            let norm = m.iter().map(|x| x * x).sum::<f64>().sqrt();
            assert!((norm - 3.0).abs() < 0.3, "{norm}");
        }
        let gap: f64 = (0..5).map(|j| (means[0][j] - means[1][j]).powi(2)).sum();
        assert!(gap.sqrt() > 1.0, "{gap}");
    }
}
