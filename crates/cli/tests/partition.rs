//! `graphloom partition` as a user runs it: each method's JSON report and the record in
//! `partition.json`, `auto`'s choice under a memory budget, and the streamed parts taken
//! unchanged by SAR training, `--cluster-from` and `info`; bad settings refused in one line.

mod common;

use common::{cora, graphloom, graphloom_ok, refused, s, scratch, summary};
use graphloom_graph::parts::PartitionMeta;

fn split(ds: &std::path::Path, out: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "partition",
        "--dataset",
        s(ds),
        "--parts",
        "4",
        "--out",
        s(out),
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = graphloom_ok(&args);
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn each_method_reports_its_split_and_sar_trains_on_the_streamed_parts() {
    let root = scratch("partition-methods");
    let ds = cora(&root);
    let metis = split(&ds, &root.join("metis"), &["--method", "metis"]);
    let streamed = split(&ds, &root.join("stream"), &["--method", "stream"]);
    let edges = 10556.0;
    for (report, method) in [(&metis, "metis"), (&streamed, "stream")] {
        assert_eq!(report["method"], method);
        let cut = report["edge_cut"].as_u64().unwrap() as f64;
        assert_eq!(report["edge_cut_fraction"].as_f64().unwrap(), cut / edges);
        assert!(report["peak_anon_bytes"].as_u64().unwrap() > 0);
        assert!(report["seconds"].as_f64().unwrap() > 0.0);
        let nodes: u64 = report["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(nodes, 2708);
    }
    assert!(streamed["max_part_nodes_over_mean"].as_f64().unwrap() <= 1.03 + 1.0 / 677.0);
    let (stream_cut, metis_cut) = (
        streamed["edge_cut"].as_f64().unwrap(),
        metis["edge_cut"].as_f64().unwrap(),
    );
    assert!(
        stream_cut <= 1.5 * metis_cut,
        "{stream_cut} against {metis_cut}"
    );
    let meta = PartitionMeta::load(&root.join("stream")).unwrap();
    let method = meta.method.unwrap();
    assert_eq!(method.name, "stream");
    assert_eq!(method.balance, Some(1.03));
    assert!(!method.passes.is_empty());
    assert_eq!(meta.edge_cut as f64, stream_cut);
    // A dry run splits alike and writes nothing.
    let dry = graphloom_ok(&[
        "partition",
        "--dataset",
        s(&ds),
        "--parts",
        "4",
        "--method",
        "stream",
        "--dry-run",
        "--json",
    ]);
    let dry: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(dry["edge_cut"], streamed["edge_cut"]);
    assert_eq!(dry["halo"], streamed["halo"]);
    assert_eq!(dry["written"], false);
    // SAR over the streamed parts: 4 workers train the losses of 1 worker's whole graph
    // (within f32's rounding of a different summation order).
    let parts = root.join("stream");
    let run = |dataset: &std::path::Path, workers: &str, out: &str| {
        let json = root.join(out);
        graphloom_ok(&[
            "train",
            "--dataset",
            s(dataset),
            "--model",
            "gcn",
            "--workers",
            workers,
            "--epochs",
            "3",
            "--dtype",
            "f64",
            "--summary-json",
            s(&json),
        ]);
        common::losses(&summary(&json))
    };
    let one = run(&ds, "1", "one.json");
    let four = run(&parts, "4", "four.json");
    for (a, b) in one.iter().zip(&four) {
        assert!((a - b).abs() < 1e-9, "{one:?} against {four:?}");
    }
    graphloom_ok(&[
        "train",
        "--dataset",
        s(&ds),
        "--batching",
        "cluster",
        "--cluster-from",
        s(&parts),
        "--epochs",
        "1",
    ]);
    let info = graphloom_ok(&["info", s(&parts)]);
    assert!(String::from_utf8_lossy(&info.stdout).contains("4 parts"));
}

#[test]
fn auto_takes_metis_while_it_fits_and_streams_past_the_budget() {
    let root = scratch("partition-auto");
    let ds = root.join("syn");
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--nodes",
        "30000",
        "--avg-degree",
        "10",
        "--feat-dim",
        "4",
        "--out",
        s(&ds),
    ]);
    assert_eq!(split(&ds, &root.join("a"), &[])["method"], "metis");
    // METIS needs about 15 MB here, the streaming split about 2.5 MB.
    let tight = split(&ds, &root.join("b"), &["--memory-gib", "0.005"]);
    assert_eq!(tight["method"], "stream");
    let out = graphloom(&[
        "partition",
        "--dataset",
        s(&ds),
        "--parts",
        "4",
        "--out",
        s(&root.join("c")),
        "--method",
        "metis",
        "--memory-gib",
        "0.005",
    ]);
    refused(&out, &["METIS", "--memory-gib gives", "--method stream"]);
    assert!(!root.join("c").exists());
}

#[test]
fn settings_no_split_can_meet_are_refused_in_one_line() {
    let root = scratch("partition-refusals");
    let ds = cora(&root);
    let out = root.join("out");
    for (extra, expect) in [
        (vec!["--parts", "0"], "--parts must be at least 1"),
        (
            vec!["--parts", "3000"],
            "cannot cut 2708 nodes into 3000 parts",
        ),
        (
            vec!["--parts", "2", "--balance", "0.9"],
            "--balance 0.9 is below 1",
        ),
        (
            vec!["--parts", "2", "--memory-gib", "0"],
            "--memory-gib must be a positive number of GiB",
        ),
        (
            vec![
                "--parts",
                "2",
                "--method",
                "stream",
                "--memory-gib",
                "0.00001",
            ],
            "the streaming split",
        ),
    ] {
        let mut args = vec!["partition", "--dataset", s(&ds), "--out", s(&out)];
        args.extend_from_slice(&extra);
        refused(&graphloom(&args), &[expect]);
        assert!(!out.exists(), "{extra:?}");
    }
}
