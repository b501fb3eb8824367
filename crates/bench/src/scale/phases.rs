//! The phases of `graphloom bench scale`, each run in a process of its own: preparing the
//! dataset, sampling over the mapped graph, the training runs (out of core with direct reads,
//! in memory, out of core through the page cache; the first epoch after the page cache is
//! dropped) and the disk's direct-read probe.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use graphloom_comm::Local;
use graphloom_convert::synthetic::{self, EdgeModel, SplitSizes, SyntheticConfig};
use graphloom_graph::sample::{Fanouts, Sampler, SamplerKind};
use graphloom_graph::MappedDataset;
use graphloom_nn::batches::epoch_batches;
use graphloom_nn::minibatch::{Inputs, MiniBatch};
use graphloom_nn::train::fit;
use graphloom_nn::Architecture;
use graphloom_plan::{FeatureReads, FeaturesLocation, Plan, RunOutcome, TrainSettings};
use graphloom_store::{Layout, Location, RowSource, StoreSpec, StoreTensor};
use graphloom_tensor::autodiff::ops::Probability;
use graphloom_tensor::{DType, RssPeaks, Tensor};
use serde_json::{json, Value};

use super::{average_degree, row, Phase, ScaleArgs, Shape, MARKER};

/// The training run's fanouts (`--fanouts 15,10,5`).
const FANOUTS: [i64; 3] = [15, 10, 5];

/// [`FANOUTS`] as the plan takes them.
fn fanouts() -> Fanouts {
    Fanouts::new(FANOUTS.to_vec()).expect("the bench's fanouts are valid")
}

/// `p` as a dropout rate.
fn probability(p: f64) -> Probability {
    Probability::new(p).expect("the bench's rates are probabilities")
}

/// Seeds per training batch.
const BATCH_SIZE: usize = 1024;

/// Runs `phase` in this process and returns its row: the common fields, the peaks of its
/// memory and what the phase measured.
pub(super) fn run_phase(args: &ScaleArgs, phase: Phase) -> Result<Value> {
    let memory = RssPeaks::start();
    let start = Instant::now();
    let mut extra = serde_json::Map::new();
    match phase {
        Phase::Prepare => prepare(args, &mut extra)?,
        Phase::Sample => sample(args, &mut extra)?,
        Phase::Train => train(args, Run::Direct, &mut extra)?,
        Phase::TrainInMemory => train(args, Run::InMemory, &mut extra)?,
        Phase::TrainStatic => train(args, Run::Static, &mut extra)?,
        Phase::Cold => cold(args, &mut extra)?,
        Phase::Probe => probe(args, &mut extra)?,
    }
    let seconds = start.elapsed().as_secs_f64();
    let mut value = row(args, phase, seconds, memory.finish());
    for (k, v) in extra {
        value[k] = v;
    }
    Ok(value)
}

/// The synthetic configuration of the bench's dataset.
fn config(args: &ScaleArgs) -> Result<SyntheticConfig> {
    let &[train, valid, test] = args.split.as_slice() else {
        bail!("--split takes three counts: train,valid,test");
    };
    let (edges, edge_model) = match args.shape {
        Shape::Realistic => (None, EdgeModel::PowerLaw),
        Shape::RmatDirected => (Some(args.edges), EdgeModel::Rmat),
    };
    Ok(SyntheticConfig {
        nodes: args.nodes,
        avg_degree: average_degree(args),
        edges,
        feat_dim: args.feat_dim,
        classes: args.classes,
        homophily: 0.5,
        signal: args.signal,
        feat_dtype: DType::BF16,
        seed: 0,
        edge_model,
        split: SplitSizes::Counts(train, valid, test),
    })
}

