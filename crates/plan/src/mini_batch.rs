//! [`MiniBatchPlan`]: sampled mini-batches, data parallel over in-process workers or the
//! ranks of an MPI job. The dataset is opened in place (mapped), so no array of the graph is
//! read whole; features stay in their file or are copied into the store straight from it.

use std::sync::Arc;

use graphloom_comm::Communicator;
use graphloom_graph::sample::{Block, CsrSource, Fanouts, Sampler, SamplerKind};
use graphloom_graph::subgraph::batching::SubgraphBatching;
use graphloom_graph::subgraph::NodeSet;
use graphloom_graph::{Dataset, GraphData, MappedDataset, Meta, NodeId};
use graphloom_nn::batches::rank_slice;
use graphloom_nn::minibatch::{Inputs, MiniBatch, MiniBatchConfig, SampledEval, StageSeconds};
use graphloom_nn::task::Task;
use graphloom_nn::train::{fit, EpochRecord, TrainConfig, TrainReport};
use graphloom_nn::ModelConfig;
use graphloom_store::{
    HotRows, Layout, Location, MissReads, ReadEngine, RowSource, StoreSpec, StoreTensor,
};
use graphloom_tensor::DType;

use crate::budget::{self, probe_max_edges, MiniBatchShape, RunShape, SampledBatch};
use crate::checks::{check_layerwise_batch_norm, check_local_workers};
use crate::data::{check_features_fit, embedding_table, load, no_features, EMBEDDING_LR};
use crate::link::LinkPlan;
use crate::plan::{check_sizes, Common, PlannedModel, RootReport};
use crate::values::value_task;
use crate::{
    layerwise_config, run_job, Backend, FeatureReads, FeaturesLocation, MemoryPlan, PlanError,
    Result, TrainMode, TrainSettings,
};

/// Producer threads of a mini-batch run whose features are mapped from disk: enough reads in
/// flight for a disk that serves tens of thousands a second.
const MAPPED_PRODUCER_THREADS: usize = 32;

/// The default number of seeds per batch.
pub(crate) const BATCH_SIZE: usize = 1024;

/// Batches the plan samples to measure how many nodes a batch reaches at each hop.
const HOP_PROBE_BATCHES: usize = 3;

/// The shape of a sampled batch of `seeds` seeds (the distinct nodes within each hop, the
/// rows and edges of its blocks), the largest over [`HOP_PROBE_BATCHES`] batches whose seeds
/// are spread over `train` (the training nodes, or the supervision pairs' ends). Measured with the run's own sampler, because a formula
/// from the average degree misses both what skewed degrees do (most nodes have fewer
/// neighbours than the fanout, and a few hubs are drawn again and again) and the overlap of
/// the hops.
fn sampled_batch_shape(
    d: &GraphData,
    train: &[usize],
    seeds: usize,
    fanouts: &[i64],
    max_edges: u64,
) -> Result<SampledBatch> {
    let seeds = seeds.min(train.len());
    let source = CsrSource::from_arrays(d.row_ptr, d.col_idx);
    let mut sampler = Sampler::new(d.num_nodes());
    let mut shape = SampledBatch {
        hop_rows: vec![seeds as u64; fanouts.len() + 1],
        block_rows: 0,
        edges: 0,
        probed: Vec::new(),
    };
    for batch in 0..HOP_PROBE_BATCHES {
        // Distinct positions: increasing by at least one, then shifted by the batch; a pool of
        // pairs' ends repeats nodes, which a batch's seeds hold once.
        let mut ids: Vec<NodeId> = (0..seeds)
            .map(|i| train[(i * train.len() / seeds.max(1) + batch) % train.len()] as NodeId)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let mut draw = |ids: &[NodeId]| {
            sampler.sample(&source, ids, fanouts, SamplerKind::Uniform, 0, batch as u64)
        };
        let blocks = draw(&ids)?;
        if let Some(fewer) = widen(&mut shape, blocks, &ids, max_edges) {
            shape.probed = draw(&fewer)?;
        }
    }
    Ok(shape)
}

