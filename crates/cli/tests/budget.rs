//! `train --memory-gib`: small runs in every mode whose measured peak anonymous memory (the
//! summary's `peak_anon_bytes`) stays under the budget and within 15% of the plan's
//! prediction (`predicted_peak_bytes`); the division printed before training, `--dry-run`,
//! and a budget too small.

mod common;
use common::{cora, graphloom, graphloom_ok, partition, scratch};

use std::path::{Path, PathBuf};

const GIB: f64 = (1u64 << 30) as f64;

/// A synthetic dataset of 20,000 nodes with 256 features (20 MB) in `root`.
fn wide(root: &Path) -> PathBuf {
    let dir = root.join("wide");
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--nodes",
        "20000",
        "--avg-degree",
        "8",
        "--feat-dim",
        "256",
        "--classes",
        "4",
        "--out",
        dir.to_str().unwrap(),
    ]);
    dir
}

/// Trains with `args` and `--memory-gib budget`; checks the measured peak against the budget
/// and the prediction, and that the division was printed first; returns the summary.
fn within_budget(args: &[&str], budget: f64) -> serde_json::Value {
    let budget_arg = budget.to_string();
    let mut all = vec!["train", "--json", "--memory-gib", &budget_arg];
    all.extend_from_slice(args);
    let out = graphloom_ok(&all);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let head = format!("memory budget {budget:.3} GiB");
    let first = stderr.lines().next().unwrap_or("");
    assert!(first.starts_with(&head), "{args:?}: {stderr}");
    let s: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    let measured = s["peak_anon_bytes"].as_f64().unwrap();
    let predicted = s["predicted_peak_bytes"].as_f64().unwrap();
    assert_eq!(s["memory_gib"].as_f64(), Some(budget));
    assert!(
        measured < budget * GIB,
        "{args:?}: measured {measured} over the budget"
    );
    assert!(
        (predicted - measured).abs() <= 0.15 * measured,
        "{args:?}: predicted {:.1} MiB, measured {:.1} MiB ({})",
        predicted / (1 << 20) as f64,
        measured / (1 << 20) as f64,
        s["predicted_bytes"]
    );
    s
}

#[test]
fn full_batch_and_sar_runs_on_cora_stay_within_their_budget_as_predicted() {
    let root = scratch("budget-cora");
    let ds = cora(&root);
    // Enough epochs that the sampled peak is the run's steady state.
    within_budget(
        &["--dataset", ds.to_str().unwrap(), "--epochs", "200"],
        0.25,
    );
    let parts = root.join("parts");
    partition(&ds, 2, &parts);
    within_budget(
        &["--dataset", parts.to_str().unwrap(), "--epochs", "100"],
        0.25,
    );
}

/// Wide layers over the whole graph, where the memory no tensor counts and what one epoch
/// leaves for the next weigh most: before, GraphSAGE 512 wide peaked 15% over its prediction
/// in f32 (the split weight gradient's partial products, a shortened cached buffer faulted in
/// again, the aggregation of the features that evaluation keeps) and 42% in bf16 (both
/// operands of each weight gradient widened whole to f32).
#[test]
fn wide_full_batch_runs_stay_within_their_budget_as_predicted() {
    let root = scratch("budget-wide");
    let ds = wide(&root);
    let ds = ds.to_str().unwrap();
    for dtype in ["f32", "bf16"] {
        within_budget(
            &[
                "--dataset",
                ds,
                "--model",
                "sage",
                "--hidden",
                "512",
                "--dtype",
                dtype,
                "--epochs",
                "3",
            ],
            0.5,
        );
    }
}

/// The families beside GCN, GraphSAGE and GAT, full batch: the plan's probe measures their
/// steps as it does the others'. SGC has no input dropout, so its steps read the features'
/// aggregation that evaluation keeps (it was predicted at 71 MiB against 47 when the plan
/// counted that aggregation twice).
#[test]
fn gatv2_gin_sgc_and_appnp_full_batch_runs_stay_within_their_budget_as_predicted() {
    let root = scratch("budget-families");
    let ds = wide(&root);
    let ds = ds.to_str().unwrap();
    for model in [
        &["--model", "gatv2", "--hidden", "32", "--heads", "4"][..],
        &["--model", "gin", "--hidden", "256"],
        &["--model", "sgc"],
        &["--model", "sgc", "--input-dropout", "0.5"],
        &["--model", "appnp", "--hidden", "256"],
    ] {
        let args = [&["--dataset", ds, "--epochs", "3"][..], model].concat();
        within_budget(&args, 0.5);
    }
}

