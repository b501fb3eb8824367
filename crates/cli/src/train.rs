//! `graphloom train`: parses the options into a [`Plan`], runs it, and prints and writes what it
//! measured. Every decision about how to train lives in the plan.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;

use graphloom_nn::model_file::ModelFile;
use graphloom_nn::train::{EpochRecord, TrainReport};
use graphloom_plan::{Choice, Common, Plan, RunOutcome, TrainSettings};
use graphloom_tensor::memory::Category;

use crate::output;

/// Arguments of `graphloom train`: the plan's settings, and what to write and print.
#[derive(Args, Clone)]
pub(crate) struct TrainArgs {
    #[command(flatten)]
    pub(crate) settings: TrainSettings,
    /// Worker threads for the kernels, at most 1024, and no more than the address-space limit
    /// (ulimit -v) leaves room for their stacks [default: all cores].
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Write a JSON summary of the run here.
    #[arg(long)]
    pub(crate) summary_json: Option<PathBuf>,
    /// Save the best model here: parameters and configuration (and a learnt input
    /// embedding) in one safetensors file, for `predict`, `embed` and `--init-model`.
    #[arg(long)]
    pub(crate) save_model: Option<PathBuf>,
    /// Draw loss, accuracy and memory curves into this PNG.
    #[arg(long)]
    pub(crate) plot: Option<PathBuf>,
    /// MiB of freed tensor buffers kept for reuse in the next epoch (0: none; a new tensor
    /// buffer takes the place of cached ones, but other allocations do not) [default: the
    /// largest phase of the memory plan, at least 1024, and above that no more than
    /// --memory-gib leaves]
    #[arg(long)]
    pub(crate) buffer_cache_mib: Option<usize>,
    /// Time every op and print the totals, forward and backward, at the end.
    #[arg(long)]
    pub(crate) profile: bool,
    /// Print only the final line.
    #[arg(long)]
    pub(crate) quiet: bool,
    /// Print the plan's predicted peak memory by part (the division of --memory-gib) and
    /// exit without training.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Print the summary (the --summary-json object) as one JSON line on stdout instead of
    /// the final line.
    #[arg(long)]
    pub(crate) json: bool,
}

impl TrainArgs {
    /// The output files, each checked writable before any training.
    fn outputs(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.summary_json, &self.save_model, &self.plot]
            .into_iter()
            .flatten()
    }
}

/// Fails, before any training, when an output file cannot be written, would replace a file
/// the run reads (the dataset's, the initial model, the snapshots) or another output.
pub(crate) fn check_outputs(args: &TrainArgs) -> Result<()> {
    let s = &args.settings;
    let inputs: Vec<&Path> = [&s.dataset, &s.init_model, &s.snapshot_dir, &s.scratch_dir]
        .into_iter()
        .flatten()
        .map(PathBuf::as_path)
        .collect();
    let outputs: Vec<&PathBuf> = args.outputs().collect();
    for (k, path) in outputs.iter().enumerate() {
        graphloom_graph::check_output_file(path, &inputs)?;
        if outputs[..k].contains(path) {
            anyhow::bail!(
                "{} is given for two outputs: each needs a file of its own",
                path.display()
            );
        }
        output::check_writable(path)?;
    }
    Ok(())
}

/// Which of the train, validation and test splits hold nodes: an empty split has no accuracy
/// (shown as n/a, null in JSON), not one of 0.
#[derive(Clone, Copy)]
pub(crate) struct Splits(pub(crate) [bool; 3]);

impl Splits {
    /// The splits of the run's dataset (the generated default dataset has all three).
    fn of(dataset: Option<&Path>) -> Result<Splits> {
        Ok(Splits(match dataset {
            Some(d) => graphloom_graph::split_sizes(d)?.map(|n| n > 0),
            None => [true; 3],
        }))
    }
}

/// One epoch's line of the log.
pub(crate) fn epoch_line(r: &EpochRecord, splits: Splits) -> String {
    let figures = match &r.evaluation {
        Some(e) => e.epoch_text(splits.0),
        None => format!("{:<34}", "(not evaluated)"),
    };
    format!(
        "epoch {:4}  loss {:.4}  {figures}  {:.3}s  peak {:.1} MiB",
        r.epoch,
        r.loss,
        r.seconds,
        r.peak_bytes as f64 / (1 << 20) as f64
    )
}