/// Widens `shape` to hold the batch of `blocks` (drawn from `seeds`) too. When it is the
/// largest so far but too large to train a step on at plan time (past `max_edges`, see
/// [`probe_max_edges`]), returns a spread of fewer of its seeds to draw the probed batch from.
fn widen(
    shape: &mut SampledBatch,
    blocks: Vec<Block>,
    seeds: &[NodeId],
    max_edges: u64,
) -> Option<Vec<NodeId>> {
    // Blocks run from the input layer to the seeds: the hops are theirs in reverse.
    for (hop, block) in blocks.iter().rev().enumerate() {
        let most = &mut shape.hop_rows[hop + 1];
        *most = (*most).max(block.src_nodes.len() as u64);
    }
    let edges = blocks.iter().map(|b| b.num_edges() as u64).sum();
    let block_rows = blocks.iter().map(|b| b.src_nodes.len() as u64).sum();
    shape.block_rows = shape.block_rows.max(block_rows);
    let largest = shape.probed.is_empty() || edges > shape.edges;
    shape.edges = shape.edges.max(edges);
    if !largest {
        return None;
    }
    shape.probed = blocks;
    (edges > max_edges).then(|| {
        let every = edges.div_ceil(max_edges.max(1)) as usize;
        seeds.iter().copied().step_by(every).collect()
    })
}

/// The shape of the subgraph batches `batching` draws for `model`'s layers, the largest over
/// the first [`HOP_PROBE_BATCHES`] batches of the first epoch, with the induced subgraph a
/// batch is made from: measured by drawing them, because a sample's draws bound its distinct
/// nodes loosely (random walks and node draws revisit nodes) and say nothing of its edges. A
/// worker of `workers` takes the blocks around its share of a batch's training nodes.
fn subgraph_batch_shape(
    d: &GraphData,
    batching: &SubgraphBatching,
    model: &ModelConfig,
    workers: usize,
    seed: u64,
) -> Result<(SampledBatch, u64)> {
    let (layers, max_edges) = (model.layers, probe_max_edges(model));
    let mut train = vec![false; d.num_nodes()];
    for &v in d.train_idx {
        train[v] = true;
    }
    let mut set = NodeSet::new(d.num_nodes());
    let mut sampler = Sampler::new(d.num_nodes());
    let mut shape = SampledBatch {
        hop_rows: vec![0; layers + 1],
        block_rows: 0,
        edges: 0,
        probed: Vec::new(),
    };
    let mut induced = 0;
    for draw in batching.epoch(seed, 0).iter().take(HOP_PROBE_BATCHES) {
        let nodes = batching.nodes(*d, draw, seed, 0)?;
        let rows: Vec<NodeId> = (0..nodes.len())
            .filter(|&p| train[nodes[p] as usize])
            .map(|p| p as NodeId)
            .collect();
        let rows = rank_slice(&rows, 0, workers);
        let sub = set.members(&nodes).induced(*d);
        // Its nodes (u32), offsets (i64), sources (u32), edge ids (i64) and edge weights (f32).
        induced = induced.max(12 * sub.nodes.len() as u64 + 16 * sub.edge_ids.len() as u64);
        let source = CsrSource::new(&sub.csr);
        let mut draw = |rows: &[NodeId]| {
            sampler.sample(&source, rows, &vec![-1; layers], SamplerKind::Uniform, 0, 0)
        };
        let blocks = draw(rows)?;
        shape.hop_rows[0] = shape.hop_rows[0].max(rows.len() as u64);
        if let Some(fewer) = widen(&mut shape, blocks, rows, max_edges) {
            shape.probed = draw(&fewer)?;
        }
    }
    Ok((shape, induced))
}

