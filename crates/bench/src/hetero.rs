//! `graphloom bench hetero`: sampled R-GCN on a graph of ogbn-mag's shape against DGL's
//! ogbn-mag R-GCN (`dgl_hetero.py`) on the same directory in the same run: 2 layers, hidden 64,
//! the same fanouts for every relation (25,20), batches of 1024 papers, learnt 128-wide
//! embeddings for the featureless types. GraphLoom trains one epoch in a process of its own
//! (its seeds per second are the epoch's training nodes over the epoch's seconds, sampling,
//! gathers and updates included; its peak RSS is its own) and then times the sampling alone of
//! `--batches` batches; DGL times `--batches` batches after `--warmup`, and its sampling alone
//! over as many. The systems alternate over the repeats and the median counts.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use graphloom_convert::synthetic::{write_mag, MagConfig};
use graphloom_graph::sample::{Fanouts, HeteroSampler};
use graphloom_graph::NodeId;
use graphloom_nn::batches::epoch_batches;
use graphloom_nn::hetero::{sample_blocks, RelationalKind};
use graphloom_plan::{HeteroPlan, ModelName, TrainSettings};
use graphloom_tensor::RssReport;
use serde_json::{json, Value};

use crate::peers;

/// Arguments of `graphloom bench hetero`.
#[derive(Args)]
pub(crate) struct HeteroArgs {
    /// A heterogeneous dataset directory [default: data/bench-mag-SCALE, ogbn-mag's shape at
    /// --scale, made when missing].
    #[arg(long)]
    dataset: Option<PathBuf>,
    /// ogbn-mag's size times this, for the default dataset.
    #[arg(long, default_value_t = 0.25)]
    scale: f64,
    /// Fanouts of every relation, from the seeds outwards.
    #[arg(long, default_value = "25,20")]
    fanouts: Fanouts,
    /// Papers per batch.
    #[arg(long, default_value_t = 1024)]
    batch_size: usize,
    /// Batches DGL times after its warm-up, and batches whose sampling alone is timed.
    #[arg(long, default_value_t = 50)]
    batches: usize,
    /// DGL's batches before the timed ones.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Runs of each system, alternating; the median counts.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Threads for every system [default: all cores].
    #[arg(long)]
    threads: Option<usize>,
    /// Folder of the DGL script [default: $GRAPHLOOM_SHARED/baselines, else
    /// ../shared/baselines]; a peer whose script or Python environment is missing is left
    /// out, saying why on stderr and in each JSON record's `baselines`.
    #[arg(long)]
    baselines: Option<PathBuf>,
    /// Run one GraphLoom measurement in this process and print its JSON line (what the bench
    /// runs in a child process).
    #[arg(long, hide = true)]
    measure: bool,
    /// Print one JSON object per measurement per line.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: HeteroArgs) -> Result<()> {
    if args.batch_size == 0 || args.batches == 0 || args.repeats == 0 {
        bail!("--batch-size, --batches and --repeats must be positive");
    }
    if let Some(t) = args.threads {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global();
    }
    let dataset = match &args.dataset {
        Some(d) => d.clone(),
        None => default_dataset(args.scale)?,
    };
    if args.measure {
        println!("{}", measure(&args, &dataset)?);
        return Ok(());
    }
    let mut peers = peers::Peers::find(&args.baselines, "hetero", &["dgl"])?;
    let mut ours = Vec::new();
    let mut dgl = Vec::new();
    for _ in 0..args.repeats {
        ours.push(child(&args, &dataset)?);
        if let Some(r) = peer(&args, &mut peers, &dataset)? {
            dgl.push(r);
        }
    }
    let rate = |v: &Value| v["seeds_per_second"].as_f64().unwrap_or(f64::NAN);
    let median = |records: &[Value]| -> Option<Value> {
        let mut sorted = records.to_vec();
        sorted.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
        sorted.get(sorted.len() / 2).cloned()
    };
    let mut mine = median(&ours).context("no GraphLoom measurement")?;
    let theirs = median(&dgl);
    let rss = |v: &Value| v["peak_rss_bytes"].as_f64().unwrap_or(f64::NAN);
    mine["vs_dgl"] = theirs
        .as_ref()
        .map_or(Value::Null, |d| json!(rate(&mine) / rate(d)));
    mine["peak_rss_vs_dgl"] = theirs
        .as_ref()
        .map_or(Value::Null, |d| json!(rss(&mine) / rss(d)));
    mine["repeats"] = json!(ours.len());
    report(&args, &peers, &mine);
    if let Some(mut d) = theirs {
        d["repeats"] = json!(dgl.len());
        report(&args, &peers, &d);
    }
    Ok(())
}

/// ogbn-mag's shape at `scale` in `data/bench-mag-SCALE`, made when missing.
fn default_dataset(scale: f64) -> Result<PathBuf> {
    let dir = PathBuf::from(format!("data/bench-mag-{scale}"));
    if !graphloom_graph::format::meta::is_hetero(&dir) {
        eprintln!("writing ogbn-mag's shape at {scale} into {}", dir.display());
        let cfg = MagConfig {
            scale,
            ..MagConfig::default()
        };
        write_mag(
            &cfg,
            &dir,
            graphloom_convert::default_buffer_bytes(),
            &|_, _, _| {},
        )?;
    }
    Ok(dir)
}

