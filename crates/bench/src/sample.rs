//! `graphloom bench sample`: neighbour-sampling throughput on the benchmark graphs, against
//! DGL's and PyG's samplers on the same dataset directories in the same run.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use graphloom_graph::sample::{CsrSource, Sampler, SamplerKind};
use graphloom_graph::{Dataset, NodeId};
use graphloom_tensor::rng::RngKey;
use rayon::prelude::*;
use serde_json::{json, Value};

use crate::peers;

/// Arguments of `graphloom bench sample`.
#[derive(Args)]
pub(crate) struct SampleArgs {
    /// Dataset directories, comma-separated [default: data/bench-syn-100k (100k nodes, 2M
    /// edges) and data/bench-rmat-1m (1M nodes, 25M edges, R-MAT), generated when missing].
    #[arg(long, value_delimiter = ',')]
    datasets: Vec<PathBuf>,
    /// Fanout lists written from the seeds outwards, separated by ';'.
    #[arg(long, default_value = "15,10;25,10")]
    fanouts: String,
    /// Seeds per batch.
    #[arg(long, default_value_t = 1024)]
    batch_size: usize,
    /// Sampling epochs over the training nodes; the fastest counts.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Threads for every system [default: all cores].
    #[arg(long)]
    threads: Option<usize>,
    /// Folder of the DGL and PyG scripts [default: $GRAPHLOOM_SHARED/baselines, else
    /// ../shared/baselines]; a peer whose script or Python environment is missing is left
    /// out, saying why on stderr and in each JSON record's `baselines`.
    #[arg(long)]
    baselines: Option<PathBuf>,
    /// Graphs (dataset folder names) on which a whole mini-batch GraphSAGE epoch is timed too
    /// (hidden 256, dropout 0.5, Adam at 0.003, as the baseline scripts train).
    #[arg(long, value_delimiter = ',', default_value = "bench-syn-100k")]
    train_graphs: Vec<String>,
    /// Print one JSON object per measurement per line.
    #[arg(long)]
    json: bool,
}

