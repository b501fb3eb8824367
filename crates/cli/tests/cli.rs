//! The command line end to end: the default job, the summary JSON, and a clear one-line error
//! (no panic) for every kind of bad input.

use std::path::Path;
use std::process::Command;

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

#[test]
fn default_job_trains_and_writes_summary_plot_and_model() {
    let dir = scratch("default");
    let summary = dir.join("s.json");
    let plot = dir.join("p.png");
    let model = dir.join("m.safetensors");
    let out = graphloom(&[
        "train",
        "--epochs",
        "20",
        "--quiet",
        "--model",
        "sage",
        "--summary-json",
        summary.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
        "--save-model",
        model.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    for key in [
        "test_acc",
        "best_val_acc",
        "best_epoch",
        "epochs",
        "final_train_loss",
        "mean_epoch_seconds",
        "peak_rss_bytes",
    ] {
        assert!(s.get(key).is_some(), "summary lacks {key}");
    }
    assert!(s["test_acc"].as_f64().unwrap() > 0.5, "{s}");
    assert!(s["peak_bytes"]["features"].as_u64().unwrap() > 0);
    assert_eq!(&std::fs::read(&plot).unwrap()[1..4], b"PNG");
    let bytes = std::fs::read(&model).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert!(st
        .names()
        .iter()
        .any(|n| n.as_str() == "layers.0.lin_l.weight"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn buffer_cache_can_be_turned_off() {
    let dir = scratch("cache");
    let summary = dir.join("s.json");
    let out = graphloom(&[
        "train",
        "--epochs",
        "3",
        "--quiet",
        "--buffer-cache-mib",
        "0",
        "--summary-json",
        summary.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["allocator_cache_bytes"].as_u64(), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_options_are_clear_errors() {
    // Choices are parsed by clap, which lists the valid values (exit code 2).
    for (args, expect) in [
        (
            vec!["train", "--model", "mlp"],
            "[possible values: gcn, sage, gat]",
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
            vec!["--summary-json", "/nonexistent-graphloom/run.json"],
            "/nonexistent-graphloom/run.json cannot be written",
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

/// `--json` prints exactly one JSON object on stdout, in `prepare`, `info` and `train`.
#[test]
fn prepare_info_and_train_print_one_json_object() {
    let root = scratch("json");
    let dir = root.join("ds");
    let one_object = |args: &[&str]| -> serde_json::Value {
        let out = graphloom(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(stdout.lines().count(), 1, "{stdout}");
        serde_json::from_str(&stdout).unwrap()
    };
    let prepared = one_object(&[
        "prepare",
        "synthetic",
        "--nodes",
        "300",
        "--classes",
        "3",
        "--out",
        dir.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(prepared["num_nodes"], 300);
    assert_eq!(prepared["num_classes"], 3);
    let info = one_object(&["info", dir.to_str().unwrap(), "--json"]);
    assert_eq!(info["num_nodes"], 300);
    assert_eq!(info["num_edges"], prepared["num_edges"]);
    assert_eq!(
        info["train"].as_u64().unwrap()
            + info["valid"].as_u64().unwrap()
            + info["test"].as_u64().unwrap(),
        300
    );
    let trained = one_object(&[
        "train",
        "--dataset",
        dir.to_str().unwrap(),
        "--epochs",
        "2",
        "--quiet",
        "--json",
    ]);
    assert_eq!(trained["epochs"], 2);
    assert!(trained["test_acc"].as_f64().is_some());
    std::fs::remove_dir_all(&root).unwrap();
}

/// Under mpirun, with stderr going to a log, rank 0 alone prints one line per epoch.
#[cfg(feature = "mpi")]
#[test]
fn mpi_epoch_lines_come_from_rank_0_only() {
    let root = scratch("mpi-log");
    let dir = root.join("ds");
    small_dataset(&dir);
    let out = graphloom_comm::launch::mpirun(2)
        .arg(env!("CARGO_BIN_EXE_graphloom"))
        .args([
            "train",
            "--dataset",
            dir.to_str().unwrap(),
            "--model",
            "sage",
            "--fanouts",
            "5,5",
            "--batch-size",
            "32",
            "--epochs",
            "3",
            "--comm",
            "mpi",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let epochs: Vec<&str> = stderr.lines().filter(|l| l.starts_with("epoch")).collect();
    assert_eq!(epochs.len(), 3, "{stderr}");
    std::fs::remove_dir_all(&root).unwrap();
}

/// When stderr is not a terminal (a log file, a pipe, mpirun), every epoch is a plain line.
#[test]
fn epoch_lines_reach_a_log() {
    let out = graphloom(&["train", "--epochs", "3", "--eval-every", "2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("epoch")).collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(lines[0].contains("(not evaluated)"), "{stderr}");
    assert!(lines[1].contains("val "), "{stderr}");
    assert!(lines[2].contains("val "), "{stderr}");
}

/// `bench gather --json` prints one object per measurement with the keys the issue names, for
/// every layout and location this job supports, and the cache measurement.
#[test]
fn bench_gather_prints_one_json_object_per_measurement() {
    let dir = scratch("gather");
    let out = graphloom(&[
        "bench",
        "gather",
        "--rows",
        "3000",
        "--ids",
        "2000",
        "--row-bytes",
        "64,512",
        "--repeats",
        "1",
        "--cache-multiple",
        "0",
        "--mpi-ranks",
        "0",
        "--json",
        "--mmap-dir",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    // 2 row sizes x 3 layouts x 3 locations, and the cache.
    assert_eq!(records.len(), 2 * 9 + 1, "{text}");
    for r in &records {
        for key in [
            "layout",
            "location",
            "ranks",
            "row_bytes",
            "gbps",
            "memcpy_gbps",
            "ratio",
        ] {
            assert!(!r[key].is_null(), "{key} missing in {r}");
        }
        assert!(r["gbps"].as_f64().unwrap() > 0.0);
    }
    assert!(records.last().unwrap()["cache_hit_rate"].as_f64().unwrap() > 0.0);
    // The memory-mapped tables are removed after their measurement.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

/// Sampled mini-batch training reads its features from the store: memory-mapped from
/// `node_feat.npy` it gives exactly the losses of features in host memory, and the summary
/// reports the stage shares.
#[test]
fn mini_batch_training_from_mapped_features_matches_host_features() {
    let root = scratch("minibatch");
    let dir = root.join("ds");
    small_dataset(&dir);
    let losses = |location: &str| {
        let summary = root.join(format!("{location}.json"));
        let out = graphloom(&[
            "train",
            "--dataset",
            dir.to_str().unwrap(),
            "--model",
            "sage",
            "--fanouts",
            "5,-1",
            "--batch-size",
            "32",
            "--epochs",
            "3",
            "--quiet",
            "--features-location",
            location,
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
        assert!(v["sample_share"].as_f64().unwrap() > 0.0);
        assert!(v["gather_share"].as_f64().unwrap() > 0.0);
        v["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["loss"].as_f64().unwrap())
            .collect::<Vec<_>>()
    };
    let host = losses("host");
    assert_eq!(host.len(), 3);
    assert_eq!(losses("mmap"), host);
    assert_eq!(losses("shared"), host);
    let out = graphloom(&["train", "--fanouts", "5,5", "--features-location", "mmap"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs --dataset"));
}

/// Data-parallel workers, in-process or as MPI processes, train exactly as one worker: the same
/// losses epoch by epoch (to rounding: gradients are summed in another order).
#[test]
fn mpi_and_local_workers_train_like_one_worker() {
    let root = scratch("workers");
    let dir = root.join("ds");
    small_dataset(&dir);
    let losses = |summary: &Path| -> Vec<f64> {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(summary).unwrap()).unwrap();
        v["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["loss"].as_f64().unwrap())
            .collect()
    };
    let args = |summary: &Path| -> Vec<String> {
        [
            "train",
            "--dataset",
            dir.to_str().unwrap(),
            "--model",
            "sage",
            "--fanouts",
            "4,4",
            "--batch-size",
            "50",
            "--epochs",
            "3",
            "--quiet",
            "--summary-json",
            summary.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let one = root.join("one.json");
    assert!(
        graphloom(&args(&one).iter().map(String::as_str).collect::<Vec<_>>())
            .status
            .success()
    );
    let two = root.join("two.json");
    let mut two_args = args(&two);
    two_args.extend(["--workers".into(), "2".into()]);
    let out = graphloom(&two_args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let close = |a: &[f64], b: &[f64]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5 * y.abs())
    };
    assert!(
        close(&losses(&two), &losses(&one)),
        "{:?} vs {:?}",
        losses(&two),
        losses(&one)
    );
    if cfg!(feature = "mpi") {
        let mpi = root.join("mpi.json");
        let mut mpi_args = args(&mpi);
        mpi_args.extend(["--comm".into(), "mpi".into()]);
        let out = graphloom_comm::launch::mpirun(2)
            .arg(env!("CARGO_BIN_EXE_graphloom"))
            .args(&mpi_args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            close(&losses(&mpi), &losses(&one)),
            "{:?} vs {:?}",
            losses(&mpi),
            losses(&one)
        );
    }
}

/// `graphloom partition` writes one folder per part and reports the cut; impossible splits are
/// clear errors.
#[test]
fn partition_writes_parts_and_refuses_impossible_splits() {
    let root = scratch("partition");
    let dir = root.join("ds");
    small_dataset(&dir);
    let out = root.join("parts");
    let run = graphloom(&[
        "partition",
        "--dataset",
        dir.to_str().unwrap(),
        "--parts",
        "3",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(
        report["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .sum::<u64>(),
        300
    );
    for p in 0..3 {
        assert!(out.join(format!("part_{p}/node_feat.npy")).exists());
    }
    // Nearly a part per node: METIS complains, on stderr; stdout holds the one JSON object,
    // and the files grow with the edges cut, not with the square of the parts.
    let many = graphloom(&[
        "partition",
        "--dataset",
        dir.to_str().unwrap(),
        "--parts",
        "290",
        "--out",
        root.join("many").to_str().unwrap(),
        "--json",
    ]);
    assert!(
        many.status.success(),
        "{}",
        String::from_utf8_lossy(&many.stderr)
    );
    let stdout = String::from_utf8_lossy(&many.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["parts"], 290);
    let files = std::fs::read_dir(root.join("many"))
        .unwrap()
        .flatten()
        .map(|p| std::fs::read_dir(p.path()).map_or(0, |d| d.count()))
        .sum::<usize>();
    // Eight files per part, and at most four (a shard's three and a send list) per cut edge.
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    let edges = meta["num_edges"].as_u64().unwrap() as usize;
    assert!(
        files <= 290 * 8 + 4 * edges,
        "{files} files for {edges} edges"
    );
    assert!(files < 290 * 290, "{files} files");
    let bad = graphloom(&[
        "partition",
        "--dataset",
        dir.to_str().unwrap(),
        "--parts",
        "301",
        "--out",
        root.join("bad").to_str().unwrap(),
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cannot cut 300 nodes into 301 parts"));
    assert!(!root.join("bad").exists(), "no half-written output");
}

/// A partitioned dataset trains full-batch with SAR: 3 workers give the losses of one worker
/// on the whole graph, and a worker count that does not match the parts is a clear error.
#[test]
fn sar_workers_train_like_one_worker_on_the_whole_graph() {
    let root = scratch("sar");
    let dir = root.join("ds");
    small_dataset(&dir);
    let parts = root.join("parts");
    let run = graphloom(&[
        "partition",
        "--dataset",
        dir.to_str().unwrap(),
        "--parts",
        "3",
        "--out",
        parts.to_str().unwrap(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let losses = |dataset: &Path, workers: &str| -> Vec<f64> {
        let summary = root.join(format!("{workers}.json"));
        let out = graphloom(&[
            "train",
            "--dataset",
            dataset.to_str().unwrap(),
            "--model",
            "sage",
            "--epochs",
            "10",
            "--workers",
            workers,
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
        v["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["loss"].as_f64().unwrap())
            .collect()
    };
    let one = losses(&dir, "1");
    let three = losses(&parts, "3");
    assert_eq!(one.len(), three.len());
    for (a, b) in three.iter().zip(&one) {
        assert!((a - b).abs() <= 1e-4 * b.abs(), "{a} vs {b}");
    }
    let out = graphloom(&[
        "train",
        "--dataset",
        parts.to_str().unwrap(),
        "--workers",
        "2",
        "--epochs",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("a partition into 3 parts"));
    // Without --workers, a partitioned dataset trains on one worker per part.
    let out = graphloom(&[
        "train",
        "--dataset",
        parts.to_str().unwrap(),
        "--epochs",
        "1",
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // info on a partitioned folder, and on no dataset at all, says what it is.
    let out = graphloom(&["info", parts.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a partitioned dataset"));
    let out = graphloom(&["info", root.join("nothing").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    // Damaged send lists and shards are one-line errors naming the file, not panics.
    let corrupt = |file: &str, expect: &str| {
        let copy = root.join(format!("damaged-{}", file.replace('/', "-")));
        let status = Command::new("cp")
            .args(["-r", parts.to_str().unwrap(), copy.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
        let p = copy.join(file);
        let mut a = npy::read::<i64>(&p).unwrap();
        a.data[0] = 1_000_000;
        npy::write(&p, &a.data, &a.shape).unwrap();
        let out = graphloom(&[
            "train",
            "--dataset",
            copy.to_str().unwrap(),
            "--workers",
            "3",
            "--epochs",
            "1",
            "--quiet",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{file}: {stderr}");
        assert!(
            stderr.contains(file) && stderr.contains(expect) && !stderr.contains("panicked"),
            "{file}: {stderr}"
        );
    };
    let sent = (0..3)
        .flat_map(|p| (0..3).map(move |q| format!("part_{p}/send_{q}.npy")))
        .find(|f| parts.join(f).exists())
        .unwrap();
    corrupt(&sent, "local row 1000000 is not below");
    let shard = (0..3)
        .flat_map(|p| {
            (0..3)
                .filter(move |&q| q != p)
                .map(move |q| format!("part_{p}/shard_{q}_src.npy"))
        })
        .find(|f| parts.join(f).exists())
        .unwrap();
    corrupt(&shard, "position 1000000 is not below");
}

/// The pid of rank `rank` of an mpirun job whose command line names `marker`.
#[cfg(feature = "mpi")]
fn rank_pid(marker: &str, rank: usize) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let environ = std::fs::read(e.path().join("environ")).ok()?;
        let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
        let mine = has(&cmdline, marker.as_bytes()) && !has(&cmdline, b"mpirun");
        let rank_var = format!("OMPI_COMM_WORLD_RANK={rank}\0");
        (mine && has(&environ, rank_var.as_bytes())).then_some(pid)
    })
}

/// Under MPI, a rank that hangs (stopped by SIGSTOP) in a mini-batch epoch is named by the
/// rank waiting for it, once its wait reaches the collective timeout: `rank 1 failed: ...`,
/// and the job ends.
#[cfg(feature = "mpi")]
#[test]
fn mpi_hung_rank_is_named_by_the_others() {
    use std::time::{Duration, Instant};
    let root = scratch("mpi-hang");
    let dir = root.join("ds");
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--nodes",
        "20000",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let marker = dir.to_str().unwrap();
    let mut job = graphloom_comm::launch::mpirun(2)
        .env(graphloom_comm::TIMEOUT_ENV, "4")
        .arg(env!("CARGO_BIN_EXE_graphloom"))
        .args([
            "train",
            "--dataset",
            marker,
            "--comm",
            "mpi",
            "--model",
            "sage",
            "--fanouts",
            "10,10",
            "--batch-size",
            "64",
            "--epochs",
            "100000",
            "--quiet",
            "--threads",
            "1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let victim = loop {
        if let Some(pid) = rank_pid(marker, 1) {
            break pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "rank 1 never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        job.try_wait().unwrap().is_none(),
        "the job ended before the stop"
    );
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGSTOP) }, 0);
    let stopped = Instant::now();
    while job.try_wait().unwrap().is_none() {
        if stopped.elapsed() > Duration::from_secs(90) {
            // SAFETY: as above.
            unsafe { libc::kill(victim as i32, libc::SIGKILL) };
            let _ = job.kill();
            panic!("the job did not end within 90 s of the stop");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: as above; a rank that outlived the job must not stay stopped.
    unsafe { libc::kill(victim as i32, libc::SIGCONT) };
    let output = job.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    // The first report names the stopped rank. (Once resumed to be killed, the stopped rank
    // may find its own wait past the deadline and add a line of its own.)
    let first = stderr.lines().find(|l| l.contains(" failed: "));
    assert!(
        first.is_some_and(|l| l.starts_with("rank 1 failed: no answer to")),
        "{stderr}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// Under MPI, a SAR worker killed mid-epoch makes the job exit with an error that names it, well
/// within the collective timeout, and no rank hangs.
#[cfg(feature = "mpi")]
#[test]
fn mpi_sar_worker_killed_mid_epoch_fails_the_job_naming_it() {
    use std::time::{Duration, Instant};
    let root = scratch("sar-kill");
    let dir = root.join("ds");
    let out = graphloom(&[
        "prepare",
        "synthetic",
        "--nodes",
        "20000",
        "--avg-degree",
        "10",
        "--feat-dim",
        "32",
        "--classes",
        "4",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parts = root.join("parts");
    let out = graphloom(&[
        "partition",
        "--dataset",
        dir.to_str().unwrap(),
        "--parts",
        "3",
        "--out",
        parts.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut job = graphloom_comm::launch::mpirun(3)
        .env(graphloom_comm::TIMEOUT_ENV, "30")
        .arg(env!("CARGO_BIN_EXE_graphloom"))
        .args([
            "train",
            "--dataset",
            parts.to_str().unwrap(),
            "--comm",
            "mpi",
            "--model",
            "gat",
            "--epochs",
            "100000",
            "--quiet",
            "--threads",
            "1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let rank_pid = |rank: usize| rank_pid(parts.to_str().unwrap(), rank);
    let start = Instant::now();
    let victim = loop {
        if let Some(pid) = rank_pid(1) {
            break pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "rank 1 never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // Let the job load its parts and get into its epochs.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        job.try_wait().unwrap().is_none(),
        "the job ended before the kill"
    );
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGKILL) }, 0);
    let killed = Instant::now();
    let status = loop {
        if let Some(status) = job.try_wait().unwrap() {
            break status;
        }
        if killed.elapsed() > Duration::from_secs(90) {
            let _ = job.kill();
            panic!("the job did not end within 90 s of the kill");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = job.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!status.success());
    assert!(stderr.contains("rank 1"), "{stderr}");
    for rank in [0, 2] {
        assert!(rank_pid(rank).is_none(), "rank {rank} is still running");
    }
}

/// The out-of-core path from the command line: a directed R-MAT graph streamed by
/// `prepare synthetic` with most nodes unlabelled, trained from mapped features behind a row
/// cache with sampled evaluation; the cache changes no loss, and misplaced options are refused.
#[test]
fn out_of_core_training_from_a_streamed_graph() {
    let root = scratch("out-of-core");
    let dir = root.join("rmat");
    let d = dir.to_str().unwrap();
    let out = graphloom_ok(&[
        "prepare",
        "synthetic",
        "--edge-model",
        "rmat",
        "--nodes",
        "4000",
        "--edges",
        "60000",
        "--classes",
        "5",
        "--feat-dim",
        "8",
        "--feat-dtype",
        "bf16",
        "--signal",
        "4",
        "--split-counts",
        "600,200,200",
        "--json",
        "--out",
        d,
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["num_edges"].as_u64(), v["directed"].as_bool()),
        (Some(60000), Some(true))
    );
    assert_eq!(v["train"].as_u64(), Some(600));
    let run = |extra: &[&str]| {
        let mut args = vec![
            "train",
            "--dataset",
            d,
            "--model",
            "sage",
            "--fanouts",
            "5,5",
            "--batch-size",
            "64",
            "--epochs",
            "3",
            "--batches-per-epoch",
            "4",
            "--eval-nodes",
            "100",
            "--eval-fanouts",
            "5,5",
            "--json",
        ];
        if !extra.contains(&"--features-location") {
            args.extend(["--features-location", "mmap"]);
        }
        args.extend_from_slice(extra);
        let out = graphloom_ok(&args);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let losses = |v: &serde_json::Value| -> Vec<f64> {
        v["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["loss"].as_f64().unwrap())
            .collect()
    };
    let plain = run(&[]);
    // Rows from a file are sampled and gathered in two stages on threads of their own; from
    // memory, in one: the same batches either way.
    let in_memory = run(&["--features-location", "host"]);
    assert_eq!(losses(&plain), losses(&in_memory));
    let cached = run(&[
        "--feature-cache-gib",
        "0.00002",
        "--feature-reads",
        "mapped",
    ]);
    assert_eq!(losses(&plain), losses(&cached));
    // Rows read past the page cache, with and without a cache in front, train the same.
    let direct = run(&[
        "--feature-cache-gib",
        "0.00002",
        "--feature-reads",
        "direct",
    ]);
    let direct_alone = run(&["--feature-reads", "direct"]);
    assert_eq!(losses(&plain), losses(&direct));
    assert_eq!(losses(&plain), losses(&direct_alone));
    assert_eq!(cached["feature_reads"], "mapped");
    assert!(direct["feature_reads"]
        .as_str()
        .unwrap()
        .starts_with("direct"));
    assert_eq!(direct["cache_hit_rate"], cached["cache_hit_rate"]);
    assert!(direct["cache_fill_seconds"].as_f64().unwrap() >= 0.0);
    assert_eq!(direct_alone["cache_hit_rate"].as_f64(), Some(0.0));
    assert!(direct_alone["rows_read"].as_u64().unwrap() > 0);
    let accuracies = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        let h = v["history"].as_array().unwrap();
        h.iter()
            .map(|e| serde_json::json!([e["train_acc"], e["val_acc"], e["test_acc"]]))
            .collect()
    };
    assert_eq!(accuracies(&plain), accuracies(&cached));
    let hit = cached["cache_hit_rate"].as_f64().unwrap();
    assert!(hit > 0.0 && hit < 1.0, "{hit}");
    assert!(plain.get("cache_hit_rate").is_none());
    assert!(plain["peak_anon_bytes"].as_u64().unwrap() > 0);
    // Accuracies of 100 evaluated nodes are multiples of 1/100, and the model learns.
    let last = plain["history"].as_array().unwrap().last().unwrap().clone();
    let val = last["val_acc"].as_f64().unwrap();
    assert!(
        (val * 100.0 - (val * 100.0).round()).abs() < 1e-9 && val > 0.3,
        "{val}"
    );
    // Exact evaluation layer by layer in chunks through scratch files gives the accuracies of
    // one pass over the whole graph (f64, so no near-tie can flip a prediction).
    let scratch = root.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let exact = |extra: &[&str]| {
        let mut args = vec![
            "train",
            "--dataset",
            d,
            "--model",
            "gat",
            "--fanouts",
            "5,5",
            "--epochs",
            "2",
            "--batches-per-epoch",
            "3",
            "--dtype",
            "f64",
            "--json",
        ];
        args.extend_from_slice(extra);
        serde_json::from_slice::<serde_json::Value>(&graphloom_ok(&args).stdout).unwrap()
    };
    let whole = exact(&[]);
    let chunked = exact(&[
        "--inference-memory-gib",
        "0.0001",
        "--scratch-dir",
        scratch.to_str().unwrap(),
    ]);
    assert_eq!(accuracies(&whole), accuracies(&chunked));
    assert_eq!(
        std::fs::read_dir(&scratch).unwrap().count(),
        0,
        "scratch files left"
    );
    for (args, expect) in [
        (
            vec![
                "train",
                "--dataset",
                d,
                "--fanouts",
                "5,5",
                "--scratch-dir",
                "x",
            ],
            "--inference-memory-gib",
        ),
        (
            vec![
                "train",
                "--dataset",
                d,
                "--fanouts",
                "5,5",
                "--inference-memory-gib",
                "1",
                "--eval-nodes",
                "5",
            ],
            "--eval-nodes",
        ),
    ] {
        let out = graphloom(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(expect),
            "{args:?}: {err}"
        );
    }
    for (args, expect) in [
        (
            vec!["train", "--dataset", d, "--feature-cache-gib", "1"],
            "--feature-cache-gib",
        ),
        (
            vec![
                "train",
                "--dataset",
                d,
                "--fanouts",
                "5,5",
                "--feature-cache-gib",
                "1",
            ],
            "mmap",
        ),
        (
            vec![
                "train",
                "--dataset",
                d,
                "--fanouts",
                "5,5",
                "--feature-reads",
                "direct",
            ],
            "mmap",
        ),
        (
            vec!["train", "--dataset", d, "--feature-reads", "direct"],
            "--feature-reads",
        ),
        (
            vec![
                "train",
                "--dataset",
                d,
                "--fanouts",
                "5,5",
                "--inference-memory-gib",
                "1",
                "--scratch-dir",
                "/nonexistent/scratch",
            ],
            "is not a folder",
        ),
        (
            vec!["train", "--dataset", d, "--eval-nodes", "10"],
            "--eval-nodes",
        ),
        (
            vec![
                "train",
                "--dataset",
                d,
                "--fanouts",
                "5,5",
                "--eval-fanouts",
                "5",
            ],
            "--eval-fanouts",
        ),
        (
            vec![
                "train",
                "--dataset",
                d,
                "--fanouts",
                "5,5",
                "--batches-per-epoch",
                "0",
            ],
            "at least 1",
        ),
    ] {
        let out = graphloom(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(expect),
            "{args:?}: {err}"
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// `bench scale` at a tiny shape: one JSON object per measurement with the issue's keys, a
/// throughput for both training runs, and a folder it did not make is refused, not replaced.
#[test]
fn bench_scale_prints_one_json_object_per_measurement() {
    let root = scratch("bench-scale");
    let dir = root.join("scale");
    let plot = root.join("seeds.png");
    let args = |dir: &Path| -> Vec<String> {
        [
            "bench",
            "scale",
            "--nodes",
            "20000",
            "--edges",
            "200000",
            "--split",
            "2000,300,300",
            "--batches",
            "12",
            "--eval-every",
            "6",
            "--eval-nodes",
            "100",
            "--probe-seconds",
            "0.2",
            "--repeats",
            "1",
            "--feature-cache-gib",
            "0.0005",
            "--keep-page-cache",
            "--memory-gib",
            "1",
            "--json",
            "--dir",
            dir.to_str().unwrap(),
            "--plot",
            plot.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let a = args(&dir);
    let out = graphloom_ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let phases: Vec<&str> = rows.iter().map(|r| r["phase"].as_str().unwrap()).collect();
    assert_eq!(
        phases,
        [
            "prepare",
            "sample",
            "train",
            "train_in_memory",
            "train_static",
            "cold",
            "probe"
        ]
    );
    for r in &rows {
        for key in [
            "system",
            "phase",
            "nodes",
            "edges",
            "seconds",
            "peak_anon_bytes",
            "peak_file_bytes",
            "seeds_per_second",
            "sampled_edges_per_second",
            "disk_reads_per_second",
            "probe_reads_per_second",
            "cache_hit_rate",
            "val_acc",
        ] {
            assert!(r.get(key).is_some(), "{key} missing from {r}");
        }
        assert_eq!(r["nodes"].as_u64(), Some(20000));
    }
    for r in &rows[2..6] {
        assert!(r["seeds_per_second"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["disk_reads_per_seed"].as_f64().is_some(), "{r}");
        assert!(r["first_batch_seconds"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(rows[2]["cache_hit_rate"].as_f64().is_some());
    assert!(rows[2]["feature_reads"]
        .as_str()
        .unwrap()
        .starts_with("direct"));
    assert_eq!(rows[4]["feature_reads"], "mapped");
    assert_eq!(rows[5]["page_cache_dropped"], false);
    // Rows read directly or through the page cache are the same rows: the same training.
    assert!(rows[2]["val_acc"].as_f64().is_some());
    assert_eq!(rows[2]["val_acc"], rows[4]["val_acc"]);
    // The training runs were planned within the budget given.
    for train in &rows[2..6] {
        assert_eq!(train["memory_gib"].as_f64(), Some(1.0), "{train}");
        assert!(train["peak_anon_bytes"].as_f64().unwrap() < (1u64 << 30) as f64);
    }
    assert!(rows[1]["sampled_edges_per_second"].as_f64().unwrap() > 0.0);
    assert!(plot.exists());
    // A folder the bench did not make is refused before any work.
    let other = root.join("mine");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("keep.txt"), "x").unwrap();
    let b = args(&other);
    let out = graphloom(&b.iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("was not made by"),
        "{err}"
    );
    assert!(other.join("keep.txt").exists());
    // A dataset prepared by its phase alone is marked as the bench's, for a full run to reuse.
    let hand = root.join("hand");
    let mut c = args(&hand);
    c.extend(["--phase".to_string(), "prepare".to_string()]);
    graphloom_ok(&c.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(hand.join(".graphloom-bench-scale").exists());
    std::fs::remove_dir_all(&root).unwrap();
}

/// `train --help` shows each default that the run decides, as the plan reads it off the
/// definition the run uses, once, after its flag's own text.
#[test]
fn train_help_shows_the_defaults_the_run_uses() {
    let out = graphloom_ok(&["train", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for (setting, default) in graphloom_plan::help_defaults() {
        let flag = format!("--{} <", setting.replace('_', "-"));
        let at = help
            .find(&flag)
            .unwrap_or_else(|| panic!("no {flag} in {help}"));
        let text = &help[at..];
        let next = text[2..].find("\n      --").map_or(text.len(), |n| n + 2);
        let said = format!("[default: {default}]");
        assert_eq!(
            text[..next].matches("[default:").count(),
            1,
            "{}",
            &text[..next]
        );
        assert!(text[..next].contains(&said), "{setting}: {}", &text[..next]);
    }
}
