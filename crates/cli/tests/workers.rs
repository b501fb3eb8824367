//! Several workers end to end (in-process and MPI, data parallel and SAR): the same training as
//! one worker, `partition`, and a worker that hangs or dies named by the others.

use std::path::Path;
use std::process::Command;

use graphloom_graph::npy;

mod common;
use common::{graphloom, graphloom_ok, scratch, small_dataset};

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
    // info on a partitioned folder describes its parts; on no dataset at all, says so.
    let out = graphloom(&["info", parts.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("partition  ") && text.contains(" parts of "),
        "{text}"
    );
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
        let mut a = npy::read_ints(&p).unwrap();
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
