//! Converting the raw Cora files gives PyG's Planetoid dataset.

use std::path::PathBuf;

use graphloom_convert::planetoid;
use graphloom_graph::Dataset;

/// The raw Cora files kept in the repository (`testdata/planetoid`).
fn planetoid_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/planetoid")
}

#[test]
fn cora_matches_pyg_planetoid() {
    let ds = planetoid::convert(&planetoid_dir(), "cora").unwrap();
    assert_eq!(ds.meta.num_nodes, 2708);
    assert_eq!(ds.meta.num_edges, 10556);
    assert_eq!(ds.meta.feat_dim, 1433);
    assert_eq!(ds.meta.num_classes, 7);
    assert_eq!(
        (ds.train_idx.len(), ds.valid_idx.len(), ds.test_idx.len()),
        (140, 500, 1000)
    );
    assert_eq!(ds.train_idx, (0..140).collect::<Vec<_>>());
    assert_eq!(ds.valid_idx, (140..640).collect::<Vec<_>>());
    // The public split has 20 training nodes per class.
    let mut per_class = [0; 7];
    for &i in &ds.train_idx {
        per_class[ds.labels[i] as usize] += 1;
    }
    assert_eq!(per_class, [20; 7]);
    // Symmetric, no self-loops, no duplicates.
    let g = &ds.graph;
    assert_eq!(g.transpose(), *g);
    for v in 0..g.num_nodes() {
        let nb = g.in_neighbors(v);
        assert!(nb.windows(2).all(|w| w[0] < w[1]) && !nb.contains(&(v as u32)));
    }
    // NormalizeFeatures: bag-of-words rows sum to 1.
    let x = ds.features.as_slice::<f32>().unwrap();
    for row in x.chunks(1433) {
        let s: f32 = row.iter().sum();
        assert!((s - 1.0).abs() < 1e-4 || s == 0.0);
    }
    // Test rows follow the file order of test.index: its first id is 2692.
    assert_eq!(ds.test_idx[0], 2692);
    // Label distribution of all of Cora (PyG: 351, 217, 418, 818, 426, 298, 180).
    let mut all = [0; 7];
    for &l in &ds.labels {
        all[l as usize] += 1;
    }
    assert_eq!(all, [351, 217, 418, 818, 426, 298, 180]);
}

#[test]
fn cora_round_trips_through_the_dataset_directory() {
    let ds = planetoid::convert(&planetoid_dir(), "cora").unwrap();
    let dir = std::env::temp_dir().join(format!("graphloom-cora-{}", std::process::id()));
    ds.save(&dir).unwrap();
    let back = Dataset::load(&dir).unwrap();
    assert_eq!(back.meta, ds.meta);
    assert_eq!(back.graph, ds.graph);
    assert_eq!(back.labels, ds.labels);
    assert_eq!(back.test_idx, ds.test_idx);
    assert_eq!(
        back.features.as_slice::<f32>().unwrap(),
        ds.features.as_slice::<f32>().unwrap()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_raw_file_names_the_file() {
    let dir = std::env::temp_dir();
    let err = planetoid::convert(&dir, "no-such-dataset")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("ind.no-such-dataset.x"), "{err}");
}
