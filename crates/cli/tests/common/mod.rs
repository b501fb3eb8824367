//! What the command-line tests share: running the binary and a scratch folder per test.

use std::path::{Path, PathBuf};
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

/// Checks that `out` is a one-line error (exit 1, no panic) holding every piece of `expect`.
#[allow(dead_code)]
pub(crate) fn refused(out: &Output, expect: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    for piece in expect {
        assert!(stderr.contains(piece), "{piece:?} not in: {stderr}");
    }
}

/// `p` as text.
#[allow(dead_code)]
pub(crate) fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A link split of the 300-node synthetic dataset in `root/link` (about 760 supervision
/// pairs).
#[allow(dead_code)]
pub(crate) fn small_link_split(root: &Path) -> std::path::PathBuf {
    let ds = root.join("ds");
    small_dataset(&ds);
    let link = root.join("link");
    link_split(&ds, &link);
    link
}

/// `prepare link-split` of dataset `ds` into `out`, with the default shares.
#[allow(dead_code)]
pub(crate) fn link_split(ds: &Path, out: &Path) {
    graphloom_ok(&["prepare", "link-split", "--dataset", s(ds), "--out", s(out)]);
}

/// The share of `idx` whose predicted label is the true one.
#[allow(dead_code)]
pub(crate) fn accuracy(pred: &[i64], labels: &[i64], idx: &[i64]) -> f64 {
    let hits = idx
        .iter()
        .filter(|&&i| pred[i as usize] == labels[i as usize])
        .count();
    hits as f64 / idx.len() as f64
}

/// The arguments of one quiet epoch of link prediction on the split `link`, then `extra`.
#[allow(dead_code)]
pub(crate) fn train_link<'a>(link: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
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

/// The names in folder `dir`, sorted.
#[allow(dead_code)]
pub(crate) fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// ogbn-mag's shape at 1% (7,364 papers of 349 classes, 11,346 authors, 87 institutions,
/// 600 fields; papers alone have features) in `root/mag`.
#[allow(dead_code)]
pub(crate) fn mag(root: &Path) -> PathBuf {
    let dir = root.join("mag");
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--hetero",
        "mag",
        "--scale",
        "0.01",
        "--seed",
        "3",
        "--out",
        s(&dir),
    ]);
    dir
}
