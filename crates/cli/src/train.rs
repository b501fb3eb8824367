//! `graphloom train`: parses the options into a [`Plan`], runs it, and prints and writes what it
//! measured. Every decision about how to train lives in the plan.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;

use graphloom_graph::Meta;
use graphloom_nn::model_file::ModelFile;
use graphloom_nn::train::{Accuracy, EpochRecord, TrainReport};
use graphloom_nn::{Architecture, ModelConfig};
use graphloom_plan::{
    Backend, Choice, ComputeDType, FeaturesLocation, OptimizerName, Plan, TrainSettings,
};
use graphloom_sar::SarMode;
use graphloom_tensor::memory::Category;

use crate::output::{self, choice};

/// Arguments of `graphloom train`.
#[derive(Args, Clone)]
pub(crate) struct TrainArgs {
    /// Dataset directory (a partitioned one, from `graphloom partition`, trains with SAR);
    /// without it, a small synthetic graph is generated in memory.
    #[arg(long)]
    pub(crate) dataset: Option<PathBuf>,
    /// Model [default: gcn].
    #[arg(long, value_parser = choice::<Architecture>())]
    pub(crate) model: Option<Architecture>,
    /// Number of layers [default: 2].
    #[arg(long)]
    pub(crate) layers: Option<usize>,
    /// Hidden width (per head for GAT) [default: gcn 16, sage 64, gat 8].
    #[arg(long)]
    pub(crate) hidden: Option<usize>,
    /// GAT: heads of the hidden layers [default: 8].
    #[arg(long)]
    pub(crate) heads: Option<usize>,
    /// GAT: heads of the output layer (averaged) [default: 1].
    #[arg(long)]
    pub(crate) out_heads: Option<usize>,
    /// Dropout before each layer [default: 0.5, gat 0.6].
    #[arg(long)]
    pub(crate) dropout: Option<f64>,
    /// Dropout on the input features [default: the --dropout value].
    #[arg(long)]
    pub(crate) input_dropout: Option<f64>,
    /// GAT: dropout on attention coefficients [default: the --dropout value].
    #[arg(long)]
    pub(crate) attention_dropout: Option<f64>,
    /// Learning rate [default: 0.01, gat 0.005].
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) lr: Option<f64>,
    /// Weight decay.
    #[arg(long, default_value_t = 5e-4, allow_hyphen_values = true)]
    pub(crate) weight_decay: f64,
    /// Optimizer.
    #[arg(long, default_value = "adam", value_parser = choice::<OptimizerName>())]
    pub(crate) optimizer: OptimizerName,
    /// Number of epochs.
    #[arg(long, default_value_t = 200)]
    pub(crate) epochs: usize,
    /// Stop after this many evaluations without a better validation accuracy.
    #[arg(long)]
    pub(crate) patience: Option<usize>,
    /// Evaluate every this many epochs (and after the last one).
    #[arg(long, default_value_t = 1)]
    pub(crate) eval_every: usize,
    /// Seed of initialisation, dropout and sampling.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Worker threads for the kernels [default: all cores].
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Storage and compute dtype of features and activations.
    #[arg(long, default_value = "f32", value_parser = choice::<ComputeDType>())]
    pub(crate) dtype: ComputeDType,
    /// Recompute each layer in the backward pass instead of keeping its activations.
    #[arg(long)]
    pub(crate) checkpoint: bool,
    /// Batch normalisation after every hidden layer (statistics over every node, summed over
    /// the workers of a SAR job).
    #[arg(long)]
    pub(crate) batch_norm: bool,
    /// Write a JSON summary of the run here.
    #[arg(long)]
    pub(crate) summary_json: Option<PathBuf>,
    /// Save the best model here: parameters and configuration (and a learnt input
    /// embedding) in one safetensors file, for `predict`, `embed` and `--init-model`.
    #[arg(long)]
    pub(crate) save_model: Option<PathBuf>,
    /// Start from this saved model's parameters (and learnt input embedding); its shape and
    /// dropout rates are the defaults of the model options.
    #[arg(long)]
    pub(crate) init_model: Option<PathBuf>,
    /// Draw loss, accuracy and memory curves into this PNG.
    #[arg(long)]
    pub(crate) plot: Option<PathBuf>,
    /// MiB of freed tensor buffers kept for reuse in the next epoch (0: none; a new tensor
    /// buffer takes the place of cached ones, but other allocations do not).
    #[arg(long, default_value_t = graphloom_tensor::alloc::DEFAULT_CACHE_LIMIT >> 20)]
    pub(crate) buffer_cache_mib: usize,
    /// Time every op and print the totals, forward and backward, at the end.
    #[arg(long)]
    pub(crate) profile: bool,
    /// Print only the final line.
    #[arg(long)]
    pub(crate) quiet: bool,
    /// Print the summary (the --summary-json object) as one JSON line on stdout instead of
    /// the final line.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write snapshots of the training state (parameters, optimizer state, learnt input
    /// embedding, epoch, model selection) into this folder, for --resume.
    #[arg(long)]
    pub(crate) snapshot_dir: Option<PathBuf>,
    /// Snapshot after every this many epochs, and at the end [default: 1].
    #[arg(long)]
    pub(crate) snapshot_every: Option<usize>,
    /// Continue from the snapshot in --snapshot-dir up to --epochs in total; the result is
    /// the one of an uninterrupted run.
    #[arg(long)]
    pub(crate) resume: bool,
    /// Train in sampled mini-batches with these fanouts, one per layer from the seeds outwards
    /// (-1: all neighbours), e.g. 15,10; without it, training is full-batch.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    pub(crate) fanouts: Option<Vec<i64>>,
    /// Mini-batch: seeds per batch [default: 1024].
    #[arg(long)]
    pub(crate) batch_size: Option<usize>,
    /// Mini-batch: batches sampled and gathered ahead of the compute [default: 4].
    #[arg(long)]
    pub(crate) queue_depth: Option<usize>,
    /// Mini-batch: where the store keeps the features (mmap: node_feat.npy mapped from disk,
    /// for features larger than memory) [default: host].
    #[arg(long, value_parser = choice::<FeaturesLocation>())]
    pub(crate) features_location: Option<FeaturesLocation>,
    /// Mini-batch with --features-location mmap: GiB of memory for a cache of the feature
    /// rows of the nodes of highest in-degree, read once at the start (its hit rate is in the
    /// summary) [default: no cache: every row is read from the file, through the page cache].
    #[arg(long)]
    pub(crate) feature_cache_gib: Option<f64>,
    /// Mini-batch: evaluate exactly but layer by layer, in chunks of nodes within this many GiB
    /// of memory, each layer's output for all nodes in a scratch file when it takes more than
    /// half of it [default: one forward pass over the whole graph in memory].
    #[arg(long)]
    pub(crate) inference_memory_gib: Option<f64>,
    /// Folder of --inference-memory-gib's scratch files, removed after use [default: the
    /// system's temporary folder].
    #[arg(long)]
    pub(crate) scratch_dir: Option<PathBuf>,
    /// Mini-batch: batches per epoch; each epoch then trains on the first batches of its own
    /// order of the training nodes, so evaluation and snapshots come every that many batches
    /// [default: every training node once per epoch].
    #[arg(long)]
    pub(crate) batches_per_epoch: Option<usize>,
    /// Mini-batch: evaluate by sampled inference with these fanouts, one per layer (-1: all
    /// neighbours), from draws fixed for the run; for graphs whose every node's input rows do
    /// not fit in memory [default: exact full-neighbour inference].
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    pub(crate) eval_fanouts: Option<Vec<i64>>,
    /// Mini-batch: evaluate by sampled inference on at most this many nodes of each split,
    /// a subset drawn once from --seed (with the training fanouts unless --eval-fanouts)
    /// [default: every node of each split].
    #[arg(long)]
    pub(crate) eval_nodes: Option<usize>,
    /// Workers in this process: data parallel for mini-batches (each takes a slice of every
    /// batch), one per part for a partitioned dataset [default: 1].
    #[arg(long)]
    pub(crate) workers: Option<usize>,
    /// How workers talk: the --workers threads of this process, or the processes of an
    /// mpirun job (needs a build with --features mpi) [default: local].
    #[arg(long, value_parser = choice::<Backend>())]
    pub(crate) comm: Option<Backend>,
    /// Mini-batch: learn a node-embedding table of this width as the input instead of reading
    /// features (for graphs without features), trained with LazyAdam.
    #[arg(long)]
    pub(crate) embedding_dim: Option<usize>,
    /// Mini-batch: learning rate of the embedding table's LazyAdam [default: 0.01].
    #[arg(long)]
    pub(crate) embedding_lr: Option<f32>,
    /// Partitioned dataset (SAR): how the other parts' rows travel: sar (one halo at a time,
    /// fetched again in the backward pass where needed), sa (one at a time, kept for the
    /// backward pass) or osa (all at once) [default: sar].
    #[arg(long, value_parser = choice::<SarMode>())]
    pub(crate) mode: Option<SarMode>,
}