/// A mini-batch run.
pub struct MiniBatchPlan {
    /// Settings, model and loop.
    pub common: Common,
    /// How batches are made and evaluated.
    pub batches: MiniBatchConfig,
    /// Workers of an in-process job.
    pub workers: usize,
    /// How the workers talk.
    pub backend: Backend,
    /// Where the features live.
    pub features_location: FeaturesLocation,
    /// The learnt input embedding's width and learning rate, when the run learns one instead
    /// of reading features.
    pub embedding: Option<(usize, f32)>,
    /// Subgraph batches: where their clusters or normalisation came from, in words.
    pub subgraph_origin: Option<String>,
    /// GiB of the cache of hot feature rows (mapped features only).
    pub feature_cache_gib: Option<f64>,
    /// How feature rows kept on disk and missing from the cache are read (`auto` resolved).
    pub feature_reads: FeatureReads,
    /// The predicted peak memory by part, as divided from `memory_gib` when given.
    pub memory: MemoryPlan,
    data: MiniBatchData,
    link: Option<LinkPlan>,
}

/// A mini-batch run's dataset: mapped in place, or (the default synthetic graph) in memory.
enum MiniBatchData {
    Loaded(Dataset),
    Mapped(MappedDataset),
}

impl MiniBatchData {
    fn graph_data(&self) -> GraphData<'_> {
        match self {
            MiniBatchData::Loaded(ds) => ds.data(),
            MiniBatchData::Mapped(ds) => ds.data(),
        }
    }
}

/// What a mini-batch run produced, on the worker that reports it.
pub struct MiniBatchOutcome {
    /// The loop's records and the best parameters.
    pub report: TrainReport,
    /// Whether this process reports the job's results (rank 0 of the job).
    pub root: bool,
    /// Seconds per pipeline stage.
    pub stages: StageSeconds,
    /// With features kept on disk behind a row cache: what the cache served and what was read.
    pub row_cache: Option<RowCacheReport>,
}

/// What a row cache in front of features kept on disk did over a run.
#[derive(Clone, Copy, Debug)]
pub struct RowCacheReport {
    /// Rows held in memory.
    pub cached_rows: usize,
    /// Row reads the cache served.
    pub hits: u64,
    /// Row reads it did not.
    pub misses: u64,
    /// Distinct rows read from the file (a row missed twice in one batch is read once).
    pub rows_read: u64,
    /// How misses were read: `O_DIRECT` through this engine, or `None` for page faults.
    pub direct_engine: Option<ReadEngine>,
    /// Seconds the cache took to fill before the first batch.
    pub fill_seconds: f64,
}

impl RowCacheReport {
    /// The share of row reads the cache served (0 when none was asked for).
    pub fn hit_rate(&self) -> f64 {
        self.hits as f64 / (self.hits + self.misses).max(1) as f64
    }

    /// How misses were read, as reports spell it: `direct (io_uring)`, `mapped`.
    pub fn reads(&self) -> String {
        match self.direct_engine {
            Some(e) => format!("direct ({})", e.name()),
            None => "mapped".into(),
        }
    }
}

