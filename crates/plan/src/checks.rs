//! The plan's refusals: settings that the chosen mode or model does not use, and values that
//! cannot train. Checked values (fanouts, dropout rates) were checked when they were made;
//! the training loop's own settings are checked by the loop's check
//! (`TrainConfig::check`), called here before anything is loaded.

use graphloom_graph::format_bytes;
use graphloom_nn::Architecture;

use crate::budget::gib_bytes;
pub use graphloom_nn::batches::MAX_QUEUE_DEPTH;

use crate::{Backend, FeaturesLocation, PlanError, Result, TaskKind, TrainMode, TrainSettings};

/// The most in-process workers a job may have: each is a thread with a share of the data, and
/// far more threads than cores only slows a job down (an MPI job's processes are not counted
/// here).
pub const MAX_WORKERS: usize = 1024;

/// Refuses the MPI backend in a build without it, before anything is loaded or planned (the
/// run would otherwise fail only when its workers start).
pub(crate) fn check_backend_built(s: &TrainSettings) -> Result<()> {
    if s.comm == Some(Backend::Mpi) && !cfg!(feature = "mpi") {
        return Err(PlanError::NoMpi);
    }
    Ok(())
}

/// Refuses a setting that the mode or the model does not use.
pub(crate) fn check_applicable(
    s: &TrainSettings,
    mode: TrainMode,
    arch: Architecture,
    embedding: bool,
) -> Result<()> {
    check_backend_built(s)?;
    check_task(s, mode)?;
    let link = s.task == Some(TaskKind::Link);
    let given = |o: bool, setting: &'static str, hint: &'static str| -> Result<()> {
        if o {
            Err(PlanError::not_applicable(setting, mode, hint))
        } else {
            Ok(())
        }
    };
    let sampled = "it is a setting of sampled mini-batch training (`fanouts`)";
    if mode != TrainMode::MiniBatch {
        given(s.batch_size.is_some() && !link, "batch_size", sampled)?;
        given(s.queue_depth.is_some(), "queue_depth", sampled)?;
        given(s.features_location.is_some(), "features_location", sampled)?;
        given(s.embedding_dim.is_some() && !link, "embedding_dim", sampled)?;
        given(s.embedding_lr.is_some() && !link, "embedding_lr", sampled)?;
        given(s.batches_per_epoch.is_some(), "batches_per_epoch", sampled)?;
        given(s.eval_fanouts.is_some(), "eval_fanouts", sampled)?;
        given(s.feature_cache_gib.is_some(), "feature_cache_gib", sampled)?;
        given(s.feature_reads.is_some(), "feature_reads", sampled)?;
        given(s.eval_nodes.is_some(), "eval_nodes", sampled)?;
        given(
            s.inference_memory_gib.is_some(),
            "inference_memory_gib",
            sampled,
        )?;
        given(s.scratch_dir.is_some(), "scratch_dir", sampled)?;
    }
    given(
        s.num_bases.is_some(),
        "num_bases",
        "it decomposes the relation weights of R-GCN on a heterogeneous dataset",
    )?;
    given(
        !s.fanouts_per_relation.is_empty(),
        "fanouts_per_relation",
        "it sets the fanouts of one relation of a heterogeneous dataset",
    )?;
    if mode != TrainMode::Sar {
        given(
            s.sar_mode.is_some(),
            "sar_mode",
            "it says how halos travel between the parts of a partitioned dataset (graphloom partition)",
        )?;
    }
    if mode == TrainMode::FullBatch {
        let one = "full batch on an unpartitioned dataset runs on one worker: partition it (graphloom partition) for SAR, or sample mini-batches (`fanouts`)";
        given(s.workers.is_some_and(|w| w != 1), "workers", one)?;
        given(s.comm == Some(Backend::Mpi), "comm", one)?;
    }
    given(
        s.comm == Some(Backend::Mpi) && s.workers.is_some(),
        "workers",
        "under mpirun the job's processes are the workers: set their number with mpirun -np",
    )?;
    if mode == TrainMode::MiniBatch
        && s.batch_norm
        && (s.workers.unwrap_or(1) > 1 || s.comm == Some(Backend::Mpi))
    {
        return Err(PlanError::not_applicable(
            "batch_norm",
            mode,
            "with data-parallel workers each would normalise its own slice of a batch: train mini-batches on one worker, or full-batch",
        ));
    }
    if mode != TrainMode::Sar && !embedding {
        given(
            s.embedding_lr.is_some(),
            "embedding_lr",
            "it is the learning rate of `embedding_dim`'s table",
        )?;
    }
    if mode == TrainMode::MiniBatch && embedding {
        given(
            s.features_location.is_some(),
            "features_location",
            "the input is a learnt embedding table (`embedding_dim`), not the features",
        )?;
    }
    if mode == TrainMode::MiniBatch && s.inference_memory_gib.is_none() {
        given(
            s.scratch_dir.is_some(),
            "scratch_dir",
            "it is where `inference_memory_gib` keeps layer outputs",
        )?;
    }
    if s.inference_memory_gib.is_some() && (s.eval_fanouts.is_some() || s.eval_nodes.is_some()) {
        return Err(PlanError::invalid(
            "inference_memory_gib",
            "evaluates exactly, and `eval_fanouts`/`eval_nodes` evaluate by sampling: give one \
             or the other",
        ));
    }
    if mode == TrainMode::MiniBatch && s.features_location != Some(FeaturesLocation::Mmap) {
        given(
            s.feature_cache_gib.is_some(),
            "feature_cache_gib",
            "it caches rows of features kept on disk (`features_location` mmap)",
        )?;
        given(
            s.feature_reads.is_some(),
            "feature_reads",
            "it reads rows of features kept on disk (`features_location` mmap)",
        )?;
    }
    if arch == Architecture::Sgc {
        given(
            s.hidden.is_some(),
            "hidden",
            "SGC has no hidden layer: its hops keep the input's width",
        )?;
    }
    if arch != Architecture::Appnp {
        let appnp = "it is a setting of APPNP (`model` appnp)";
        given(s.hops.is_some(), "hops", appnp)?;
        given(s.teleport.is_some(), "teleport", appnp)?;
    } else if mode == TrainMode::MiniBatch {
        return Err(PlanError::not_applicable(
            "model",
            mode,
            "APPNP propagates all its hops (`hops`) in one layer, and a sampled block or \
             layer-wise inference gives a layer one hop: train APPNP full-batch or with SAR",
        ));
    }
    if arch == Architecture::Sign {
        let rows = "SIGN reads no graph: it trains full batch, or on mini-batches of rows \
                    (`batch_size`), over a dataset from `prepare propagate`";
        given(s.fanouts.is_some(), "fanouts", rows)?;
        given(s.subgraph.batching.is_some(), "batching", rows)?;
        given(mode == TrainMode::Sar, "model", rows)?;
        given(s.task == Some(TaskKind::Link), "task", rows)?;
    }
    if arch == Architecture::GatV2 && mode == TrainMode::Sar {
        return Err(PlanError::not_applicable(
            "model",
            mode,
            "GATv2's scores need a source's and a destination's projected rows together, which \
             SAR's ring attention does not exchange: train GATv2 full-batch or in mini-batches, \
             or GAT with SAR",
        ));
    }
    if !arch.has_heads() {
        let gat = "it is a setting of GAT and GATv2 (`model` gat or gatv2)";
        given(s.heads.is_some(), "heads", gat)?;
        given(s.out_heads.is_some(), "out_heads", gat)?;
        given(s.attention_dropout.is_some(), "attention_dropout", gat)?;
    }
    Ok(())
}

