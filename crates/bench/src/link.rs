//! `graphloom bench link`: link-prediction training throughput on the 100k benchmark graph
//! (split once with `prepare link-split`), against DGL's and PyG's link loaders on the same
//! dataset directory in the same run: GraphSAGE (2 layers, hidden 256, fanouts 15,10), batches
//! of 1024 positive edges with one uniform negative each, a dot decoder, Adam at 0.003; 100
//! timed batches after 5 of warm-up. Each GraphLoom measurement runs in a process of its own,
//! so its peak RSS is its own; the systems alternate over the repeats and the median counts.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use graphloom_convert::link_split::{self, LinkSplitConfig};
use graphloom_graph::sample::{Fanouts, Sampler, SamplerKind};
use graphloom_graph::{LinkSet, LinkSplit, MappedDataset};
use graphloom_nn::link::metrics::LinkMetric;
use graphloom_nn::link::{pair_batches, LinkTask, NegativeSampling, PairBatch};
use graphloom_nn::Architecture;
use graphloom_plan::{Plan, TaskKind, TrainSettings};
use graphloom_tensor::autodiff::ops::Probability;
use graphloom_tensor::RssReport;
use serde_json::{json, Value};

use crate::peers;

/// The negatives of the measured work: the destination drawn, the source kept, as DGL's
/// `negative_sampler.Uniform` (the peer measured beside it) draws them.
const NEG_SAMPLING: NegativeSampling = NegativeSampling::Dst;

/// Arguments of `graphloom bench link`.
#[derive(Args)]
pub(crate) struct LinkArgs {
    /// The dataset with a link split [default: data/bench-syn-100k-link, split from
    /// data/bench-syn-100k (both made when missing)].
    #[arg(long)]
    dataset: Option<PathBuf>,
    /// Fanouts, from the seeds outwards.
    #[arg(long, default_value = "15,10")]
    fanouts: Fanouts,
    /// Positive edges per batch.
    #[arg(long, default_value_t = 1024)]
    batch_size: usize,
    /// Negatives per positive.
    #[arg(long, default_value_t = 1)]
    neg_ratio: usize,
    /// Timed batches, after the warm-up ones.
    #[arg(long, default_value_t = 100)]
    batches: usize,
    /// Batches before the timed ones.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Runs of each system, alternating; the median counts.
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
    /// Run one GraphLoom measurement in this process and print its JSON line (what the bench
    /// runs in a child process).
    #[arg(long, hide = true)]
    measure: bool,
    /// Print one JSON object per measurement per line.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: LinkArgs) -> Result<()> {
    if args.batch_size == 0 || args.batches == 0 || args.repeats == 0 || args.neg_ratio == 0 {
        bail!("--batch-size, --batches, --repeats and --neg-ratio must be positive");
    }
    if let Some(t) = args.threads {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global();
    }
    let dataset = match &args.dataset {
        Some(d) => d.clone(),
        None => default_dataset()?,
    };
    if args.measure {
        println!("{}", measure(&args, &dataset)?);
        return Ok(());
    }
    let mut peers = peers::Peers::find(&args.baselines, "link", &["dgl", "pyg"])?;
    let mut runs: Vec<(String, Vec<Value>)> = ["graphloom", "dgl", "pyg"]
        .iter()
        .map(|s| (s.to_string(), Vec::new()))
        .collect();
    for _ in 0..args.repeats {
        for (system, records) in &mut runs {
            let record = if system == "graphloom" {
                Some(child(&args, &dataset)?)
            } else {
                peer(&args, &mut peers, &dataset, system)?
            };
            if let Some(r) = record {
                records.push(r);
            }
        }
    }
    let median = |records: &[Value]| -> Option<Value> {
        let mut sorted = records.to_vec();
        sorted.sort_by(|a, b| {
            let rate = |v: &Value| v["positive_edges_per_second"].as_f64().unwrap_or(0.0);
            rate(a).total_cmp(&rate(b))
        });
        sorted.get(sorted.len() / 2).cloned()
    };
    let ours = median(&runs[0].1).context("no GraphLoom measurement")?;
    let rate = |v: &Value| v["positive_edges_per_second"].as_f64().unwrap_or(f64::NAN);
    let dgl = median(&runs[1].1);
    let mut ours = ours;
    ours["vs_dgl"] = dgl
        .as_ref()
        .map_or(Value::Null, |d| json!(rate(&ours) / rate(d)));
    ours["repeats"] = json!(runs[0].1.len());
    report(&args, &peers, &ours);
    for (_, records) in &runs[1..] {
        if let Some(mut peer) = median(records) {
            peer["repeats"] = json!(records.len());
            report(&args, &peers, &peer);
        }
    }
    Ok(())
}

