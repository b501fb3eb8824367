//! [`HeteroPlan`]: a training run over a heterogeneous dataset directory. The relational model
//! (R-GCN or R-SAGE) reads each node type's features, or a learnt embedding for a type without
//! any, and trains full batch, or on sampled batches of the target type's training nodes with
//! the same fanout for every relation at each hop (DGL's meaning), on one worker or data
//! parallel. Its memory is planned part by part ([`crate::budget`]): under `memory_gib` the
//! learnt tables and the features go to files, mapped, when memory cannot hold them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use graphloom_comm::{Communicator, CommunicatorExt};
use graphloom_graph::sample::Fanouts;
use graphloom_graph::{format_bytes, HeteroDataset, HeteroGraph};
use graphloom_nn::hetero::{
    relation_specs, HeteroBatching, HeteroModel, HeteroModelConfig, HeteroTraining, RelationalKind,
    TypeInput,
};
use graphloom_nn::train::{fit, EpochRecord, TrainConfig, TrainReport};
use graphloom_store::Layout;
use graphloom_tensor::autodiff::ops::Probability;
use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::DType;

use crate::budget::{hetero_plan, HeteroPlacement, HeteroShape};
use crate::checks::{check_backend_built, check_local_workers, check_values};
use crate::data::embedding_table;
use crate::MemoryPlan;
use crate::{run_job, Backend, ModelName, PlanError, Result, TaskKind, TrainSettings};

/// The hidden width of a relational model unless told otherwise (DGL's and OGB's ogbn-mag
/// R-GCN: 64).
pub(crate) const HIDDEN: usize = 64;
/// The width of a featureless type's learnt embedding unless told otherwise (DGL's ogbn-mag
/// example: 128).
pub(crate) const EMBEDDING_DIM: usize = 128;
/// Training nodes per sampled batch unless told otherwise (the OGB leaderboard's recipe).
pub(crate) const BATCH_SIZE: usize = 1024;
/// The learning rate of a learnt embedding's LazyAdam in a relational model unless told
/// otherwise: three times DGL's 0.01, because its SparseAdam corrects the moments' bias by the
/// steps of the whole table, so a row first met late in training steps up to
/// `(1 - beta1) / sqrt(1 - beta2)` = 3.16 times the rate, where LazyAdam counts each row's own
/// steps. On the mag shape at 0.1 (3 epochs, fanouts 25,20): 0.003 reached test 0.349, 0.01
/// 0.592, 0.03 0.754; DGL 0.641.
pub(crate) const EMBEDDING_LR: f32 = 0.03;
/// R-GCN's learning rate unless told otherwise (DGL's ogbn-mag example; it decays no weight
/// either).
pub(crate) const RGCN_LR: f64 = 0.01;
/// R-SAGE's learning rate unless told otherwise: a type that `k` relations reach sums `k` root
/// weights and biases, so at R-GCN's rate its self term moves `k` times as fast (4 for
/// ogbn-mag's papers). On make_hetero.py's shape at 0.1 (3 epochs, fanouts 25,20, data seed
/// 0): 0.03 reached test 0.327, 0.01 0.512, 0.003 0.668 (seed 1: 0.643); DGL's R-GCN 0.612.
pub(crate) const RSAGE_LR: f64 = 0.003;
/// The relational models' dropout unless told otherwise (DGL's ogbn-mag example).
pub(crate) const DROPOUT: f64 = 0.5;

/// A checked run over a heterogeneous dataset, its graph in memory.
pub struct HeteroPlan {
    /// What was asked.
    pub settings: TrainSettings,
    /// The model, every default filled in.
    pub model: HeteroModelConfig,
    /// The loop's settings.
    pub train: TrainConfig,
    /// Full batch, or the fanouts of each hop and relation and the batch size.
    pub batching: HeteroBatching,
    /// The width of the learnt embedding of each type without features (0 for a type with).
    pub embedding_dims: Vec<usize>,
    /// Keep the learnt tables of the best evaluation, to save them with the model
    /// (`TrainReport::best_input_embedding`: every featureless type's rows stacked in the
    /// types' order).
    pub keep_embeddings: bool,
    /// The predicted peak by part, and what the division of a budget decided.
    pub memory: MemoryPlan,
    placement: HeteroPlacement,
    embedding_lr: f32,
    graph: HeteroGraph,
}