impl MiniBatchPlan {
    pub(crate) fn new(
        settings: TrainSettings,
        train: TrainConfig,
        model: PlannedModel,
    ) -> Result<MiniBatchPlan> {
        let s = &settings;
        let embedding = model
            .embedding_dim
            .map(|dim| (dim, s.embedding_lr.unwrap_or(EMBEDDING_LR)));
        let data = open(s, embedding.is_some(), model.arch.reads_edge_features())?;
        let link = LinkPlan::open(s, s.dataset.as_deref(), data.graph_data())?;
        let d = data.graph_data();
        value_task(s, d.targets, [d.train_idx, d.valid_idx, d.test_idx])?;
        let meta: &Meta = match &data {
            MiniBatchData::Loaded(ds) => &ds.meta,
            MiniBatchData::Mapped(ds) => &ds.meta,
        };
        let subgraph = crate::subgraph::batching(s, s.dataset.as_deref(), data.graph_data())?;
        if let MiniBatchData::Mapped(ds) = &data {
            if ds.edge_weight().is_some() {
                return Err(PlanError::invalid(
                    if subgraph.is_some() {
                        "batching"
                    } else {
                        "fanouts"
                    },
                    "samples blocks without edge weights, and this dataset has \
                     edge_weight.npy: train it full-batch (or partitioned, with SAR), where GCN \
                     and GraphSAGE weigh every edge",
                ));
            }
        }
        // Subgraph batches use fanouts only for sampled evaluation: all neighbours unless
        // `eval_fanouts`.
        let fanouts = match (&s.fanouts, &subgraph) {
            (Some(f), _) => f.clone(),
            (None, Some(_)) => Fanouts::new(vec![-1; model.layers])?,
            // SIGN's batches are rows: blocks of the seeds alone.
            (None, None) if model.arch == graphloom_nn::Architecture::Sign => {
                Fanouts::rows(model.layers)
            }
            (None, None) => {
                return Err(PlanError::invalid(
                    "fanouts",
                    "mini-batch training samples with fanouts",
                ))
            }
        };
        let mut batches = MiniBatchConfig::new(fanouts.clone(), s.batch_size.unwrap_or(BATCH_SIZE));
        if let Some(depth) = s.queue_depth {
            batches.queue_depth = depth;
        }
        batches.batches_per_epoch = s.batches_per_epoch;
        let subgraph_origin = subgraph.as_ref().map(|(_, line)| line.clone());
        batches.subgraph = subgraph.map(|(b, _)| b);
        // SIGN reads no graph: its classification evaluated on rows, in batches, is its exact
        // evaluation, without the whole graph in memory that exact inference builds.
        let rows_eval = model.arch == graphloom_nn::Architecture::Sign
            && s.task.is_none_or(|t| t == crate::TaskKind::Node);
        batches.sampled_eval = (s.eval_fanouts.is_some() || s.eval_nodes.is_some() || rows_eval)
            .then(|| SampledEval {
                fanouts: s.eval_fanouts.clone().unwrap_or(fanouts),
                nodes: s.eval_nodes.unwrap_or(usize::MAX),
            });
        let meta = meta.clone();
        let workers = s.workers.unwrap_or(1);
        let backend = s.comm.unwrap_or(Backend::Local);
        let graph_in_memory = matches!(data, MiniBatchData::Loaded(_));
        let common = model.common(settings, train, meta)?;
        if let Some(link) = &link {
            link.check_step(&common.model, Some(batches.batch_size))?;
        }
        let s = &common.settings;
        let n = common.meta.num_nodes;
        // A link batch's seeds are both ends of its pairs, positives and negatives, drawn from
        // the supervision pairs' ends (positives' ends are where the degrees are).
        let link_pairs = link.as_ref().map(|l| l.pairs(batches.batch_size));
        let pair_ends: Vec<usize>;
        let (pool, items) = match &link {
            Some(l) => {
                pair_ends = l.supervision_ends();
                (&pair_ends[..], l.supervision_pairs())
            }
            None => (
                data.graph_data().train_idx,
                data.graph_data().train_idx.len(),
            ),
        };
        let items = items.max(1);
        let seeds = match link_pairs {
            Some(p) => (2 * p.step as usize).min(n),
            None => batches.batch_size.min(items),
        };
        let per_epoch = batches
            .batches_per_epoch
            .unwrap_or(items.div_ceil(batches.batch_size.max(1)));
        let (sampled, induced_bytes) = match &batches.subgraph {
            None => (
                sampled_batch_shape(
                    &data.graph_data(),
                    pool,
                    seeds,
                    batches.fanouts.as_slice(),
                    probe_max_edges(&common.model),
                )?,
                0,
            ),
            Some(b) => subgraph_batch_shape(&data.graph_data(), b, &common.model, workers, s.seed)?,
        };
        let shape = MiniBatchShape {
            seeds: seeds as u64,
            sampled,
            induced_bytes,
            in_flight: (batches.queue_depth + 2).min(per_epoch.max(1)) as u64,
            queue_given: s.queue_depth.is_some(),
            workers: workers as u64,
            producer_threads: MAPPED_PRODUCER_THREADS,
            graph_in_memory,
            learnt_input: embedding.is_some(),
            largest_split: {
                let d = data.graph_data();
                [d.train_idx.len(), d.valid_idx.len(), d.test_idx.len()]
                    .into_iter()
                    .max()
                    .unwrap_or(0) as u64
            },
            exact_eval: batches.sampled_eval.is_none(),
            features_location: s.features_location,
            feature_cache_gib: s.feature_cache_gib,
            inference_memory_gib: s.inference_memory_gib,
            link: link_pairs,
        };
        let division = budget::mini_batch(&RunShape::of(&common)?, &common.meta, &shape)?;
        let features_location = division.features_location;
        if let Some(depth) = division.queue_depth {
            batches.queue_depth = depth;
        }
        // Features read from their file block on the disk: sample and gather on threads of
        // their own, many reads in flight.
        batches.producer_threads =
            (features_location == FeaturesLocation::Mmap).then_some(MAPPED_PRODUCER_THREADS);
        // A worker's own thread and its batch producer; with a pool of producer threads, a
        // second stage that gathers the rows too.
        let threads_each = 2 + batches.producer_threads.map_or(0, |t| t + 1);
        check_local_workers(backend, workers, threads_each, None)?;
        check_layerwise_batch_norm(division.inference_memory_gib.is_some(), &common.model)?;
        batches.layerwise = division
            .inference_memory_gib
            .map(|gib| layerwise_config(gib, s.scratch_dir.clone()))
            .transpose()?;
        check_sizes(
            &common.model,
            budget::rows_computed(&batches, common.meta.num_nodes),
        )?;
        let mut memory = division.memory;
        let feature_reads = match (&data, s.feature_reads.unwrap_or(FeatureReads::Auto)) {
            (MiniBatchData::Mapped(_), FeatureReads::Auto)
                if features_location == FeaturesLocation::Mmap && backend == Backend::Mpi =>
            {
                // See `feature_rows`: the processes of a job map their own rows, which direct
                // reads (of the whole file) cannot address; so say what will happen.
                memory.decisions.push(
                    "feature rows outside the cache read through the page cache: under MPI \
                     each process maps only its own rows"
                        .to_string(),
                );
                FeatureReads::Mapped
            }
            (MiniBatchData::Mapped(ds), FeatureReads::Auto)
                if features_location == FeaturesLocation::Mmap =>
            {
                let (reads, why) = auto_miss_reads(ds, division.feature_cache_gib, memory.peak());
                memory.decisions.push(why);
                reads
            }
            (_, FeatureReads::Auto) => FeatureReads::Mapped,
            (_, asked) => asked,
        };
        Ok(MiniBatchPlan {
            common,
            batches,
            workers,
            backend,
            features_location,
            embedding,
            subgraph_origin,
            feature_cache_gib: division.feature_cache_gib,
            feature_reads,
            memory,
            data,
            link,
        })
    }