/// The 100k benchmark graph split for link prediction (5% validation, 10% test, 100
/// negatives per held-out edge), made when missing.
fn default_dataset() -> Result<PathBuf> {
    let source = PathBuf::from("data/bench-syn-100k");
    let split = PathBuf::from("data/bench-syn-100k-link");
    peers::ensure_synthetic(&source, &peers::bench_graph_100k())?;
    if !LinkSplit::exists(&split) {
        eprintln!(
            "splitting {} for link prediction into {}",
            source.display(),
            split.display()
        );
        let cfg = LinkSplitConfig {
            valid: 0.05,
            test: 0.1,
            ..LinkSplitConfig::default()
        };
        link_split::write(&source, &cfg, &split, &|_, _, _| {})?;
    }
    Ok(split)
}

/// One GraphLoom measurement, in a child process of this program.
fn child(args: &LinkArgs, dataset: &Path) -> Result<Value> {
    let mut cmd = std::process::Command::new(peers::graphloom_program()?);
    cmd.args(["bench", "link", "--measure", "--dataset"])
        .arg(dataset);
    cmd.args(["--fanouts", &args.fanouts.to_string()]);
    cmd.args(["--batch-size", &args.batch_size.to_string()]);
    cmd.args(["--neg-ratio", &args.neg_ratio.to_string()]);
    cmd.args(["--batches", &args.batches.to_string()]);
    cmd.args(["--warmup", &args.warmup.to_string()]);
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

/// A peer's script on the same work; `None` when it is not installed.
fn peer(
    args: &LinkArgs,
    peers: &mut peers::Peers,
    dataset: &Path,
    system: &str,
) -> Result<Option<Value>> {
    let mut script = vec![
        dataset.display().to_string(),
        "--fanouts".into(),
        args.fanouts.to_string(),
        "--batch-size".into(),
        args.batch_size.to_string(),
        "--neg-ratio".into(),
        args.neg_ratio.to_string(),
        "--batches".into(),
        args.batches.to_string(),
        "--warmup".into(),
        args.warmup.to_string(),
    ];
    if let Some(t) = args.threads {
        script.extend(["--threads".into(), t.to_string()]);
    }
    peers.run(system, &script)
}

/// Times the training batches and, apart, the sampling of as many batches.
fn measure(args: &LinkArgs, dataset: &Path) -> Result<Value> {
    let total = args.warmup + args.batches;
    let settings = TrainSettings {
        dataset: Some(dataset.to_path_buf()),
        task: Some(TaskKind::Link),
        model: Some(Architecture::Sage.into()),
        hidden: Some(256),
        out_dim: Some(256),
        lr: Some(0.003),
        weight_decay: Some(0.0),
        dropout: Some(Probability::ZERO),
        epochs: 1,
        fanouts: Some(args.fanouts.clone()),
        batch_size: Some(args.batch_size),
        neg_ratio: Some(args.neg_ratio),
        neg_sampling: Some(NEG_SAMPLING),
        batches_per_epoch: Some(total),
        ..Default::default()
    };
    let plan = Plan::new(settings).map_err(crate::output::plan_error)?;
    let times = Mutex::new(Vec::with_capacity(total));
    let start = Instant::now();
    let outcome = plan
        .run_with_progress(
            |_| {},
            |_, _| {
                times
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(start.elapsed().as_secs_f64())
            },
        )
        .map_err(crate::output::plan_error)?;
    let times = times.into_inner().unwrap_or_else(|e| e.into_inner());
    if times.len() < total {
        bail!(
            "only {} batches ran: the split has too few supervision edges for {total} batches \
             of {}",
            times.len(),
            args.batch_size
        );
    }
    // `times[i]` is when batch `i` ended: the timed batches end after the warm-up's last.
    let train_seconds = match args.warmup {
        0 => times[total - 1],
        w => times[total - 1] - times[w - 1],
    };
    let final_loss = outcome.report().epochs.last().map(|e| e.loss);
    let (sampled_edges, sample_seconds) = sampling(args, dataset)?;
    Ok(json!({
        "system": "graphloom",
        "task": "link",
        "threads": rayon::current_num_threads(),
        "fanouts": args.fanouts.as_slice(),
        "batch_size": args.batch_size,
        "neg_ratio": args.neg_ratio,
        "batches": args.batches,
        "supervision_edges": supervision_edges(dataset),
        "sample_seconds": sample_seconds,
        "sampled_edges_per_second": sampled_edges as f64 / sample_seconds,
        "train_seconds": train_seconds,
        "seconds_per_batch": train_seconds / args.batches as f64,
        "positive_edges_per_second": (args.batches * args.batch_size) as f64 / train_seconds,
        "final_loss": final_loss,
        "peak_rss_bytes": RssReport::read().peak_bytes,
    }))
}

/// The number of supervision pairs of the split in `dataset`.
fn supervision_edges(dataset: &Path) -> Option<usize> {
    let ds = MappedDataset::open(dataset).ok()?;
    let split = LinkSplit::open(dataset, ds.data()).ok()?;
    Some(split.pairs(LinkSet::TrainPos).len())
}

/// The sampling alone of the first `batches` batches of an epoch (their pairs' ends as
/// seeds), after the warm-up ones: sampled edges and seconds.
fn sampling(args: &LinkArgs, dataset: &Path) -> Result<(usize, f64)> {
    let ds = MappedDataset::open(dataset)?;
    let split = LinkSplit::open(dataset, ds.data())?;
    let task = LinkTask {
        split: &split,
        neg_ratio: args.neg_ratio,
        neg_sampling: NEG_SAMPLING,
        metric: LinkMetric::Auc,
        exclude_supervision: false,
    };
    let n = ds.meta.num_nodes;
    let (batches, _) = pair_batches(
        split.pairs(LinkSet::TrainPos).len(),
        0,
        1,
        args.batch_size,
        0,
        1,
    );
    let mut sampler = Sampler::new(n);
    let source = ds.data().source();
    let (mut edges, mut seconds) = (0, 0.0);
    for (i, index) in batches.iter().take(args.warmup + args.batches).enumerate() {
        let seeds = PairBatch::new(&task, index, n, 0, 1).nodes();
        let start = Instant::now();
        let blocks = sampler.sample(&source, &seeds, &args.fanouts, SamplerKind::Uniform, 0, 1)?;
        if i >= args.warmup {
            seconds += start.elapsed().as_secs_f64();
            edges += blocks.iter().map(|b| b.num_edges()).sum::<usize>();
        }
    }
    Ok((edges, seconds.max(f64::MIN_POSITIVE)))
}

fn report(args: &LinkArgs, peers: &peers::Peers, record: &Value) {
    if args.json {
        let mut record = record.clone();
        record["baselines"] = peers.json();
        crate::host::print_record(&record, args.threads);
        return;
    }
    let vs = record["vs_dgl"]
        .as_f64()
        .map_or(String::new(), |r| format!("  {r:.2}x DGL"));
    println!(
        "{:<10} {:>9.0} positive edges/s  {:>6.2} M sampled edges/s  peak RSS {:.0} MiB{vs}",
        record["system"].as_str().unwrap_or(""),
        record["positive_edges_per_second"]
            .as_f64()
            .unwrap_or(f64::NAN),
        record["sampled_edges_per_second"]
            .as_f64()
            .unwrap_or(f64::NAN)
            / 1e6,
        record["peak_rss_bytes"].as_f64().unwrap_or(f64::NAN) / (1 << 20) as f64,
    );
}
