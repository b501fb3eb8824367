//! `graphloom bench` end to end: one JSON object per measurement per line.

use std::path::Path;

mod common;
use common::{graphloom, graphloom_ok, scratch};

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

/// `bench scale` at a tiny shape: one JSON object per measurement with the keys, a
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

/// `bench hetero --json` prints GraphLoom's measurement with the keys the issue names (DGL
/// left out here: its interpreter is pointed at nothing).
#[test]
fn bench_hetero_prints_its_measurement_as_one_json_line() {
    let dir = scratch("bench-hetero");
    let data = dir.join("mag");
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--hetero",
        "mag",
        "--scale",
        "0.005",
        "--out",
        data.to_str().unwrap(),
    ]);
    // The peer's script is there, its Python environment is not.
    let baselines = dir.join("baselines");
    std::fs::create_dir_all(&baselines).unwrap();
    std::fs::write(baselines.join("dgl_hetero.py"), "").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_graphloom"))
        .args(["bench", "hetero", "--dataset"])
        .arg(&data)
        .args([
            "--fanouts",
            "5,5",
            "--batches",
            "2",
            "--repeats",
            "1",
            "--json",
            "--baselines",
        ])
        .arg(&baselines)
        .env("DGL_PYTHON", dir.join("no-python"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["system"], "graphloom");
    for key in [
        "seeds_per_second",
        "sampled_edges_per_second",
        "peak_rss_bytes",
    ] {
        assert!(v[key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }
    assert!(v["vs_dgl"].is_null() && v["host"].is_object(), "{v}");
    // The missing peer is named with the reason, in the record and on stderr.
    let said = v["baselines"]["dgl"].as_str().unwrap_or_default();
    assert!(said.starts_with("left out: not installed"), "{v}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("dgl: left out: not installed"), "{stderr}");
    // A baselines folder that is not there is an error, not a quiet run without peers.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_graphloom"))
        .args(["bench", "hetero", "--dataset"])
        .arg(&data)
        .args(["--batches", "1", "--repeats", "1", "--baselines"])
        .arg(dir.join("no-baselines"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: --baselines ") && stderr.contains("no-baselines: not a folder"),
        "{stderr}"
    );
}