impl TrainArgs {
    /// The plan's settings: the options that are not about output.
    fn settings(&self) -> TrainSettings {
        TrainSettings {
            dataset: self.dataset.clone(),
            model: self.model,
            layers: self.layers,
            hidden: self.hidden,
            heads: self.heads,
            out_heads: self.out_heads,
            dropout: self.dropout,
            input_dropout: self.input_dropout,
            attention_dropout: self.attention_dropout,
            lr: self.lr,
            weight_decay: self.weight_decay,
            optimizer: self.optimizer,
            epochs: self.epochs,
            patience: self.patience,
            eval_every: self.eval_every,
            seed: self.seed,
            dtype: self.dtype,
            checkpoint: self.checkpoint,
            batch_norm: self.batch_norm,
            fanouts: self.fanouts.clone(),
            batch_size: self.batch_size,
            queue_depth: self.queue_depth,
            features_location: self.features_location,
            feature_cache_gib: self.feature_cache_gib,
            inference_memory_gib: self.inference_memory_gib,
            scratch_dir: self.scratch_dir.clone(),
            batches_per_epoch: self.batches_per_epoch,
            eval_fanouts: self.eval_fanouts.clone(),
            eval_nodes: self.eval_nodes,
            workers: self.workers,
            comm: self.comm,
            embedding_dim: self.embedding_dim,
            embedding_lr: self.embedding_lr,
            sar_mode: self.mode,
            init_model: self.init_model.clone(),
            snapshot_dir: self.snapshot_dir.clone(),
            snapshot_every: self.snapshot_every,
            resume: self.resume,
        }
    }