    /// Trains on every worker of the job; returns what rank 0 reports.
    pub(crate) fn run<F: FnMut(&EpochRecord) + Send>(
        &self,
        on_epoch: &RootReport<F>,
        on_batch: &(impl Fn(usize, usize) + Sync),
    ) -> Result<MiniBatchOutcome> {
        run_job(self.backend, self.workers, |comm| {
            let rank = comm.rank();
            let on_batch = move |done, total| {
                if rank == 0 {
                    on_batch(done, total)
                }
            };
            self.run_worker(comm, on_epoch.of_rank(rank), on_batch)
        })
    }

    /// One worker of the job.
    fn run_worker(
        &self,
        comm: Arc<dyn Communicator>,
        on_epoch: impl FnMut(&EpochRecord),
        on_batch: impl FnMut(usize, usize) + Send,
    ) -> Result<MiniBatchOutcome> {
        let c = &self.common;
        let rank = comm.rank();
        let mut table;
        let features = match self.embedding {
            Some(_) => None,
            None => Some(self.feature_rows(comm.clone())?),
        };
        let inputs = match (self.embedding, &features) {
            (Some((dim, lr)), _) => {
                let saved = c.init.as_ref().and_then(|m| m.input_embedding.as_ref());
                table = embedding_table(
                    comm.clone(),
                    c.meta.num_nodes,
                    dim,
                    c.train.seed,
                    saved,
                    None,
                )?;
                Inputs::Embedding {
                    table: &mut table,
                    lr,
                }
            }
            (None, Some(rows)) => Inputs::Features(rows.as_source()),
            (None, None) => return Err(no_features(false)),
        };
        let workload = MiniBatch::new(
            self.data.graph_data(),
            inputs,
            comm,
            c.model.clone(),
            c.train.seed,
            &self.batches,
        )?;
        let d = self.data.graph_data();
        let values = value_task(
            &c.settings,
            d.targets,
            [d.train_idx, d.valid_idx, d.test_idx],
        )?;
        let mut workload = match (&self.link, values) {
            (Some(link), _) => workload.with_task(link.task())?,
            (None, Some(task)) => workload.with_task(Task::Values(task))?,
            (None, None) => workload,
        };
        workload.on_batch(on_batch);
        c.start_from_saved(&mut workload)?;
        let report = fit(&mut workload, &c.train, on_epoch)?;
        let stages = workload.stages();
        drop(workload);
        let row_cache = match &features {
            Some(FeatureRows::Cached(c)) => {
                let (hits, misses) = c.hits_and_misses();
                Some(RowCacheReport {
                    cached_rows: c.cached_rows(),
                    hits,
                    misses,
                    rows_read: c.rows_read(),
                    direct_engine: c.direct_engine(),
                    fill_seconds: c.fill_seconds(),
                })
            }
            _ => None,
        };
        Ok(MiniBatchOutcome {
            report,
            root: rank == 0,
            stages,
            row_cache,
        })
    }

