//! A heterogeneous dataset directory (DESIGN.md's layout, as make_hetero.py writes it): opened
//! and checked, and each kind of damage refused naming its file.

use std::path::{Path, PathBuf};

use graphloom_graph::{npy, HeteroDataset, Meta};

/// Writes the CSR by destination of `(src, dst)` edges over `n_dst` destinations.
fn write_relation(root: &Path, name: &str, edges: &[(i64, i64)], n_dst: usize) {
    let dir = root.join("edges").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut sorted = edges.to_vec();
    sorted.sort_by_key(|&(s, d)| (d, s));
    let mut row_ptr = vec![0i64; n_dst + 1];
    for &(_, d) in &sorted {
        row_ptr[d as usize + 1] += 1;
    }
    for i in 0..n_dst {
        row_ptr[i + 1] += row_ptr[i];
    }
    let col: Vec<i32> = sorted.iter().map(|&(s, _)| s as i32).collect();
    npy::write(&dir.join("csr_row_ptr.npy"), &row_ptr, &[n_dst + 1]).unwrap();
    npy::write(&dir.join("csr_col_idx.npy"), &col, &[col.len()]).unwrap();
}

/// Papers (5, 4 features, labelled), authors (3) and fields (2) without features; authors
/// write papers (and the reverse), papers have topics.
fn hetero(name: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("graphloom-hetero-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let writes = [(0, 0), (0, 1), (1, 1), (2, 3), (2, 4), (1, 2)];
    write_relation(&root, "author__writes__paper", &writes, 5);
    let reverse: Vec<(i64, i64)> = writes.iter().map(|&(a, p)| (p, a)).collect();
    write_relation(&root, "paper__rev_writes__author", &reverse, 3);
    write_relation(
        &root,
        "paper__has_topic__field",
        &[(0, 0), (3, 1), (4, 1)],
        2,
    );
    let paper = root.join("nodes/paper");
    std::fs::create_dir_all(&paper).unwrap();
    for t in ["author", "field"] {
        std::fs::create_dir_all(root.join("nodes").join(t)).unwrap();
    }
    npy::write(&paper.join("node_feat.npy"), &[0.5f32; 20], &[5, 4]).unwrap();
    npy::write(&paper.join("node_label.npy"), &[0i64, 1, 2, 0, 1], &[5]).unwrap();
    npy::write(&paper.join("train_idx.npy"), &[0i64, 1, 2], &[3]).unwrap();
    npy::write(&paper.join("valid_idx.npy"), &[3i64], &[1]).unwrap();
    npy::write(&paper.join("test_idx.npy"), &[4i64], &[1]).unwrap();
    let meta = serde_json::json!({
        "name": "tiny-hetero", "format": "hetero",
        "node_types": {
            "paper": {"num_nodes": 5, "feat_dim": 4, "feat_dtype": "f32"},
            "author": {"num_nodes": 3, "feat_dim": 0},
            "field": {"num_nodes": 2, "feat_dim": 0},
        },
        "edge_types": [["author", "writes", "paper"], ["paper", "rev_writes", "author"],
                       ["paper", "has_topic", "field"]],
        "target_node_type": "paper", "num_classes": 3, "directed": true,
    });
    std::fs::write(root.join("meta.json"), meta.to_string()).unwrap();
    root
}

/// Why `HeteroDataset::open` refuses `dir` after `damage`.
fn refusal(name: &str, damage: impl FnOnce(&Path)) -> String {
    let dir = hetero(name);
    damage(&dir);
    let e = HeteroDataset::open(&dir)
        .err()
        .expect("refused")
        .to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    e
}

fn edit_meta(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("meta.json");
    let mut meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut meta);
    std::fs::write(&path, meta.to_string()).unwrap();
}

#[test]
fn a_heterogeneous_directory_opens_with_its_types_and_relations() {
    let dir = hetero("opens");
    let ds = HeteroDataset::open(&dir).unwrap();
    assert_eq!(ds.meta.node_types.len(), 3);
    let edges: Vec<(String, usize, usize)> = ds
        .relations
        .iter()
        .map(|r| (r.relation[1].clone(), r.num_edges, r.max_in_degree))
        .collect();
    assert_eq!(
        edges,
        [
            ("writes".to_string(), 6, 2),
            ("rev_writes".to_string(), 6, 2),
            ("has_topic".to_string(), 3, 2)
        ]
    );
    assert_eq!(ds.splits, [3, 1, 1]);
    assert_eq!(ds.features.get("paper"), Some(&vec![5, 4]));
    assert!(!ds.features.contains_key("author"));
    // The homogeneous reader says what the directory is, in one line.
    let e = Meta::read(&dir).unwrap_err().to_string();
    assert!(
        e.contains("is a heterogeneous dataset") && !e.contains('\n'),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn damaged_heterogeneous_directories_are_refused_naming_the_file() {
    let e = refusal("unknown-type", |d| {
        edit_meta(d, |m| m["edge_types"][2][2] = "venue".into())
    });
    assert!(e.contains("names node type \"venue\""), "{e}");
    let e = refusal("twice", |d| {
        edit_meta(d, |m| {
            let first = m["edge_types"][0].clone();
            m["edge_types"].as_array_mut().unwrap().push(first)
        })
    });
    assert!(e.contains("author__writes__paper is listed twice"), "{e}");
    // Offsets sized for another type: 3 papers' instead of 5.
    let e = refusal("row-ptr", |d| {
        let path = d.join("edges/author__writes__paper/csr_row_ptr.npy");
        npy::write(&path, &[0i64, 2, 4, 6], &[4]).unwrap();
    });
    assert!(
        e.contains("csr_row_ptr.npy") && e.contains("destination type \"paper\""),
        "{e}"
    );
    // A source beyond the source type (authors are 0..3).
    let e = refusal("source", |d| {
        let path = d.join("edges/author__writes__paper/csr_col_idx.npy");
        npy::write(&path, &[0i32, 0, 1, 7, 2, 2], &[6]).unwrap();
    });
    assert!(
        e.contains("csr_col_idx.npy")
            && e.contains("entry 3 is 7, not an id of source type \"author\""),
        "{e}"
    );
    let e = refusal("labels", |d| {
        std::fs::remove_file(d.join("nodes/paper/node_label.npy")).unwrap()
    });
    assert!(
        e.contains("node_label.npy") && e.contains("needs a label per node"),
        "{e}"
    );
    let e = refusal("split", |d| {
        npy::write(&d.join("nodes/paper/test_idx.npy"), &[5i64], &[1]).unwrap()
    });
    assert!(
        e.contains("test_idx.npy") && e.contains("not a node of the target type"),
        "{e}"
    );
    let e = refusal("features", |d| {
        npy::write(&d.join("nodes/paper/node_feat.npy"), &[0.5f32; 12], &[3, 4]).unwrap()
    });
    assert!(
        e.contains("node_feat.npy") && e.contains("node type \"paper\""),
        "{e}"
    );
    let e = refusal("target", |d| {
        edit_meta(d, |m| m["target_node_type"] = "venue".into())
    });
    assert!(e.contains("target_node_type \"venue\""), "{e}");
}