/// Prepares the dataset (unless kept from before) and opens it once, which runs and records
/// its checks; reports the disk it takes.
fn prepare(args: &ScaleArgs, extra: &mut serde_json::Map<String, Value>) -> Result<()> {
    if std::env::var_os("GRAPHLOOM_BENCH_SCALE_REUSE").is_none() {
        let progress = crate::output::PhaseProgress::new();
        // 1.75 GiB of edges per pass (four passes over 1.6 billion edges, eight over the
        // realistic shape's 3.2 billion CSR entries) keeps the phase well under 4 GiB of
        // anonymous memory with the offsets (0.9 GB).
        synthetic::write(&config(args)?, &args.dir, 7 << 28, &|phase, done, total| {
            progress.update(phase.name(), done, total)
        })?;
        progress.finish();
        // Marked here, not by the bench that runs this phase, so a dataset prepared by
        // `--phase prepare` alone is the bench's to reuse or replace too.
        std::fs::write(args.dir.join(MARKER), "made by graphloom bench scale\n")
            .with_context(|| format!("marking {}", args.dir.display()))?;
    }
    let check = Instant::now();
    MappedDataset::open(&args.dir)?;
    extra.insert("check_seconds".into(), json!(check.elapsed().as_secs_f64()));
    extra.insert("shape".into(), json!(args.shape.name()));
    if let Some(d) = graphloom_graph::DatasetSummary::read(&args.dir)?.degrees {
        extra.insert(
            "isolated_fraction".into(),
            json!(d.isolated as f64 / args.nodes.max(1) as f64),
        );
        extra.insert("top1pct_degree_share".into(), json!(d.top_percent_share));
    }
    let disk: u64 = std::fs::read_dir(&args.dir)?
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    extra.insert("disk_bytes".into(), json!(disk));
    Ok(())
}

