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

/// An empty folder for one test, named after it and this process.
pub(crate) fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("graphloom-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
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