/// A bf16 model over features stored in f32: full batch reads the f32 rows and holds them
/// beside their bf16 copy while it is made (cora peaked 24% over its prediction before that
/// was counted), and a sampled run's table keeps the file's f32 rows, twice the model's bytes.
#[test]
fn bf16_runs_over_f32_features_stay_within_their_budget_as_predicted() {
    let root = scratch("budget-bf16");
    let ds = cora(&root);
    let ds = ds.to_str().unwrap();
    within_budget(
        &["--dataset", ds, "--dtype", "bf16", "--epochs", "50"],
        0.25,
    );
    let wide = wide(&root);
    let wide = wide.to_str().unwrap();
    let mini = [
        "--dataset",
        wide,
        "--fanouts",
        "10,5",
        "--dtype",
        "bf16",
        "--epochs",
        "2",
    ];
    let s = within_budget(&mini, 0.5);
    assert_eq!(s["features_location"], "host");
}

/// SAR's ring attention keeps each layer's output and a score per edge and head for its
/// backward pass, beyond the single-graph model that the plan's probe measures: without them
/// the prediction fell 15% under the measured peak here.
#[test]
fn a_sar_gat_run_stays_within_its_budget_as_predicted() {
    let root = scratch("budget-sar-gat");
    let ds = wide(&root);
    let parts = root.join("parts");
    partition(&ds, 2, &parts);
    let parts = parts.to_str().unwrap();
    let gat = ["--model", "gat", "--hidden", "64", "--heads", "4"];
    within_budget(
        &[&["--dataset", parts, "--epochs", "5"][..], &gat[..]].concat(),
        0.5,
    );
}

#[test]
fn mini_batch_runs_stay_within_their_budget_as_predicted() {
    let root = scratch("budget-mini");
    let ds = wide(&root);
    let ds = ds.to_str().unwrap();
    let mini = ["--dataset", ds, "--fanouts", "10,5", "--epochs", "4"];
    // A budget the whole run fits: the features in memory, evaluation in one pass.
    let s = within_budget(&mini, 0.5);
    assert_eq!(s["features_location"], "host");
    assert!(s["inference_memory_gib"].is_null());
    // Mapped features asked for: what is left caches their rows.
    let s = within_budget(&[&mini[..], &["--features-location", "mmap"]].concat(), 0.5);
    assert_eq!(s["features_location"], "mmap");
    assert!(s["feature_cache_gib"].as_f64().unwrap() > 0.0);
    // A budget the features do not fit with the rest: they stay on disk, with a cache of what
    // is left, and evaluation goes layer by layer.
    let s = within_budget(&mini, 0.13);
    assert_eq!(s["features_location"], "mmap");
    assert!(s["feature_cache_gib"].as_f64().unwrap() > 0.0);
    assert!(s["inference_memory_gib"].as_f64().unwrap() > 0.0);
}

/// Sampled GAT projects every source row of a block to its output width before attending, so
/// a batch's step holds far more than rows weighted by layer widths say: measured on a drawn
/// batch, the prediction was a third of the step before (38% under the measured peak).
#[test]
fn a_sampled_gat_run_stays_within_its_budget_as_predicted() {
    let root = scratch("budget-mini-gat");
    let ds = wide(&root);
    let args = [
        "--dataset",
        ds.to_str().unwrap(),
        "--model",
        "gat",
        "--hidden",
        "64",
        "--heads",
        "4",
        "--fanouts",
        "10,10",
        "--batch-size",
        "512",
        "--epochs",
        "2",
    ];
    within_budget(&args, 0.5);
}

/// A wide input and a wide hidden layer: the weight gradient's reduction over a batch was cut
/// into chunks whose partial products (four of a 1000 x 1024 output at a time) no tensor
/// counted, 33 MiB beside the step (28% over the prediction).
#[test]
fn a_wide_input_subgraph_run_stays_within_its_budget_as_predicted() {
    let root = scratch("budget-fat");
    let ds = root.join("fat");
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--nodes",
        "5000",
        "--avg-degree",
        "8",
        "--feat-dim",
        "1000",
        "--classes",
        "4",
        "--out",
        ds.to_str().unwrap(),
    ]);
    let args = [
        "--dataset",
        ds.to_str().unwrap(),
        "--model",
        "sage",
        "--hidden",
        "1024",
        "--batching",
        "saint-node",
        "--saint-budget",
        "2000",
        "--batches-per-epoch",
        "5",
        "--epochs",
        "2",
    ];
    within_budget(&args, 0.25);
}

