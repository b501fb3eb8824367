//! `graphloom train`: full-batch training on one worker, or sampled mini-batches through the store.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use std::sync::Arc;

use graphloom_comm::{Communicator, Counting, Local, ReduceData, ReduceOp};
use graphloom_graph::convert::synthetic;
use graphloom_graph::parts::{Part, PartitionMeta};
use graphloom_graph::{Dataset, Meta};
use graphloom_nn::minibatch::{train_mini_batch, Inputs, MiniBatchConfig, StageSeconds};
use graphloom_nn::train::{train_full_batch, TrainConfig, TrainReport};
use graphloom_nn::{Architecture, ModelConfig, OptimizerKind};
use graphloom_sar::{train_sar, SarMode};
use graphloom_store::{Embedding, Layout, Location, SparseOptimizer, StoreSpec, StoreTensor};
use graphloom_tensor::memory::{category_scope, set_thread_tracker, Category, MemoryTracker};
use graphloom_tensor::{DType, RssReport};
use serde_json::json;

use crate::output;

/// Arguments of `graphloom train`.
#[derive(Args, Clone)]
pub(crate) struct TrainArgs {
    /// Dataset directory; without it, a small synthetic graph is generated in memory.
    #[arg(long)]
    pub(crate) dataset: Option<PathBuf>,
    /// Model: gcn, sage or gat.
    #[arg(long, default_value = "gcn")]
    pub(crate) model: String,
    /// Number of layers.
    #[arg(long, default_value_t = 2)]
    pub(crate) layers: usize,
    /// Hidden width (per head for GAT) [default: gcn 16, sage 64, gat 8].
    #[arg(long)]
    pub(crate) hidden: Option<usize>,
    /// GAT: heads of the hidden layers.
    #[arg(long, default_value_t = 8)]
    pub(crate) heads: usize,
    /// GAT: heads of the output layer (averaged).
    #[arg(long, default_value_t = 1)]
    pub(crate) out_heads: usize,
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
    #[arg(long)]
    pub(crate) lr: Option<f64>,
    /// Weight decay.
    #[arg(long, default_value_t = 5e-4)]
    pub(crate) weight_decay: f64,
    /// Optimizer: adam, adamw or sgd.
    #[arg(long, default_value = "adam")]
    pub(crate) optimizer: String,
    /// Number of epochs.
    #[arg(long, default_value_t = 200)]
    pub(crate) epochs: usize,
    /// Stop after this many epochs without a better validation accuracy.
    #[arg(long)]
    pub(crate) patience: Option<usize>,
    /// Seed of initialisation and dropout.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Worker threads for the kernels [default: all cores].
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Storage and compute dtype of features and activations: f32, bf16 or f64.
    #[arg(long, default_value = "f32")]
    pub(crate) dtype: String,
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
    /// Save the best model's parameters here (safetensors).
    #[arg(long)]
    pub(crate) save_model: Option<PathBuf>,
    /// Draw loss, accuracy and memory curves into this PNG.
    #[arg(long)]
    pub(crate) plot: Option<PathBuf>,
    /// MiB of freed tensor buffers kept for reuse in the next epoch (0: none; less memory,
    /// slower epochs).
    #[arg(long, default_value_t = 1024)]
    pub(crate) buffer_cache_mib: usize,
    /// Time every op and print the totals, forward and backward, at the end.
    #[arg(long)]
    pub(crate) profile: bool,
    /// Print only the final line.
    #[arg(long)]
    pub(crate) quiet: bool,
    /// Train in sampled mini-batches with these fanouts, one per layer from the seeds outwards
    /// (-1: all neighbours), e.g. 15,10; without it, training is full-batch.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    pub(crate) fanouts: Option<Vec<i64>>,
    /// Mini-batch: seeds per batch.
    #[arg(long, default_value_t = 1024)]
    pub(crate) batch_size: usize,
    /// Mini-batch: batches sampled and gathered ahead of the compute.
    #[arg(long, default_value_t = 4)]
    pub(crate) queue_depth: usize,
    /// Mini-batch: where the store keeps the features: host, shared, or mmap (node_feat.npy
    /// mapped from disk, for features larger than memory).
    #[arg(long, default_value = "host")]
    pub(crate) features_location: String,
    /// Mini-batch: data-parallel workers in this process (each takes a slice of every batch;
    /// gradients are summed over the workers).
    #[arg(long, default_value_t = 1)]
    pub(crate) workers: usize,
    /// Mini-batch: `local` (the --workers threads of this process) or `mpi` (the processes of
    /// an mpirun job; needs a build with --features mpi).
    #[arg(long, default_value = "local")]
    pub(crate) comm: String,
    /// Mini-batch: learn a node-embedding table of this width as the input instead of reading
    /// features (for graphs without features), trained with LazyAdam.
    #[arg(long)]
    pub(crate) embedding_dim: Option<usize>,
    /// Partitioned dataset (SAR): how the other parts' rows travel: sar (one halo at a time,
    /// fetched again in the backward pass where needed), sa (one at a time, kept for the
    /// backward pass) or osa (all at once).
    #[arg(long, default_value = "sar")]
    pub(crate) mode: String,
    /// Mini-batch: learning rate of the embedding table's LazyAdam.
    #[arg(long, default_value_t = 0.01)]
    pub(crate) embedding_lr: f32,
}