/// Seconds of one mini-batch GraphSAGE epoch of `graphloom train` (the second of two, the
/// first warming up), run in its own process.
fn graphloom_epoch(args: &SampleArgs, dir: &std::path::Path, fanouts: &[i64]) -> Result<f64> {
    let fanouts = fanouts
        .iter()
        .map(|f| f.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let train_args: Vec<String> = [
        "--model",
        "sage",
        "--hidden",
        "256",
        "--epochs",
        "2",
        "--dropout",
        "0.5",
        "--input-dropout",
        "0",
        "--lr",
        "0.003",
        "--weight-decay",
        "0",
        "--fanouts",
        &fanouts,
        "--batch-size",
        &args.batch_size.to_string(),
        "--dataset",
        &dir.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let value = peers::run_graphloom_train(&train_args, args.threads)?;
    value["mean_epoch_seconds"]
        .as_f64()
        .context("no mean_epoch_seconds in the summary")
}

fn parse_fanouts(text: &str) -> Result<Vec<Vec<i64>>> {
    text.split(';')
        .map(|list| {
            list.split(',')
                .map(|f| {
                    f.trim()
                        .parse::<i64>()
                        .with_context(|| format!("bad fanout '{f}' in '{list}'"))
                })
                .collect()
        })
        .collect()
}

/// One sampling epoch over `train` in batches, batches sampled in parallel (each by a
/// sampler of its worker thread). Returns (sampled edges, seconds).
fn sampling_epoch(
    ds: &Dataset,
    fanouts: &[i64],
    batch_size: usize,
    epoch: u64,
) -> Result<(usize, f64)> {
    let key = RngKey::new(0, epoch, 0x5348_5546);
    let mut order: Vec<(u64, NodeId)> = ds
        .train_idx
        .iter()
        .map(|&v| (key.bits(v as u64, 0), v as NodeId))
        .collect();
    order.sort_unstable();
    let seeds: Vec<NodeId> = order.into_iter().map(|(_, v)| v).collect();
    let source = CsrSource::new(&ds.graph);
    let n = ds.graph.num_nodes();
    let start = Instant::now();
    let edges = seeds
        .par_chunks(batch_size)
        .map_init(
            || Sampler::new(n),
            |sampler, batch| {
                sampler
                    .sample(&source, batch, fanouts, SamplerKind::Uniform, 0, epoch)
                    .map(|blocks| blocks.iter().map(|b| b.num_edges()).sum::<usize>())
            },
        )
        .collect::<graphloom_graph::Result<Vec<usize>>>()?
        .into_iter()
        .sum();
    Ok((edges, start.elapsed().as_secs_f64()))
}

fn report(args: &SampleArgs, peers: &peers::Peers, record: &Value, ours: Option<f64>) {
    if args.json {
        let mut record = record.clone();
        record["baselines"] = peers.json();
        crate::host::print_record(&record, args.threads);
        return;
    }
    let eps = record["sampled_edges_per_second"]
        .as_f64()
        .unwrap_or(f64::NAN);
    let ratio = ours.map_or(String::new(), |o| {
        format!("  graphloom / this: {:.2}", o / eps)
    });
    let epoch = record["train_epoch_seconds"]
        .as_f64()
        .map_or(String::new(), |s| format!("  GraphSAGE epoch {s:.2} s"));
    println!(
        "{:<10} {:<18} fanouts {:<8} {:>8.2} M sampled edges/s{ratio}{epoch}",
        record["system"].as_str().unwrap_or(""),
        record["graph"].as_str().unwrap_or(""),
        record["fanouts"]
            .as_array()
            .map(|a| a
                .iter()
                .map(|f| f.to_string())
                .collect::<Vec<_>>()
                .join(","))
            .unwrap_or_default(),
        eps / 1e6
    );
}

pub(crate) fn run(args: SampleArgs) -> Result<()> {
    if args.batch_size == 0 || args.repeats == 0 {
        bail!("--batch-size and --repeats must be positive");
    }
    if let Some(t) = args.threads {
        // Ignore the error of a pool that already exists: the caller set it already.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global();
    }
    let fanout_lists = parse_fanouts(&args.fanouts)?;
    let datasets = if args.datasets.is_empty() {
        let defaults = [
            (
                PathBuf::from("data/bench-syn-100k"),
                peers::bench_graph_100k(),
            ),
            (
                PathBuf::from("data/bench-rmat-1m"),
                peers::bench_graph_rmat_1m(),
            ),
        ];
        for (dir, cfg) in &defaults {
            peers::ensure_synthetic(dir, cfg)?;
        }
        defaults.into_iter().map(|(d, _)| d).collect()
    } else {
        args.datasets.clone()
    };
    let mut peers = peers::Peers::find(&args.baselines, "sample", &["dgl", "graphbolt", "pyg"])?;
    for dir in &datasets {
        let ds = Dataset::load(dir)?;
        let graph = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for fanouts in &fanout_lists {
            let mut best: Option<(usize, f64)> = None;
            for epoch in 0..args.repeats as u64 {
                let (edges, seconds) = sampling_epoch(&ds, fanouts, args.batch_size, epoch)?;
                if best.is_none_or(|(_, s)| seconds < s) {
                    best = Some((edges, seconds));
                }
            }
            let (edges, seconds) = best.expect("at least one repeat");
            let ours = edges as f64 / seconds;
            let train = args.train_graphs.contains(&graph);
            let epoch = if train {
                json!(graphloom_epoch(&args, dir, fanouts)?)
            } else {
                Value::Null
            };
            report(
                &args,
                &peers,
                &json!({
                    "system": "graphloom",
                    "graph": graph,
                    "fanouts": fanouts,
                    "batch_size": args.batch_size,
                    "threads": rayon::current_num_threads(),
                    "sampled_edges": edges,
                    "sample_epoch_seconds": seconds,
                    "sampled_edges_per_second": ours,
                    "train_epoch_seconds": epoch,
                }),
                None,
            );
            // GraphBolt (DGL's newer sampler) times sampling alone, the fastest of its repeats.
            for system in ["dgl", "graphbolt", "pyg"] {
                let mut script_args = vec![
                    dir.display().to_string(),
                    "--fanouts".to_string(),
                    fanouts
                        .iter()
                        .map(|f| f.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                    "--batch-size".to_string(),
                    args.batch_size.to_string(),
                ];
                if system == "graphbolt" {
                    script_args.extend(["--repeats".to_string(), args.repeats.to_string()]);
                } else if !train {
                    script_args.push("--no-train".to_string());
                }
                if let Some(t) = args.threads {
                    script_args.extend(["--threads".to_string(), t.to_string()]);
                }
                let Some(mut peer) = peers.run(system, &script_args)? else {
                    continue;
                };
                peer["graph"] = json!(graph);
                peer["fanouts"] = json!(fanouts);
                peer["train_epoch_seconds"] = peer
                    .get("train_epoch_seconds")
                    .cloned()
                    .unwrap_or(Value::Null);
                report(&args, &peers, &peer, Some(ours));
            }
        }
    }
    Ok(())
}