/// Samples batches of the training nodes over the mapped graph for about 30 seconds.
fn sample(args: &ScaleArgs, extra: &mut serde_json::Map<String, Value>) -> Result<()> {
    let ds = MappedDataset::open(&args.dir)?;
    ds.advise_random();
    let data = ds.data();
    let mut sampler = Sampler::new(data.num_nodes());
    let batches = epoch_batches(data.train_idx, 0, 0, BATCH_SIZE, 0, 1);
    let start = Instant::now();
    let (mut seeds, mut edges) = (0usize, 0usize);
    for (k, batch) in batches.iter().enumerate() {
        let blocks = sampler.sample(&data.source(), batch, &FANOUTS, SamplerKind::Uniform, 0, 0)?;
        seeds += batch.len();
        edges += blocks.iter().map(|b| b.num_edges()).sum::<usize>();
        if k >= 10 && start.elapsed().as_secs_f64() > 30.0 {
            break;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    extra.insert("seeds_per_second".into(), json!(seeds as f64 / seconds));
    extra.insert(
        "sampled_edges_per_second".into(),
        json!(edges as f64 / seconds),
    );
    Ok(())
}

/// How a training phase reads its features.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Run {
    /// From the file behind the row cache, misses read with O_DIRECT.
    Direct,
    /// From memory (a folded table, see [`FoldedRows`]).
    InMemory,
    /// From the file behind the row cache, misses through the page cache.
    Static,
}

/// The training run's settings: GraphSAGE, hidden 256, fanouts 15,10,5, features from the
/// mapped file (behind the row cache), evaluated by sampled inference.
fn settings(args: &ScaleArgs, run: Run) -> TrainSettings {
    let in_memory = run == Run::InMemory;
    TrainSettings {
        dataset: Some(args.dir.clone()),
        model: Some(Architecture::Sage.into()),
        layers: Some(3),
        hidden: Some(256),
        lr: Some(0.003),
        weight_decay: Some(0.0),
        dropout: Some(probability(0.5)),
        input_dropout: Some(Probability::ZERO),
        epochs: args.batches.div_ceil(args.eval_every.max(1)),
        fanouts: Some(fanouts()),
        batch_size: Some(BATCH_SIZE),
        features_location: Some(FeaturesLocation::Mmap),
        feature_cache_gib: (!in_memory
            && args.feature_cache_gib > 0.0
            && args.memory_gib.is_none())
        .then_some(args.feature_cache_gib),
        feature_reads: match run {
            Run::Direct => Some(FeatureReads::Direct),
            Run::Static => Some(FeatureReads::Mapped),
            Run::InMemory => None,
        },
        memory_gib: args.memory_gib,
        batches_per_epoch: Some(args.eval_every.max(1)),
        eval_fanouts: Some(fanouts()),
        eval_nodes: Some(args.eval_nodes),
        ..Default::default()
    }
}

/// Feature rows from an in-memory table of a sixteenth of the nodes, ids folded onto it: the
/// bench's stand-in for features in memory, which gathers as many rows of the same width
/// from memory as the out-of-core run reads from its file.
struct FoldedRows {
    table: StoreTensor,
    rows: usize,
}

impl RowSource for FoldedRows {
    fn rows(&self) -> usize {
        self.rows
    }
    fn gather(&self, ids: &[i64]) -> graphloom_store::Result<Tensor> {
        let folded = self.table.rows() as i64;
        let ids: Vec<i64> = ids.iter().map(|&i| i % folded).collect();
        self.table.gather(&ids)
    }
    fn collective(&self) -> bool {
        false
    }
}

/// Trains `args.batches` batches and reports seeds per second (median of windows of ten
/// batches after the warm-up tenth), disk reads, the cache's hit rate and the validation
/// accuracy of the sampled evaluations.
fn train(args: &ScaleArgs, run: Run, extra: &mut serde_json::Map<String, Value>) -> Result<()> {
    let in_memory = run == Run::InMemory;
    let plan = match Plan::new(settings(args, run)).map_err(crate::output::plan_error)? {
        Plan::MiniBatch(plan) => plan,
        _ => bail!("the scale bench plans a mini-batch run"),
    };
    for line in plan.memory.lines() {
        eprintln!("  {line}");
    }
    extra.insert("memory_gib".into(), json!(args.memory_gib));
    extra.insert("predicted_peak_bytes".into(), json!(plan.memory.peak()));
    let times = std::sync::Mutex::new(Vec::<(usize, f64)>::new());
    let start = Instant::now();
    let record = |done: usize| {
        let mut times = times.lock().unwrap_or_else(|e| e.into_inner());
        times.push((done, start.elapsed().as_secs_f64()));
        if times.len().is_multiple_of(25) {
            eprintln!(
                "  {} batches, {:.0} s",
                times.len(),
                start.elapsed().as_secs_f64()
            );
        }
    };
    let reads_before = crate::disk::disk_reads(&args.dir);
    let val = std::sync::Mutex::new(Vec::new());
    let on_epoch = |r: &graphloom_nn::train::EpochRecord| {
        val.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(r.evaluation.map(|e| e.validation()))
    };
    let (report, row_cache, stages) = if in_memory {
        let ds = MappedDataset::open(&args.dir)?;
        ds.advise_random();
        let meta = &ds.meta;
        let folded_rows = (meta.num_nodes / 16).max(1);
        let comm = Local::single();
        let file = ds.feature_table(comm.clone(), Layout::Continuous, FeaturesLocation::Mmap)?;
        let mut table = StoreTensor::new(
            comm.clone(),
            StoreSpec::new(
                &[folded_rows, meta.feat_dim],
                file.spec().dtype,
                Layout::Continuous,
                Location::Host,
            ),
        )?;
        let first: Vec<i64> = (0..folded_rows as i64).collect();
        table.fill_from_whole(file.gather(&first)?.as_bytes())?;
        drop(file);
        let rows = FoldedRows {
            table,
            rows: meta.num_nodes,
        };
        let c = &plan.common;
        let mut workload = MiniBatch::new(
            ds.data(),
            Inputs::Features(&rows),
            comm,
            c.model.clone(),
            c.train.seed,
            &plan.batches,
        )?;
        workload.on_batch(|done, _| record(done));
        let report = fit(&mut workload, &c.train, on_epoch)?;
        (report, None, workload.stages())
    } else {
        let outcome = Plan::MiniBatch(plan)
            .run_with_progress(on_epoch, |done, _| record(done))
            .map_err(crate::output::plan_error)?;
        match outcome {
            RunOutcome::MiniBatch(o) => (o.report, o.row_cache, o.stages),
            _ => bail!("the scale bench plans a mini-batch run"),
        }
    };
    let seconds = start.elapsed().as_secs_f64();
    let reads = crate::disk::disk_reads(&args.dir).saturating_sub(reads_before) as f64;
    let val = val.into_inner().unwrap_or_else(|e| e.into_inner());
    let times = times.into_inner().unwrap_or_else(|e| e.into_inner());
    // A run of one epoch (the cold phase) is measured whole: its start is what it is about.
    let warmup = if args.batches <= args.eval_every {
        0
    } else {
        args.batches / 10
    };
    let (median, series) = seeds_per_second(&times, warmup);
    if times.len() < args.batches {
        eprintln!(
            "  only {} batches ran: an epoch of {} batches holds more seeds than the training \
             split has",
            times.len(),
            args.eval_every
        );
    }
    extra.insert("seeds_per_second".into(), json!(median));
    extra.insert("disk_reads_per_second".into(), json!(reads / seconds));
    extra.insert(
        "disk_reads_per_seed".into(),
        json!(reads / (times.len() * BATCH_SIZE).max(1) as f64),
    );
    // Opening the graph and filling the cache, then the first batch.
    extra.insert(
        "first_batch_seconds".into(),
        json!(times.first().map(|t| t.1)),
    );
    if let Some(cache) = row_cache {
        extra.insert("cache_hit_rate".into(), json!(cache.hit_rate()));
        extra.insert("feature_reads".into(), json!(cache.reads()));
        extra.insert("cache_fill_seconds".into(), json!(cache.fill_seconds));
    }
    // Folded rows are not the nodes' own features: the in-memory run's accuracy means nothing.
    if !in_memory {
        extra.insert("val_acc".into(), json!(val.iter().flatten().last()));
        extra.insert("val_acc_by_epoch".into(), json!(val));
    }
    extra.insert("batches".into(), json!(times.len()));
    // The producer thread's sampling and gathering overlap the compute thread's steps.
    extra.insert("sample_seconds".into(), json!(stages.sample));
    extra.insert("gather_seconds".into(), json!(stages.gather));
    extra.insert("compute_seconds".into(), json!(stages.compute));
    extra.insert("test_acc".into(), json!(report.test_score));
    extra.insert("series".into(), json!(series));
    Ok(())
}

/// The first epoch of the out-of-core run after the page cache is dropped (where this process
/// may: root, outside a container that forbids it; the row says whether it was).
fn cold(args: &ScaleArgs, extra: &mut serde_json::Map<String, Value>) -> Result<()> {
    let dropped = if args.keep_page_cache {
        false
    } else {
        // Written pages must reach the disk before clean ones can be dropped.
        // SAFETY: sync has no preconditions.
        unsafe { libc::sync() };
        match std::fs::write("/proc/sys/vm/drop_caches", "3\n") {
            Ok(()) => true,
            Err(e) => {
                eprintln!("  the page cache could not be dropped ({e}): this epoch may start warm");
                false
            }
        }
    };
    extra.insert("page_cache_dropped".into(), json!(dropped));
    let first_epoch = ScaleArgs {
        batches: args.eval_every,
        ..args.clone()
    };
    train(&first_epoch, Run::Direct, extra)
}

/// The median seeds per second over windows of ten consecutive batches of one epoch (fewer
/// for epochs of up to ten batches; those
/// after `warmup` batches; a window never spans an evaluation), and every window, warm-up
/// included, as (seconds since start, seeds per second).
fn seeds_per_second(times: &[(usize, f64)], warmup: usize) -> (f64, Vec<(f64, f64)>) {
    // Ten batches, or fewer when epochs are shorter.
    let per_epoch = times.iter().map(|t| t.0).max().unwrap_or(0);
    let window = 10.min(per_epoch.saturating_sub(1)).max(1);
    let (mut series, mut rates) = (Vec::new(), Vec::new());
    let mut k = 0;
    while k + window < times.len() {
        let (a, b) = (times[k], times[k + window]);
        // Batch numbers restart at each epoch: a window must stay inside one.
        if b.0 == a.0 + window {
            let rate = (window * BATCH_SIZE) as f64 / (b.1 - a.1);
            series.push((b.1, rate));
            if k >= warmup {
                rates.push(rate);
            }
            k += window;
        } else {
            k += 1;
        }
    }
    rates.sort_by(f64::total_cmp);
    let median = rates.get(rates.len() / 2).copied().unwrap_or(0.0);
    (median, series)
}

/// The disk's limit for the reads the training run makes: random direct reads of the feature
/// file, of the size a row is read with, for `probe_seconds`.
fn probe(args: &ScaleArgs, extra: &mut serde_json::Map<String, Value>) -> Result<()> {
    let probe = crate::disk::probe(&args.dir.join("node_feat.npy"), args.probe_seconds)?;
    extra.insert("probe_read_bytes".into(), json!(probe.read_bytes));
    extra.insert(
        "probe_reads_per_second".into(),
        json!(probe.reads_per_second),
    );
    Ok(())
}
