//! The heterogeneous dataset reader, [`HeteroDataset::open`]: `meta.json`, each relation's
//! CSR over its types, the target type's labels and splits, each type's features (a module of
//! the graph crate's targets).

use graphloom_graph::HeteroDataset;

use super::{errors, npy_bytes};
use crate::mutate::{plain, Files, Target};

/// A heterogeneous dataset directory (papers with features and labels, authors without;
/// authors write papers, papers cite papers), opened and checked by [`HeteroDataset::open`].
pub(crate) fn hetero() -> Target {
    // Papers 0..4, authors 0..3: the CSR by destination of each relation.
    let files: Files = vec![
        (
            "edges/author__writes__paper/csr_row_ptr.npy".into(),
            npy_bytes(&[0i64, 1, 3, 4, 6], &[5]),
        ),
        (
            "edges/author__writes__paper/csr_col_idx.npy".into(),
            npy_bytes(&[0i32, 0, 1, 2, 1, 2], &[6]),
        ),
        (
            "edges/paper__cites__paper/csr_row_ptr.npy".into(),
            npy_bytes(&[0i64, 0, 1, 2, 4], &[5]),
        ),
        (
            "edges/paper__cites__paper/csr_col_idx.npy".into(),
            npy_bytes(&[0i64, 1, 0, 2], &[4]),
        ),
        (
            "edges/paper__cites__paper/edge_weight.npy".into(),
            npy_bytes(&[1.0f32, 0.5, 2.0, 1.0], &[4]),
        ),
        (
            "meta.json".into(),
            serde_json::json!({
                "name": "fuzz-hetero", "format": "hetero",
                "node_types": {
                    "paper": {"num_nodes": 4, "feat_dim": 3, "feat_dtype": "f32"},
                    "author": {"num_nodes": 3, "feat_dim": 0},
                },
                "edge_types": [["author", "writes", "paper"], ["paper", "cites", "paper"]],
                "target_node_type": "paper", "num_classes": 2, "directed": true,
            })
            .to_string()
            .into_bytes(),
        ),
        (
            "nodes/paper/node_feat.npy".into(),
            npy_bytes(&[0.25f32; 12], &[4, 3]),
        ),
        (
            "nodes/paper/node_label.npy".into(),
            npy_bytes(&[0i64, 1, 1, 0], &[4]),
        ),
        (
            "nodes/paper/train_idx.npy".into(),
            npy_bytes(&[0i64, 1], &[2]),
        ),
        ("nodes/paper/valid_idx.npy".into(), npy_bytes(&[2i64], &[1])),
        ("nodes/paper/test_idx.npy".into(), npy_bytes(&[3i64], &[1])),
    ];
    Target {
        name: "hetero",
        files,
        encode: plain,
        read: |dir| errors([HeteroDataset::open(dir).map(|ds| walk_hetero(&ds))]),
        alloc_factor: 16,
    }
}

/// What an opened heterogeneous dataset promises: each relation's offsets span its edges, one
/// per destination and one more; the splits fit the target type.
fn walk_hetero(ds: &HeteroDataset) {
    for r in &ds.relations {
        let offsets = r.row_ptr.as_slice();
        assert_eq!(offsets.len(), ds.meta.num_nodes(&r.relation[2]) + 1);
        assert_eq!(offsets.last().copied(), Some(r.num_edges as i64));
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
    }
    let target = ds.meta.num_nodes(&ds.meta.target_node_type);
    assert!(ds.splits.iter().sum::<usize>() <= target);
}
