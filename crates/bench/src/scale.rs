//! `graphloom bench scale`: training on a graph of ogbn-papers100M's shape whose features do
//! not fit in memory, against the same run with its features in memory.
//!
//! The dataset (by default a power-law graph stored in both directions, `--shape realistic`;
//! or the first bench's directed R-MAT graph, `--shape rmat-directed`; either with the class
//! signal of `prepare synthetic`) is prepared once and kept. Each phase runs in a process of its own (this binary, with `--phase`), so its
//! peak memory is its own: peak anonymous memory (`RssAnon`, sampled every 100 ms, since the
//! kernel's `VmHWM` counts the page cache of mapped files too) is reported beside peak
//! file-backed resident memory, which the kernel reclaims at will.

use std::io::BufRead;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use graphloom_graph::Meta;
use serde_json::{json, Value};

use phases::run_phase;

mod phases;

/// Arguments of `graphloom bench scale`.
#[derive(Args, Clone)]
pub(crate) struct ScaleArgs {
    /// The dataset directory, prepared on the first run and kept (a folder the bench did not
    /// make is refused, never replaced).
    #[arg(long, default_value = "data/bench-scale")]
    dir: PathBuf,
    /// Nodes (ogbn-papers100M's count).
    #[arg(long, default_value_t = 111_059_956)]
    nodes: usize,
    /// Edges (ogbn-papers100M's count): with `--shape realistic`, pairs stored in both
    /// directions (to the nearest whole average degree), with rmat-directed, directed edges.
    #[arg(long, default_value_t = 1_615_685_872)]
    edges: usize,
    /// The graph's shape: realistic (ogbn-papers100M as it is trained: every edge stored in
    /// both directions, power-law degrees of a citation graph, `prepare synthetic
    /// --edge-model powerlaw`) or rmat-directed (the first bench's directed R-MAT graph, whose
    /// extreme hubs flatter a cache of the hottest rows).
    #[arg(long, value_enum, default_value_t = Shape::Realistic)]
    shape: Shape,
    /// Train, validation and test nodes (ogbn-papers100M's); all other nodes are unlabelled.
    #[arg(long, value_delimiter = ',', default_value = "1207179,125265,214338")]
    split: Vec<usize>,
    /// Classes.
    #[arg(long, default_value_t = 172)]
    classes: usize,
    /// Feature width (bf16 on disk).
    #[arg(long, default_value_t = 128)]
    feat_dim: usize,
    /// Norm of the class signal in the features (unit noise per column).
    #[arg(long, default_value_t = 4.0)]
    signal: f64,
    /// Training batches per training phase, a tenth of them warm-up.
    #[arg(long, default_value_t = 250)]
    batches: usize,
    /// Batches between evaluations (an epoch of the run; seeds per second is measured over
    /// windows of ten batches inside one, or fewer for shorter epochs).
    #[arg(long, default_value_t = 50)]
    eval_every: usize,
    /// Validation nodes of each sampled evaluation.
    #[arg(long, default_value_t = 10_000)]
    eval_nodes: usize,
    /// GiB of the feature row cache of the out-of-core run (0: none).
    #[arg(long, default_value_t = 4.0)]
    feature_cache_gib: f64,
    /// GiB of memory each training run may take, divided by the plan (`train --memory-gib`;
    /// the out-of-core run's feature cache is then the division's, not --feature-cache-gib)
    /// [default: no budget].
    #[arg(long)]
    memory_gib: Option<f64>,
    /// Runs of each training phase (alternating); report their median.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Leave the page cache alone before the cold phase (dropping it, as root, slows every
    /// other process of the machine for a while), so the cold phase may start warm.
    #[arg(long)]
    keep_page_cache: bool,
    /// Seconds of the disk probe.
    #[arg(long, default_value_t = 10.0)]
    probe_seconds: f64,
    /// Write a PNG of seeds per second over the training runs here.
    #[arg(long, default_value = "bench/scale_seeds.png")]
    plot: PathBuf,
    /// Print one JSON object per measurement per line.
    #[arg(long)]
    json: bool,
    /// Run one phase in this process and print its JSON object (used by the bench itself).
    #[arg(long, hide = true)]
    phase: Option<Phase>,
}

/// The shape of the bench's graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Shape {
    /// Undirected power-law (Chung-Lu) graph.
    Realistic,
    /// Directed R-MAT graph.
    RmatDirected,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Realistic => "realistic",
            Shape::RmatDirected => "rmat-directed",
        }
    }
}