/// One GraphLoom measurement, in a child process of this program.
fn child(args: &HeteroArgs, dataset: &Path) -> Result<Value> {
    let mut cmd = std::process::Command::new(peers::graphloom_program()?);
    cmd.args(["bench", "hetero", "--measure", "--dataset"])
        .arg(dataset);
    cmd.args(["--fanouts", &args.fanouts.to_string()]);
    cmd.args(["--batch-size", &args.batch_size.to_string()]);
    cmd.args(["--batches", &args.batches.to_string()]);
    if let Some(t) = args.threads {
        cmd.args(["--threads", &t.to_string()]);
    }
    let out = cmd.output().context("running the measurement")?;
    if !out.status.success() {
        bail!(
            "the GraphLoom measurement failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .context("no JSON line from the measurement")?;
    Ok(serde_json::from_str(line)?)
}

/// DGL's script on the same work; `None` when DGL is not installed.
fn peer(args: &HeteroArgs, peers: &mut peers::Peers, dataset: &Path) -> Result<Option<Value>> {
    let mut script = vec![
        dataset.display().to_string(),
        "--fanouts".into(),
        args.fanouts.to_string(),
        "--batch-size".into(),
        args.batch_size.to_string(),
        "--batches".into(),
        args.batches.to_string(),
        "--warmup".into(),
        args.warmup.to_string(),
    ];
    if let Some(t) = args.threads {
        script.extend(["--threads".into(), t.to_string()]);
    }
    peers.run("dgl", &script)
}

/// Trains one epoch and times it, then times the sampling alone of `--batches` batches.
fn measure(args: &HeteroArgs, dataset: &Path) -> Result<Value> {
    let settings = TrainSettings {
        dataset: Some(dataset.to_path_buf()),
        model: Some(ModelName::Relational(RelationalKind::Rgcn)),
        epochs: 1,
        fanouts: Some(args.fanouts.clone()),
        batch_size: Some(args.batch_size),
        ..Default::default()
    };
    let plan = HeteroPlan::new(settings).map_err(crate::output::plan_error)?;
    // As `graphloom train` does: freed buffers kept for reuse up to the largest phase.
    graphloom_tensor::alloc::set_cache_limit(plan.memory.buffer_cache_bytes() as usize);
    let (report, _) = plan.run(|_| {}).map_err(crate::output::plan_error)?;
    let epoch = report.epochs.last().context("no epoch ran")?;
    let graph = plan.graph();
    let train = &graph.splits[0];
    let (sampled_edges, sample_seconds) = sampling(args, &plan)?;
    Ok(json!({
        "system": "graphloom",
        "task": "node",
        "model": "rgcn",
        "hetero": true,
        "threads": rayon::current_num_threads(),
        "fanouts": args.fanouts.as_slice(),
        "batch_size": args.batch_size,
        "train_nodes": train.len(),
        "epoch_seconds": epoch.seconds,
        "seeds_per_second": train.len() as f64 / epoch.seconds,
        "seconds_per_batch": epoch.seconds / train.len().div_ceil(args.batch_size) as f64,
        "sample_seconds": sample_seconds,
        "sampled_edges_per_second": sampled_edges as f64 / sample_seconds,
        "final_loss": epoch.loss,
        "peak_rss_bytes": RssReport::read().peak_bytes,
        "predicted_peak_bytes": plan.memory.peak(),
    }))
}

/// The sampling alone of the first `--batches` batches of an epoch: sampled edges and seconds.
fn sampling(args: &HeteroArgs, plan: &HeteroPlan) -> Result<(usize, f64)> {
    let graph = plan.graph();
    let fanouts: Vec<Vec<i64>> = args
        .fanouts
        .as_slice()
        .iter()
        .map(|&f| vec![f; graph.relations.len()])
        .collect();
    let batches = epoch_batches(&graph.splits[0], 1, 1, args.batch_size, 0, 1);
    let mut sampler = HeteroSampler::new(&graph.type_sizes);
    let (mut edges, mut seconds) = (0, 0.0);
    for seeds in batches.iter().take(args.batches) {
        let seeds: &[NodeId] = seeds;
        let start = Instant::now();
        let blocks = sample_blocks(graph, &mut sampler, graph.target, seeds, &fanouts, 1, 1)?;
        seconds += start.elapsed().as_secs_f64();
        edges += blocks.iter().map(|b| b.num_edges()).sum::<usize>();
    }
    Ok((edges, seconds.max(f64::MIN_POSITIVE)))
}

fn report(args: &HeteroArgs, peers: &peers::Peers, record: &Value) {
    if args.json {
        let mut record = record.clone();
        record["baselines"] = peers.json();
        crate::host::print_record(&record, args.threads);
        return;
    }
    let vs = match (
        record["vs_dgl"].as_f64(),
        record["peak_rss_vs_dgl"].as_f64(),
    ) {
        (Some(r), Some(m)) => format!("  {r:.2}x DGL's seeds/s at {m:.2}x its peak RSS"),
        _ => String::new(),
    };
    println!(
        "{:<10} {:>8.0} seeds/s  {:>6.2} M sampled edges/s  peak RSS {:.0} MiB{vs}",
        record["system"].as_str().unwrap_or(""),
        record["seeds_per_second"].as_f64().unwrap_or(f64::NAN),
        record["sampled_edges_per_second"]
            .as_f64()
            .unwrap_or(f64::NAN)
            / 1e6,
        record["peak_rss_bytes"].as_f64().unwrap_or(f64::NAN) / (1 << 20) as f64,
    );
}