    /// The feature rows of a worker: the store table; for features kept on disk, behind a
    /// cache of the rows of the nodes of highest in-degree (of `feature_cache_gib`, or none)
    /// that reads the others as `feature_reads` says (a plain mapped table when neither is
    /// asked for). One table the threads share (Continuous), or each process's own rows
    /// (Distributed) under MPI.
    fn feature_rows(&self, comm: Arc<dyn Communicator>) -> Result<FeatureRows> {
        let layout = if comm.backend() == "mpi" && comm.size() > 1 {
            Layout::Distributed
        } else {
            Layout::Continuous
        };
        Ok(match &self.data {
            MiniBatchData::Mapped(ds) => {
                let table = ds.feature_table(comm, layout, self.features_location)?;
                let reads = self.feature_reads;
                let on_disk = self.features_location == FeaturesLocation::Mmap;
                // Under MPI each process maps only its own rows: direct reads address the
                // whole file, so they are for the single-table layout.
                let direct = reads == FeatureReads::Direct && layout == Layout::Continuous;
                if on_disk && (self.feature_cache_gib.is_some() || direct) {
                    let gib = self.feature_cache_gib.unwrap_or(0.0);
                    let rows = (gib * (1u64 << 30) as f64) as usize / table.row_bytes().max(1);
                    let hot = ds.data().highest_in_degree(rows);
                    let reads = if direct {
                        MissReads::Direct(None)
                    } else {
                        MissReads::Mapped
                    };
                    FeatureRows::Cached(HotRows::new(table, &hot, reads)?)
                } else {
                    FeatureRows::Table(table)
                }
            }
            MiniBatchData::Loaded(ds) => {
                let location = if self.features_location == FeaturesLocation::Shared {
                    Location::SharedHost
                } else {
                    Location::Host
                };
                let spec =
                    StoreSpec::new(ds.features.shape(), ds.features.dtype(), layout, location);
                let mut t = StoreTensor::new(comm, spec)?;
                t.fill_from_whole(ds.features.as_bytes())?;
                FeatureRows::Table(t)
            }
        })
    }
}

