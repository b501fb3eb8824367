//! The batch stream, written once for every way of batching and every consumer (the training
//! workloads and the Python loaders): a producer thread makes batch `0, 1, ...` ahead of the
//! consumer into a bounded queue, optionally running its parallel loops on a thread pool of
//! its own, and borrows the [`Sampler`] (whose relabel table has a slot per node, so it is made
//! once and lent to each epoch) for the stream's life. What differs per batching is only the
//! function from a batch index to a batch; [`sample_batch`] is neighbour sampling's.
//!
//! The seeds of each batch come from [`epoch_batches`]: an order of the seed nodes drawn from
//! (seed, epoch), cut into global batches, each cut into one contiguous slice per worker, so a
//! batch is the same for any thread or worker count.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::{JoinHandle, Scope, ScopedJoinHandle};
use std::time::Instant;

use graphloom_graph::sample::{Block, Sampler, SamplerKind};
use graphloom_graph::{GraphData, NodeId};
use graphloom_store::RowSource;
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{DType, Tensor};

use crate::{Error, Result};

/// Batches a stream makes ahead of its consumer unless told otherwise: the training loop's and
/// every Python loader's default.
pub const DEFAULT_QUEUE_DEPTH: usize = 4;
/// The most batches a stream may make ahead of its consumer.
pub const MAX_QUEUE_DEPTH: usize = 1024;
/// The most threads of a producer's own pool.
pub const MAX_PRODUCER_THREADS: usize = 1024;

/// The seeds of each step of an epoch for worker `rank` of `ranks`: the nodes `nodes` put in
/// an order drawn from (seed, epoch), cut into global batches of `batch_size`, and each global
/// batch into `ranks` contiguous slices. Every worker gets one slice per step (possibly empty),
/// so all run the same number of steps, and the slices of a step together are that step's
/// batch on one worker.
pub fn epoch_batches(
    nodes: &[usize],
    seed: u64,
    epoch: u64,
    batch_size: usize,
    rank: usize,
    ranks: usize,
) -> Vec<Vec<NodeId>> {
    let key = RngKey::new(seed, epoch, 0x5348_5546);
    let mut order: Vec<(u64, NodeId)> = nodes
        .iter()
        .map(|&v| (key.bits(v as u64, 0), v as NodeId))
        .collect();
    order.sort_unstable();
    let order: Vec<NodeId> = order.into_iter().map(|(_, v)| v).collect();
    slice_batches(&order, batch_size, rank, ranks)
}

/// `nodes` in order, cut into global batches of `batch_size` and each into `ranks` contiguous
/// slices, of which this returns slice `rank` of every batch.
pub fn slice_batches(
    nodes: &[NodeId],
    batch_size: usize,
    rank: usize,
    ranks: usize,
) -> Vec<Vec<NodeId>> {
    nodes
        .chunks(batch_size.max(1))
        .map(|global| rank_slice(global, rank, ranks).to_vec())
        .collect()
}

/// Slice `rank` of `ranks` contiguous slices of `global`.
pub fn rank_slice<T>(global: &[T], rank: usize, ranks: usize) -> &[T] {
    let n = global.len();
    &global[n * rank / ranks..n * (rank + 1) / ranks]
}

/// Batches made ahead of the consumer, on a producer thread, into a bounded queue; iterate it
/// for the batches in order, then [`BatchStream::finish`] to get the sampler back. The
/// producer stops after the first error it sends (of the consumer's error type `E`), and
/// when the stream is dropped.
pub struct BatchStream<'scope, B, E = Error> {
    queue: Option<Receiver<std::result::Result<B, E>>>,
    producer: Option<Producer<'scope>>,
    /// The second stage of a stream made in two ([`BatchStream::scoped_in_stages`]).
    finisher: Option<ScopedJoinHandle<'scope, ()>>,
}

enum Producer<'scope> {
    Scoped(ScopedJoinHandle<'scope, Sampler>),
    Owned(JoinHandle<Sampler>),
}

/// How a stream makes its batches: how many, how many ahead, with which sampler and pool.
pub struct StreamSettings {
    /// Batches in the stream.
    pub batches: usize,
    /// Batches made ahead of the consumer (at least 1).
    pub depth: usize,
    /// The sampler lent to the producer for the stream's life.
    pub sampler: Sampler,
    /// A thread pool of the producer's own for its parallel loops (`None`: the global pool,
    /// shared with the consumer). Reads of mapped files block their thread on the disk: in a
    /// pool of their own, many are in flight at once and none holds up the consumer's threads.
    pub pool: Option<Arc<rayon::ThreadPool>>,
}