/// Loads the dataset, or generates the default synthetic one.
fn load_dataset(args: &TrainArgs) -> Result<Dataset> {
    // Loading and generation charge features and graph to their own categories.
    match &args.dataset {
        Some(dir) => Ok(Dataset::load(dir)?),
        None => Ok(synthetic::generate(&synthetic::SyntheticConfig {
            nodes: 20_000,
            avg_degree: 10,
            feat_dim: 64,
            classes: 8,
            seed: args.seed,
            ..Default::default()
        })?),
    }
}

fn model_config(args: &TrainArgs, meta: &Meta, dtype: DType) -> Result<ModelConfig> {
    let arch = Architecture::parse(&args.model)
        .with_context(|| format!("--model must be gcn, sage or gat, not '{}'", args.model))?;
    let gat = arch == Architecture::Gat;
    let dropout = args.dropout.unwrap_or(if gat { 0.6 } else { 0.5 });
    Ok(ModelConfig {
        arch,
        in_dim: meta.feat_dim,
        hidden: args.hidden.unwrap_or(match arch {
            Architecture::Gcn => 16,
            Architecture::Sage => 64,
            Architecture::Gat => 8,
        }),
        out_dim: meta.num_classes,
        layers: args.layers,
        heads: args.heads,
        out_heads: args.out_heads,
        dropout,
        input_dropout: args.input_dropout.unwrap_or(dropout),
        attention_dropout: if gat {
            args.attention_dropout.unwrap_or(dropout)
        } else {
            0.0
        },
        dtype,
        checkpoint: args.checkpoint,
        batch_norm: args.batch_norm,
    })
}

