//! `graphloom train --batching`: the clusters' origin reported and kept beside the dataset,
//! the batching in the summary, bad values as one-line errors, and an MPI job taking the steps
//! of one process.

mod common;

use common::{graphloom, graphloom_ok, scratch, small_dataset};

/// The per-epoch losses of a `--json` summary printed on stdout.
fn losses(stdout: &[u8]) -> Vec<f64> {
    let text = String::from_utf8_lossy(stdout);
    let line = text.lines().next().expect("a summary line");
    let summary: serde_json::Value = serde_json::from_str(line).unwrap();
    assert!(summary["batching"]
        .as_str()
        .unwrap()
        .contains("Cluster-GCN"));
    summary["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["loss"].as_f64().unwrap())
        .collect()
}

const CLUSTERS: [&str; 6] = [
    "--batching",
    "cluster",
    "--clusters",
    "6",
    "--clusters-per-batch",
    "2",
];

#[test]
fn clusters_are_reported_computed_then_reused() {
    let root = scratch("subgraph-clusters");
    let dir = root.join("ds");
    small_dataset(&dir);
    let ds = dir.to_str().unwrap();
    let run = || {
        let mut args = vec!["train", "--dataset", ds, "--epochs", "2"];
        args.extend(CLUSTERS);
        String::from_utf8_lossy(&graphloom_ok(&args).stderr).into_owned()
    };
    let first = run();
    assert!(
        first.contains("subgraph batches: 6 clusters, computed by METIS"),
        "{first}"
    );
    assert!(dir.join("clusters").join("metis-6.npy").exists());
    let again = run();
    assert!(
        again.contains("subgraph batches: 6 clusters, reused from"),
        "{again}"
    );
    let mut args = vec!["train", "--dataset", ds, "--epochs", "2", "--json"];
    args.extend(CLUSTERS);
    assert_eq!(losses(&graphloom_ok(&args).stdout).len(), 2);
    for (bad, says) in [
        (
            vec!["--batching", "cluster", "--clusters", "301"],
            "--clusters cannot cut 300 nodes",
        ),
        (
            vec!["--batching", "saint-rw", "--saint-budget", "0"],
            "--saint-budget must be at least 1",
        ),
        (
            vec![
                "--batching",
                "saint-rw",
                "--saint-budget",
                "5",
                "--walk-length",
                "0",
            ],
            "--walk-length must be at least 1",
        ),
    ] {
        let mut args = vec!["train", "--dataset", ds, "--epochs", "1"];
        args.extend(bad);
        let out = graphloom(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// Two MPI processes, each with its own rows of the features, take the steps of one.
#[cfg(feature = "mpi")]
#[test]
fn mpi_subgraph_batches_take_the_steps_of_one_process() {
    let root = scratch("subgraph-mpi");
    let dir = root.join("ds");
    small_dataset(&dir);
    let ds = dir.to_str().unwrap();
    let mut args = vec![
        "train",
        "--dataset",
        ds,
        "--epochs",
        "3",
        "--json",
        "--quiet",
    ];
    args.extend(CLUSTERS);
    let one = losses(&graphloom_ok(&args).stdout);
    args.extend(["--comm", "mpi"]);
    let out = graphloom_comm::launch::mpirun(2)
        .arg(env!("CARGO_BIN_EXE_graphloom"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let two = losses(&out.stdout);
    for (a, b) in one.iter().zip(&two) {
        assert!((a - b).abs() <= 1e-5 * a.abs(), "{a} vs {b}");
    }
    std::fs::remove_dir_all(&root).unwrap();
}