    /// The output files, each checked writable before any training.
    fn outputs(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.summary_json, &self.save_model, &self.plot]
            .into_iter()
            .flatten()
    }
}

/// Which of the train, validation and test splits hold nodes: an empty split has no accuracy
/// (shown as n/a, null in JSON), not one of 0.
#[derive(Clone, Copy)]
struct Splits([bool; 3]);

impl Splits {
    /// The splits of the run's dataset (the generated default dataset has all three).
    fn of(dataset: Option<&Path>) -> Result<Splits> {
        Ok(Splits(match dataset {
            Some(d) => graphloom_graph::split_sizes(d)?.map(|n| n > 0),
            None => [true; 3],
        }))
    }

    /// The accuracies of the splits that hold nodes.
    fn values(self, a: &Accuracy) -> [Option<f64>; 3] {
        let all = [a.train, a.val, a.test];
        std::array::from_fn(|s| self.0[s].then_some(all[s]))
    }
}

/// An accuracy to four places, or n/a for an empty split.
fn shown(accuracy: Option<f64>) -> String {
    accuracy.map_or("n/a".into(), |a| format!("{a:.4}"))
}

/// One epoch's line of the log.
fn epoch_line(r: &EpochRecord, splits: Splits) -> String {
    let acc = match r.accuracy {
        Some(a) => {
            let [train, val, test] = splits.values(&a).map(shown);
            format!("train {train:>6}  val {val:>6}  test {test:>6}")
        }
        None => format!("{:<34}", "(not evaluated)"),
    };
    format!(
        "epoch {:4}  loss {:.4}  {acc}  {:.3}s  peak {:.1} MiB",
        r.epoch,
        r.loss,
        r.seconds,
        r.peak_bytes as f64 / (1 << 20) as f64
    )
}