/// Subgraph batches whose compute outlasts their making, so that the queue the plan counts
/// fills: Cluster-GCN and GraphSAINT's random walks and edge draws, the batches measured by
/// drawing some (blocks around their training nodes, the induced subgraph they are made of).
#[test]
fn subgraph_batch_runs_stay_within_their_budget_as_predicted() {
    let root = scratch("budget-subgraph");
    let ds = wide(&root);
    let ds = ds.to_str().unwrap();
    let gat = ["--model", "gat", "--hidden", "32", "--heads", "4"];
    let sage = ["--model", "sage", "--hidden", "256"];
    for (batching, model) in [
        (&["--batching", "cluster", "--clusters", "40"][..], &gat[..]),
        (&["--batching", "saint-rw", "--saint-budget", "2000"], &sage),
        (
            &["--batching", "saint-edge", "--saint-budget", "4000"],
            &sage,
        ),
    ] {
        let args = [&["--dataset", ds, "--epochs", "8"][..], batching, model].concat();
        within_budget(&args, 0.5);
    }
}

/// A deep model evaluated exactly, in one pass, on a graph of skewed degrees: the pass and its
/// graph are the peak between epochs, and their buffers must not stay beside the next
/// epoch's batches.
#[test]
fn a_deep_model_evaluated_exactly_on_a_skewed_graph_stays_within_its_budget_as_predicted() {
    let root = scratch("budget-deep");
    let dir = root.join("rmat");
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--nodes",
        "50000",
        "--avg-degree",
        "25",
        "--feat-dim",
        "16",
        "--classes",
        "47",
        "--edge-model",
        "rmat",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let s = within_budget(
        &[
            "--dataset",
            dir.to_str().unwrap(),
            "--model",
            "sage",
            "--layers",
            "3",
            "--fanouts",
            "15,10,5",
            "--epochs",
            "2",
        ],
        1.0,
    );
    assert!(s["inference_memory_gib"].is_null());
}

#[test]
fn a_dry_run_prints_the_division_and_a_budget_too_small_names_its_part() {
    let root = scratch("budget-dry");
    let ds = cora(&root);
    let summary = root.join("s.json");
    let out = graphloom_ok(&[
        "train",
        "--dataset",
        ds.to_str().unwrap(),
        "--fanouts",
        "10,5",
        "--memory-gib",
        "0.2",
        "--summary-json",
        summary.to_str().unwrap(),
        "--dry-run",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for part in [
        "process",
        "model and optimizer",
        "batches in flight",
        "features in memory",
    ] {
        assert!(stderr.contains(part), "{part}: {stderr}");
    }
    assert!(!stderr.contains("epoch"), "{stderr}");
    assert!(!summary.exists(), "a dry run trains and writes nothing");
    // Without a budget, the prediction alone.
    let out = graphloom_ok(&["train", "--dataset", ds.to_str().unwrap(), "--dry-run"]);
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("predicted peak memory"));
    for (budget, part) in [("0.001", "process"), ("0.010", "features in memory")] {
        let out = graphloom(&[
            "train",
            "--dataset",
            ds.to_str().unwrap(),
            "--memory-gib",
            budget,
        ]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!(
                "--memory-gib of {budget} GiB is too small: the part \"{part}\""
            )),
            "{stderr}"
        );
    }
}

/// Link prediction, full batch and sampled: each step's pairs (positives and their negatives,
/// through the decoder), each batch's seeds (both ends of its pairs) and evaluation's scored
/// pairs are in the plan. Without them a sampled run of the defaults was predicted at 57.5
/// MiB and peaked at 127.6; the buffer cache's floor of 1 GiB, kept under any budget, took a
/// run under `--memory-gib 0.5` to 1.1 GiB.
#[test]
fn link_prediction_runs_stay_within_their_budget_as_predicted() {
    let root = scratch("budget-link");
    let ds = cora(&root);
    let split = root.join("cora-link");
    common::link_split(&ds, &split);
    let link = ["--dataset", split.to_str().unwrap(), "--task", "link"];
    within_budget(&[&link[..], &["--epochs", "20"]].concat(), 0.25);
    within_budget(
        &[
            &link[..],
            &[
                "--epochs",
                "10",
                "--decoder",
                "mlp",
                "--out-dim",
                "256",
                "--neg-ratio",
                "20",
            ],
        ]
        .concat(),
        1.0,
    );
    within_budget(
        &[
            &link[..],
            &["--epochs", "5", "--fanouts", "10,10", "--batch-size", "256"],
        ]
        .concat(),
        0.1,
    );
    // A budget smaller than the default cache: the run stays under it.
    let out = graphloom_ok(
        &[
            &[
                "train",
                "--json",
                "--memory-gib",
                "0.5",
                "--epochs",
                "10",
                "--neg-ratio",
                "200",
            ][..],
            &link[..],
        ]
        .concat(),
    );
    let s: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    let measured = s["peak_anon_bytes"].as_f64().unwrap();
    assert!(
        measured < 0.5 * GIB,
        "measured {:.1} MiB",
        measured / (1 << 20) as f64
    );
}
