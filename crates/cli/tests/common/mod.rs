//! What the command-line tests share: running the binary and a scratch folder per test.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `graphloom` with `args`, stdout and stderr captured (so stderr is not a terminal).
pub(crate) fn graphloom(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_graphloom"))
        .args(args)
        .output()
        .expect("run graphloom")
}

/// Runs `graphloom` under an address-space limit of `kib` KiB (`ulimit -v`) and a time limit
/// of `seconds` (`timeout`, exit code 124), so that a run that spins fails its test.
#[allow(dead_code)]
pub(crate) fn graphloom_limited(kib: u64, seconds: u64, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {kib} && exec timeout {seconds} \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_graphloom"))
        .args(args)
        .output()
        .expect("run graphloom under sh")
}

/// An empty folder for one test, named after it and this process, removed with everything in
/// it when the test ends, passed or failed (so test runs leave nothing in the temporary
/// folder).
pub(crate) fn scratch(name: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("graphloom-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

/// A test's scratch folder ([`scratch`]): its path, removed on drop.
pub(crate) struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = PathBuf;

    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `graphloom` and fails the test with its stderr unless it succeeds.
#[allow(dead_code)]
pub(crate) fn graphloom_ok(args: &[&str]) -> Output {
    let out = graphloom(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Cora as a dataset directory, converted from the raw files in `testdata/planetoid`.
#[allow(dead_code)]
pub(crate) fn cora(root: &std::path::Path) -> PathBuf {
    let dir = root.join("cora");
    let raw = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/planetoid");
    graphloom_ok(&[
        "prepare",
        "planetoid",
        "--raw",
        raw.to_str().unwrap(),
        "--name",
        "cora",
        "--out",
        dir.to_str().unwrap(),
    ]);
    dir
}

/// The dataset directory `dataset` partitioned into `parts` parts in `out` (`graphloom
/// partition`, which must succeed).
#[allow(dead_code)]
pub(crate) fn partition(dataset: &std::path::Path, parts: usize, out: &std::path::Path) {
    graphloom_ok(&[
        "partition",
        "--dataset",
        dataset.to_str().unwrap(),
        "--parts",
        &parts.to_string(),
        "--out",
        out.to_str().unwrap(),
    ]);
}

/// A synthetic dataset of 300 nodes, 8 features and 3 classes in `dir`.
#[allow(dead_code)]
pub(crate) fn small_dataset(dir: &std::path::Path) {
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--nodes",
        "300",
        "--avg-degree",
        "6",
        "--feat-dim",
        "8",
        "--classes",
        "3",
        "--out",
        dir.to_str().unwrap(),
    ]);
}

/// The JSON summary a run wrote (`--summary-json`).
#[allow(dead_code)]
pub(crate) fn summary(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The loss of every epoch of a summary.
#[allow(dead_code)]
pub(crate) fn losses(s: &serde_json::Value) -> Vec<f64> {
    s["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["loss"].as_f64().unwrap())
        .collect()
}

/// The tensors of a safetensors file, by name, as bytes.
#[allow(dead_code)]
pub(crate) fn tensors(path: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut v: Vec<(String, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(name, t)| (name, t.data().to_vec()))
        .collect();
    v.sort();
    v
}