/// Runs `graphloom train`; returns the report for callers that measure it (the benchmark).
pub(crate) fn run(args: TrainArgs) -> Result<TrainReport> {
    if let Some(t) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .ok();
    }
    for path in args.outputs() {
        output::check_writable(path)?;
    }
    let rss_peaks = graphloom_tensor::RssPeaks::start();
    let plan = Plan::new(args.settings())?;
    let splits = Splits::of(args.dataset.as_deref())?;
    let arch = plan.model.arch;
    graphloom_tensor::autodiff::profile::set_enabled(args.profile);
    graphloom_tensor::alloc::set_cache_limit(args.buffer_cache_mib << 20);
    let log = output::EpochLog::new(args.epochs as u64, arch.name(), args.quiet);
    if let (true, false, Some(dir)) = (args.resume, args.quiet, &args.snapshot_dir) {
        eprintln!("resuming from the snapshot in {}", dir.display());
    }
    let outcome = plan.run_with_progress(
        |r| log.epoch(r, &epoch_line(r, splits)),
        |done, total| log.batch(done, total),
    )?;
    log.finish();
    let (peak_anon, peak_file) = rss_peaks.finish();
    let report = outcome.report;
    if report.stopped_early && !args.quiet && outcome.root {
        eprintln!(
            "stopped early after epoch {}: no better validation accuracy in {} evaluations",
            report.epochs.last().map_or(0, |e| e.epoch),
            args.patience.unwrap_or(0)
        );
    }
    if !outcome.root {
        // Rank 0 prints and writes the results of the job.
        return Ok(report);
    }
    let meta = &plan.meta;
    if let (Some((hits, misses)), false) = (outcome.cache_hits_and_misses, args.quiet || args.json)
    {
        eprintln!(
            "feature cache: {:.1}% of {} row reads from memory",
            100.0 * hits as f64 / (hits + misses).max(1) as f64,
            hits + misses
        );
    }
    if !args.json {
        println!(
            "{} on {}: test accuracy {} at epoch {} (best validation {}); {:.4} s/epoch; peak tracked {:.1} MiB, peak anonymous {:.1} MiB (RSS with mapped files {:.1} MiB)",
            arch.name(),
            meta.name,
            match splits.0[2] {
                true => shown(Some(report.test_acc)),
                false => "n/a (no test nodes)".into(),
            },
            report.best_epoch,
            shown(splits.0[1].then_some(report.best_val_acc)),
            report.mean_epoch_seconds(),
            report.memory.total_peak as f64 / (1 << 20) as f64,
            peak_anon as f64 / (1 << 20) as f64,
            report.rss.peak_bytes as f64 / (1 << 20) as f64
        );
    }
    if args.profile {
        eprintln!(
            "{:<16} {:>8} {:>12} {:>12}",
            "op", "calls", "forward s", "backward s"
        );
        for (name, t) in graphloom_tensor::autodiff::profile::take() {
            eprintln!(
                "{name:<16} {:>8} {:>12.3} {:>12.3}",
                t.calls, t.forward_seconds, t.backward_seconds
            );
        }
    }
    if args.json || args.summary_json.is_some() {
        let mut value = summary(&args, &plan.model, meta, &report, splits);
        value["peak_anon_bytes"] = json!(peak_anon);
        value["peak_file_bytes"] = json!(peak_file);
        if let Some(st) = outcome.stages {
            // Sampling and gathering run beside the compute: their shares of the pipeline's
            // total stage time.
            let total = (st.sample + st.gather + st.compute).max(f64::MIN_POSITIVE);
            value["fanouts"] = json!(args.fanouts);
            value["batch_size"] = json!(plan.batches.as_ref().map(|b| b.batch_size));
            value["features_location"] = json!(plan.features_location.name());
            value["sample_seconds"] = json!(st.sample);
            value["gather_seconds"] = json!(st.gather);
            value["compute_seconds"] = json!(st.compute);
            value["sample_share"] = json!(st.sample / total);
            value["gather_share"] = json!(st.gather / total);
            if let Some((hits, misses)) = outcome.cache_hits_and_misses {
                value["cache_hit_rate"] = json!(hits as f64 / (hits + misses).max(1) as f64);
            }
        }
        if let Some(workers) = &outcome.workers {
            value["mode"] = json!(plan.sar_mode.name());
            value["workers"] = json!(workers
                .iter()
                .enumerate()
                .map(|(rank, w)| json!({
                    "rank": rank,
                    "peak_tracked_bytes": w.peak_tracked_bytes,
                    "peak_rss_bytes": w.peak_rss_bytes,
                    "bytes_sent": w.bytes_sent,
                }))
                .collect::<Vec<_>>());
        }
        if let Some(path) = &args.summary_json {
            output::write_json(path, &value)?;
        }
        if args.json {
            output::print_json(&value);
        }
    }
    if let Some(path) = &args.plot {
        output_plot(path, &format!("{} on {}", arch.name(), meta.name), &report)?;
    }
    if let Some(path) = &args.save_model {
        ModelFile {
            config: plan.model.clone(),
            params: report.best_params.clone(),
            input_embedding: report.best_input_embedding.clone(),
        }
        .save(path)
        .with_context(|| format!("saving the model to {}", path.display()))?;
    }
    Ok(report)
}

fn output_plot(path: &std::path::Path, title: &str, report: &TrainReport) -> Result<()> {
    crate::plot::training_curves(path, title, &report.epochs)
        .with_context(|| format!("drawing {}", path.display()))
}

fn summary(
    args: &TrainArgs,
    plan_model: &ModelConfig,
    meta: &Meta,
    r: &TrainReport,
    splits: Splits,
) -> serde_json::Value {
    let peak: serde_json::Map<String, serde_json::Value> = Category::ALL
        .iter()
        .map(|c| (c.name().to_string(), json!(r.memory.peak_of(*c))))
        .collect();
    json!({
        "dataset": meta.name,
        "model": plan_model.arch.name(),
        "dtype": args.dtype.name(),
        "checkpoint": args.checkpoint,
        "seed": args.seed,
        "test_acc": splits.0[2].then_some(r.test_acc),
        "best_val_acc": splits.0[1].then_some(r.best_val_acc),
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
        "history": r.epochs.iter().map(|e| json!({
            "epoch": e.epoch, "loss": e.loss,
            "train_acc": e.accuracy.and_then(|a| splits.values(&a)[0]),
            "val_acc": e.accuracy.and_then(|a| splits.values(&a)[1]),
            "test_acc": e.accuracy.and_then(|a| splits.values(&a)[2]),
            "seconds": e.seconds, "peak_bytes": e.peak_bytes,
        })).collect::<Vec<_>>(),
    })
}