/// `train`'s command with the defaults that the run decides (and clap therefore cannot show)
/// appended to their help, as the plan reads them off their definitions.
pub(crate) fn with_defaults(mut train: clap::Command) -> clap::Command {
    for (setting, default) in graphloom_plan::help_defaults() {
        train = train.mut_arg(setting, |arg| {
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            arg.help(format!("{help} [default: {default}]"))
        });
    }
    train
}

/// Runs `graphloom train`; returns the report for callers that measure it (none for
/// `--dry-run`).
pub(crate) fn run(args: TrainArgs) -> Result<Option<TrainReport>> {
    check_outputs(&args)?;
    if let Some(dir) = args.settings.dataset.as_deref() {
        if graphloom_graph::format::meta::is_hetero(dir) {
            return crate::train_hetero::run(args);
        }
    }
    let rss_peaks = graphloom_tensor::RssPeaks::start();
    let plan = Plan::new(args.settings.clone()).map_err(output::plan_error)?;
    if !args.quiet || args.dry_run {
        print_memory_plan(&plan, &args);
    }
    if args.dry_run {
        return Ok(None);
    }
    let common = plan.common();
    let s = &common.settings;
    let splits = Splits::of(s.dataset.as_deref())?;
    let arch = common.model.arch;
    graphloom_tensor::autodiff::profile::set_enabled(args.profile);
    let buffer_cache = match args.buffer_cache_mib {
        Some(mib) => mib << 20,
        None => plan.memory().buffer_cache_bytes() as usize,
    };
    graphloom_tensor::alloc::set_cache_limit(buffer_cache);
    let log = output::EpochLog::new(s.epochs as u64, arch.name(), args.quiet);
    if let (Plan::MiniBatch(p), false) = (&plan, args.quiet || args.json) {
        if let Some(origin) = &p.subgraph_origin {
            eprintln!("subgraph batches: {origin}");
        }
    }
    let ignored_edges = graphloom_graph::format::edge_features::EDGE_FEATURES_FILE;
    if let (Some(dir), false) = (&s.dataset, arch.reads_edge_features() || args.quiet) {
        if dir.join(ignored_edges).exists() {
            eprintln!(
                "note: {} does not read {ignored_edges} (gine does)",
                arch.name()
            );
        }
    }
    if let (true, false, Some(dir)) = (s.resume, args.quiet, &s.snapshot_dir) {
        eprintln!("resuming from the snapshot in {}", dir.display());
    }
    let outcome = plan
        .run_with_progress(
            |r| log.epoch(r, &epoch_line(r, splits)),
            |done, total| log.batch(done, total),
        )
        .map_err(output::plan_error)?;
    log.finish();
    let peaks = rss_peaks.finish();
    let report = outcome.report();
    if report.stopped_early && !args.quiet && outcome.root() {
        eprintln!(
            "stopped early after epoch {}: no better validation score in {} evaluations",
            report.epochs.last().map_or(0, |e| e.epoch),
            s.patience.unwrap_or(0)
        );
    }
    if !outcome.root() {
        // Rank 0 prints and writes the results of the job.
        return Ok(Some(into_report(outcome)));
    }
    if !(args.quiet || args.json) {
        print_row_cache(&outcome);
    }
    if !args.json {
        print_result(common, report, splits, peaks.0);
    }
    let note = report
        .best
        .selection_note(&report.epochs, report.best_epoch);
    if let (Some(note), false) = (note, args.quiet) {
        eprintln!("{note}");
    }
    if args.profile {
        print_profile();
    }
    if args.json || args.summary_json.is_some() {
        let value = run_summary(&plan, &outcome, splits, peaks);
        if let Some(path) = &args.summary_json {
            output::write_json(path, &value)?;
        }
        if args.json {
            output::print_json(&value);
        }
    }
    if let Some(path) = &args.plot {
        let title = format!("{} on {}", arch.name(), common.meta.name);
        output_plot(path, &title, report)?;
    }
    if let Some(path) = &args.save_model {
        ModelFile {
            config: common.model.clone(),
            params: report.best_params.clone(),
            input_embedding: report.best_input_embedding.clone(),
        }
        .save(path)
        .with_context(|| format!("saving the model to {}", path.display()))?;
    }
    Ok(Some(into_report(outcome)))
}

