//! Nothing of the user's is lost and nothing crashes: outputs that would replace a user's
//! folder or an input are refused, a snapshot folder serves one run at a time, sizes beyond
//! the process's memory are errors (`memory_limits.rs`), and damaged files give one-line
//! errors.

use std::path::Path;

use graphloom_graph::npy;

mod common;
use common::{
    graphloom, graphloom_ok, listing, refused, s, scratch, small_dataset, small_link_split,
    train_link,
};

#[test]
fn prepare_and_partition_replace_nothing_of_the_users() {
    let root = scratch("replace");
    let mine = root.join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), b"keep").unwrap();
    let synthetic =
        |out: &Path| graphloom(&["prepare", "synthetic", "--nodes", "300", "--out", s(out)]);
    refused(&synthetic(&mine), &[s(&mine), "is not a dataset directory"]);
    assert_eq!(listing(&mine), ["notes.txt"]);
    // A dataset is written again in place; a partition is not replaced by a dataset.
    let ds = root.join("ds");
    small_dataset(&ds);
    small_dataset(&ds);
    let parts = root.join("parts");
    let partition = |dataset: &Path, out: &Path| {
        graphloom(&[
            "partition",
            "--dataset",
            s(dataset),
            "--parts",
            "2",
            "--out",
            s(out),
        ])
    };
    assert!(partition(&ds, &parts).status.success());
    assert!(partition(&ds, &parts).status.success());
    refused(&synthetic(&parts), &["is a partitioned dataset directory"]);
    // The source dataset is neither replaced by its partition nor written into.
    let before = listing(&ds);
    refused(&partition(&ds, &ds), &[s(&ds), "is an input of this run"]);
    refused(
        &partition(&ds, &ds.join("parts")),
        &["lies inside an input folder"],
    );
    refused(&partition(&ds, &root), &["holds an input of this run"]);
    assert_eq!(listing(&ds), before);
    graphloom_ok(&["train", "--dataset", s(&ds), "--epochs", "1", "--quiet"]);
    // The raw files are not replaced by the dataset made of them.
    let raw = root.join("raw");
    std::fs::create_dir_all(&raw).unwrap();
    let planetoid =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/planetoid");
    for f in std::fs::read_dir(&planetoid).unwrap().flatten() {
        std::fs::copy(f.path(), raw.join(f.file_name())).unwrap();
    }
    let raw_files = listing(&raw);
    let out = graphloom(&[
        "prepare",
        "planetoid",
        "--raw",
        s(&raw),
        "--name",
        "cora",
        "--out",
        s(&raw),
    ]);
    refused(&out, &["is an input of this run"]);
    assert_eq!(listing(&raw), raw_files);
    // Nor is an edge list's own folder.
    let edges = root.join("edges");
    std::fs::create_dir_all(&edges).unwrap();
    std::fs::write(edges.join("e.txt"), "0 1\n1 2\n").unwrap();
    let out = graphloom(&[
        "prepare",
        "edgelist",
        "--edges",
        s(&edges.join("e.txt")),
        "--out",
        s(&edges),
    ]);
    refused(&out, &["holds an input of this run"]);
    assert_eq!(listing(&edges), ["e.txt"]);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn predict_and_embed_write_over_no_input() {
    let root = scratch("predict-out");
    let ds = root.join("ds");
    small_dataset(&ds);
    let model = root.join("model.safetensors");
    graphloom_ok(&[
        "train",
        "--dataset",
        s(&ds),
        "--epochs",
        "2",
        "--quiet",
        "--save-model",
        s(&model),
    ]);
    let saved = std::fs::read(&model).unwrap();
    let out = graphloom(&[
        "predict",
        "--model",
        s(&model),
        "--dataset",
        s(&ds),
        "--out",
        s(&root.join(".").join("model.safetensors")),
    ]);
    refused(&out, &["is an input of this run"]);
    assert_eq!(std::fs::read(&model).unwrap(), saved);
    let features = std::fs::read(ds.join("node_feat.npy")).unwrap();
    let out = graphloom(&[
        "embed",
        "--model",
        s(&model),
        "--dataset",
        s(&ds),
        "--out",
        s(&ds.join("node_feat.npy")),
    ]);
    refused(&out, &["lies inside an input folder"]);
    assert_eq!(std::fs::read(ds.join("node_feat.npy")).unwrap(), features);
    graphloom_ok(&[
        "predict",
        "--model",
        s(&model),
        "--dataset",
        s(&ds),
        "--out",
        s(&root.join("pred.npy")),
    ]);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_snapshot_folder_serves_one_run_at_a_time() {
    use std::os::fd::AsRawFd;
    let root = scratch("snapshot-lock");
    let ds = root.join("ds");
    small_dataset(&ds);
    let snaps = root.join("snaps");
    let train = || {
        graphloom(&[
            "train",
            "--dataset",
            s(&ds),
            "--epochs",
            "2",
            "--quiet",
            "--snapshot-dir",
            s(&snaps),
        ])
    };
    graphloom_ok(&[
        "train",
        "--dataset",
        s(&ds),
        "--epochs",
        "1",
        "--quiet",
        "--snapshot-dir",
        s(&snaps),
    ]);
    // Another run holds the folder (as a running training does, through its lock file).
    let lock = std::fs::File::open(snaps.join(".graphloom.lock")).unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(
        unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let snapshot = std::fs::read(snaps.join("snapshot/state.safetensors")).unwrap();
    refused(&train(), &[s(&snaps), "in use by another run"]);
    assert_eq!(
        std::fs::read(snaps.join("snapshot/state.safetensors")).unwrap(),
        snapshot
    );
    // Released (the kernel releases it however the holder ends): the folder is free again.
    drop(lock);
    assert!(train().status.success());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn an_empty_supervision_split_is_named_as_such() {
    let root = scratch("empty-train-pos");
    let link = small_link_split(&root);
    let empty: [i64; 0] = [];
    npy::write(&link.join("link_split/train_pos.npy"), &empty, &[2, 0]).unwrap();
    for extra in [&[][..], &["--fanouts", "5,5"][..]] {
        refused(
            &graphloom(&train_link(&link, extra)),
            &["no supervision pairs (train_pos.npy is empty)"],
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn info_reports_the_feature_file_and_plain_offsets() {
    let root = scratch("info");
    let ds = root.join("ds");
    small_dataset(&ds);
    let meta_path = ds.join("meta.json");
    let text = std::fs::read_to_string(&meta_path).unwrap();
    std::fs::write(
        &meta_path,
        text.replace("\"feat_dim\": 8", "\"feat_dim\": 5"),
    )
    .unwrap();
    let out = graphloom_ok(&["info", s(&ds)]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("features   300 x 8 f32 (meta.json says 300 x 5 f32)"),
        "{stdout}"
    );
    let out = graphloom_ok(&["info", s(&ds), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["feature_file"]["shape"], serde_json::json!([300, 8]));
    assert_eq!(v["feature_file"]["matches_meta"], false);
    std::fs::write(&meta_path, &text).unwrap();
    // The last offset is shown as a number.
    let row_ptr = ds.join("csr_row_ptr.npy");
    let mut a = npy::read::<i64>(&row_ptr).unwrap();
    let last = a.data.len() - 1;
    a.data[last] -= 1;
    let end = a.data[last];
    npy::write(&row_ptr, &a.data, &a.shape).unwrap();
    let out = graphloom(&["info", s(&ds)]);
    refused(&out, &["csr_row_ptr.npy", &format!("ends at {end},")]);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn an_empty_test_split_has_no_accuracy() {
    let root = scratch("no-test");
    let ds = root.join("ds");
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--nodes",
        "300",
        "--feat-dim",
        "8",
        "--classes",
        "3",
        "--split-counts",
        "100,50,0",
        "--out",
        s(&ds),
    ]);
    let out = graphloom_ok(&["train", "--dataset", s(&ds), "--epochs", "2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("test accuracy n/a (no test nodes)"),
        "{stdout}"
    );
    assert!(stderr.contains("test    n/a"), "{stderr}");
    assert!(!stdout.contains("0.0000") && !stderr.contains("test 0.0000"));
    let out = graphloom_ok(&["train", "--dataset", s(&ds), "--epochs", "2", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["test_acc"].is_null(), "{v}");
    assert!(v["best_val_acc"].is_number(), "{v}");
    assert!(v["history"][1]["test_acc"].is_null(), "{v}");
    std::fs::remove_dir_all(&root).unwrap();
}

/// Rewrites metadata entry `key` of the safetensors file `path` to `value`.
fn set_safetensors_metadata(path: &Path, key: &str, value: &str) {
    let bytes = std::fs::read(path).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    header["__metadata__"][key] = value.into();
    let mut text = header.to_string().into_bytes();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&text);
    out.extend_from_slice(&bytes[8 + len..]);
    std::fs::write(path, out).unwrap();
}

#[test]
fn hand_edited_snapshot_counters_are_refused() {
    let root = scratch("counters");
    let ds = root.join("ds");
    small_dataset(&ds);
    let snaps = root.join("snaps");
    let train = |epochs: &str, resume: bool| {
        let mut args = vec![
            "train",
            "--dataset",
            s(&ds),
            "--epochs",
            epochs,
            "--quiet",
            "--snapshot-dir",
            s(&snaps),
        ];
        if resume {
            args.push("--resume");
        }
        graphloom(&args)
    };
    assert!(train("2", false).status.success());
    let state = snaps.join("snapshot/state.safetensors");
    let saved = std::fs::read(&state).unwrap();
    for key in ["step", "optimizer_step", "epoch", "evaluations_since_best"] {
        set_safetensors_metadata(&state, key, &u64::MAX.to_string());
        refused(
            &train("4", true),
            &["state.safetensors", &format!("'{key}' is {}", u64::MAX)],
        );
        std::fs::write(&state, &saved).unwrap();
    }
    assert!(train("4", true).status.success());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn train_outputs_never_replace_what_the_run_reads() {
    let root = scratch("train-outputs");
    let ds = root.join("ds");
    small_dataset(&ds);
    let features = std::fs::read(ds.join("node_feat.npy")).unwrap();
    for flag in ["--save-model", "--summary-json", "--plot"] {
        for target in [ds.join("node_feat.npy"), ds.clone()] {
            let out = graphloom(&[
                "train",
                "--dataset",
                s(&ds),
                "--epochs",
                "1",
                flag,
                s(&target),
            ]);
            refused(&out, &["of this run", "write elsewhere"]);
        }
    }
    assert_eq!(std::fs::read(ds.join("node_feat.npy")).unwrap(), features);
    let twice = root.join("out.json");
    let out = graphloom(&[
        "train",
        "--dataset",
        s(&ds),
        "--epochs",
        "1",
        "--summary-json",
        s(&twice),
        "--plot",
        s(&twice),
    ]);
    refused(&out, &["two outputs"]);
    std::fs::remove_dir_all(&root).unwrap();
}

/// A dataset of one class has nothing to classify: `prepare synthetic` refuses to make one,
/// and training one (here a meta.json edited to say so) is a one-line error in every mode,
/// not the probe's "index 1 out of range 0..1".
#[test]
fn a_one_class_dataset_is_refused_in_one_line() {
    let root = scratch("one-class");
    let dir = root.join("one");
    refused(
        &graphloom(&[
            "prepare",
            "synthetic",
            "--nodes",
            "100",
            "--classes",
            "1",
            "--out",
            s(&dir),
        ]),
        &["--classes must be at least 2"],
    );
    assert!(!dir.exists());
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--nodes",
        "100",
        "--classes",
        "2",
        "--out",
        s(&dir),
    ]);
    let meta = dir.join("meta.json");
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(
        &meta,
        text.replace("\"num_classes\": 2", "\"num_classes\": 1"),
    )
    .unwrap();
    npy::write(&dir.join("node_label.npy"), &[0i64; 100], &[100]).unwrap();
    for mode in [&[][..], &["--fanouts", "5,5"][..]] {
        let args = [&["train", "--dataset", s(&dir), "--epochs", "1"][..], mode].concat();
        refused(&graphloom(&args), &["has 1 class", "needs 2 or more"]);
    }
}
