//! `graphloom bench fullbatch`: full-batch epoch time and peak memory of GraphLoom, DGL and
//! PyG on one synthetic dataset, each run in its own process so its peak RSS is its own.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use serde_json::{json, Value};

use crate::peers;

/// Arguments of `graphloom bench fullbatch`.
#[derive(Args)]
pub(crate) struct FullbatchArgs {
    /// Dataset directory; generated there when missing (100k nodes, 2M edges, 128 features,
    /// 47 classes).
    #[arg(long, default_value = "data/bench-syn-100k")]
    dataset: PathBuf,
    /// Models to time, comma-separated.
    #[arg(long, default_value = "gcn,sage,gat", value_delimiter = ',')]
    models: Vec<String>,
    /// Timed epochs per run (after one warm-up epoch).
    #[arg(long, default_value_t = 5)]
    epochs: usize,
    /// Hidden width (GAT: in total, split over the heads, as the baselines do).
    #[arg(long, default_value_t = 256)]
    hidden: usize,
    /// GAT heads.
    #[arg(long, default_value_t = 4)]
    heads: usize,
    /// Threads for every system [default: all cores].
    #[arg(long)]
    threads: Option<usize>,
    /// Folder of the DGL and PyG scripts [default: $GRAPHLOOM_SHARED/baselines, else
    /// ../shared/baselines]; a peer whose script or Python environment is missing is left
    /// out, saying why on stderr and in each JSON record's `baselines`.
    #[arg(long)]
    baselines: Option<PathBuf>,
    /// Print one JSON object per measurement per line.
    #[arg(long)]
    json: bool,
}

fn run_graphloom(args: &FullbatchArgs, model: &str) -> Result<Value> {
    let hidden = if model == "gat" {
        args.hidden / args.heads
    } else {
        args.hidden
    };
    let mut train_args: Vec<String> = [
        "--model",
        model,
        "--dataset",
        &args.dataset.display().to_string(),
        "--hidden",
        &hidden.to_string(),
        "--epochs",
        &(args.epochs + 1).to_string(),
        "--dropout",
        "0.5",
        // The baselines drop out between layers only, not on the input features.
        "--input-dropout",
        "0",
        "--lr",
        "0.01",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if model == "gat" {
        let heads = args.heads.to_string();
        let gat = [
            "--heads",
            &heads,
            "--out-heads",
            "1",
            "--attention-dropout",
            "0",
        ];
        train_args.extend(gat.iter().map(|s| s.to_string()));
    }
    peers::run_graphloom_train(&train_args, args.threads)
}

fn run_peer(
    args: &FullbatchArgs,
    peers: &mut peers::Peers,
    system: &str,
    model: &str,
) -> Result<Option<Value>> {
    let mut script_args: Vec<String> = vec![
        args.dataset.display().to_string(),
        "--model".into(),
        model.into(),
        "--hidden".into(),
        args.hidden.to_string(),
        "--heads".into(),
        args.heads.to_string(),
        "--epochs".into(),
        args.epochs.to_string(),
    ];
    if let Some(t) = args.threads {
        script_args.extend(["--threads".into(), t.to_string()]);
    }
    peers.run(system, &script_args)
}

pub(crate) fn run(args: FullbatchArgs) -> Result<()> {
    peers::ensure_synthetic(&args.dataset, &peers::bench_graph_100k())?;
    let mut peers = peers::Peers::find(&args.baselines, "fullbatch", &["dgl", "pyg"])?;
    if !args.json {
        println!(
            "{:<6} {:<10} {:>14} {:>16} {:>12} {:>12}",
            "model", "system", "epoch seconds", "peak RSS MiB", "time ratio", "memory ratio"
        );
    }
    for model in &args.models {
        let ours = run_graphloom(&args, model)?;
        let (our_t, our_m) = (
            ours["mean_epoch_seconds"].as_f64().unwrap_or(f64::NAN),
            ours["peak_rss_bytes"].as_f64().unwrap_or(f64::NAN),
        );
        let mut rows = vec![("graphloom".to_string(), our_t, our_m)];
        for system in ["dgl", "pyg"] {
            if let Some(v) = run_peer(&args, &mut peers, system, model)? {
                rows.push((
                    system.to_string(),
                    v["mean_epoch_seconds"].as_f64().unwrap_or(f64::NAN),
                    v["peak_rss_bytes"].as_f64().unwrap_or(f64::NAN),
                ));
            }
        }
        for (system, t, m) in &rows {
            // Ratios are the peer's figure over GraphLoom's: above 1, GraphLoom is faster/smaller.
            let (tr, mr) = (t / our_t, m / our_m);
            if args.json {
                let record = json!({"system": system, "model": model, "mean_epoch_seconds": t,
                    "peak_rss_bytes": *m as u64, "time_ratio_vs_graphloom": tr,
                    "memory_ratio_vs_graphloom": mr, "baselines": peers.json()});
                crate::host::print_record(&record, args.threads);
            } else {
                println!(
                    "{:<6} {:<10} {:>14.3} {:>16.1} {:>12.2} {:>12.2}",
                    model,
                    system,
                    t,
                    m / (1 << 20) as f64,
                    tr,
                    mr
                );
            }
        }
    }
    Ok(())
}