impl<B: Send + 'static, E: Send + 'static> BatchStream<'static, B, E> {
    /// Starts a producer thread that owns everything it needs (a loader driven from another
    /// language, whose calls come one at a time): `make(sampler, i)` for each batch `i`.
    pub fn spawn(
        settings: StreamSettings,
        make: impl FnMut(&mut Sampler, usize) -> std::result::Result<B, E> + Send + 'static,
    ) -> Result<BatchStream<'static, B, E>> {
        let (tx, rx) = sync_channel(settings.depth.max(1));
        let handle = graphloom_tensor::threads::builder()
            .and_then(|b| {
                b.name("graphloom-batches".into())
                    .spawn(move || produce(settings, make, tx))
            })
            .map_err(spawn_error)?;
        Ok(BatchStream {
            queue: Some(rx),
            producer: Some(Producer::Owned(handle)),
            finisher: None,
        })
    }
}

impl<'scope, B: Send + 'scope, E: Send + 'scope> BatchStream<'scope, B, E> {
    /// Starts a producer thread in `scope`, so `make(sampler, i)` may borrow what the scope
    /// outlives (a training workload's dataset and tables).
    pub fn scoped<'env>(
        scope: &'scope Scope<'scope, 'env>,
        settings: StreamSettings,
        make: impl FnMut(&mut Sampler, usize) -> std::result::Result<B, E> + Send + 'scope,
    ) -> Result<BatchStream<'scope, B, E>> {
        let (tx, rx) = sync_channel(settings.depth.max(1));
        let handle = graphloom_tensor::threads::builder()
            .and_then(|b| {
                b.name("graphloom-batches".into())
                    .spawn_scoped(scope, move || produce(settings, make, tx))
            })
            .map_err(spawn_error)?;
        Ok(BatchStream {
            queue: Some(rx),
            producer: Some(Producer::Scoped(handle)),
            finisher: None,
        })
    }

    /// A stream made in two stages on two threads of `scope`: `make(sampler, i)` (sampling,
    /// which needs the sampler) for batch `i + 1` runs while `finish` (gathering its rows,
    /// which does not) completes batch `i`. Where both stages wait on a disk (a mapped graph's
    /// pages, feature rows read from a file), their waits overlap instead of adding up.
    /// Batches still come out in order, and `finish` sees them in order (a collective gather
    /// stays in step across workers).
    pub fn scoped_in_stages<'env, A: Send + 'scope>(
        scope: &'scope Scope<'scope, 'env>,
        settings: StreamSettings,
        make: impl FnMut(&mut Sampler, usize) -> std::result::Result<A, E> + Send + 'scope,
        mut finish: impl FnMut(A) -> std::result::Result<B, E> + Send + 'scope,
    ) -> Result<BatchStream<'scope, B, E>> {
        // One batch between the stages: the queue after them holds the look-ahead.
        let (half_tx, half_rx) = sync_channel::<std::result::Result<A, E>>(1);
        let (tx, rx) = sync_channel(settings.depth.max(1));
        let pool = settings.pool.clone();
        let handle = graphloom_tensor::threads::builder()
            .and_then(|b| {
                b.name("graphloom-batches".into())
                    .spawn_scoped(scope, move || produce(settings, make, half_tx))
            })
            .map_err(spawn_error)?;
        let finisher = graphloom_tensor::threads::builder().and_then(|b| {
            b.name("graphloom-batches-finish".into())
                .spawn_scoped(scope, move || {
                    for half in half_rx {
                        let batch = half.and_then(|a| match &pool {
                            Some(pool) => pool.install(|| finish(a)),
                            None => finish(a),
                        });
                        let failed = batch.is_err();
                        if tx.send(batch).is_err() || failed {
                            break;
                        }
                    }
                })
        });
        let finisher = match finisher {
            Ok(f) => f,
            Err(e) => {
                // The producer ends once its queue's receiver is gone.
                drop(handle.join());
                return Err(spawn_error(e));
            }
        };
        Ok(BatchStream {
            queue: Some(rx),
            producer: Some(Producer::Scoped(handle)),
            finisher: Some(finisher),
        })
    }

    /// Stops the producer (it finishes the batch in hand) and returns the sampler it
    /// borrowed.
    pub fn finish(mut self) -> Result<Sampler> {
        self.queue = None;
        let failed = || Error::InvalidSetting {
            setting: "batches",
            reason: "the thread that makes batches failed".into(),
        };
        if let Some(f) = self.finisher.take() {
            f.join().map_err(|_| failed())?;
        }
        match self.producer.take().ok_or_else(failed)? {
            Producer::Scoped(h) => h.join(),
            Producer::Owned(h) => h.join(),
        }
        .map_err(|_| failed())
    }
}

