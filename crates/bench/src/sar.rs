//! `graphloom bench sar`: SAR's peak memory per worker, epoch time and traffic for N workers,
//! in the three halo modes, for GraphSAGE and GAT, on a graph whose features dominate memory.
//! Every run is `graphloom train` in a process of its own (an `mpirun` job with `--comm mpi`),
//! so its peak RSS is its own.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use graphloom_convert::synthetic::SyntheticConfig;
use graphloom_graph::Dataset;
use serde_json::{json, Value};

use graphloom_nn::Architecture;
use graphloom_sar::SarMode;

use crate::output::{self, choice};
use crate::peers;

/// Arguments of `graphloom bench sar`.
#[derive(Args)]
pub(crate) struct SarArgs {
    /// Dataset directory; generated there when missing (`--nodes`, `--avg-degree`,
    /// `--features`). Its partitions go to `{dataset}-parts{N}`.
    #[arg(long, default_value = "data/bench-sar-400k")]
    dataset: PathBuf,
    /// Nodes of the generated graph.
    #[arg(long, default_value_t = 400_000)]
    nodes: usize,
    /// Average in-degree of the generated graph (edges = nodes x degree).
    #[arg(long, default_value_t = 20)]
    avg_degree: usize,
    /// Feature width of the generated graph.
    #[arg(long, default_value_t = 512)]
    features: usize,
    /// Worker counts, comma-separated.
    #[arg(long, default_value = "1,2,4,8", value_delimiter = ',')]
    workers: Vec<usize>,
    /// Halo modes, comma-separated.
    #[arg(long, default_value = "sar,sa,osa", value_delimiter = ',', value_parser = choice::<SarMode>())]
    modes: Vec<SarMode>,
    /// Partitioners of the SAR runs, comma-separated: `metis` (parts in `{dataset}-parts{N}`)
    /// and `stream` (`graphloom partition --method stream`'s split, in `{dataset}-stream{N}`),
    /// for their traffic side by side.
    #[arg(long, default_value = "metis", value_delimiter = ',', value_parser = ["metis", "stream"])]
    partitioners: Vec<String>,
    /// Models, comma-separated (any family SAR trains: all but gatv2).
    #[arg(long, default_value = "sage,gat", value_delimiter = ',', value_parser = choice::<Architecture>())]
    models: Vec<Architecture>,
    /// Timed epochs per run (after one warm-up epoch); their mean is the run's epoch time.
    /// Three, because one epoch on a shared host moves by a third from run to run.
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    /// Hidden width (GAT: in total, split over the heads).
    #[arg(long, default_value_t = 256)]
    hidden: usize,
    /// GAT heads.
    #[arg(long, default_value_t = 4)]
    heads: usize,
    /// `local` (N threads of one process) or `mpi` (an mpirun job of N processes; needs a
    /// build with --features mpi).
    #[arg(long, default_value = "local")]
    comm: String,
    /// Kernel threads per process [default: all cores, divided among MPI processes].
    #[arg(long)]
    threads: Option<usize>,
    /// Draw peak memory per worker against N into this PNG.
    #[arg(long, default_value = "bench/sar_memory.png")]
    plot: PathBuf,
    /// Print one JSON object per measurement per line.
    #[arg(long)]
    json: bool,
}

/// One run's figures.
pub(crate) struct SarRun {
    pub(crate) model: String,
    pub(crate) mode: String,
    pub(crate) workers: usize,
    /// The largest peak of tracked bytes over the workers.
    pub(crate) peak_bytes: u64,
    /// The largest peak RSS over the processes.
    pub(crate) peak_rss_bytes: u64,
    pub(crate) epoch_seconds: f64,
    /// Mean bytes a worker sent per epoch (training step and evaluation).
    pub(crate) bytes_sent: f64,
}

