//! Crash consistency: `prepare`, `partition`, `train --save-model` and snapshot writes killed
//! with SIGKILL at seeded moments of their run. Whatever the moment, the previous dataset,
//! partition, model file or snapshot is still whole and unchanged (or the new one is there,
//! whole: never half of one under the final name), and the next run continues: a training
//! resumed after every kill ends with the losses and parameters of an uninterrupted one, bit
//! for bit.
//!
//! The kill delays are seeded fractions of the time an uninterrupted run took on this
//! machine, so they fall across the whole run however fast the machine is; what is checked
//! holds wherever they fall.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{graphloom_ok, losses, scratch, summary, tensors};

use graphloom_graph::parts::{Part, PartitionMeta};
use graphloom_graph::Dataset;
use graphloom_nn::model_file::ModelFile;

/// Files that readers may add to a folder they only read (records of checks passed).
const READERS_NOTES: &str = ".graphloom-checks.json";

/// Seeded fractions in (0.02, `most`): where in an uninterrupted run's time each kill falls
/// (past 1, after it would have ended).
fn kill_points(seed: u64, count: usize, most: f64) -> Vec<f64> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            0.02 + (most - 0.02) * (z >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect()
}

/// How long `graphloom args` takes when not interrupted.
fn time_of(args: &[&str]) -> Duration {
    let start = Instant::now();
    graphloom_ok(args);
    start.elapsed()
}

/// Runs `graphloom args` and sends it SIGKILL after `delay` unless it ended before; returns
/// whether it was killed.
fn kill_after(args: &[&str], delay: Duration) -> bool {
    let mut child = Command::new(env!("CARGO_BIN_EXE_graphloom"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run graphloom");
    let end = Instant::now() + delay;
    while Instant::now() < end {
        if child.try_wait().expect("wait").is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1).min(end - Instant::now()));
    }
    let killed = child.try_wait().expect("wait").is_none();
    // SIGKILL: no handler, no unwinding, no destructor runs.
    let _ = child.kill();
    child.wait().expect("reap");
    killed
}

