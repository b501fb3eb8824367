//! Sizes beyond what the process may use are errors, never aborts: ids past 32 bits, features,
//! link steps and GraphSAINT samples past memory, products of sizes past their types, and every
//! mode under an address-space limit below what it needs.

use std::path::Path;

use graphloom_graph::npy;

mod common;
use common::{
    graphloom_limited, graphloom_ok, listing, refused, s, scratch, small_dataset, small_link_split,
    train_link,
};

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
    // The top leaves room for the stacks of a mini-batch run's threads (35 of them reserve
    // about 140 MiB) beside the binary's own mappings, with some to spare as the binary grows.
    let limits = [0, 5_000, 15_000, 30_000, 50_000, 160_000].map(|above| floor + above);
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
            "{args:?} ran under {} KiB",
            limits[0]
        );
        assert_eq!(
            outcomes.last(),
            Some(&true),
            "{args:?} failed under {} KiB",
            limits[limits.len() - 1]
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}