/// A phase of the bench.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Phase {
    Prepare,
    Sample,
    /// Out of core: rows outside the cache read with O_DIRECT, a batch at a time.
    Train,
    TrainInMemory,
    /// Out of core as the first bench ran it: the same cache, misses through the page cache.
    TrainStatic,
    /// The first epoch of `Train` after the page cache is dropped.
    Cold,
    Probe,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Prepare => "prepare",
            Phase::Sample => "sample",
            Phase::Train => "train",
            Phase::TrainInMemory => "train_in_memory",
            Phase::TrainStatic => "train_static",
            Phase::Cold => "cold",
            Phase::Probe => "probe",
        }
    }
}

/// The file that marks a dataset directory as the bench's own, which it may replace.
const MARKER: &str = ".graphloom-bench-scale";

/// Runs the bench: every phase in a process of its own (or, with `--phase`, the one phase
/// this process was started for), then the chart and the summary.
pub(crate) fn run(args: ScaleArgs) -> Result<()> {
    if let Some(phase) = args.phase {
        let value = run_phase(&args, phase)?;
        println!("{value}");
        return Ok(());
    }
    for (value, flag) in [
        (args.batches, "--batches"),
        (args.eval_every, "--eval-every"),
        (args.repeats, "--repeats"),
        (args.eval_nodes, "--eval-nodes"),
    ] {
        if value == 0 {
            bail!("{flag} must be at least 1");
        }
    }
    crate::output::check_writable(&args.plot)?;
    if args.dir.exists() && !args.dir.join(MARKER).exists() {
        bail!(
            "{} exists and was not made by graphloom bench scale: give another --dir (the bench \
             replaces a dataset it made whose shape differs)",
            args.dir.display()
        );
    }
    let start = Instant::now();
    let mut rows = Vec::new();
    if dataset_matches(&args)? {
        eprintln!(
            "using the dataset prepared before in {}",
            args.dir.display()
        );
        let mut row = child(&args, Phase::Prepare, true)?;
        row["reused"] = json!(true);
        rows.push(row);
    } else {
        rows.push(child(&args, Phase::Prepare, false)?);
    }
    emit(&args, rows.last().expect("pushed"));
    let mut series = Vec::new();
    // The training runs alternate, each `repeats` times; a run is one process.
    const TRAINING: [Phase; 3] = [Phase::Train, Phase::TrainInMemory, Phase::TrainStatic];
    let mut order = vec![Phase::Sample];
    for _ in 0..args.repeats.max(1) {
        order.extend(TRAINING);
    }
    order.extend([Phase::Cold, Phase::Probe]);
    for (k, phase) in order.into_iter().enumerate() {
        let mut row = child(&args, phase, false)?;
        if let Some(Value::Array(points)) = row.as_object_mut().and_then(|o| o.remove("series")) {
            let points: Vec<(f64, f64)> = points
                .iter()
                .filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64()?)))
                .collect();
            // The first run of each training phase is plotted.
            if !series.iter().any(|(name, _)| *name == phase.name()) {
                series.push((phase.name(), points));
            }
        }
        if TRAINING.contains(&phase) {
            row["repeat"] = json!((k - 1) / TRAINING.len());
        }
        emit(&args, &row);
        rows.push(row);
    }
    if !series.is_empty() {
        crate::plot::seeds_over_time(&args.plot, &series)?;
        eprintln!("wrote {}", args.plot.display());
    }
    if !args.json {
        print_summary(&rows);
    }
    eprintln!("bench scale took {:.0} s", start.elapsed().as_secs_f64());
    Ok(())
}

/// Whether the dataset directory holds this run's shape already.
fn dataset_matches(args: &ScaleArgs) -> Result<bool> {
    if !args.dir.join("meta.json").exists() {
        return Ok(false);
    }
    let meta = Meta::read(&args.dir)?;
    Ok(meta.num_nodes == args.nodes
        && meta.num_edges == csr_entries(args)
        && meta.feat_dim == args.feat_dim
        && meta.num_classes == args.classes
        && meta.feat_dtype == "bf16")
}

