//! A dataset file cut short under a sampled run that maps it: the run ends with a one-line
//! error naming the file and exit status 1, not with SIGBUS.
//!
//! The file is cut to nothing as soon as the first epoch's line appears, while thousands of
//! epochs remain; every later epoch reads the mapped file (sampling reads `csr_col_idx.npy`,
//! gathers under `--feature-reads mapped` read `node_feat.npy`), and truncation unmaps the
//! pages past the new end from every process, so the next read faults wherever it falls.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

mod common;
use common::{scratch, small_dataset};

/// Trains on `dataset` with `args` for up to 10,000 epochs, cuts `dataset/file` to nothing
/// when the first epoch ends, and checks that the run ends with an error naming the file.
fn cut_under_a_run(dataset: &Path, file: &str, args: &[&str]) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_graphloom"))
        .args(["train", "--dataset", dataset.to_str().unwrap()])
        .args([
            "--fanouts",
            "5,5",
            "--batch-size",
            "16",
            "--epochs",
            "10000",
        ])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run graphloom");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let path = dataset.join(file);
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            panic!("the run ended before its first epoch: {seen}");
        }
        seen.push_str(&line);
        if line.starts_with("epoch") {
            break;
        }
    }
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    stderr.read_to_string(&mut seen).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), None, "{seen}");
    assert_eq!(status.code(), Some(1), "{seen}");
    let last = seen.trim_end().lines().last().unwrap_or_default();
    let expect = format!("error: {} changed while in use", path.display());
    assert!(
        last.starts_with(&expect),
        "{expect:?} does not start: {seen}"
    );
}

#[test]
fn mapped_features_cut_short_end_the_run_with_an_error_naming_them() {
    let root = scratch("shrink-features");
    let dataset = root.join("ds");
    small_dataset(&dataset);
    cut_under_a_run(
        &dataset,
        "node_feat.npy",
        &["--features-location", "mmap", "--feature-reads", "mapped"],
    );
}

#[test]
fn a_mapped_graph_cut_short_ends_the_run_with_an_error_naming_it() {
    let root = scratch("shrink-graph");
    let dataset = root.join("ds");
    small_dataset(&dataset);
    cut_under_a_run(&dataset, "csr_col_idx.npy", &[]);
}