/// Refuses the settings of link prediction in a run that classifies nodes, and link prediction
/// where it does not run.
fn check_task(s: &TrainSettings, mode: TrainMode) -> Result<()> {
    if s.task == Some(TaskKind::Link) {
        let not_here = |setting, hint| Err(PlanError::not_applicable(setting, mode, hint));
        if mode == TrainMode::Sar {
            return not_here(
                "task",
                "SAR trains node classification: give the unpartitioned dataset, with its link \
                 split, to train link prediction full-batch or in mini-batches",
            );
        }
        if s.exclude_supervision == Some(true) && mode != TrainMode::MiniBatch {
            return not_here(
                "exclude_supervision",
                "it hides a batch's edges from its sampled blocks (`fanouts`); a full batch has \
                 its held-out edges removed already",
            );
        }
        if s.eval_fanouts.is_some() || s.eval_nodes.is_some() {
            let setting = if s.eval_fanouts.is_some() {
                "eval_fanouts"
            } else {
                "eval_nodes"
            };
            return Err(PlanError::invalid(
                setting,
                "samples the evaluation of node classification; link prediction scores every \
                 held-out pair exactly (`inference_memory_gib` bounds its memory)",
            ));
        }
        return Ok(());
    }
    let context = match s.task {
        Some(TaskKind::Multilabel) => "multi-label classification",
        Some(TaskKind::Regression) => "regression",
        _ => "node classification",
    };
    let values = matches!(s.task, Some(TaskKind::Multilabel | TaskKind::Regression));
    if values && (s.eval_fanouts.is_some() || s.eval_nodes.is_some()) {
        return Err(PlanError::invalid(
            if s.eval_fanouts.is_some() {
                "eval_fanouts"
            } else {
                "eval_nodes"
            },
            "samples the evaluation of node classification; multi-label classification and \
             regression evaluate every node exactly (`inference_memory_gib` bounds its memory)",
        ));
    }
    if s.loss.is_some() && s.task != Some(TaskKind::Regression) {
        return Err(PlanError::NotApplicable {
            setting: "loss",
            context,
            hint: "it is a setting of regression (`task` regression)",
        });
    }
    let link = "it is a setting of link prediction (`task` link)";
    for (given, setting) in [
        (s.decoder.is_some(), "decoder"),
        (s.out_dim.is_some(), "out_dim"),
        (s.neg_ratio.is_some(), "neg_ratio"),
        (s.neg_sampling.is_some(), "neg_sampling"),
        (s.exclude_supervision.is_some(), "exclude_supervision"),
        (s.metric.is_some(), "metric"),
    ] {
        if given {
            return Err(PlanError::NotApplicable {
                setting,
                context,
                hint: link,
            });
        }
    }
    Ok(())
}