/// The partition of `dataset` into `parts` by `partitioner`, written on first use.
fn ensure_parts(dataset: &Path, parts: usize, partitioner: &str) -> Result<PathBuf> {
    let suffix = if partitioner == "stream" {
        "stream"
    } else {
        "parts"
    };
    let dir = PathBuf::from(format!("{}-{suffix}{parts}", dataset.display()));
    if graphloom_graph::parts::PartitionMeta::is_partitioned(&dir) {
        return Ok(dir);
    }
    let spinner = output::spinner(&format!(
        "{partitioner}: {} into {parts} parts",
        dataset.display()
    ));
    let ds = Dataset::load(dataset)?;
    let partition = output::with_stdout_on_stderr(|| {
        if partitioner == "stream" {
            let settings = graphloom_graph::partition::StreamSettings {
                parts,
                ..Default::default()
            };
            graphloom_graph::partition::stream(&ds.data(), &settings, &|_, _, _| {})
                .map(|(partition, _)| partition)
        } else {
            graphloom_graph::partition::metis(&ds.graph, &ds.train_idx, parts, 0)
        }
    })?;
    ds.write_parts(&partition, &dir)
        .with_context(|| format!("writing {}", dir.display()))?;
    spinner.finish_and_clear();
    Ok(dir)
}

/// The mode name of the unpartitioned in-memory full-batch run that the SAR runs are compared
/// with.
const TRAIN: &str = "train";

