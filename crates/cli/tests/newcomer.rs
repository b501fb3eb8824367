//! The command line as users of PyG, OGB and WholeGraph meet it: datasets in the folders their
//! tools download to, their own splits, their spellings of models and fanouts, and summaries
//! that say how a run was made.

mod common;

use std::path::{Path, PathBuf};

use common::{graphloom, graphloom_ok, scratch, summary};

fn raw_planetoid() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/planetoid")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// PyG's `Planetoid(root="ROOT", name="Cora")` download: `ROOT/Cora/raw/ind.cora.*`.
fn pyg_planetoid_root(dir: &Path) -> PathBuf {
    let raw = dir.join("Planetoid/Cora/raw");
    std::fs::create_dir_all(&raw).unwrap();
    for f in std::fs::read_dir(raw_planetoid()).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, raw.join(f.file_name().unwrap())).unwrap();
    }
    dir.join("Planetoid")
}

#[test]
fn version_is_the_workspace_version() {
    let out = graphloom_ok(&["--version"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("graphloom {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn model_names_and_space_separated_fanouts_get_a_tip() {
    for (given, meant) in [("graphsage", "sage"), ("GCN", "gcn"), ("GATConv", "gat")] {
        let out = graphloom(&["train", "--model", given]);
        let err = stderr(&out);
        assert!(!out.status.success());
        assert!(
            err.contains(&format!("invalid value '{given}'"))
                && err.contains(&format!("a similar value exists: '{meant}'")),
            "{err}"
        );
    }
    let out = graphloom(&["train", "--fanouts", "25", "10", "--epochs", "1"]);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("unexpected argument '10'")
            && err.contains("--fanouts takes one comma-separated list: --fanouts 25,10"),
        "{err}"
    );
}

#[test]
fn planetoid_reads_pyg_layouts_and_any_case_of_the_name() {
    let dir = scratch("pyg-planetoid");
    let root = pyg_planetoid_root(&dir);
    // The root given to PyG, the dataset's folder and its raw/ folder all convert.
    for (i, raw) in [root.clone(), root.join("Cora"), root.join("Cora/raw")]
        .iter()
        .enumerate()
    {
        let out = dir.join(format!("cora{i}"));
        graphloom_ok(&[
            "prepare",
            "planetoid",
            "--raw",
            raw.to_str().unwrap(),
            "--name",
            "Cora",
            "--out",
            out.to_str().unwrap(),
        ]);
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("meta.json")).unwrap()).unwrap();
        assert_eq!(
            (meta["name"].as_str(), meta["num_nodes"].as_u64()),
            (Some("cora"), Some(2708))
        );
    }
    // Another dataset's name says which one is there.
    let out = graphloom(&[
        "prepare",
        "planetoid",
        "--raw",
        root.to_str().unwrap(),
        "--name",
        "PubMed",
        "--out",
        dir.join("pubmed").to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert!(
        !out.status.success() && err.contains("--name cora"),
        "{err}"
    );
    assert!(!dir.join("pubmed").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_pyg_or_ogb_download_given_as_a_dataset_names_its_prepare_command() {
    let dir = scratch("pyg-hint");
    let root = pyg_planetoid_root(&dir);
    let out = graphloom(&["train", "--dataset", root.join("Cora").to_str().unwrap()]);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("graphloom prepare planetoid --raw") && err.contains("--name cora"),
        "{err}"
    );
    let ogb = dir.join("ogbn_arxiv");
    std::fs::create_dir_all(ogb.join("raw")).unwrap();
    std::fs::create_dir_all(ogb.join("split/time")).unwrap();
    let out = graphloom(&["info", dir.join("ogbn_arxiv").to_str().unwrap()]);
    let err = stderr(&out);
    assert!(
        !out.status.success() && err.contains("graphloom prepare ogb --raw"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes a `.npy` of int64 values.
fn write_ids(path: &Path, ids: &[i64]) {
    graphloom_graph::npy::write(path, ids, &[ids.len()]).unwrap();
}

#[test]
fn edgelist_takes_the_users_split() {
    let dir = scratch("edgelist-split");
    let edges = dir.join("edges.txt");
    std::fs::write(&edges, "0 1\n1 2\n2 3\n3 4\n4 5\n5 0\n").unwrap();
    let labels = dir.join("labels.npy");
    write_ids(&labels, &[0, 1, 0, 1, -1, 1]);
    let (train, valid, test) = (
        dir.join("train.npy"),
        dir.join("valid.npy"),
        dir.join("test.txt"),
    );
    write_ids(&train, &[3, 0]);
    write_ids(&valid, &[1]);
    std::fs::write(&test, "2\n5\n").unwrap();
    let out = dir.join("ds");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "prepare",
            "edgelist",
            "--edges",
            edges.to_str().unwrap(),
            "--labels",
            labels.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run = |extra: &[&str]| {
        let a = args(extra);
        graphloom(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let ok = run(&[
        "--train-idx",
        train.to_str().unwrap(),
        "--valid-idx",
        valid.to_str().unwrap(),
        "--test-idx",
        test.to_str().unwrap(),
    ]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let read = |name: &str| {
        graphloom_graph::npy::read_ints(&out.join(name))
            .unwrap()
            .data
    };
    assert_eq!(read("train_idx.npy"), [3, 0]);
    assert_eq!(read("valid_idx.npy"), [1]);
    assert_eq!(read("test_idx.npy"), [2, 5]);
    // Node 4 has no label: it may not be in a split.
    std::fs::remove_dir_all(&out).unwrap();
    write_ids(&valid, &[4]);
    let bad = run(&[
        "--train-idx",
        train.to_str().unwrap(),
        "--valid-idx",
        valid.to_str().unwrap(),
    ]);
    let err = stderr(&bad);
    assert!(
        !bad.status.success() && err.contains("valid.npy") && err.contains("node 4"),
        "{err}"
    );
    assert!(!out.exists(), "a refused split leaves no dataset");
    // Without the user's split, every node needs a label.
    let unlabelled = run(&[]);
    assert!(!unlabelled.status.success(), "{}", stderr(&unlabelled));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_summary_holds_the_hyperparameters_and_the_dataset_path() {
    let dir = scratch("summary-settings");
    let data = dir.join("data");
    common::small_dataset(&data);
    let path = dir.join("s.json");
    graphloom_ok(&[
        "train",
        "--dataset",
        data.to_str().unwrap(),
        "--model",
        "sage",
        "--epochs",
        "2",
        "--lr",
        "0.02",
        "--dropout",
        "0.25",
        "--quiet",
        "--summary-json",
        path.to_str().unwrap(),
    ]);
    let s = summary(&path);
    let h = &s["hyperparameters"];
    assert_eq!(h["model"], "sage");
    assert_eq!(h["lr"], 0.02);
    assert_eq!(h["dropout"], 0.25);
    assert_eq!(h["hidden"], 64, "the model's default filled in");
    assert_eq!(h["layers"], 2);
    assert_eq!(h["weight_decay"], 5e-4);
    assert_eq!(h["optimizer"], "adam");
    assert_eq!(h["max_epochs"], 2);
    let shown = PathBuf::from(s["dataset_path"].as_str().unwrap());
    assert_eq!(shown.canonicalize().unwrap(), data.canonicalize().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}