/// Refuses values that cannot train: counts of zero, sizes past their bounds, fanouts that
/// do not fit the layers.
pub(crate) fn check_values(s: &TrainSettings, layers: usize) -> Result<()> {
    let positive = |v: Option<usize>, setting: &'static str| -> Result<()> {
        match v {
            Some(0) => Err(PlanError::invalid(setting, "must be at least 1")),
            _ => Ok(()),
        }
    };
    positive(Some(layers), "layers")?;
    positive(s.hidden, "hidden")?;
    positive(s.heads, "heads")?;
    positive(s.out_heads, "out_heads")?;
    positive(s.batch_size, "batch_size")?;
    positive(s.batches_per_epoch, "batches_per_epoch")?;
    positive(s.eval_nodes, "eval_nodes")?;
    positive(s.queue_depth, "queue_depth")?;
    positive(s.workers, "workers")?;
    positive(s.embedding_dim, "embedding_dim")?;
    positive(s.snapshot_every, "snapshot_every")?;
    positive(s.out_dim, "out_dim")?;
    positive(s.neg_ratio, "neg_ratio")?;
    if let Some(r) = s.neg_ratio.filter(|&r| r > MAX_NEG_RATIO) {
        return Err(PlanError::invalid(
            "neg_ratio",
            format!("{r} is more than {MAX_NEG_RATIO} negatives per positive"),
        ));
    }
    if let Some(w) = s.workers.filter(|&w| w > MAX_WORKERS) {
        return Err(PlanError::invalid(
            "workers",
            format!("{w} is more than the {MAX_WORKERS} workers one process may run"),
        ));
    }
    if let Some(q) = s.queue_depth.filter(|&q| q > MAX_QUEUE_DEPTH) {
        return Err(PlanError::invalid(
            "queue_depth",
            format!("{q} is more than {MAX_QUEUE_DEPTH} batches ahead"),
        ));
    }
    for (gib, setting) in [
        (s.feature_cache_gib, "feature_cache_gib"),
        (s.inference_memory_gib, "inference_memory_gib"),
    ] {
        if let Some(gib) = gib {
            gib_bytes(setting, gib)?;
        }
    }
    if let Some(lr) = s.embedding_lr {
        if !(lr.is_finite() && lr > 0.0) {
            return Err(PlanError::invalid(
                "embedding_lr",
                format!("must be a positive number, not {lr}"),
            ));
        }
    }
    for (f, setting) in [(&s.fanouts, "fanouts"), (&s.eval_fanouts, "eval_fanouts")] {
        let Some(f) = f else { continue };
        if f.len() != layers {
            return Err(PlanError::invalid(
                setting,
                format!(
                    "has {} values for {layers} layers: give one per layer",
                    f.len()
                ),
            ));
        }
    }
    Ok(())
}