/// Every file under `root` (but readers' notes), by relative path, with its bytes.
fn tree(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.file_name().unwrap() != READERS_NOTES {
                let rel = path.strip_prefix(root).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The names in `dir` that start with `.` (temporary files and folders of writers).
fn hidden_entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}

/// `out` is `old` or `new` whole, never a mix or a part.
fn assert_old_or_new(
    out: &Path,
    old: &BTreeMap<PathBuf, Vec<u8>>,
    new: &BTreeMap<PathBuf, Vec<u8>>,
    what: &str,
) {
    let now = tree(out);
    assert!(
        now == *old || now == *new,
        "{what}: {} holds neither the previous output nor the new one whole ({} files: {:?})",
        out.display(),
        now.len(),
        now.keys().collect::<Vec<_>>()
    );
}

/// Kills `args` (which write `out`, holding `old` before) at seeded moments; after each kill,
/// `out` is the old or the new output whole and `check` accepts it. A last run completes and
/// leaves no temporary entry beside `out`.
fn kill_a_rewrite(args: &[&str], out: &Path, seed: u64, kills: usize, check: impl Fn(&Path)) {
    let old = tree(out);
    let reference = out.with_extension("reference");
    let ref_args: Vec<&str> = args
        .iter()
        .map(|&a| {
            if a == out.to_str().unwrap() {
                reference.to_str().unwrap()
            } else {
                a
            }
        })
        .collect();
    let took = time_of(&ref_args);
    let new = tree(&reference);
    assert!(old != new, "the rewrite must change {}", out.display());
    for (i, f) in kill_points(seed, kills, 1.2).into_iter().enumerate() {
        kill_after(args, took.mul_f64(f));
        assert_old_or_new(out, &old, &new, &format!("kill {i} at {f:.2} of a run"));
        check(out);
    }
    graphloom_ok(args);
    assert_eq!(tree(out), new, "the run after the kills");
    check(out);
    let parent = out.parent().unwrap();
    let name = out.file_name().unwrap().to_string_lossy();
    let left: Vec<String> = hidden_entries(parent)
        .into_iter()
        .filter(|n| n.starts_with(&format!(".{name}.")))
        .collect();
    assert!(left.is_empty(), "left beside {}: {left:?}", out.display());
    std::fs::remove_dir_all(&reference).unwrap();
}

fn synthetic(out: &Path, seed: &str) -> Vec<String> {
    [
        "prepare",
        "synthetic",
        "--nodes",
        "30000",
        "--avg-degree",
        "10",
        "--feat-dim",
        "32",
        "--classes",
        "4",
        "--seed",
        seed,
        "--out",
        out.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn killed_prepare_keeps_the_previous_dataset() {
    let root = scratch("crash-prepare");
    let ds = root.join("ds");
    graphloom_ok(&strs(&synthetic(&ds, "1")));
    kill_a_rewrite(&strs(&synthetic(&ds, "2")), &ds, 11, 8, |d| {
        Dataset::load(d).unwrap_or_else(|e| panic!("{e}"));
    });
    // The in-memory converters save through the same swap.
    let raw = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/planetoid");
    let cora = [
        "prepare",
        "planetoid",
        "--raw",
        raw.to_str().unwrap(),
        "--name",
        "cora",
        "--out",
        ds.to_str().unwrap(),
    ];
    kill_a_rewrite(&cora, &ds, 12, 6, |d| {
        Dataset::load(d).unwrap_or_else(|e| panic!("{e}"));
    });
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn killed_partition_keeps_the_previous_partition() {
    let root = scratch("crash-partition");
    let ds = root.join("ds");
    graphloom_ok(&strs(&synthetic(&ds, "3")));
    let parts = root.join("parts");
    let partition = |count: &str| {
        [
            "partition",
            "--dataset",
            ds.to_str().unwrap(),
            "--parts",
            count,
            "--out",
            parts.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    };
    graphloom_ok(&strs(&partition("2")));
    let mut streamed = partition("3");
    streamed.extend(["--method", "stream"].map(String::from));
    kill_a_rewrite(&strs(&streamed), &parts, 21, 8, |p| {
        let meta = PartitionMeta::load(p).unwrap_or_else(|e| panic!("{e}"));
        for i in 0..meta.parts {
            Part::load(p, i).unwrap_or_else(|e| panic!("{e}"));
        }
    });
    std::fs::remove_dir_all(&root).unwrap();
}

/// A small dataset for the training runs.
fn training_dataset(root: &Path) -> PathBuf {
    let ds = root.join("ds");
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--nodes",
        "3000",
        "--avg-degree",
        "8",
        "--feat-dim",
        "16",
        "--classes",
        "4",
        "--out",
        ds.to_str().unwrap(),
    ]);
    ds
}

#[test]
fn killed_save_model_keeps_the_previous_model_file() {
    let root = scratch("crash-model");
    let ds = training_dataset(&root);
    let model = root.join("model.safetensors");
    let train = |seed: &str, out: &Path| {
        [
            "train",
            "--dataset",
            ds.to_str().unwrap(),
            "--epochs",
            "20",
            "--quiet",
            "--seed",
            seed,
            "--save-model",
            out.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    };
    graphloom_ok(&strs(&train("0", &model)));
    let old = model_contents(&model);
    let reference = root.join("reference.safetensors");
    let took = time_of(&strs(&train("1", &reference)));
    let new = model_contents(&reference);
    assert!(old != new, "the two trainings must differ");
    for (i, f) in kill_points(31, 10, 1.2).into_iter().enumerate() {
        kill_after(&strs(&train("1", &model)), took.mul_f64(f));
        let now = model_contents(&model);
        assert!(
            now == old || now == new,
            "kill {i} at {f:.2} of a run: the model file is neither the previous nor the new one"
        );
        ModelFile::load(&model).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// A model file's tensors (by name, as bytes) and metadata.
type ModelContents = (Vec<(String, Vec<u8>)>, BTreeMap<String, String>);

/// What a model file holds (its bytes differ from save to save: the metadata's order is a hash
/// map's).
fn model_contents(path: &Path) -> ModelContents {
    let bytes = std::fs::read(path).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let metadata = header.metadata().clone().unwrap_or_default();
    (tensors(path), metadata.into_iter().collect())
}

/// Whether the snapshot folder holds a snapshot a run can resume from.
fn has_snapshot(dir: &Path) -> bool {
    dir.join("snapshot").exists() || dir.join("snapshot.old").exists()
}

#[test]
fn killed_snapshot_runs_resume_to_the_uninterrupted_bits() {
    let root = scratch("crash-snapshot");
    let ds = training_dataset(&root);
    let snaps = root.join("snapshots");
    let train_in = |snaps: &Path, tag: &str, extra: &[&str]| {
        let mut args: Vec<String> = [
            "train",
            "--dataset",
            ds.to_str().unwrap(),
            "--epochs",
            "100",
            "--quiet",
            "--snapshot-dir",
            snaps.to_str().unwrap(),
            "--snapshot-every",
            "1",
            "--summary-json",
            root.join(format!("{tag}.json")).to_str().unwrap(),
            "--save-model",
            root.join(format!("{tag}.safetensors")).to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let train = |tag: &str, extra: &[&str]| train_in(&snaps, tag, extra);
    let took = time_of(&strs(&train_in(
        &root.join("whole-snapshots"),
        "whole",
        &[],
    )));
    let mut resumable = false;
    // Each run resumes where the last was killed: short delays, so that the kills spread
    // over the whole training.
    for (i, f) in kill_points(41, 10, 0.3).into_iter().enumerate() {
        let args = if has_snapshot(&snaps) {
            train("killed", &["--resume"])
        } else {
            train("killed", &[])
        };
        kill_after(&strs(&args), took.mul_f64(f));
        // Once a snapshot was written, a whole one stays, whatever the moment of the kill.
        assert!(
            !resumable || has_snapshot(&snaps),
            "kill {i} at {f:.2} of a run lost the snapshot: {:?}",
            hidden_entries(&snaps)
        );
        resumable = has_snapshot(&snaps);
        if resumable {
            let state = ["snapshot", "snapshot.old"]
                .iter()
                .map(|d| snaps.join(d).join("state.safetensors"))
                .find(|p| p.exists())
                .expect("a snapshot holds its state");
            let bytes = std::fs::read(&state).unwrap();
            safetensors::SafeTensors::deserialize(&bytes)
                .unwrap_or_else(|e| panic!("kill {i}: {}: {e}", state.display()));
        }
    }
    let last = if has_snapshot(&snaps) {
        train("resumed", &["--resume"])
    } else {
        train("resumed", &[])
    };
    graphloom_ok(&strs(&last));
    let (whole_run, resumed_run) = (
        summary(&root.join("whole.json")),
        summary(&root.join("resumed.json")),
    );
    assert_eq!(losses(&resumed_run), losses(&whole_run), "losses");
    assert_eq!(
        tensors(&root.join("resumed.safetensors")),
        tensors(&root.join("whole.safetensors")),
        "parameters"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn killed_propagation_continues_to_the_uninterrupted_bytes() {
    let root = scratch("crash-propagate");
    let ds = root.join("ds");
    graphloom_ok(&strs(&synthetic(&ds, "3")));
    let propagate = |out: &Path| -> Vec<String> {
        [
            "prepare",
            "propagate",
            "--dataset",
            ds.to_str().unwrap(),
            "--hops",
            "3",
            "--operators",
            "sym,ppr",
            // Blocks of a few rows: many records of progress to be killed between.
            "--memory-gib",
            "0.0001",
            "--out",
            out.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    };
    let whole = root.join("whole");
    let took = time_of(&strs(&propagate(&whole)));
    let out = root.join("out");
    for f in kill_points(53, 8, 0.5) {
        kill_after(&strs(&propagate(&out)), took.mul_f64(f));
        // Never half of a dataset under the output's name: none, or a whole one.
        if out.exists() {
            assert!(
                tree(&out) == tree(&whole),
                "killed at {f:.2}: a changed output"
            );
        }
    }
    if !out.exists() {
        graphloom_ok(&strs(&propagate(&out)));
    }
    assert_eq!(tree(&out), tree(&whole));
}
