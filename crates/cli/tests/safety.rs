//! Nothing of the user's is lost and nothing crashes: outputs that would replace a user's
//! folder or an input are refused, a snapshot folder serves one run at a time, sizes beyond
//! the process's memory are errors, and damaged files give one-line errors.

use std::path::Path;
use std::process::Output;

use graphloom_graph::npy;

mod common;
use common::{graphloom, graphloom_limited, graphloom_ok, scratch, small_dataset};

/// Checks that `out` is a one-line error (exit 1, no panic) holding every piece of `expect`.
fn refused(out: &Output, expect: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    for piece in expect {
        assert!(stderr.contains(piece), "{piece:?} not in: {stderr}");
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The names in folder `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

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
fn node_ids_beyond_32_bits_or_memory_are_errors_not_aborts() {
    let root = scratch("big-ids");
    let e31 = root.join("e31.txt");
    std::fs::write(&e31, "0 2147483648\n1 2\n").unwrap();
    let e32 = root.join("e32.txt");
    std::fs::write(&e32, "0 4294967296\n").unwrap();
    let prepare = |edges: &Path| {
        graphloom_limited(
            4 << 20,
            300,
            &[
                "prepare",
                "edgelist",
                "--edges",
                s(edges),
                "--out",
                s(&root.join("ds")),
            ],
        )
    };
    // An id far beyond the edges' count is refused before anything is sized by it.
    refused(
        &prepare(&e31),
        &["e31.txt", "node id 2147483648", "give the number of nodes"],
    );
    refused(&prepare(&e32), &["e32.txt", "above 4294967294", "32-bit"]);
    assert_eq!(listing(&root), ["e31.txt", "e32.txt"]);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn features_beyond_the_address_space_limit_are_refused_before_loading() {
    let root = scratch("ulimit");
    let ds = root.join("ds");
    small_dataset(&ds);
    // 300 x 5,000,000 f32 features (5.6 GiB), a sparse file: the header and meta.json agree.
    let feat_dim = 5_000_000;
    let meta_path = ds.join("meta.json");
    let mut meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).unwrap();
    meta["feat_dim"] = feat_dim.into();
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    let path = ds.join("node_feat.npy");
    let mut dict =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': (300, {feat_dim}), }}");
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    bytes.extend_from_slice(dict.as_bytes());
    std::fs::write(&path, &bytes).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len((bytes.len() + 300 * feat_dim * 4) as u64)
        .unwrap();
    assert_eq!(npy::read_header(&path).unwrap().shape, [300, feat_dim]);
    let out = graphloom_limited(
        4 << 20,
        300,
        &["train", "--dataset", s(&ds), "--epochs", "1", "--quiet"],
    );
    refused(&out, &["--dataset", "node features take 5.6 GiB"]);
    std::fs::remove_dir_all(&root).unwrap();
}

/// A link split of the 300-node synthetic dataset in `root/link` (about 760 supervision
/// pairs).
fn small_link_split(root: &Path) -> std::path::PathBuf {
    let ds = root.join("ds");
    small_dataset(&ds);
    let link = root.join("link");
    graphloom_ok(&[
        "prepare",
        "link-split",
        "--dataset",
        s(&ds),
        "--out",
        s(&link),
    ]);
    link
}

/// The arguments of one quiet epoch of link prediction on the split `link`, then `extra`.
fn train_link<'a>(link: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "train",
        "--dataset",
        s(link),
        "--task",
        "link",
        "--epochs",
        "1",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn link_steps_whose_pairs_outgrow_memory_are_refused_before_allocating() {
    let root = scratch("neg-ratio");
    let link = small_link_split(&root);
    let train = |extra: &[&str]| graphloom_limited(4 << 20, 300, &train_link(&link, extra));
    // 760 pairs with 65536 negatives each: 50 million pairs, 7 GiB and more.
    refused(
        &train(&["--neg-ratio", "65536"]),
        &[
            "--neg-ratio 65536 with all ",
            "supervision pairs in one step (no --batch-size)",
            "this process may use: lower --neg-ratio, or give --batch-size",
        ],
    );
    refused(
        &train(&["--neg-ratio", "65536", "--fanouts", "10,10"]),
        &[
            "--neg-ratio 65536 with ",
            "supervision pairs a step (--batch-size)",
            "lower --neg-ratio or --batch-size",
        ],
    );
    refused(
        &train(&["--neg-ratio", "65537"]),
        &["--neg-ratio 65537 is more than 65536 negatives per positive"],
    );
    // A step that fits trains.
    let out = train(&["--neg-ratio", "1000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn graphsaint_sizes_beyond_the_graph_or_memory_are_refused() {
    let root = scratch("saint-sizes");
    let ds = root.join("ds");
    small_dataset(&ds);
    let train = |dataset: &Path, batching: &[&str]| {
        let mut args = vec![
            "train",
            "--dataset",
            s(dataset),
            "--epochs",
            "1",
            "--quiet",
            "--batching",
        ];
        args.extend_from_slice(batching);
        graphloom_limited(4 << 20, 300, &args)
    };
    for (batching, expect) in [
        (
            vec![
                "saint-rw",
                "--saint-budget",
                "100000000",
                "--walk-length",
                "100",
            ],
            "--saint-budget 100000000 is more than the graph's 300 nodes: give at most 300",
        ),
        (
            vec!["saint-node", "--saint-budget", "4294967296"],
            "--saint-budget 4294967296 is more than the graph's 300 nodes",
        ),
        (
            vec![
                "saint-rw",
                "--saint-budget",
                "5",
                "--walk-length",
                "1000000000000",
            ],
            "--walk-length 1000000000000 steps are more than the graph's 300 nodes",
        ),
        (
            vec![
                "saint-rw",
                "--saint-budget",
                "4294967296",
                "--walk-length",
                "4294967296",
            ],
            "--saint-budget 4294967296 is more than",
        ),
        (
            vec![
                "saint-edge",
                "--saint-budget",
                "10",
                "--batches-per-epoch",
                "1099511627776",
            ],
            "--batches-per-epoch 1099511627776 samples per epoch: give 1 to the graph's 300",
        ),
        (
            vec![
                "saint-edge",
                "--saint-budget",
                "100",
                "--batches-per-epoch",
                "1099511627776",
                "--saint-coverage",
                "2",
            ],
            "--batches-per-epoch 1099511627776 samples per epoch",
        ),
    ] {
        refused(&train(&ds, &batching), &[expect]);
    }
    // Within the graph, a sample can still outgrow memory: 100,000 walks of 100,000 steps.
    let big = root.join("big");
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--nodes",
        "100000",
        "--avg-degree",
        "2",
        "--feat-dim",
        "1",
        "--classes",
        "2",
        "--out",
        s(&big),
    ]);
    refused(
        &train(
            &big,
            &[
                "saint-rw",
                "--saint-budget",
                "100000",
                "--walk-length",
                "100000",
            ],
        ),
        &[
            "--saint-budget 100000 with --walk-length 100000 draws 10000100000 nodes per sample",
            "lower --saint-budget or --walk-length",
        ],
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn synthetic_and_model_sizes_past_their_products_are_refused() {
    let root = scratch("synthetic-sizes");
    let out = root.join("ds");
    let prepare = |flag: &str, value: &str| {
        graphloom_limited(
            4 << 20,
            300,
            &[
                "prepare",
                "synthetic",
                "--nodes",
                "1000",
                flag,
                value,
                "--out",
                s(&out),
            ],
        )
    };
    refused(
        &prepare("--edges", "18446744073709551615"),
        &["edges: 18446744073709551615 edges are more than the 1152921504606846975"],
    );
    refused(
        &prepare("--feat-dim", "18446744073709551615"),
        &["feat_dim: 1000 nodes of 18446744073709551615 features are more bytes"],
    );
    // Within the bounds, the disk decides, before anything is written.
    refused(
        &prepare("--edges", "1152921504606846975"),
        &["the synthetic dataset needs about", "of disk"],
    );
    // Nothing is left behind: no dataset, no temporary folder.
    assert!(listing(&root).is_empty(), "{:?}", listing(&root));
    small_dataset(&out);
    let gat = graphloom_limited(
        4 << 20,
        300,
        &[
            "train",
            "--dataset",
            s(&out),
            "--model",
            "gat",
            "--hidden",
            "4294967296",
            "--heads",
            "4294967296",
        ],
    );
    refused(
        &gat,
        &["4294967296 heads of hidden width 4294967296 make more than 1099511627776 parameters"],
    );
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

#[test]
fn every_mode_below_the_memory_it_needs_ends_in_a_memory_error() {
    let root = scratch("below");
    let link = small_link_split(&root);
    let ds = root.join("ds");
    let parts = root.join("parts");
    let model = root.join("model.safetensors");
    graphloom_ok(&[
        "partition",
        "--dataset",
        s(&ds),
        "--parts",
        "2",
        "--out",
        s(&parts),
    ]);
    graphloom_ok(&[
        "train",
        "--dataset",
        s(&ds),
        "--epochs",
        "1",
        "--quiet",
        "--save-model",
        s(&model),
    ]);
    let train = |dataset: &Path, extra: &[&str]| -> Vec<String> {
        let mut args = vec!["train", "--dataset", s(dataset), "--epochs", "1", "--quiet"];
        args.extend_from_slice(extra);
        args.into_iter().map(String::from).collect()
    };
    let predictions = root.join("predictions.npy");
    let modes = [
        train(&ds, &[]),
        train(&ds, &["--fanouts", "5,5"]),
        train(&ds, &["--fanouts", "5,5", "--features-location", "mmap"]),
        train(&ds, &["--batching", "cluster", "--clusters", "4"]),
        train(&ds, &["--batching", "saint-rw", "--saint-budget", "50"]),
        train(&link, &["--task", "link"]),
        train(&link, &["--task", "link", "--fanouts", "5,5"]),
        train(&parts, &["--workers", "2"]),
        [
            "predict",
            "--dataset",
            s(&ds),
            "--model",
            s(&model),
            "--out",
        ]
        .into_iter()
        .map(String::from)
        .chain([s(&predictions).to_string()])
        .collect(),
    ];
    // From the least limit the process starts under (below it the loader cannot map the
    // binary and its libraries: about 15,000 KiB, more with MPI linked) to one every mode runs
    // under: each run either trains or ends in one error line, never a panic, an abort or a
    // signal.
    let floor = (15_000..=60_000)
        .step_by(5_000)
        .find(|&kib| graphloom_limited(kib, 60, &["--version"]).status.success())
        .expect("graphloom --version runs under 60,000 KiB");
    let limits = [0, 5_000, 15_000, 30_000, 50_000, 150_000].map(|above| floor + above);
    for args in &modes {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut outcomes = Vec::new();
        for kib in limits {
            let _ = std::fs::remove_file(&predictions);
            let out = graphloom_limited(kib, 300, &args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let code = out.status.code();
            assert!(
                code == Some(0) || code == Some(1),
                "{args:?} under {kib} KiB: {:?}\n{stderr}",
                out.status
            );
            for crash in ["panicked", "memory allocation of", "RUST_BACKTRACE"] {
                assert!(
                    !stderr.contains(crash),
                    "{args:?} under {kib} KiB: {stderr}"
                );
            }
            if code == Some(1) {
                let last = stderr.trim().lines().last().unwrap_or_default();
                assert!(
                    last.starts_with("error: "),
                    "{args:?} under {kib} KiB: {stderr}"
                );
            }
            outcomes.push(code == Some(0));
        }
        // The sweep crosses what the mode needs: refused at the lowest limit, run at the top.
        assert_eq!(
            outcomes.first(),
            Some(&false),
            "{args:?} ran under 20,000 KiB"
        );
        assert_eq!(
            outcomes.last(),
            Some(&true),
            "{args:?} failed under 200,000 KiB"
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}