/// The `graphloom train` options of a run of `model` on `dataset`: the same model in every
/// run of the bench.
fn train_args(args: &SarArgs, dataset: &Path, model: &str) -> Vec<String> {
    let hidden = if model == "gat" {
        (args.hidden / args.heads).max(1)
    } else {
        args.hidden
    };
    let mut train: Vec<String> = [
        "--dataset",
        &dataset.display().to_string(),
        "--model",
        model,
        "--hidden",
        &hidden.to_string(),
        "--epochs",
        &(args.epochs + 1).to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if model == "gat" {
        train.extend(["--heads".into(), args.heads.to_string()]);
    }
    train
}

fn run_one(
    args: &SarArgs,
    model: &str,
    mode: &str,
    workers: usize,
    partitioner: &str,
) -> Result<SarRun> {
    if mode == TRAIN {
        let train = train_args(args, &args.dataset, model);
        let summary = peers::run_graphloom_train(&train, args.threads)?;
        return Ok(SarRun {
            model: model.into(),
            mode: mode.into(),
            workers: 1,
            peak_bytes: summary["peak_total_bytes"].as_u64().unwrap_or(0),
            peak_rss_bytes: summary["peak_rss_bytes"].as_u64().unwrap_or(0),
            epoch_seconds: summary["mean_epoch_seconds"].as_f64().unwrap_or(f64::NAN),
            bytes_sent: 0.0,
        });
    }
    let parts = ensure_parts(&args.dataset, workers, partitioner)?;
    let mut train = train_args(args, &parts, model);
    train.extend(["--mode".into(), mode.into()]);
    let summary = match args.comm.as_str() {
        "local" => {
            train.extend(["--workers".into(), workers.to_string()]);
            peers::run_graphloom_train(&train, args.threads)?
        }
        "mpi" => {
            train.extend(["--comm".into(), "mpi".into()]);
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let threads = args.threads.unwrap_or((cores / workers).max(1));
            peers::run_graphloom_train_mpi(workers, &train, Some(threads))?
        }
        other => bail!("--comm must be local or mpi, not '{other}'"),
    };
    let mut run = figures(model, mode, workers, &summary)?;
    if partitioner != "metis" {
        // Told apart in the table and the chart.
        run.mode = format!("{mode} ({partitioner})");
    }
    Ok(run)
}

/// A run's figures from its summary JSON.
fn figures(model: &str, mode: &str, workers: usize, summary: &Value) -> Result<SarRun> {
    let per_worker = summary["workers"]
        .as_array()
        .context("the summary has no per-worker figures")?;
    let field = |key: &'static str| per_worker.iter().filter_map(move |w| w[key].as_u64());
    let epochs = summary["epochs"].as_u64().unwrap_or(1).max(1) as f64;
    Ok(SarRun {
        model: model.into(),
        mode: mode.into(),
        workers,
        peak_bytes: field("peak_tracked_bytes").max().unwrap_or(0),
        peak_rss_bytes: field("peak_rss_bytes").max().unwrap_or(0),
        epoch_seconds: summary["mean_epoch_seconds"].as_f64().unwrap_or(f64::NAN),
        bytes_sent: field("bytes_sent").sum::<u64>() as f64
            / per_worker.len().max(1) as f64
            / epochs,
    })
}

pub(crate) fn run(args: SarArgs) -> Result<()> {
    if args.workers.contains(&0) {
        bail!("--workers counts must be positive");
    }
    if args.models.contains(&Architecture::GatV2) {
        bail!("--models: SAR does not train gatv2 (its scores need both ends' projected rows)");
    }
    peers::ensure_synthetic(
        &args.dataset,
        &SyntheticConfig {
            nodes: args.nodes,
            avg_degree: args.avg_degree,
            feat_dim: args.features,
            classes: 47,
            seed: 0,
            ..Default::default()
        },
    )?;
    // Per model: the unpartitioned in-memory full-batch run (mode "train"), then every SAR run.
    let total =
        args.models.len() * (1 + args.modes.len() * args.workers.len() * args.partitioners.len());
    let bar = output::bar(total as u64, "sar runs");
    let mut runs = Vec::new();
    for model in args.models.iter().map(|m| m.name()) {
        let mut plans = vec![(TRAIN, 1, "metis")];
        for &workers in &args.workers {
            for mode in &args.modes {
                for partitioner in &args.partitioners {
                    plans.push((mode.name(), workers, partitioner.as_str()));
                }
            }
        }
        for (mode, workers, partitioner) in plans {
            bar.set_message(format!("{model} {mode} N={workers} {partitioner}"));
            let run = run_one(&args, model, mode, workers, partitioner)
                .with_context(|| format!("{model} {mode} on {workers} workers"))?;
            if args.json {
                let record = json!({
                    "mode": mode,
                    "partitioner": if mode == TRAIN { None } else { Some(partitioner) },
                    "model": run.model,
                    "workers": run.workers,
                    "comm": args.comm,
                    "peak_bytes_per_worker": run.peak_bytes,
                    "peak_rss_bytes": run.peak_rss_bytes,
                    "epoch_seconds": run.epoch_seconds,
                    "bytes_sent_per_worker": run.bytes_sent,
                });
                bar.suspend(|| crate::host::print_record(&record, args.threads));
            }
            runs.push(run);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    if !args.json {
        print_table(&runs);
    }
    if let Some(dir) = args.plot.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let peaks: Vec<crate::plot::WorkerPeak> = runs
        .iter()
        .map(|r| crate::plot::WorkerPeak {
            model: &r.model,
            mode: &r.mode,
            workers: r.workers,
            peak_bytes: r.peak_bytes,
        })
        .collect();
    crate::plot::sar_memory(&args.plot, &peaks)
        .with_context(|| format!("drawing {}", args.plot.display()))?;
    eprintln!("wrote {}", args.plot.display());
    Ok(())
}

fn print_table(runs: &[SarRun]) {
    println!(
        "{:<6} {:<5} {:>3} {:>12} {:>9} {:>12} {:>10} {:>14}",
        "model", "mode", "N", "peak MiB", "vs N=1", "peak RSS MiB", "epoch s", "MB sent/epoch"
    );
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    for r in runs {
        let single = runs
            .iter()
            .find(|s| s.model == r.model && s.mode == r.mode && s.workers == 1)
            .map(|s| s.peak_bytes as f64);
        let ratio = single.map_or(String::from("-"), |s| {
            format!("{:.3}", r.peak_bytes as f64 / s)
        });
        println!(
            "{:<6} {:<5} {:>3} {:>12.1} {:>9} {:>12.1} {:>10.3} {:>14.1}",
            r.model,
            r.mode,
            r.workers,
            mib(r.peak_bytes),
            ratio,
            mib(r.peak_rss_bytes),
            r.epoch_seconds,
            r.bytes_sent / 1e6
        );
    }
}
