//! The memory of heterogeneous training: a budget too small for the learnt tables and the
//! features maps them from files and trains the same bits; sampled evaluation of every
//! neighbour is exact evaluation; an epoch can stop after a number of batches.

mod common;

use common::{graphloom, graphloom_ok, losses, mag, refused, s, scratch, summary};
use std::path::Path;

/// Trains sampled R-GCN on `data` with `extra` options; returns the summary and stderr.
fn train(data: &Path, json: &Path, extra: &[&str]) -> (serde_json::Value, String) {
    let mut args = vec![
        "train",
        "--dataset",
        s(data),
        "--fanouts",
        "5,5",
        "--batch-size",
        "256",
        "--epochs",
        "2",
        "--seed",
        "1",
        "--summary-json",
        s(json),
    ];
    args.extend(extra);
    let out = graphloom_ok(&args);
    (
        summary(json),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The predicted bytes of part `name` of a summary (0 when the plan has none).
fn part(v: &serde_json::Value, name: &str) -> f64 {
    v["predicted_bytes"][name].as_f64().unwrap_or(0.0)
}

/// A budget that holds everything but the learnt tables and the features maps both from
/// files (the tables with their LazyAdam state in scratch files, removed after the run),
/// trains the losses and accuracies of the run without a budget to the bit, and peaks within
/// it.
#[test]
fn a_budget_too_small_for_the_tables_maps_them_and_trains_the_same_bits() {
    let root = scratch("hetero-budget");
    let data = mag(&root);
    let (free, _) = train(&data, &root.join("free.json"), &[]);
    let tables = part(&free, "learnt embeddings");
    let features = part(&free, "features in memory");
    assert!(tables > 0.0 && features > 0.0, "{free}");
    let predicted = free["predicted_peak_bytes"].as_f64().unwrap();
    // The rest of the run, with a tenth kept for the prediction's error and a little room.
    let rest = predicted - tables - features;
    let budget = rest / 0.9 + (1 << 20) as f64;
    assert!(budget < (rest + features.min(tables)) / 0.9, "{free}");
    let gib = format!("{:.6}", budget / (1u64 << 30) as f64);
    let scratch_dir = root.join("scratch");
    std::fs::create_dir_all(&scratch_dir).unwrap();
    let (mapped, stderr) = train(
        &data,
        &root.join("mapped.json"),
        &["--memory-gib", &gib, "--scratch-dir", s(&scratch_dir)],
    );
    assert!(
        stderr.contains("learnt embeddings with their LazyAdam state mapped from scratch files"),
        "{stderr}"
    );
    assert!(
        stderr.contains("features mapped from their files"),
        "{stderr}"
    );
    assert_eq!(part(&mapped, "learnt embeddings"), 0.0, "{mapped}");
    assert_eq!(losses(&mapped), losses(&free));
    for key in ["train_acc", "best_val_acc", "test_acc"] {
        assert_eq!(mapped[key], free[key], "{key}");
    }
    let peak = mapped["peak_anon_bytes"].as_f64().unwrap();
    assert!(peak <= budget, "peak {peak} over the budget {budget}");
    let left: Vec<_> = std::fs::read_dir(&scratch_dir).unwrap().collect();
    assert!(left.is_empty(), "scratch files left: {left:?}");
}

/// Sampled evaluation of every neighbour on every node of each split classifies as exact
/// layer-by-layer evaluation does (f64: the same sums up to their order).
#[test]
fn sampled_evaluation_of_every_neighbour_is_exact_evaluation() {
    let root = scratch("hetero-eval");
    let data = mag(&root);
    let f64 = ["--dtype", "f64"];
    let (exact, _) = train(&data, &root.join("exact.json"), &f64);
    let sampled_args = [
        &f64[..],
        &["--eval-nodes", "1000000", "--eval-fanouts=-1,-1"],
    ]
    .concat();
    let (sampled, _) = train(&data, &root.join("sampled.json"), &sampled_args);
    assert_eq!(losses(&sampled), losses(&exact));
    for key in ["train_acc", "best_val_acc", "test_acc"] {
        assert_eq!(sampled[key], exact[key], "{key}");
    }
    // A subset of 50 nodes per split is what is counted.
    let (few, _) = train(
        &data,
        &root.join("few.json"),
        &["--eval-nodes", "50", "--eval-fanouts", "3,3"],
    );
    let test = few["test_acc"].as_f64().unwrap();
    assert_eq!((test * 50.0).round(), test * 50.0, "{test}");
}

/// `--batches-per-epoch` at least an epoch's batches trains the whole epoch; one batch trains
/// less (another loss).
#[test]
fn an_epoch_stops_after_the_batches_asked_for() {
    let root = scratch("hetero-batches");
    let data = mag(&root);
    let (whole, _) = train(&data, &root.join("whole.json"), &[]);
    let (all, _) = train(
        &data,
        &root.join("all.json"),
        &["--batches-per-epoch", "100000"],
    );
    assert_eq!(losses(&all), losses(&whole));
    let (one, _) = train(&data, &root.join("one.json"), &["--batches-per-epoch", "1"]);
    assert_ne!(losses(&one), losses(&whole));
}

/// Evaluation fanouts without sampled evaluation, a budget below what the run holds, and
/// an epoch's batches or sampled evaluation in full batch are refused in one line.
#[test]
fn memory_options_that_cannot_hold_are_refused() {
    let root = scratch("hetero-memory-refused");
    let data = mag(&root);
    let d = s(&data);
    refused(
        &graphloom(&[
            "train",
            "--dataset",
            d,
            "--fanouts",
            "5,5",
            "--eval-fanouts",
            "3,3",
        ]),
        &["--eval-fanouts", "heterogeneous training"],
    );
    refused(
        &graphloom(&[
            "train",
            "--dataset",
            d,
            "--fanouts",
            "5,5",
            "--memory-gib",
            "0.001",
        ]),
        &["--memory-gib", "too small"],
    );
    refused(
        &graphloom(&["train", "--dataset", d, "--batches-per-epoch", "2"]),
        &["--batches-per-epoch", "heterogeneous training"],
    );
    refused(
        &graphloom(&["train", "--dataset", d, "--eval-nodes", "2"]),
        &["--eval-nodes", "heterogeneous training"],
    );
}
