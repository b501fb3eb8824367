//! Out-of-core training end to end: a graph streamed to disk and trained from its files.

mod common;
use common::{graphloom, graphloom_ok, scratch};

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