/// The address space one thread reserves, touched or not: its stack (2 MiB, Rust's and
/// rayon's default), a guard page and its share of the allocator's arenas. Measured on
/// 300-node runs: 2.7 MiB a kernel thread (`threads`), 4.3 MiB a mini-batch worker of two
/// threads (its own, its batch producer), 6.2 MiB a SAR worker of three (its own, two rounds
/// of its ring exchange); rounded up.
const THREAD_ADDRESS_BYTES: u64 = 4 << 20;

/// Why `threads` more threads cannot start in this process: their stacks would reserve more
/// address space than its limit (`ulimit -v`) leaves, past which a thread cannot start or an
/// allocation fails and the process aborts. `None` when they fit, or without a limit.
pub fn threads_beyond_address_space(threads: u64) -> Option<String> {
    let left = graphloom_tensor::memory::address_space_left()?;
    let reserved = threads.saturating_mul(THREAD_ADDRESS_BYTES);
    (reserved > left).then(|| {
        format!(
            "{threads} threads reserve about {} of address space for their stacks, more than \
             the {} this process's address-space limit (ulimit -v) leaves, room for {}",
            format_bytes(reserved),
            format_bytes(left),
            left / THREAD_ADDRESS_BYTES
        )
    })
}

/// Refuses a model with batch normalisation whose evaluation would run layer by layer
/// (`layerwise`), which normalises each chunk of nodes by its own statistics.
pub(crate) fn check_layerwise_batch_norm(
    layerwise: bool,
    model: &graphloom_nn::ModelConfig,
) -> Result<()> {
    if !(layerwise && model.batch_norm) {
        return Ok(());
    }
    Err(PlanError::invalid(
        "batch_norm",
        format!(
            "evaluation would run layer by layer ({}): leave out --batch-norm, give more \
             --memory-gib, or evaluate by sampling (--eval-fanouts)",
            graphloom_nn::inference::LAYERWISE_BATCH_NORM
        ),
    ))
}

/// Refuses an in-process job that one process cannot start: `workers` workers of
/// `threads_each` threads beyond the address space its limit leaves
/// ([`threads_beyond_address_space`]); and, where the partition's `parts` set the number of
/// workers, more than [`MAX_WORKERS`] (a number given is checked with the other values). An
/// MPI job's processes start their own threads: nothing is checked for them.
pub(crate) fn check_local_workers(
    backend: Backend,
    workers: usize,
    threads_each: usize,
    parts: Option<usize>,
) -> Result<()> {
    if backend != Backend::Local {
        return Ok(());
    }
    let whose = match parts {
        Some(p) => format!("not given: the partition's {p} parts train on as many workers"),
        None => workers.to_string(),
    };
    if parts.is_some() && workers > MAX_WORKERS {
        return Err(PlanError::invalid(
            "workers",
            format!(
                "{whose}, more than the {MAX_WORKERS} one process may run: partition into \
                 fewer parts, or train one part per process of an MPI job (`comm` mpi)"
            ),
        ));
    }
    let threads = (workers as u64).saturating_mul(threads_each as u64);
    if let Some(why) = threads_beyond_address_space(threads) {
        return Err(PlanError::invalid(
            "workers",
            format!(
                "{whose}: workers of {threads_each} threads each, {why}: give fewer workers, \
                 or run them as the processes of an MPI job (`comm` mpi)"
            ),
        ));
    }
    Ok(())
}

/// The most negatives a positive may draw in training.
pub const MAX_NEG_RATIO: usize = 1 << 16;