/// Runs `graphloom train`; returns the report for callers that measure it (the benchmark).
pub(crate) fn run(args: TrainArgs) -> Result<TrainReport> {
    if let Some(t) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .ok();
    }
    let dtype = match DType::parse(&args.dtype) {
        Some(d) if d.is_float() => d,
        _ => bail!("--dtype must be f32, bf16 or f64, not '{}'", args.dtype),
    };
    let optimizer = OptimizerKind::parse(&args.optimizer).with_context(|| {
        format!(
            "--optimizer must be adam, adamw or sgd, not '{}'",
            args.optimizer
        )
    })?;
    // A partitioned directory (from `graphloom partition`) trains with SAR, one part a worker.
    let partitioned = args
        .dataset
        .clone()
        .filter(|d| d.join("partition.json").exists());
    let data_parallel = args.workers > 1 || args.comm == "mpi";
    if args.batch_norm && args.fanouts.is_some() && data_parallel {
        bail!(
            "--batch-norm with --fanouts normalises each worker's slice of a batch on its own: \
             train mini-batches on one worker, or full-batch"
        );
    }
    let (meta, ds) = match &partitioned {
        Some(dir) => {
            if args.fanouts.is_some() || args.embedding_dim.is_some() {
                bail!("a partitioned dataset trains full-batch with SAR: drop --fanouts and --embedding-dim");
            }
            (PartitionMeta::load(dir)?.dataset, None)
        }
        None => {
            let ds = load_for_training(&args, dtype)?;
            (ds.meta.clone(), Some(ds))
        }
    };
    let mut cfg = model_config(&args, &meta, dtype)?;
    if let Some(dim) = args.embedding_dim {
        cfg.in_dim = dim;
    }
    let arch = cfg.arch;
    let tc = TrainConfig {
        epochs: args.epochs,
        lr: args.lr.unwrap_or(if arch == Architecture::Gat {
            0.005
        } else {
            0.01
        }),
        weight_decay: args.weight_decay,
        optimizer,
        patience: args.patience,
        seed: args.seed,
    };
    graphloom_tensor::autodiff::profile::set_enabled(args.profile);
    graphloom_tensor::alloc::set_cache_limit(args.buffer_cache_mib << 20);
    let pb = output::bar(args.epochs as u64, arch.name());
    if args.quiet {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let quiet = args.quiet;
    let on_epoch = |r: &graphloom_nn::train::EpochRecord| {
        pb.inc(1);
        pb.set_message(format!("loss {:.4} val {:.4}", r.loss, r.val_acc));
        if !quiet {
            pb.println(format!(
                "epoch {:4}  loss {:.4}  train {:.4}  val {:.4}  test {:.4}  {:.3}s  peak {:.1} MiB",
                r.epoch,
                r.loss,
                r.train_acc,
                r.val_acc,
                r.test_acc,
                r.seconds,
                r.peak_bytes as f64 / (1 << 20) as f64
            ));
        }
    };
    let mut workers = None;
    let (report, stages) = match (&partitioned, &ds, &args.fanouts) {
        (Some(dir), _, _) => {
            let (report, figures) = train_partitioned(&args, dir, cfg, &tc, on_epoch)?;
            let Some(figures) = figures else {
                return Ok(report);
            };
            workers = Some(figures);
            (report, None)
        }
        (None, Some(ds), None) => (train_full_batch(ds, cfg, &tc, on_epoch)?, None),
        (None, Some(ds), Some(fanouts)) => {
            let mb = MiniBatchConfig {
                fanouts: fanouts.clone(),
                batch_size: args.batch_size,
                queue_depth: args.queue_depth,
            };
            let (report, stages, root) = train_sampled(&args, ds, cfg, &tc, &mb, on_epoch)?;
            if !root {
                // Rank 0 prints and writes the results of the job.
                return Ok(report);
            }
            (report, Some(stages))
        }
        (None, None, _) => unreachable!("a dataset is loaded unless it is partitioned"),
    };
    pb.finish_and_clear();
    println!(
        "{} on {}: test accuracy {:.4} at epoch {} (best validation {:.4}); {:.4} s/epoch; peak tracked {:.1} MiB, peak RSS {:.1} MiB",
        arch.name(),
        meta.name,
        report.test_acc,
        report.best_epoch,
        report.best_val_acc,
        report.mean_epoch_seconds(),
        report.memory.total_peak as f64 / (1 << 20) as f64,
        report.rss.peak_bytes as f64 / (1 << 20) as f64
    );
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
    if let Some(path) = &args.summary_json {
        let mut value = summary(&args, &meta, &report);
        if let Some(st) = stages {
            // Sampling and gathering run beside the compute: their shares of the pipeline's
            // total stage time.
            let total = (st.sample + st.gather + st.compute).max(f64::MIN_POSITIVE);
            value["fanouts"] = json!(args.fanouts);
            value["batch_size"] = json!(args.batch_size);
            value["features_location"] = json!(args.features_location);
            value["sample_seconds"] = json!(st.sample);
            value["gather_seconds"] = json!(st.gather);
            value["compute_seconds"] = json!(st.compute);
            value["sample_share"] = json!(st.sample / total);
            value["gather_share"] = json!(st.gather / total);
        }
        if let Some(workers) = &workers {
            value["mode"] = json!(args.mode);
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
        output::write_json(path, &value)?;
    }
    if let Some(path) = &args.plot {
        output_plot(path, &format!("{} on {}", arch.name(), meta.name), &report)?;
    }
    if let Some(path) = &args.save_model {
        save_model(path, &report)?;
    }
    Ok(report)
}

/// Loads the dataset for training on one machine (the features stay on disk for
/// `--features-location mmap`) and casts its features to the compute dtype.
fn load_for_training(args: &TrainArgs, dtype: DType) -> Result<Dataset> {
    let on_disk = args.fanouts.is_some() && args.features_location == "mmap";
    let mut ds = match (&args.dataset, on_disk) {
        (Some(dir), true) => Dataset::load_without_features(dir)?,
        (None, true) => {
            bail!("--features-location mmap needs --dataset (a directory with node_feat.npy)")
        }
        _ => load_dataset(args)?,
    };
    if let Some(dim) = args.embedding_dim {
        if args.fanouts.is_none() || dim == 0 {
            bail!("--embedding-dim needs mini-batch training (--fanouts) and a positive width");
        }
    } else if ds.meta.feat_dim == 0 {
        bail!("the dataset has no node features: train an input embedding with --fanouts and --embedding-dim");
    }
    let _g = category_scope(Category::Features);
    ds.features = ds.features.cast(dtype)?;
    Ok(ds)
}

/// What one worker of a SAR job used: its peak tracked bytes, its process's peak RSS (the
/// same process for every in-process worker) and the bytes it sent.
pub(crate) struct WorkerFigures {
    pub(crate) peak_tracked_bytes: u64,
    pub(crate) peak_rss_bytes: u64,
    pub(crate) bytes_sent: u64,
}

/// Full-batch SAR training of a partitioned dataset on `--workers` in-process ranks or the
/// processes of an MPI job, each loading only its part; returns the report, and on rank 0
/// (which prints the results) every worker's figures.
fn train_partitioned(
    args: &TrainArgs,
    dir: &std::path::Path,
    cfg: ModelConfig,
    tc: &TrainConfig,
    on_epoch: impl FnMut(&graphloom_nn::train::EpochRecord) + Send,
) -> Result<(TrainReport, Option<Vec<WorkerFigures>>)> {
    let mode = SarMode::parse(&args.mode)
        .with_context(|| format!("--mode must be sar, sa or osa, not '{}'", args.mode))?;
    let on_epoch = std::sync::Mutex::new(on_epoch);
    let job = |comm: Arc<dyn Communicator>| -> Result<(TrainReport, Option<Vec<WorkerFigures>>)> {
        let (rank, size) = (comm.rank(), comm.size());
        // Each worker's memory is its own: the rank thread charges a tracker of its own.
        set_thread_tracker(MemoryTracker::new());
        let mut part = {
            let _g = category_scope(Category::Features);
            Part::load(dir, rank)?
        };
        let counting = Arc::new(Counting::new(comm.clone()));
        let report = train_sar(counting.clone(), &mut part, cfg.clone(), tc, mode, |r| {
            if rank == 0 {
                (on_epoch.lock().unwrap_or_else(|e| e.into_inner()))(r)
            }
        })?;
        // Every worker's figures, gathered by a sum into each worker's own slots.
        let mut figures = vec![0f64; 3 * size];
        figures[3 * rank] = report.memory.total_peak as f64;
        figures[3 * rank + 1] = RssReport::read().peak_bytes as f64;
        figures[3 * rank + 2] = counting.bytes_sent() as f64;
        comm.all_reduce(ReduceData::F64(&mut figures), ReduceOp::Sum)?;
        let figures = figures
            .chunks(3)
            .map(|f| WorkerFigures {
                peak_tracked_bytes: f[0] as u64,
                peak_rss_bytes: f[1] as u64,
                bytes_sent: f[2] as u64,
            })
            .collect();
        Ok((report, (rank == 0).then_some(figures)))
    };
    run_job(args, job)
}

/// Runs `job` on `--workers` in-process ranks (returning rank 0's result) or as this process's
/// rank of an MPI job (`--comm mpi`).
fn run_job<T: Send>(
    args: &TrainArgs,
    job: impl Fn(Arc<dyn Communicator>) -> Result<T> + Sync,
) -> Result<T> {
    match args.comm.as_str() {
        "local" => {
            if args.workers == 0 {
                bail!("--workers must be at least 1");
            }
            let mut results = Local::run(args.workers, job);
            results.swap_remove(0)
        }
        "mpi" => run_under_mpi(job),
        other => bail!("--comm must be local or mpi, not '{other}'"),
    }
}

/// The features of `ds` in the store at `--features-location`: one table the threads share
/// (Continuous), or each process's own rows (Distributed) under MPI, or the mapped file.
fn feature_table(
    args: &TrainArgs,
    ds: &Dataset,
    comm: Arc<dyn Communicator>,
) -> Result<StoreTensor> {
    let layout = if comm.backend() == "mpi" && comm.size() > 1 {
        Layout::Distributed
    } else {
        Layout::Continuous
    };
    Ok(match args.features_location.as_str() {
        "mmap" => {
            let dir = args.dataset.as_ref().expect("checked when loading");
            let dtype = DType::parse(&ds.meta.feat_dtype)
                .with_context(|| format!("feature dtype '{}'", ds.meta.feat_dtype))?;
            let location = Location::Mmap {
                path: dir.join("node_feat.npy"),
                writable: false,
            };
            let shape = [ds.meta.num_nodes, ds.meta.feat_dim];
            StoreTensor::new(comm, StoreSpec::new(&shape, dtype, layout, location))?
        }
        name @ ("host" | "shared") => {
            let location = if name == "host" {
                Location::Host
            } else {
                Location::SharedHost
            };
            let spec = StoreSpec::new(ds.features.shape(), ds.features.dtype(), layout, location);
            let mut t = StoreTensor::new(comm, spec)?;
            t.fill_from_whole(ds.features.as_bytes())?;
            t
        }
        other => bail!("--features-location must be host, shared or mmap, not '{other}'"),
    })
}

/// Mini-batch training on `--workers` in-process ranks or the processes of an MPI job; returns
/// the report, the stage times, and whether this process prints and writes the results (rank
/// 0 does).
fn train_sampled(
    args: &TrainArgs,
    ds: &Dataset,
    cfg: ModelConfig,
    tc: &TrainConfig,
    mb: &MiniBatchConfig,
    on_epoch: impl FnMut(&graphloom_nn::train::EpochRecord) + Send,
) -> Result<(TrainReport, StageSeconds, bool)> {
    let on_epoch = std::sync::Mutex::new(on_epoch);
    let job = |comm: Arc<dyn Communicator>| -> Result<(TrainReport, StageSeconds, bool)> {
        let root = comm.rank() == 0;
        // Only rank 0 reports; the lock is taken per call, never held across collectives.
        let report = |r: &graphloom_nn::train::EpochRecord| {
            if root {
                (on_epoch.lock().unwrap_or_else(|e| e.into_inner()))(r)
            }
        };
        let (report, stages) = match args.embedding_dim {
            Some(dim) => {
                let shape = [ds.meta.num_nodes, dim];
                let spec = StoreSpec::new(&shape, DType::F32, Layout::Distributed, Location::Host);
                let table = StoreTensor::new(comm, spec)?;
                let mut table = Embedding::trainable(table, SparseOptimizer::lazy_adam())?;
                table.init_uniform(args.seed, 1.0 / (dim as f32).sqrt())?;
                let inputs = Inputs::Embedding {
                    table: &mut table,
                    lr: args.embedding_lr,
                };
                train_mini_batch(ds, inputs, cfg.clone(), tc, mb, report)?
            }
            None => {
                let features = feature_table(args, ds, comm)?;
                let inputs = Inputs::Features(&features);
                train_mini_batch(ds, inputs, cfg.clone(), tc, mb, report)?
            }
        };
        Ok((report, stages, root))
    };
    run_job(args, job)
}

#[cfg(feature = "mpi")]
fn run_under_mpi<T>(job: impl FnOnce(Arc<dyn Communicator>) -> Result<T>) -> Result<T> {
    let mut out = None;
    graphloom_comm::mpi::run_rank(|comm| {
        out = Some(job(comm)?);
        Ok::<(), anyhow::Error>(())
    })?;
    Ok(out.expect("run_rank aborts the job on error"))
}

#[cfg(not(feature = "mpi"))]
fn run_under_mpi<T>(_job: impl FnOnce(Arc<dyn Communicator>) -> Result<T>) -> Result<T> {
    bail!("this graphloom was built without MPI: build with --features mpi")
}

fn output_plot(path: &std::path::Path, title: &str, report: &TrainReport) -> Result<()> {
    crate::plot::training_curves(path, title, &report.epochs)
        .with_context(|| format!("drawing {}", path.display()))
}

fn summary(args: &TrainArgs, meta: &Meta, r: &TrainReport) -> serde_json::Value {
    let peak: serde_json::Map<String, serde_json::Value> = Category::ALL
        .iter()
        .map(|c| (c.name().to_string(), json!(r.memory.peak_of(*c))))
        .collect();
    json!({
        "dataset": meta.name,
        "model": args.model,
        "dtype": args.dtype,
        "checkpoint": args.checkpoint,
        "seed": args.seed,
        "test_acc": r.test_acc,
        "best_val_acc": r.best_val_acc,
        "best_epoch": r.best_epoch,
        "epochs": r.epochs.len(),
        "final_train_loss": r.epochs.last().map(|e| e.loss),
        "mean_epoch_seconds": r.mean_epoch_seconds(),
        "peak_rss_bytes": r.rss.peak_bytes,
        "rss": { "anon_bytes": r.rss.anon_bytes, "file_bytes": r.rss.file_bytes, "shmem_bytes": r.rss.shmem_bytes },
        "peak_bytes": peak,
        "peak_total_bytes": r.memory.total_peak,
        "allocator_cache_bytes": graphloom_tensor::alloc::cached_bytes(),
        "history": r.epochs.iter().map(|e| json!({
            "epoch": e.epoch, "loss": e.loss, "train_acc": e.train_acc, "val_acc": e.val_acc,
            "test_acc": e.test_acc, "seconds": e.seconds, "peak_bytes": e.peak_bytes,
        })).collect::<Vec<_>>(),
    })
}

/// Saves the best parameters as f32 safetensors, named `layers.{i}.{name}`.
fn save_model(path: &std::path::Path, report: &TrainReport) -> Result<()> {
    let tensors: Vec<(String, Vec<u8>, Vec<usize>)> = report
        .best_params
        .iter()
        .map(|p| {
            let v = p.value.cast(DType::F32)?;
            let bytes = v
                .as_slice::<f32>()?
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            Ok((p.name.clone(), bytes, p.value.shape().to_vec()))
        })
        .collect::<Result<_>>()?;
    let views = tensors
        .iter()
        .map(|(n, b, s)| {
            Ok((
                n.clone(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let bytes = safetensors::tensor::serialize(views, &None)?;
    graphloom_graph::write_atomic(path, |w| std::io::Write::write_all(w, &bytes))
        .with_context(|| format!("writing {}", path.display()))
}