impl<B, E> Iterator for BatchStream<'_, B, E> {
    type Item = std::result::Result<B, E>;

    /// The next batch, or `None` at the end of the stream (or after the producer stopped
    /// without a batch, which [`BatchStream::finish`] then reports).
    fn next(&mut self) -> Option<std::result::Result<B, E>> {
        self.queue.as_ref()?.recv().ok()
    }
}

impl<B, E> Drop for BatchStream<'_, B, E> {
    fn drop(&mut self) {
        // Closing the queue first lets a producer blocked on a full queue end; it is then
        // joined so that no thread outlives its stream.
        self.queue = None;
        // The finisher ends on the closed queue, which closes the producer's.
        if let Some(f) = self.finisher.take() {
            drop(f.join());
        }
        match self.producer.take() {
            Some(Producer::Scoped(h)) => drop(h.join()),
            Some(Producer::Owned(h)) => drop(h.join()),
            None => {}
        }
    }
}

/// The producer's loop: each batch into the queue until the end, the first error, or a
/// consumer that went away.
fn produce<B: Send, E: Send>(
    mut settings: StreamSettings,
    mut make: impl FnMut(&mut Sampler, usize) -> std::result::Result<B, E> + Send,
    tx: SyncSender<std::result::Result<B, E>>,
) -> Sampler {
    let sampler = &mut settings.sampler;
    for i in 0..settings.batches {
        let batch = match &settings.pool {
            Some(pool) => pool.install(|| make(sampler, i)),
            None => make(sampler, i),
        };
        let failed = batch.is_err();
        if tx.send(batch).is_err() || failed {
            break;
        }
    }
    settings.sampler
}

fn spawn_error(e: std::io::Error) -> Error {
    Error::InvalidSetting {
        setting: "batches",
        reason: format!("cannot start the thread that makes batches: {e}"),
    }
}

/// A thread pool of `threads` threads for a stream's producer.
pub fn producer_pool(threads: usize) -> Result<Arc<rayon::ThreadPool>> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(|i| format!("graphloom-producer-{i}"))
        .spawn_handler(graphloom_tensor::threads::spawn_pool_thread)
        .build()
        .map(Arc::new)
        .map_err(|e| Error::InvalidSetting {
            setting: "producer threads",
            reason: format!(
                "cannot start {threads} threads to make batches ({e}): each needs a stack of \
                 its own; give the process more address space (ulimit -v)"
            ),
        })
}

/// One neighbour-sampled batch: the blocks from the seeds outwards (the first block's sources
/// are the input rows, seeds first) and, when a row table was given, the input rows.
pub struct SampledBatch {
    /// The seeds, in order.
    pub seeds: Vec<NodeId>,
    /// One block per hop, the input layer's first.
    pub blocks: Vec<Block>,
    /// The node id of each input row (the first block's sources).
    pub input_ids: Vec<i64>,
    /// The input rows, `[input_ids.len(), columns]`, in the dtype asked for.
    pub x: Option<Tensor>,
    /// Seconds spent sampling.
    pub sample_seconds: f64,
    /// Seconds spent gathering the input rows.
    pub gather_seconds: f64,
}

/// Samples blocks around `seeds` with `fanouts` (uniformly without replacement, every draw
/// keyed by `seed`, `epoch`, hop and node) and gathers the input rows from `rows` as `x_dtype`.
/// A worker with no seeds (an empty slice of a global batch) returns `None`, after taking part
/// in the table's gather when that is collective.
pub fn sample_batch(
    data: GraphData<'_>,
    rows: Option<&dyn RowSource>,
    x_dtype: DType,
    sampler: &mut Sampler,
    seeds: &[NodeId],
    fanouts: &[i64],
    seed: u64,
    epoch: u64,
) -> Result<Option<SampledBatch>> {
    if seeds.is_empty() {
        // A Distributed gather is collective: take part with no ids.
        if let Some(r) = rows.filter(|r| r.collective()) {
            r.gather(&[])?;
        }
        return Ok(None);
    }
    let start = Instant::now();
    let blocks = sampler.sample(
        &data.source(),
        seeds,
        fanouts,
        SamplerKind::Uniform,
        seed,
        epoch,
    )?;
    let sampled = Instant::now();
    let input_ids: Vec<i64> = blocks[0].src_nodes.iter().map(|&v| i64::from(v)).collect();
    let x = match rows {
        Some(r) => Some(r.gather(&input_ids)?.cast(x_dtype)?),
        None => None,
    };
    Ok(Some(SampledBatch {
        seeds: seeds.to_vec(),
        blocks,
        input_ids,
        x,
        sample_seconds: (sampled - start).as_secs_f64(),
        gather_seconds: sampled.elapsed().as_secs_f64(),
    }))
}