/// Runs `phase` in a child process of this binary and returns its JSON object.
fn child(args: &ScaleArgs, phase: Phase, reused: bool) -> Result<Value> {
    let exe = crate::peers::graphloom_program()?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        "bench",
        "scale",
        "--phase",
        phase.name().replace('_', "-").as_str(),
    ]);
    cmd.arg("--dir").arg(&args.dir);
    cmd.args([
        "--nodes",
        &args.nodes.to_string(),
        "--edges",
        &args.edges.to_string(),
        "--shape",
        args.shape.name(),
        "--split",
        &args
            .split
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(","),
        "--classes",
        &args.classes.to_string(),
        "--feat-dim",
        &args.feat_dim.to_string(),
        "--signal",
        &args.signal.to_string(),
        "--batches",
        &args.batches.to_string(),
        "--eval-every",
        &args.eval_every.to_string(),
        "--eval-nodes",
        &args.eval_nodes.to_string(),
        "--feature-cache-gib",
        &args.feature_cache_gib.to_string(),
        "--probe-seconds",
        &args.probe_seconds.to_string(),
    ]);
    if args.keep_page_cache {
        cmd.arg("--keep-page-cache");
    }
    if let Some(gib) = args.memory_gib {
        cmd.args(["--memory-gib", &gib.to_string()]);
    }
    if reused {
        // The prepare phase of a kept dataset only opens it (its checks are recorded).
        cmd.env("GRAPHLOOM_BENCH_SCALE_REUSE", "1");
    }
    eprintln!("phase {}", phase.name());
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running phase {}", phase.name()))?;
    if !out.status.success() {
        bail!("phase {} failed ({})", phase.name(), out.status);
    }
    let line = out
        .stdout
        .lines()
        .map_while(|l| l.ok())
        .filter(|l| l.starts_with('{'))
        .last()
        .with_context(|| format!("phase {} printed no result", phase.name()))?;
    Ok(serde_json::from_str(&line)?)
}

fn emit(args: &ScaleArgs, row: &Value) {
    if args.json {
        crate::host::print_record(row, None);
    }
}

fn print_summary(rows: &[Value]) {
    let get = |r: &Value, k: &str| r.get(k).and_then(Value::as_f64);
    let gib = |b: Option<f64>| b.map_or("-".into(), |b| format!("{:.2}", b / (1u64 << 30) as f64));
    println!(
        "{:<20} {:>9} {:>10} {:>10} {:>12} {:>14} {:>12} {:>8} {:>8}",
        "phase",
        "seconds",
        "anon GiB",
        "file GiB",
        "seeds/s",
        "edges/s",
        "reads/s",
        "hit",
        "val acc"
    );
    for r in rows {
        let f = |k: &str, p: usize| get(r, k).map_or("-".into(), |v| format!("{v:.p$}"));
        let phase = match r.get("repeat").and_then(Value::as_u64) {
            Some(k) => format!("{} #{}", r["phase"].as_str().unwrap_or("?"), k + 1),
            None => r["phase"].as_str().unwrap_or("?").to_string(),
        };
        println!(
            "{:<20} {:>9} {:>10} {:>10} {:>12} {:>14} {:>12} {:>8} {:>8}",
            phase,
            f("seconds", 1),
            gib(get(r, "peak_anon_bytes")),
            gib(get(r, "peak_file_bytes")),
            f("seeds_per_second", 0),
            f("sampled_edges_per_second", 0),
            get(r, "disk_reads_per_second")
                .or(get(r, "probe_reads_per_second"))
                .map_or("-".into(), |v| format!("{v:.0}")),
            f("cache_hit_rate", 3),
            f("val_acc", 4),
        );
    }
    let median = |phase: &str| {
        let mut v: Vec<f64> = rows
            .iter()
            .filter(|r| r["phase"] == phase)
            .filter_map(|r| get(r, "seeds_per_second"))
            .collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    if let (Some(disk), Some(memory)) = (median("train"), median("train_in_memory")) {
        println!(
            "median seeds/s: {disk:.0} from disk, {memory:.0} from memory: {:.2}x",
            disk / memory
        );
        if let Some(paged) = median("train_static") {
            println!(
                "  through the page cache (train_static): {paged:.0}: {:.2}x",
                paged / memory
            );
        }
    }
}

/// The common fields of a phase's row.
fn row(args: &ScaleArgs, phase: Phase, seconds: f64, peaks: (u64, u64)) -> Value {
    json!({
        "system": "graphloom",
        "phase": phase.name(),
        "nodes": args.nodes,
        "edges": args.edges,
        "seconds": seconds,
        "peak_anon_bytes": peaks.0,
        "peak_file_bytes": peaks.1,
        "seeds_per_second": null,
        "sampled_edges_per_second": null,
        "disk_reads_per_second": null,
        "probe_reads_per_second": null,
        "cache_hit_rate": null,
        "val_acc": null,
    })
}

/// The average degree of the realistic shape: `--edges` pairs over the nodes, both ways.
fn average_degree(args: &ScaleArgs) -> usize {
    ((2 * args.edges) as f64 / args.nodes.max(1) as f64).round() as usize
}

/// The CSR entries of the bench's graph.
fn csr_entries(args: &ScaleArgs) -> usize {
    match args.shape {
        Shape::Realistic => 2 * (args.nodes * average_degree(args) / 2),
        Shape::RmatDirected => args.edges,
    }
}
