//! Bad input to the command line end to end: a clear one-line error (no panic) for every
//! kind of damaged dataset, impossible size and option out of range.

use std::path::Path;

use graphloom_graph::npy;

mod common;
use common::{graphloom, graphloom_ok, scratch, small_dataset};

/// Runs `train` on a dataset that `corrupt` damaged and checks the error names `file`.
fn assert_clear_error(name: &str, file: &str, expect: &str, corrupt: impl FnOnce(&Path)) {
    let root = scratch(name);
    let dir = root.join("ds");
    small_dataset(&dir);
    corrupt(&dir);
    let out = graphloom(&[
        "train",
        "--dataset",
        dir.to_str().unwrap(),
        "--epochs",
        "2",
        "--quiet",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
    assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{name}: {stderr}");
    assert!(
        stderr.contains(file) && stderr.contains(expect),
        "{name}: {stderr}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn truncated_npy() {
    assert_clear_error("truncated", "node_feat.npy", "truncated", |d| {
        let p = d.join("node_feat.npy");
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
    });
}

#[test]
fn column_index_out_of_range() {
    assert_clear_error("col", "csr_col_idx.npy", "not a node id", |d| {
        let p = d.join("csr_col_idx.npy");
        let mut a = npy::read::<i32>(&p).unwrap();
        a.data[5] = 300;
        npy::write(&p, &a.data, &a.shape).unwrap();
    });
}

#[test]
fn label_out_of_range() {
    assert_clear_error("label", "node_label.npy", "outside 0..3", |d| {
        let p = d.join("node_label.npy");
        let mut a = npy::read::<i64>(&p).unwrap();
        a.data[7] = 3;
        npy::write(&p, &a.data, &a.shape).unwrap();
    });
}

#[test]
fn nan_features() {
    assert_clear_error("nan", "node_feat.npy", "node 4, column 2", |d| {
        let p = d.join("node_feat.npy");
        let mut a = npy::read::<f32>(&p).unwrap();
        a.data[4 * 8 + 2] = f32::NAN;
        npy::write(&p, &a.data, &a.shape).unwrap();
    });
}

/// Features left on disk (mapped) are checked as those read into memory are, once per version
/// of the file: the check is recorded with the file's size and time, and a changed file is
/// checked again.
#[test]
fn nan_features_on_disk() {
    let root = scratch("nan-mmap");
    let dir = root.join("ds");
    small_dataset(&dir);
    let train = || {
        graphloom(&[
            "train",
            "--dataset",
            dir.to_str().unwrap(),
            "--fanouts",
            "5,5",
            "--features-location",
            "mmap",
            "--epochs",
            "1",
            "--quiet",
        ])
    };
    assert!(train().status.success());
    assert!(dir.join(".graphloom-checks.json").exists());
    let p = dir.join("node_feat.npy");
    let checked_at = std::fs::metadata(&p).unwrap().modified().unwrap();
    let mut a = npy::read::<f32>(&p).unwrap();
    a.data[250 * 8 + 6] = f32::NAN;
    npy::write(&p, &a.data, &a.shape).unwrap();
    // Another version of the file: checked again.
    let out = train();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("node_feat.npy") && stderr.contains("node 250, column 6"),
        "{stderr}"
    );
    // A file changed with its modification time set back to the recorded one is still another
    // version: the record holds the change time too, which cannot be set back.
    std::fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(checked_at)
        .unwrap();
    let out = train();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("non-finite feature"), "{stderr}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn missing_file() {
    assert_clear_error("missing", "train_idx.npy", "No such file", |d| {
        std::fs::remove_file(d.join("train_idx.npy")).unwrap()
    });
}

#[test]
fn row_ptr_not_ending_at_num_edges() {
    assert_clear_error("rowptr", "csr_row_ptr.npy", "ends at", |d| {
        let p = d.join("csr_row_ptr.npy");
        let mut a = npy::read::<i64>(&p).unwrap();
        *a.data.last_mut().unwrap() -= 1;
        npy::write(&p, &a.data, &a.shape).unwrap();
    });
}

#[test]
fn unlabelled_node_in_a_split() {
    assert_clear_error("unlabelled", "train_idx.npy", "has no label", |d| {
        let train = npy::read::<i64>(&d.join("train_idx.npy")).unwrap();
        let p = d.join("node_label.npy");
        let mut a = npy::read::<i64>(&p).unwrap();
        a.data[train.data[0] as usize] = -1;
        npy::write(&p, &a.data, &a.shape).unwrap();
    });
}

/// Nodes outside the splits may be unlabelled (-1): the dataset trains.
#[test]
fn unlabelled_nodes_outside_the_splits_train() {
    let root = scratch("unlabelled-ok");
    let dir = root.join("ds");
    small_dataset(&dir);
    let p = dir.join("train_idx.npy");
    let mut train = npy::read::<i64>(&p).unwrap();
    let out_of_splits: Vec<i64> = train.data.drain(..20).collect();
    npy::write(&p, &train.data, &[train.data.len()]).unwrap();
    let p = dir.join("node_label.npy");
    let mut labels = npy::read::<i64>(&p).unwrap();
    for v in out_of_splits {
        labels.data[v as usize] = -1;
    }
    npy::write(&p, &labels.data, &labels.shape).unwrap();
    for extra in [&[][..], &["--fanouts", "5,5"][..]] {
        let mut args = vec![
            "train",
            "--dataset",
            dir.to_str().unwrap(),
            "--epochs",
            "2",
            "--quiet",
        ];
        args.extend(extra);
        let out = graphloom(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// Sizes that no machine can address are damaged files: a one-line error, no panic or
/// wrap-around.
#[test]
fn impossible_sizes() {
    assert_clear_error("hugenodes", "meta.json", "cannot be held in memory", |d| {
        let p = d.join("meta.json");
        let text = std::fs::read_to_string(&p).unwrap();
        let mut meta: serde_json::Value = serde_json::from_str(&text).unwrap();
        meta["num_nodes"] = serde_json::json!(u64::MAX);
        std::fs::write(&p, meta.to_string()).unwrap();
    });
    assert_clear_error(
        "hugeshape",
        "node_label.npy",
        "more bytes than a file can hold",
        |d| {
            // A version-1 header announcing 2^63 - 1 int64 elements, then a few bytes of data.
            let dict =
                "{'descr': '<i8', 'fortran_order': False, 'shape': (9223372036854775807,), }";
            let pad = (64 - (10 + dict.len() + 1) % 64) % 64;
            let header = format!("{dict}{}\n", " ".repeat(pad));
            let mut out = b"\x93NUMPY\x01\x00".to_vec();
            out.extend((header.len() as u16).to_le_bytes());
            out.extend(header.as_bytes());
            out.extend([0u8; 16]);
            std::fs::write(d.join("node_label.npy"), out).unwrap();
        },
    );
}

#[test]
fn split_listing_a_node_twice() {
    assert_clear_error("dupsplit", "train_idx.npy", "is listed twice", |d| {
        let p = d.join("train_idx.npy");
        let mut a = npy::read::<i64>(&p).unwrap();
        a.data[1] = a.data[0];
        npy::write(&p, &a.data, &a.shape).unwrap();
    });
}

#[test]
fn overlapping_splits() {
    assert_clear_error("overlap", "test_idx.npy", "is also in train_idx.npy", |d| {
        let train = npy::read::<i64>(&d.join("train_idx.npy")).unwrap();
        let p = d.join("test_idx.npy");
        let mut a = npy::read::<i64>(&p).unwrap();
        a.data[0] = train.data[3];
        npy::write(&p, &a.data, &a.shape).unwrap();
    });
}

#[test]
fn bad_edge_weights() {
    for (name, w) in [("nanw", f32::NAN), ("infw", f32::INFINITY), ("negw", -1.0)] {
        assert_clear_error(
            name,
            "edge_weight.npy",
            "must be finite and not negative",
            |d| {
                let edges = npy::read::<i32>(&d.join("csr_col_idx.npy"))
                    .unwrap()
                    .data
                    .len();
                let mut weights = vec![1.0f32; edges];
                weights[edges / 2] = w;
                npy::write(&d.join("edge_weight.npy"), &weights, &[edges]).unwrap();
            },
        );
    }
}

/// Edge weights reach full-batch training (the loss changes) and are refused, not ignored, by
/// mini-batch training, whose sampled blocks carry none.
#[test]
fn edge_weights_train_full_batch_and_are_refused_by_sampling() {
    let root = scratch("weights");
    let dir = root.join("ds");
    small_dataset(&dir);
    let loss = |dir: &Path, name: &str| -> f64 {
        let summary = root.join(name);
        let out = graphloom(&[
            "train",
            "--dataset",
            dir.to_str().unwrap(),
            "--epochs",
            "1",
            "--quiet",
            "--summary-json",
            summary.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
        v["final_train_loss"].as_f64().unwrap()
    };
    let plain = loss(&dir, "plain.json");
    let edges = npy::read::<i32>(&dir.join("csr_col_idx.npy"))
        .unwrap()
        .data
        .len();
    let weights: Vec<f32> = (0..edges).map(|e| 0.5 + (e % 5) as f32).collect();
    npy::write(&dir.join("edge_weight.npy"), &weights, &[edges]).unwrap();
    assert_ne!(loss(&dir, "weighted.json"), plain);
    let out = graphloom(&[
        "train",
        "--dataset",
        dir.to_str().unwrap(),
        "--fanouts",
        "5,5",
        "--epochs",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("edge_weight.npy"), "{stderr}");
    // Layer-wise inference, which does not read weights, refuses them too.
    let model = root.join("m.safetensors");
    let d = dir.to_str().unwrap();
    graphloom_ok(&[
        "train",
        "--dataset",
        d,
        "--epochs",
        "1",
        "--quiet",
        "--save-model",
        model.to_str().unwrap(),
    ]);
    let out = graphloom(&[
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--dataset",
        d,
        "--out",
        root.join("p.npy").to_str().unwrap(),
        "--inference-memory-gib",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("edge_weight.npy"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// Generator settings outside their domain are refused before anything is written.
#[test]
fn synthetic_settings_out_of_range() {
    let root = scratch("synbad");
    for (flag, value, expect) in [
        ("--signal", "nan", "signal: NaN is not a signal strength"),
        ("--homophily", "2", "homophily: 2 is not a share"),
    ] {
        let out = graphloom(&[
            "prepare",
            "synthetic",
            "--nodes",
            "50",
            flag,
            value,
            "--out",
            root.join("ds").to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(expect), "{stderr}");
        assert!(!root.join("ds").exists());
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn bad_options_are_clear_errors() {
    // Choices are parsed by clap, which lists the valid values (exit code 2).
    for (args, expect) in [
        (
            vec!["train", "--model", "mlp"],
            "[possible values: gcn, sage, gat, gatv2, gin, gine, sgc, appnp, sign, rgcn, rsage]",
        ),
        (
            vec!["train", "--dtype", "i32"],
            "[possible values: f32, bf16, f64]",
        ),
        (
            vec!["train", "--optimizer", "lbfgs"],
            "[possible values: adam, adamw, sgd]",
        ),
        (
            vec!["train", "--comm", "tcp"],
            "[possible values: local, mpi]",
        ),
        // Checked values are checked as they are parsed.
        (
            vec!["train", "--dropout", "1.5"],
            "must be in [0, 1), not 1.5",
        ),
        (vec!["train", "--fanouts", "5,0"], "0 is not a fanout"),
    ] {
        let out = graphloom(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expect), "{stderr}");
    }
    // Values that cannot train and options that do not apply: one line, exit code 1, before
    // any training.
    for (args, expect) in [
        (
            vec!["--lr", "-0.1"],
            "--lr must be a positive number, not -0.1",
        ),
        (
            vec!["--lr", "NaN"],
            "--lr must be a positive number, not NaN",
        ),
        (
            vec!["--model", "gat", "--heads", "0"],
            "--heads must be at least 1",
        ),
        (
            vec!["--model", "gat", "--out-heads", "0"],
            "--out-heads must be at least 1",
        ),
        (vec!["--heads", "4"], "--heads does not apply to"),
        (vec!["--hops", "4"], "--hops does not apply to"),
        (
            vec!["--model", "appnp", "--teleport", "1.5"],
            "--teleport must be within 0 and 1, not 1.5",
        ),
        (
            vec!["--model", "appnp", "--fanouts", "5,5"],
            "--model does not apply to mini-batch training (--fanouts): APPNP propagates",
        ),
        (
            vec!["--workers", "2"],
            "--workers does not apply to full-batch training",
        ),
        (
            vec!["--comm", "mpi"],
            "--comm does not apply to full-batch training",
        ),
        (
            vec!["--mode", "sa"],
            "--mode does not apply to full-batch training",
        ),
        (
            vec!["--batch-size", "8"],
            "--batch-size does not apply to full-batch training",
        ),
        (
            vec!["--fanouts", "5,5", "--mode", "osa"],
            "--mode does not apply to mini-batch",
        ),
        (
            vec!["--fanouts", "5"],
            "--fanouts has 1 values for 2 layers",
        ),
        (
            vec!["--hidden", "100000000"],
            "its activations need about 29.2 TiB, more than the ",
        ),
        (
            vec!["--memory-gib", "1e12"],
            "--memory-gib must be a positive number of GiB, at most 1073741824 (1 EiB), not 1e12",
        ),
        (
            vec!["--memory-gib", "1e300"],
            "at most 1073741824 (1 EiB), not 1e300",
        ),
        (
            vec!["--fanouts", "5,5", "--inference-memory-gib", "1e12"],
            "--inference-memory-gib must be a positive number of GiB, at most 1073741824 (1 EiB), \
             not 1e12",
        ),
        (
            vec![
                "--fanouts",
                "5,5",
                "--features-location",
                "mmap",
                "--feature-cache-gib",
                "0",
            ],
            "--feature-cache-gib must be a positive number of GiB, at most 1073741824 (1 EiB), \
             not 0",
        ),
        (
            // A folder under a file cannot be made.
            vec!["--summary-json", "/dev/null/graphloom/run.json"],
            "/dev/null/graphloom/run.json cannot be written",
        ),
    ] {
        let mut full = vec!["train", "--epochs", "1"];
        full.extend(args);
        let out = graphloom(&full);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{full:?}: {stderr}");
        assert!(
            stderr.contains(expect) && stderr.lines().count() == 1,
            "{full:?}: {stderr}"
        );
    }
}
