//! `graphloom bench subgraph`: an epoch of Cluster-GCN and of GraphSAINT's random-walk batches
//! beside the full-batch epoch of the same model on the same graph, with each run's peak
//! anonymous memory. Each run is `graphloom train` in a process of its own, so its peak is its
//! own; evaluation is sampled on a few nodes so that the training epoch, not the evaluation,
//! sets the peak of the subgraph runs.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use serde_json::{json, Value};

use crate::peers;

/// Arguments of `graphloom bench subgraph`.
#[derive(Args)]
pub(crate) struct SubgraphArgs {
    /// Dataset directory; generated there when missing (the 1M-node R-MAT bench graph of
    /// `bench sample`).
    #[arg(long, default_value = "data/bench-rmat-1m")]
    dataset: PathBuf,
    /// Models, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "gcn,gat")]
    models: Vec<String>,
    /// Methods, comma-separated: full (full batch), cluster (Cluster-GCN), saint-rw
    /// (GraphSAINT random walks).
    #[arg(long, value_delimiter = ',', default_value = "full,cluster,saint-rw")]
    methods: Vec<String>,
    /// Layers of every model.
    #[arg(long, default_value_t = 3)]
    layers: usize,
    /// Hidden width.
    #[arg(long, default_value_t = 256)]
    hidden: usize,
    /// Epochs per run; the first is a warm-up the epoch time leaves out.
    #[arg(long, default_value_t = 2)]
    epochs: usize,
    /// Cluster-GCN: METIS clusters (PyG's num_parts).
    #[arg(long, default_value_t = 1500)]
    clusters: usize,
    /// Cluster-GCN: clusters per batch (PyG's batch_size).
    #[arg(long, default_value_t = 20)]
    clusters_per_batch: usize,
    /// GraphSAINT: random-walk roots per batch.
    #[arg(long, default_value_t = 3000)]
    saint_roots: usize,
    /// GraphSAINT: walk length.
    #[arg(long, default_value_t = 2)]
    walk_length: usize,
    /// Threads of every run [default: all cores].
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON object per measurement per line.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: SubgraphArgs) -> Result<()> {
    if args.epochs < 2 {
        bail!("--epochs must be at least 2 (the first is a warm-up)");
    }
    if let Some(m) = args
        .methods
        .iter()
        .find(|m| !["full", "cluster", "saint-rw"].contains(&m.as_str()))
    {
        bail!("--methods: {m} is not full, cluster or saint-rw");
    }
    peers::ensure_synthetic(&args.dataset, &peers::bench_graph_rmat_1m())?;
    eprintln!(
        "PyG's ClusterData and GraphSAINT samplers need torch-sparse or pyg-lib, and no \
         baseline script for them is in the baselines folder: GraphLoom's methods only"
    );
    for model in &args.models {
        let mut full_seconds = None;
        let mut full_peak = None;
        for method in &args.methods {
            let mut train: Vec<String> = [
                "--dataset",
                &args.dataset.display().to_string(),
                "--model",
                model,
                "--layers",
                &args.layers.to_string(),
                "--hidden",
                &args.hidden.to_string(),
                "--epochs",
                &args.epochs.to_string(),
                "--eval-every",
                &args.epochs.to_string(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let batching: &[String] = &match method.as_str() {
                "cluster" => vec![
                    "--batching".into(),
                    "cluster".into(),
                    "--clusters".into(),
                    args.clusters.to_string(),
                    "--clusters-per-batch".into(),
                    args.clusters_per_batch.to_string(),
                ],
                "saint-rw" => vec![
                    "--batching".into(),
                    "saint-rw".into(),
                    "--saint-budget".into(),
                    args.saint_roots.to_string(),
                    "--walk-length".into(),
                    args.walk_length.to_string(),
                ],
                _ => Vec::new(),
            };
            train.extend_from_slice(batching);
            if method != "full" {
                // Sampled evaluation on a few nodes with small fanouts: the training epoch,
                // not the evaluation, sets the peak (and the plan sizes both).
                train.extend(["--eval-nodes".into(), "1000".into()]);
                train.extend(["--eval-fanouts".into(), "5,5,5".into()]);
            }
            eprintln!("{model} {method}");
            let summary = match peers::run_graphloom_train(&train, args.threads) {
                Ok(summary) => summary,
                Err(e) => {
                    // A run that cannot start here (a full-batch model larger than the memory)
                    // is recorded with its reason; the other methods still run.
                    let why = format!("{e:#}");
                    let why = why.trim().lines().last().unwrap_or_default().to_string();
                    let record = json!({"system": "graphloom", "method": method, "model": model,
                                        "error": why});
                    if args.json {
                        crate::host::print_record(&record, args.threads);
                    } else {
                        println!("{model:<5} {method:<9} did not run: {why}");
                    }
                    continue;
                }
            };
            let seconds = summary["mean_epoch_seconds"].as_f64();
            let peak = summary["peak_anon_bytes"].as_f64();
            if method == "full" {
                (full_seconds, full_peak) = (seconds, peak);
            }
            let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) if b > 0.0 => json!(a / b),
                _ => Value::Null,
            };
            let record = json!({
                "system": "graphloom",
                "method": method,
                "model": model,
                "epoch_seconds": seconds,
                "peak_anon_bytes": peak,
                "time_vs_full": ratio(seconds, full_seconds),
                "memory_vs_full": ratio(peak, full_peak),
            });
            if args.json {
                crate::host::print_record(&record, args.threads);
            } else {
                println!(
                    "{model:<5} {method:<9} {:>8.2} s/epoch  peak anonymous {:>8.0} MiB",
                    seconds.unwrap_or(f64::NAN),
                    peak.unwrap_or(f64::NAN) / (1 << 20) as f64
                );
            }
        }
    }
    Ok(())
}