/// The memory the run will take, part by part, before anything is trained.
fn print_memory_plan(plan: &Plan, args: &TrainArgs) {
    for line in plan.memory().lines() {
        eprintln!("{line}");
    }
    if args.buffer_cache_mib.is_none() {
        eprintln!(
            "  freed tensor buffers kept for reuse: up to {:.1} MiB (--buffer-cache-mib)",
            plan.memory().buffer_cache_bytes() as f64 / (1u64 << 20) as f64
        );
    }
}

/// How a sampled run's feature row cache served it, when it had one.
fn print_row_cache(outcome: &RunOutcome) {
    let RunOutcome::MiniBatch(o) = outcome else {
        return;
    };
    if let Some(c) = o.row_cache {
        eprintln!(
            "feature cache: {} rows, filled in {:.1} s; {:.1}% of {} row reads from memory; {} \
             rows read from disk ({})",
            c.cached_rows,
            c.fill_seconds,
            100.0 * c.hit_rate(),
            c.hits + c.misses,
            c.rows_read,
            c.reads()
        );
    }
}

/// The run's result in one line: the test figure of the selected epoch, its validation
/// score, the time per epoch and the memory.
fn print_result(common: &Common, report: &TrainReport, splits: Splits, peak_anon: u64) {
    let (test, val) = report
        .best
        .result_text(splits.0, report.test_score, report.best_val_score);
    println!(
        "{} on {}: {test} at epoch {} (best validation {val}); {:.4} s/epoch; peak tracked {:.1} MiB, peak anonymous {:.1} MiB (RSS with mapped files {:.1} MiB)",
        common.model.arch.name(),
        common.meta.name,
        report.best_epoch,
        report.mean_epoch_seconds(),
        report.memory.total_peak as f64 / (1 << 20) as f64,
        peak_anon as f64 / (1 << 20) as f64,
        report.rss.peak_bytes as f64 / (1 << 20) as f64
    );
}

/// `--profile`'s table of time per op.
pub(crate) fn print_profile() {
    // Forward calls without a backward (evaluation, inputs that need no gradient) are apart,
    // so forward and backward compare over the same calls.
    eprintln!(
        "{:<16} {:>8} {:>12} {:>12} {:>14} {:>12}",
        "op", "calls", "forward s", "backward s", "no-grad calls", "no-grad s"
    );
    for (name, t) in graphloom_tensor::autodiff::profile::take() {
        eprintln!(
            "{name:<16} {:>8} {:>12.3} {:>12.3} {:>14} {:>12.3}",
            t.calls, t.forward_seconds, t.backward_seconds, t.no_grad_calls, t.no_grad_seconds
        );
    }
}