/// `auto` feature reads for `ds`'s features kept on disk behind a cache of `cache_gib`:
/// `mapped` (page faults, through the page cache) when the page cache can keep every row that
/// may miss beside the mapped graph and the run's `run_bytes`, else `direct`; with the
/// reason, in words, for the plan's log.
///
/// Reading through the page cache is the faster path whenever it fits: a row read twice is
/// read from the disk once. On the directed R-MAT graph of papers100M's size (a 5.2 GiB cache,
/// 16 GiB left to the page cache) it trained at 0.75x of in-memory features against 0.45x
/// for direct reads, which read 21 rows per seed from the disk against 1-2. When the rows
/// that miss outgrow the page cache, mapped reads fault pages in and out and the graph's
/// pages with them: the realistic papers100M shape in an 8 GiB group trained at 40.7 seeds/s
/// that way and 105.6 reading directly.
fn auto_miss_reads(
    ds: &MappedDataset,
    cache_gib: Option<f64>,
    run_bytes: u64,
) -> (FeatureReads, String) {
    let d = ds.data();
    // Rows as the file stores them (a bf16 file's are half an f32 row).
    let file_dtype = DType::parse(&d.meta.feat_dtype).unwrap_or(DType::F32);
    let row_bytes = (d.meta.feat_dim * file_dtype.size_in_bytes()) as u64;
    let cached_rows = (cache_gib.unwrap_or(0.0) * (1u64 << 30) as f64) as u64 / row_bytes.max(1);
    // Rows a sample can reach: the nodes with an in-edge (all of them in a graph stored both
    // ways; in a directed one, an estimate), less those the cache holds.
    let reachable = d.row_ptr.windows(2).filter(|w| w[1] > w[0]).count() as u64;
    let missed_bytes = reachable.saturating_sub(cached_rows) * row_bytes;
    let graph_bytes = (std::mem::size_of_val(d.row_ptr) + std::mem::size_of_val(d.col_idx)) as u64;
    let memory = crate::plan::available_memory_bytes();
    if memory == 0 {
        return (
            FeatureReads::Mapped,
            "feature rows outside the cache read through the page cache (the memory this \
             process may use is unknown)"
                .to_string(),
        );
    }
    let room = memory.saturating_sub(run_bytes.saturating_add(graph_bytes));
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    if missed_bytes <= room {
        (
            FeatureReads::Mapped,
            format!(
                "feature rows outside the cache read through the page cache: its {:.1} GiB \
                 beside the run and the graph keep the {:.1} GiB of rows that may miss",
                gib(room),
                gib(missed_bytes)
            ),
        )
    } else {
        (
            FeatureReads::Direct,
            format!(
                "feature rows outside the cache read directly (O_DIRECT): the {:.1} GiB of rows \
                 that may miss outgrow the {:.1} GiB of page cache beside the run and the graph",
                gib(missed_bytes),
                gib(room)
            ),
        )
    }
}

/// A worker's feature rows: a store table, or one behind a cache of hot rows.
enum FeatureRows {
    Table(StoreTensor),
    Cached(HotRows),
}

impl FeatureRows {
    fn as_source(&self) -> &dyn RowSource {
        match self {
            FeatureRows::Table(t) => t,
            FeatureRows::Cached(c) => c,
        }
    }
}

/// Opens the dataset of `s` mapped in place (the default synthetic graph is generated in
/// memory), refusing features that would not fit in memory unless they stay on disk; with
/// `edge_features`, reads its edges' features into memory.
fn open(s: &TrainSettings, embedding: bool, edge_features: bool) -> Result<MiniBatchData> {
    let Some(dir) = &s.dataset else {
        if s.features_location == Some(FeaturesLocation::Mmap) {
            return Err(PlanError::invalid(
                "features_location",
                "mmap needs `dataset` (a directory with node_feat.npy)",
            ));
        }
        return Ok(MiniBatchData::Loaded(load(s, false, edge_features)?));
    };
    let meta = Meta::read(dir)?;
    // With a budget, the division decides whether the features stay on disk.
    if !embedding && s.features_location != Some(FeaturesLocation::Mmap) && s.memory_gib.is_none() {
        let dtype = DType::parse(&meta.feat_dtype).unwrap_or(DType::F32);
        check_features_fit(&meta, dtype, TrainMode::MiniBatch)?;
    }
    let mut ds = MappedDataset::open(dir)?;
    if edge_features {
        ds.load_edge_features()?;
    }
    ds.advise_random();
    if !embedding && ds.meta.feat_dim == 0 {
        return Err(no_features(false));
    }
    Ok(MiniBatchData::Mapped(ds))
}
