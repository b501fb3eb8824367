//! A small random dataset for the unit tests of this crate (the synthetic generator lives in
//! `graphloom-convert`, which depends on this crate, so unit tests here cannot use it).

use graphloom_tensor::rng::RngKey;
use graphloom_tensor::Tensor;

use crate::format::dataset::{random_split, Dataset};
use crate::format::meta::Meta;
use crate::{Csr, NodeId};

/// An undirected graph of `nodes` nodes and about `avg_degree` in-neighbours each (uniform
/// pairs stored in both directions), 4 features and 4 classes (node `v` has class `v mod 4`),
/// split 60/20/20; all drawn from `seed`.
pub(crate) fn random_dataset(nodes: usize, avg_degree: usize, seed: u64) -> Dataset {
    let key = RngKey::new(seed, 0, 0x7e57);
    let pairs = nodes * avg_degree / 2;
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for i in 0..pairs as u64 {
        let u = (key.bits(i, 0) % nodes as u64) as NodeId;
        let v = (key.bits(i, 1) % nodes as u64) as NodeId;
        src.extend([u, v]);
        dst.extend([v, u]);
    }
    let graph = Csr::from_edges(nodes, &src, &dst);
    let (feat_dim, classes) = (4, 4);
    let values: Vec<f32> = (0..nodes * feat_dim)
        .map(|i| key.uniform(i as u64, 2) as f32)
        .collect();
    let (train_idx, valid_idx, test_idx) = random_split(nodes, 0.6, 0.2, 0.2, seed);
    Dataset {
        meta: Meta {
            name: format!("random-{nodes}"),
            num_nodes: nodes,
            num_edges: graph.num_edges(),
            feat_dim,
            feat_dtype: "f32".into(),
            num_classes: classes,
            directed: false,
        },
        graph,
        features: Tensor::from_vec(values, &[nodes, feat_dim]).unwrap(),
        labels: (0..nodes as i64).map(|v| v % classes as i64).collect(),
        targets: None,
        edge_features: None,
        train_idx,
        valid_idx,
        test_idx,
        edge_weight: None,
    }
}