/// The JSON summary of a run: its figures, settings, measured and predicted memory
/// (`peaks`: anonymous and file-backed), and what its mode adds.
fn run_summary(
    plan: &Plan,
    outcome: &RunOutcome,
    splits: Splits,
    (peak_anon, peak_file): (u64, u64),
) -> serde_json::Value {
    let common = plan.common();
    let mut value = summary(
        &common.meta.name,
        common.model.arch.name(),
        &common.settings,
        outcome.report(),
        splits,
    );
    crate::run_settings::add_run_settings(&mut value, common);
    value["peak_anon_bytes"] = json!(peak_anon);
    value["peak_file_bytes"] = json!(peak_file);
    value["memory_gib"] = json!(common.settings.memory_gib);
    value["predicted_peak_bytes"] = json!(plan.memory().peak());
    value["predicted_bytes"] = plan
        .memory()
        .parts
        .iter()
        .map(|p| (p.name.to_string(), json!(p.bytes)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    match (plan, outcome) {
        (Plan::MiniBatch(p), RunOutcome::MiniBatch(o)) => {
            // Sampling and gathering run beside the compute: their shares of the pipeline's
            // total stage time.
            let st = o.stages;
            let total = (st.sample + st.gather + st.compute).max(f64::MIN_POSITIVE);
            match &p.batches.subgraph {
                Some(b) => value["batching"] = json!(b.describe()),
                None => {
                    value["fanouts"] = json!(p.batches.fanouts.as_slice());
                    value["batch_size"] = json!(p.batches.batch_size);
                }
            }
            value["features_location"] = json!(p.features_location.name());
            value["feature_cache_gib"] = json!(p.feature_cache_gib);
            value["inference_memory_gib"] = json!(common.settings.inference_memory_gib.or(p
                .batches
                .layerwise
                .as_ref()
                .map(|l| l.memory_bytes as f64 / (1u64 << 30) as f64)));
            value["sample_seconds"] = json!(st.sample);
            value["gather_seconds"] = json!(st.gather);
            value["compute_seconds"] = json!(st.compute);
            value["sample_share"] = json!(st.sample / total);
            value["gather_share"] = json!(st.gather / total);
            if let Some(cache) = o.row_cache {
                value["cache_hit_rate"] = json!(cache.hit_rate());
                value["cached_rows"] = json!(cache.cached_rows);
                value["rows_read"] = json!(cache.rows_read);
                value["feature_reads"] = json!(cache.reads());
                value["cache_fill_seconds"] = json!(cache.fill_seconds);
            }
        }
        (Plan::Sar(p), RunOutcome::Sar(o)) => {
            value["mode"] = json!(p.sar_mode.name());
            value["workers"] = json!(o
                .workers
                .iter()
                .flatten()
                .enumerate()
                .map(|(rank, w)| json!({
                    "rank": rank,
                    "peak_tracked_bytes": w.peak_tracked_bytes,
                    "peak_rss_bytes": w.peak_rss_bytes,
                    "bytes_sent": w.bytes_sent,
                }))
                .collect::<Vec<_>>());
        }
        _ => {}
    }
    value
}

/// The report of a run, taken out of its outcome.
fn into_report(outcome: RunOutcome) -> TrainReport {
    match outcome {
        RunOutcome::FullBatch(r) => r,
        RunOutcome::MiniBatch(o) => o.report,
        RunOutcome::Sar(o) => o.report,
    }
}

pub(crate) fn output_plot(path: &std::path::Path, title: &str, report: &TrainReport) -> Result<()> {
    let marks = crate::plot::Marks {
        best_epoch: report
            .epochs
            .iter()
            .any(|e| e.evaluation.is_some())
            .then_some(report.best_epoch),
        early_stop: report
            .stopped_early
            .then(|| report.epochs.last().map_or(0, |e| e.epoch)),
    };
    crate::plot::training_curves(path, title, &report.epochs, marks)
        .with_context(|| format!("drawing {}", path.display()))
}

/// The summary's figures of any run: `model` trained on the dataset `dataset` as `s` says.
pub(crate) fn summary(
    dataset: &str,
    model: &str,
    s: &TrainSettings,
    r: &TrainReport,
    splits: Splits,
) -> serde_json::Value {
    let peak: serde_json::Map<String, serde_json::Value> = Category::ALL
        .iter()
        .map(|c| (c.name().to_string(), json!(r.memory.peak_of(*c))))
        .collect();
    let mut value = json!({
        "dataset": dataset,
        "model": model,
        "dtype": s.dtype.name(),
        "checkpoint": s.checkpoint,
        "seed": s.seed,
        "best_epoch": r.best_epoch,
        "epochs": r.epochs.len(),
        "final_train_loss": r.epochs.last().map(|e| e.loss),
        "stopped_early": r.stopped_early,
        "mean_epoch_seconds": r.mean_epoch_seconds(),
        "peak_rss_bytes": r.rss.peak_bytes,
        "rss": { "anon_bytes": r.rss.anon_bytes, "file_bytes": r.rss.file_bytes, "shmem_bytes": r.rss.shmem_bytes },
        "peak_bytes": peak,
        "peak_total_bytes": r.memory.total_peak,
        "allocator_cache_bytes": graphloom_tensor::alloc::cached_bytes(),
        "history": r.epochs.iter().map(|e| {
            let mut h = json!({
                "epoch": e.epoch, "loss": e.loss,
                "seconds": e.seconds, "peak_bytes": e.peak_bytes,
            });
            if let (Some(v), Some(map)) = (e.evaluation, h.as_object_mut()) {
                map.extend(v.fields(splits.0, "val_", "test_"));
            }
            h
        }).collect::<Vec<_>>(),
    });
    if let Some(map) = value.as_object_mut() {
        map.extend(r.best.fields(splits.0, "best_val_", "test_"));
        map.extend(r.best.task_fields());
    }
    value
}
