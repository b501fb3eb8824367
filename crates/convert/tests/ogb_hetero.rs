//! OGB's heterogeneous raw layout (ogbn-mag's) converted to a heterogeneous dataset directory,
//! on a small dataset written in that layout here; and its damage refused naming the file.

mod common;
use common::gz;

use std::path::{Path, PathBuf};

use graphloom_convert::ogb_hetero;
use graphloom_graph::{npy, HeteroDataset};

/// ogbn-mag's layout in miniature: 4 papers (2 features, labelled), 3 authors, 2 fields;
/// authors write papers, papers cite papers, papers have topics; a time split of papers.
fn raw(name: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!(
        "graphloom-ogb-hetero-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join("ogbn_mag");
    let r = dir.join("raw");
    gz(
        r.join("num-node-dict.csv.gz"),
        "author,field_of_study,paper\n3,2,4\n",
    );
    gz(
        r.join("relations/author___writes___paper/edge.csv.gz"),
        "0,0\n0,1\n1,1\n2,3\n",
    );
    gz(
        r.join("relations/paper___cites___paper/edge.csv.gz"),
        "1,0\n2,0\n3,2\n",
    );
    gz(
        r.join("relations/paper___has_topic___field_of_study/edge.csv.gz"),
        "0,0\n1,1\n2,1\n3,1\n",
    );
    gz(
        r.join("node-feat/paper/node-feat.csv.gz"),
        "0.1,0.2\n0.3,0.4\n0.5,0.6\n0.7,0.8\n",
    );
    gz(r.join("node-label/paper/node-label.csv.gz"), "0\n2\n1\n2\n");
    let split = dir.join("split/time/paper");
    gz(split.join("train.csv.gz"), "0\n1\n");
    gz(split.join("valid.csv.gz"), "2\n");
    gz(split.join("test.csv.gz"), "3\n");
    dir
}

fn ints(path: &Path) -> Vec<i64> {
    npy::read_ints(path).unwrap().data
}

#[test]
fn ogbn_mag_layout_converts_with_each_relation_reversed() {
    let dir = raw("converts");
    assert!(ogb_hetero::has_layout(&dir));
    let out = dir.parent().unwrap().join("out");
    let ds = ogb_hetero::write(&dir, true, &out).unwrap();
    let m = &ds.meta;
    assert_eq!(m.target_node_type, "paper");
    assert_eq!(m.num_classes, 3);
    assert_eq!(m.node_types["paper"].feat_dim, 2);
    assert_eq!(m.node_types["author"].feat_dim, 0);
    let names: Vec<String> = m.edge_types.iter().map(|r| r.join("__")).collect();
    assert_eq!(
        names,
        [
            "author__writes__paper",
            "paper__cites__paper",
            "paper__has_topic__field_of_study",
            "paper__rev_writes__author",
            "paper__rev_cites__paper",
            "field_of_study__rev_has_topic__paper",
        ]
    );
    assert_eq!(ds.splits, [2, 1, 1]);
    // author -> paper by destination paper: paper 0 from author 0, paper 1 from 0 and 1,
    // paper 3 from 2; reversed, author 0 from papers 0 and 1, author 1 from 1, author 2 from 3.
    let writes = out.join("edges/author__writes__paper");
    assert_eq!(ints(&writes.join("csr_row_ptr.npy")), [0, 1, 3, 3, 4]);
    assert_eq!(ints(&writes.join("csr_col_idx.npy")), [0, 0, 1, 2]);
    let rev = out.join("edges/paper__rev_writes__author");
    assert_eq!(ints(&rev.join("csr_row_ptr.npy")), [0, 2, 3, 4]);
    assert_eq!(ints(&rev.join("csr_col_idx.npy")), [0, 1, 1, 3]);
    assert_eq!(ints(&out.join("nodes/paper/node_label.npy")), [0, 2, 1, 2]);
    let feat = npy::read::<f32>(&out.join("nodes/paper/node_feat.npy")).unwrap();
    assert_eq!(feat.shape, [4, 2]);
    assert_eq!(feat.data[5], 0.6);
    // Without the reverses, the relations as published.
    let plain = dir.parent().unwrap().join("plain");
    let ds = ogb_hetero::write(&dir, false, &plain).unwrap();
    assert_eq!(ds.relations.len(), 3);
    assert!(HeteroDataset::open(&plain).is_ok());
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn damaged_ogbn_mag_layouts_are_refused_naming_the_file() {
    // The case, the file written over, its text, what the error says (and the file it names).
    let cases: [(&str, &str, &str, &str, &str); 4] = [
        (
            "edge",
            "raw/relations/author___writes___paper/edge.csv.gz",
            "0,0\n3,1\n",
            "line 2: edge 3,1 is outside \"author\" (3 nodes)",
            "author___writes___paper/edge.csv.gz",
        ),
        (
            "type",
            "raw/relations/author___writes___venue/edge.csv.gz",
            "0,0\n",
            "names node type \"venue\"",
            "relations/author___writes___venue",
        ),
        (
            "features",
            "raw/node-feat/paper/node-feat.csv.gz",
            "0.1,0.2\n0.3\n",
            "line 2 has 1 values, the first has 2",
            "paper/node-feat.csv.gz",
        ),
        (
            "split",
            "split/time/paper/test.csv.gz",
            "9\n",
            "line 1: 9 is not a node of \"paper\"",
            "paper/test.csv.gz",
        ),
    ];
    for (name, file, text, expected, named) in cases {
        let dir = raw(name);
        gz(dir.join(file), text);
        let out = dir.parent().unwrap().join("out");
        let e = ogb_hetero::write(&dir, true, &out)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(expected) && e.contains(named), "{name}: {e}");
        assert!(!out.exists(), "{name}: a refused conversion writes nothing");
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }
}