/// The folder of a run's mapped learnt tables (`.graphloom-tables-PID` in the scratch
/// folder), removed with everything in it when dropped; a killed run's is removed by the
/// next run that makes one.
struct ScratchTables {
    dir: PathBuf,
    owner: bool,
}

/// The name prefix of [`ScratchTables`] folders.
const TABLES_PREFIX: &str = ".graphloom-tables-";

impl ScratchTables {
    /// The folder of the job whose first rank runs as process `pid` under `scratch`; made
    /// (and removed when dropped) by that rank.
    fn new(scratch: &Path, pid: u64, owner: bool) -> Result<ScratchTables> {
        let dir = scratch.join(format!("{TABLES_PREFIX}{pid}"));
        if owner {
            graphloom_io::remove_abandoned(scratch, TABLES_PREFIX);
            std::fs::create_dir_all(&dir).map_err(|e| {
                PlanError::invalid("scratch_dir", format!("cannot make {}: {e}", dir.display()))
            })?;
        }
        Ok(ScratchTables { dir, owner })
    }
}

impl Drop for ScratchTables {
    fn drop(&mut self) {
        if self.owner {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl HeteroPlan {
    /// Checks `settings` against heterogeneous training, opens and checks the dataset (its
    /// relations mapped, labels and splits in memory) and plans the run's memory (dividing
    /// `memory_gib` among its parts when given).
    pub fn new(settings: TrainSettings) -> Result<HeteroPlan> {
        check_applicable(&settings)?;
        let layers = settings.layers.unwrap_or(2);
        check_values(&settings, layers)?;
        let workers = settings.workers.unwrap_or(1);
        let backend = settings.comm.unwrap_or(Backend::Local);
        // Each worker is one thread of its own; the kernels share the process's pool.
        check_local_workers(backend, workers, 1, None)?;
        let dir = settings
            .dataset
            .clone()
            .expect("a heterogeneous run has a dataset");
        let kind = match settings.model {
            None => RelationalKind::Rgcn,
            Some(ModelName::Relational(kind)) => kind,
            Some(ModelName::Homogeneous(arch)) => {
                return Err(PlanError::invalid(
                    "model",
                    format!(
                        "{} takes one node type and one edge type, and {} is a heterogeneous \
                         dataset: use rgcn or rsage",
                        arch.name(),
                        dir.display()
                    ),
                ))
            }
        };
        let dtype = settings.dtype.0;
        if !matches!(dtype, DType::F32 | DType::F64) {
            return Err(PlanError::invalid(
                "dtype",
                format!("the relational models compute in f32 or f64, not {dtype}"),
            ));
        }
        let graph = {
            let _g = category_scope(Category::Features);
            HeteroDataset::open(&dir)?.load()?
        };
        let embedding_dim = settings.embedding_dim.unwrap_or(EMBEDDING_DIM);
        let embedding_dims: Vec<usize> = graph
            .features
            .iter()
            .map(|f| if f.is_some() { 0 } else { embedding_dim })
            .collect();
        let in_dims = graph
            .features
            .iter()
            .zip(&embedding_dims)
            .map(|(f, &e)| f.as_ref().map_or(e, |f| f.width))
            .collect();
        let model = HeteroModelConfig {
            kind,
            types: graph.types.clone(),
            in_dims,
            relations: relation_specs(&graph),
            target: graph.target,
            hidden: settings.hidden.unwrap_or(HIDDEN),
            out_dim: graph.meta.num_classes,
            layers,
            num_bases: settings.num_bases,
            dropout: settings
                .dropout
                .unwrap_or(Probability::new(DROPOUT).expect("a probability")),
            dtype,
        };
        let batching = match &settings.fanouts {
            None => HeteroBatching::FullBatch,
            // `check_values` held the fanouts to one per layer.
            Some(fanouts) => {
                let mut per_hop: Vec<Vec<i64>> = fanouts
                    .as_slice()
                    .iter()
                    .map(|&f| vec![f; graph.relations.len()])
                    .collect();
                for given in &settings.fanouts_per_relation {
                    let (r, own) = relation_fanouts(&graph, given, layers)?;
                    for (hop, f) in own.into_iter().enumerate() {
                        per_hop[hop][r] = f;
                    }
                }
                HeteroBatching::Sampled {
                    fanouts: per_hop,
                    batch_size: settings.batch_size.unwrap_or(BATCH_SIZE),
                }
            }
        };
        let train = TrainConfig {
            epochs: settings.epochs,
            lr: settings.lr.unwrap_or(match kind {
                RelationalKind::Rgcn => RGCN_LR,
                RelationalKind::Rsage => RSAGE_LR,
            }),
            weight_decay: settings
                .weight_decay
                .unwrap_or(TrainConfig::default().weight_decay),
            optimizer: settings.optimizer.kind(),
            patience: settings.patience,
            seed: settings.seed,
            eval_every: settings.eval_every,
            snapshots: crate::plan::snapshots(&settings)?,
        };
        train.check()?;
        let budget = crate::budget::budget_bytes(settings.memory_gib)?;
        match budget {
            Some(_) => crate::budget::return_freed_memory(),
            None => check_tables_fit(&graph, &model, &embedding_dims)?,
        }
        // A model that cannot be made fails here, before any table is allocated, naming the
        // setting as the front end spells it.
        let made = HeteroModel::new(model.clone(), settings.seed).map_err(|e| match e {
            graphloom_nn::Error::InvalidSetting { setting, reason } => {
                PlanError::invalid(setting, reason)
            }
            other => other.into(),
        })?;
        drop(made);
        let sampled = match &batching {
            HeteroBatching::Sampled {
                fanouts,
                batch_size,
            } => Some((&fanouts[..], *batch_size)),
            HeteroBatching::FullBatch => None,
        };
        let shape = HeteroShape {
            graph: &graph,
            model: &model,
            embedding_dims: &embedding_dims,
            sampled,
            optimizer: train.optimizer,
            workers,
            threads: rayon::current_num_threads(),
            eval_nodes: settings.eval_nodes,
            features_location: settings.features_location,
            seed: settings.seed,
        };
        let (memory, placement) = hetero_plan(&shape, budget)?;
        Ok(HeteroPlan {
            memory,
            placement,
            embedding_lr: settings.embedding_lr.unwrap_or(EMBEDDING_LR),
            settings,
            model,
            train,
            batching,
            embedding_dims,
            keep_embeddings: false,
            graph,
        })
    }

    /// Each relation's name and its fanouts from the seeds outwards (empty for full batch).
    pub fn fanouts_per_relation(&self) -> Vec<(String, Vec<i64>)> {
        self.graph
            .relations
            .iter()
            .enumerate()
            .map(|(r, rel)| {
                let fanouts = match &self.batching {
                    HeteroBatching::Sampled { fanouts, .. } => {
                        fanouts.iter().map(|h| h[r]).collect()
                    }
                    HeteroBatching::FullBatch => Vec::new(),
                };
                (rel.name.clone(), fanouts)
            })
            .collect()
    }

    /// Sampled evaluation's fanouts per hop and relation: `eval_fanouts` for every relation,
    /// else the training fanouts.
    fn eval_fanouts(&self) -> Vec<Vec<i64>> {
        match (&self.settings.eval_fanouts, &self.batching) {
            (Some(given), _) => (given.as_slice().iter())
                .map(|&f| vec![f; self.graph.relations.len()])
                .collect(),
            (None, HeteroBatching::Sampled { fanouts, .. }) => fanouts.clone(),
            (None, HeteroBatching::FullBatch) => {
                vec![vec![-1; self.graph.relations.len()]; self.model.layers]
            }
        }
    }

    /// The dataset as training reads it.
    pub fn graph(&self) -> &HeteroGraph {
        &self.graph
    }

    /// What the run holds before training, part by part, in words, for the log: each type's
    /// input table and the relations' graph.
    pub fn lines(&self) -> Vec<String> {
        let g = &self.graph;
        let mut lines = vec![format!(
            "{} on {}: {} node types, {} relations, {} classes of {}, {}",
            self.model.kind.name(),
            g.meta.name,
            g.types.len(),
            g.relations.len(),
            g.meta.num_classes,
            g.types[g.target],
            match &self.batching {
                HeteroBatching::FullBatch => "full batch".to_string(),
                HeteroBatching::Sampled { batch_size, .. } => {
                    let per_relation = self.fanouts_per_relation();
                    let text =
                        |f: &[i64]| f.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
                    let first = per_relation
                        .first()
                        .map(|(_, f)| f.clone())
                        .unwrap_or_default();
                    if per_relation.iter().all(|(_, f)| *f == first) {
                        format!(
                            "batches of {batch_size} with fanouts {} per relation",
                            text(&first)
                        )
                    } else {
                        let each: Vec<String> = per_relation
                            .iter()
                            .map(|(name, f)| format!("{name} {}", text(f)))
                            .collect();
                        format!("batches of {batch_size} with fanouts {}", each.join("; "))
                    }
                }
            }
        )];
        for (t, name) in g.types.iter().enumerate() {
            let n = g.type_sizes[t];
            let what = match &g.features[t] {
                Some(f) => format!(
                    "features {} wide, {}",
                    f.width,
                    format_bytes((f.rows * f.width * if f.dtype == "bf16" { 2 } else { 4 }) as u64)
                ),
                None => format!(
                    "learnt embedding {} wide, {} with its LazyAdam state",
                    self.embedding_dims[t],
                    format_bytes((3 * n * self.embedding_dims[t] * 4) as u64)
                ),
            };
            lines.push(format!("  {name}: {n} nodes, {what}"));
        }
        let edges: usize = g.relations.iter().map(|r| r.csr.num_edges()).sum();
        lines.push(format!("  relations: {edges} edges"));
        lines.extend(self.memory.lines());
        lines
    }

    /// Trains as planned on the workers asked for, calling `on_epoch` on the first after
    /// every epoch; returns this process's first worker's report and whether it is the job's
    /// first (the one that reports: under MPI every process returns its own rank's).
    pub fn run(&self, on_epoch: impl FnMut(&EpochRecord) + Send) -> Result<(TrainReport, bool)> {
        self.run_with_progress(on_epoch, |_, _| {})
    }

    /// [`HeteroPlan::run`], also calling `on_batch(done, total)` on the first worker before
    /// each step of a sampled epoch (for a progress bar).
    pub fn run_with_progress(
        &self,
        on_epoch: impl FnMut(&EpochRecord) + Send,
        on_batch: impl Fn(usize, usize) + Sync,
    ) -> Result<(TrainReport, bool)> {
        let on_epoch = std::sync::Mutex::new(on_epoch);
        let workers = self.settings.workers.unwrap_or(1);
        let backend = self.settings.comm.unwrap_or(Backend::Local);
        let on_batch = &on_batch;
        run_job(backend, workers, |comm| {
            let root = comm.rank() == 0;
            let on_batch = move |done, total| {
                if root {
                    on_batch(done, total)
                }
            };
            let report = self.run_worker(comm, on_batch, |r| {
                if root {
                    (on_epoch.lock().unwrap_or_else(|e| e.into_inner()))(r)
                }
            })?;
            Ok((report, root))
        })
    }

    /// This worker's part of the run over `comm`. Collective.
    fn run_worker(
        &self,
        comm: Arc<dyn Communicator>,
        on_batch: impl FnMut(usize, usize) + Send,
        on_epoch: impl FnMut(&EpochRecord),
    ) -> Result<TrainReport> {
        let scratch = match self.placement.tables_mapped {
            true => {
                // Every rank maps the files of the first rank's folder.
                let pid = comm.broadcast_typed(0, &[u64::from(std::process::id())])?[0];
                let dir = self.settings.scratch_dir.clone();
                let dir = dir.unwrap_or_else(std::env::temp_dir);
                Some(ScratchTables::new(&dir, pid, comm.rank() == 0)?)
            }
            false => None,
        };
        // The folder exists before any rank maps a file in it.
        comm.barrier()?;
        let mut inputs = Vec::with_capacity(self.graph.types.len());
        for (t, features) in self.graph.features.iter().enumerate() {
            inputs.push(match features {
                Some(file) => {
                    let _g = category_scope(Category::Features);
                    // One table the threads share, or each process's own rows under MPI.
                    let layout = if comm.backend() == "mpi" && comm.size() > 1 {
                        Layout::Distributed
                    } else {
                        Layout::Continuous
                    };
                    let location = self.placement.features;
                    TypeInput::Features(file.table(Arc::clone(&comm), layout, location)?)
                }
                None => {
                    let seed = self.train.seed ^ (t as u64 + 1).rotate_left(32);
                    let n = self.graph.type_sizes[t];
                    let file = (scratch.as_ref())
                        .map(|s| s.dir.join(format!("embedding.{}", self.graph.types[t])));
                    let dim = self.embedding_dims[t];
                    let table =
                        embedding_table(Arc::clone(&comm), n, dim, seed, None, file.as_deref())?;
                    TypeInput::Embedding(table, self.embedding_lr)
                }
            });
        }
        let model = HeteroModel::new(self.model.clone(), self.train.seed)?;
        let mut workload = HeteroTraining::new(
            comm,
            model,
            &self.graph,
            inputs,
            self.batching.clone(),
            self.train.seed,
        )?;
        if self.keep_embeddings {
            workload = workload.keeping_embeddings();
        }
        workload.on_batch(on_batch);
        if let Some(batches) = self.settings.batches_per_epoch {
            workload = workload.with_batches_per_epoch(batches);
        }
        if let Some(limit) = self.settings.eval_nodes {
            workload = workload.with_sampled_eval(limit, self.eval_fanouts());
        }
        let report = fit(&mut workload, &self.train, on_epoch);
        drop(workload);
        drop(scratch);
        Ok(report?)
    }
}

/// Refuses, before allocating any, a model and learnt tables (each with two optimizer states
/// beside it, Adam's and LazyAdam's) larger than the memory this process may use.
fn check_tables_fit(
    graph: &HeteroGraph,
    model: &HeteroModelConfig,
    embedding_dims: &[usize],
) -> Result<()> {
    let scalar = model.dtype.size_in_bytes() as u128;
    let params = model
        .param_count()
        .map_or(u128::MAX, |n| n as u128 * scalar * 3);
    let tables: u128 = graph
        .type_sizes
        .iter()
        .zip(embedding_dims)
        .map(|(&n, &d)| n as u128 * d as u128 * 4 * 3)
        .sum();
    let available = crate::plan::available_memory_bytes() as u128;
    if available == 0 || params.saturating_add(tables) <= available {
        return Ok(());
    }
    let (setting, what) = if tables > available || tables > params {
        (
            "embedding_dim",
            "the learnt embeddings with their LazyAdam state",
        )
    } else {
        ("hidden", "the model's parameters with Adam's state")
    };
    Err(PlanError::invalid(
        setting,
        format!(
            "{what} would take {}, more than the {} this process may use (--memory-gib maps \
             the learnt tables from scratch files when memory cannot hold them)",
            format_bytes(u64::try_from(params.saturating_add(tables)).unwrap_or(u64::MAX)),
            format_bytes(available as u64)
        ),
    ))
}

/// The relation `RELATION=f1,f2` names (by its full name, or its middle name when unique)
/// and its fanouts, one per layer of `layers`.
fn relation_fanouts(graph: &HeteroGraph, given: &str, layers: usize) -> Result<(usize, Vec<i64>)> {
    let invalid = |reason: String| PlanError::invalid("fanouts_per_relation", reason);
    let (name, fanouts) = given.split_once('=').ok_or_else(|| {
        invalid(format!(
            "{given:?} is not RELATION=FANOUTS, e.g. writes=10,5"
        ))
    })?;
    let matches: Vec<usize> = (0..graph.relations.len())
        .filter(|&r| {
            let full = &graph.relations[r].name;
            full == name || full.split("__").nth(1) == Some(name)
        })
        .collect();
    let names = || {
        graph
            .relations
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let r = match matches[..] {
        [r] => r,
        [] => {
            return Err(invalid(format!(
                "no relation {name:?}: the relations are {}",
                names()
            )))
        }
        _ => {
            return Err(invalid(format!(
                "{name:?} names several relations: give the full name, one of {}",
                names()
            )))
        }
    };
    let fanouts: Fanouts = fanouts
        .parse()
        .map_err(|e| invalid(format!("{name}: {e}")))?;
    if fanouts.len() != layers {
        return Err(invalid(format!(
            "{name}: {} fanouts for {layers} layers",
            fanouts.len()
        )));
    }
    Ok((r, fanouts.as_slice().to_vec()))
}

/// Refuses every setting heterogeneous training does not take, naming it.
fn check_applicable(s: &TrainSettings) -> Result<()> {
    check_backend_built(s)?;
    let not_here = |given: bool, setting: &'static str| -> Result<()> {
        if given {
            return Err(PlanError::invalid(
                setting,
                "heterogeneous training (rgcn, rsage: node classification, sampled or full \
                 batch, data parallel when sampled) does not take it",
            ));
        }
        Ok(())
    };
    not_here(s.task.is_some_and(|t| t != TaskKind::Node), "task")?;
    not_here(s.loss.is_some(), "loss")?;
    not_here(s.decoder.is_some(), "decoder")?;
    not_here(s.out_dim.is_some(), "out_dim")?;
    not_here(s.neg_ratio.is_some(), "neg_ratio")?;
    not_here(s.neg_sampling.is_some(), "neg_sampling")?;
    not_here(s.exclude_supervision.is_some(), "exclude_supervision")?;
    not_here(s.metric.is_some(), "metric")?;
    not_here(s.heads.is_some(), "heads")?;
    not_here(s.out_heads.is_some(), "out_heads")?;
    not_here(s.hops.is_some(), "hops")?;
    not_here(s.teleport.is_some(), "teleport")?;
    not_here(s.input_dropout.is_some(), "input_dropout")?;
    not_here(s.attention_dropout.is_some(), "attention_dropout")?;
    not_here(s.checkpoint, "checkpoint")?;
    not_here(s.batch_norm, "batch_norm")?;
    not_here(s.queue_depth.is_some(), "queue_depth")?;
    not_here(s.feature_cache_gib.is_some(), "feature_cache_gib")?;
    not_here(s.feature_reads.is_some(), "feature_reads")?;
    not_here(s.inference_memory_gib.is_some(), "inference_memory_gib")?;
    if s.fanouts.is_none() {
        not_here(s.workers.is_some_and(|w| w > 1), "workers")?;
        not_here(s.batches_per_epoch.is_some(), "batches_per_epoch")?;
        not_here(s.eval_fanouts.is_some(), "eval_fanouts")?;
        not_here(s.eval_nodes.is_some(), "eval_nodes")?;
    }
    if s.eval_nodes.is_none() {
        not_here(s.eval_fanouts.is_some(), "eval_fanouts")?;
    }
    not_here(s.sar_mode.is_some(), "sar_mode")?;
    not_here(s.init_model.is_some(), "init_model")?;
    not_here(s.subgraph.batching.is_some(), "batching")?;
    if s.fanouts.is_none() {
        not_here(s.batch_size.is_some(), "batch_size")?;
        not_here(!s.fanouts_per_relation.is_empty(), "fanouts_per_relation")?;
    }
    Ok(())
}
