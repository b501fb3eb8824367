//! `prepare` and `info` end to end: abandoned temporaries swept, `info` on streamed, empty and
//! featureless datasets, and on a heterogeneous one.

use graphloom_graph::npy;

mod common;
use common::{graphloom, graphloom_ok, s, scratch, small_dataset};

/// A killed `prepare` leaves its temporary directory; the next run into the same folder
/// removes it.
#[test]
fn abandoned_temporary_directories_are_removed() {
    let root = scratch("tmpsweep");
    // No process has a pid this large (pid_max is at most 2^22).
    let stale = root.join(".ds.tmp-99999999");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("meta.json"), "{").unwrap();
    small_dataset(&root.join("ds"));
    assert!(!stale.exists());
    std::fs::remove_dir_all(&root).unwrap();
}

/// `info` reads headers and streams the offsets: damaged offsets are a one-line error naming
/// the file, and the degrees are those of the graph.
#[test]
fn info_streams_the_offsets() {
    let root = scratch("info-offsets");
    let dir = root.join("ds");
    small_dataset(&dir);
    let out = graphloom(&["info", dir.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = dir.join("csr_row_ptr.npy");
    let mut a = npy::read::<i64>(&p).unwrap();
    let degrees: Vec<i64> = a.data.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(
        info["in_degree"]["max"].as_i64().unwrap(),
        *degrees.iter().max().unwrap()
    );
    // The degree figures against a count of their own.
    let n = degrees.len();
    let isolated = degrees.iter().filter(|&&d| d == 0).count();
    assert_eq!(
        info["isolated_fraction"].as_f64().unwrap(),
        isolated as f64 / n as f64
    );
    let mut sorted = degrees.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let top: i64 = sorted[..n.div_ceil(100)].iter().sum();
    let share = top as f64 / degrees.iter().sum::<i64>() as f64;
    let got = info["top1pct_degree_share"].as_f64().unwrap();
    assert!((got - share).abs() < 1e-9, "{got} against {share}");
    a.data[10] = a.data[9] - 1;
    npy::write(&p, &a.data, &a.shape).unwrap();
    let out = graphloom(&["info", dir.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("csr_row_ptr.npy") && stderr.contains("offset 10"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// `info` on a dataset without nodes prints its shape instead of panicking; a dataset without
/// features needs no feature file.
#[test]
fn info_on_empty_and_featureless_datasets() {
    let root = scratch("info0");
    let dir = root.join("ds");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("meta.json"),
        r#"{"name": "empty", "num_nodes": 0, "num_edges": 0, "feat_dim": 0, "num_classes": 1, "directed": true}"#,
    )
    .unwrap();
    npy::write(&dir.join("csr_row_ptr.npy"), &[0i64], &[1]).unwrap();
    for name in [
        "csr_col_idx",
        "node_label",
        "train_idx",
        "valid_idx",
        "test_idx",
    ] {
        npy::write(&dir.join(format!("{name}.npy")), &[] as &[i64], &[0]).unwrap();
    }
    let out = graphloom(&["info", dir.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("nodes      0"));
    std::fs::remove_dir_all(&root).unwrap();
}

/// `info` reads a heterogeneous dataset per node type and relation; a command that takes one
/// node type and one edge type (`partition`) refuses it in one line.
#[test]
fn info_reads_a_heterogeneous_dataset_and_partition_refuses_it() {
    let root = scratch("hetero-info");
    let dir = root.join("hetero");
    let rel = dir.join("edges/author__writes__paper");
    std::fs::create_dir_all(&rel).unwrap();
    std::fs::create_dir_all(dir.join("nodes/author")).unwrap();
    let paper = dir.join("nodes/paper");
    std::fs::create_dir_all(&paper).unwrap();
    // Papers 0..3 written by authors 0..2: paper 0 by 0, paper 1 by 0 and 1, paper 2 by 1.
    npy::write(&rel.join("csr_row_ptr.npy"), &[0i64, 1, 3, 4], &[4]).unwrap();
    npy::write(&rel.join("csr_col_idx.npy"), &[0i32, 0, 1, 1], &[4]).unwrap();
    npy::write(&paper.join("node_feat.npy"), &[1.0f32; 6], &[3, 2]).unwrap();
    npy::write(&paper.join("node_label.npy"), &[0i64, 1, 0], &[3]).unwrap();
    npy::write(&paper.join("train_idx.npy"), &[0i64, 1], &[2]).unwrap();
    npy::write(&paper.join("test_idx.npy"), &[2i64], &[1]).unwrap();
    let meta = serde_json::json!({
        "name": "tiny-hetero", "format": "hetero",
        "node_types": {"paper": {"num_nodes": 3, "feat_dim": 2}, "author": {"num_nodes": 2}},
        "edge_types": [["author", "writes", "paper"]],
        "target_node_type": "paper", "num_classes": 2, "directed": true,
    });
    std::fs::write(dir.join("meta.json"), meta.to_string()).unwrap();
    let d = dir.to_str().unwrap();
    let out = graphloom_ok(&["info", d]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("2 node types, 1 relations")
            && text.contains("author__writes__paper")
            && text.contains("in-degree mean 1.33, max 2")
            && text.contains("train 2, valid 0, test 1"),
        "{text}"
    );
    let out = graphloom_ok(&["info", d, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["relations"][0]["num_edges"], 4);
    assert_eq!(
        v["node_types"]["paper"]["feature_file"],
        serde_json::json!({"shape": [3, 2], "dtype": "f32"})
    );
    assert!(v["node_types"]["author"]["feature_file"].is_null(), "{v}");
    // The homogeneous readers name what it is in one line.
    let out = graphloom(&[
        "partition",
        "--dataset",
        d,
        "--parts",
        "2",
        "--out",
        s(&root.join("p")),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is a heterogeneous dataset") && err.trim().lines().count() == 1,
        "{err}"
    );
}

/// `prepare ogb`'s options for one kind of layout are refused on the other, not ignored:
/// `--add-reverse` on a homogeneous layout, `--undirected` on a heterogeneous one (ogbn-mag's,
/// recognised by `raw/num-node-dict.csv.gz`).
#[test]
fn prepare_ogb_refuses_the_options_of_the_other_layout() {
    let root = scratch("ogb-options");
    let homogeneous = root.join("ogbn_arxiv");
    std::fs::create_dir_all(homogeneous.join("raw")).unwrap();
    let heterogeneous = root.join("ogbn_mag");
    std::fs::create_dir_all(heterogeneous.join("raw")).unwrap();
    std::fs::write(heterogeneous.join("raw/num-node-dict.csv.gz"), b"").unwrap();
    let out = root.join("out");
    for (raw, flag, value, said) in [
        (
            &homogeneous,
            "--add-reverse",
            "false",
            "--add-reverse is for heterogeneous",
        ),
        (
            &heterogeneous,
            "--undirected",
            "",
            "--undirected is for homogeneous",
        ),
    ] {
        let mut args = vec!["prepare", "ogb", "--raw", raw.to_str().unwrap(), flag];
        if !value.is_empty() {
            args.push(value);
        }
        args.extend(["--out", out.to_str().unwrap()]);
        let run = graphloom(&args);
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{err}");
        assert!(
            err.contains(said) && err.trim().lines().count() == 1,
            "{err}"
        );
        assert!(!out.exists());
    }
}
