//! [`Epochs`]: what every loader does with its epochs, whatever its batches are. One epoch runs
//! at a time on the training workloads' batch stream (`graphloom_nn::batches`): a producer
//! thread makes the epoch's batches into a bounded queue ahead of the consumer, and hands its
//! sampler back when the epoch ends or is stopped, so the next epoch reuses it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use graphloom_graph::sample::Sampler;
use graphloom_nn::batches::{
    producer_pool, BatchStream, StreamSettings, MAX_PRODUCER_THREADS, MAX_QUEUE_DEPTH,
};
use pyo3::prelude::*;

use crate::errors::{self, invalid};
use crate::process::{check_signals, Owner};

/// Makes batch `i` of an epoch with the loader's sampler, on the producer thread.
pub(crate) type MakeBatch<B> = Box<dyn FnMut(&mut Sampler, usize) -> PyResult<B> + Send>;

/// An epoch's plan: its number of batches and how batch `i` is made.
pub(crate) struct EpochPlan<B> {
    /// The batches of the epoch.
    pub(crate) batches: usize,
    /// Makes batch `i` with the loader's sampler.
    pub(crate) make: MakeBatch<B>,
}

/// A loader's epochs: the one running, the epoch counter and the sampler between epochs.
pub(crate) struct Epochs<B> {
    /// The loader's Python name, for messages.
    name: &'static str,
    /// Nodes of the graph, for a new sampler.
    num_nodes: usize,
    queue_depth: usize,
    /// The producer's own thread pool (`None`: the global one).
    pool: Option<Arc<rayon::ThreadPool>>,
    state: Mutex<State<B>>,
    owner: Owner,
}

struct State<B> {
    epoch: u64,
    running: Option<BatchStream<'static, B, PyErr>>,
    sampler: Option<Sampler>,
}

// Every lock of the state is taken with the interpreter lock released (the loaders' methods
// release it before calling these), so a thread never holds the state while it waits for the
// interpreter.
impl<B: Send + 'static> Epochs<B> {
    /// The epochs of loader `name` over a graph of `num_nodes` nodes, `queue_depth` batches
    /// made ahead, the producer's loops on `workers` threads of its own (0: the global pool).
    pub(crate) fn new(
        name: &'static str,
        num_nodes: usize,
        queue_depth: usize,
        workers: usize,
    ) -> PyResult<Epochs<B>> {
        if !(1..=MAX_QUEUE_DEPTH).contains(&queue_depth) {
            return Err(invalid(format!(
                "queue_depth {queue_depth}: batches made ahead, 1 to {MAX_QUEUE_DEPTH}"
            )));
        }
        let pool = match workers {
            0 => None,
            w if w > MAX_PRODUCER_THREADS => {
                return Err(invalid(format!(
                    "num_workers {w}: at most {MAX_PRODUCER_THREADS} threads"
                )))
            }
            w => Some(producer_pool(w).map_err(errors::raise)?),
        };
        Ok(Epochs {
            name,
            num_nodes,
            queue_depth,
            pool,
            state: Mutex::new(State {
                epoch: 0,
                running: None,
                sampler: None,
            }),
            owner: Owner::here(),
        })
    }

    /// Fails in a process forked from the one that made the loader.
    pub(crate) fn check_owner(&self) -> PyResult<()> {
        self.owner.check(&format!("this {}", self.name))
    }

    fn lock(&self) -> MutexGuard<'_, State<B>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops the epoch in flight, if any, and takes its sampler back.
    fn stop(&self, state: &mut State<B>) -> PyResult<()> {
        if let Some(running) = state.running.take() {
            match running.finish() {
                Ok(sampler) => state.sampler = Some(sampler),
                Err(_) => {
                    return Err(errors::failure(format!(
                        "{}: the producer thread failed; the epoch is incomplete",
                        self.name
                    )))
                }
            }
        }
        Ok(())
    }

    /// Stops the running epoch (stopping one still running first) and starts the next, whose
    /// plan `plan(epoch number)` makes; returns the epoch's number.
    pub(crate) fn start(&self, plan: impl FnOnce(u64) -> EpochPlan<B>) -> PyResult<u64> {
        let mut state = self.lock();
        self.stop(&mut state)?;
        let number = state.epoch;
        state.epoch += 1;
        let EpochPlan { batches, make } = plan(number);
        let sampler = state
            .sampler
            .take()
            .unwrap_or_else(|| Sampler::new(self.num_nodes));
        let stream = StreamSettings {
            batches,
            depth: self.queue_depth,
            sampler,
            pool: self.pool.clone(),
        };
        state.running = Some(BatchStream::spawn(stream, make).map_err(errors::raise)?);
        Ok(number)
    }

    /// The next batch of the running epoch, or None at its end.
    pub(crate) fn next(&self) -> PyResult<Option<B>> {
        let mut state = self.lock();
        let Some(running) = state.running.as_mut() else {
            return Ok(None);
        };
        match running.next() {
            Some(Ok(batch)) => Ok(Some(batch)),
            Some(Err(e)) => {
                // The producer stopped after sending its error; its own is the one to tell.
                let _ = self.stop(&mut state);
                Err(e)
            }
            // The queue closed: the epoch ended, or the producer failed (then `stop` says so).
            None => self.stop(&mut state).map(|()| None),
        }
    }

    /// Runs the epoch `plan` makes with the consumer in Rust (every batch received and
    /// dropped): (batches, seconds), the loader's speed without Python. Ctrl-C stops it
    /// between batches.
    pub(crate) fn drain(&self, plan: impl FnOnce(u64) -> EpochPlan<B>) -> PyResult<(usize, f64)> {
        let start = Instant::now();
        self.start(plan)?;
        let mut count = 0;
        while self.next()?.is_some() {
            count += 1;
            check_signals().inspect_err(|_| {
                let _ = self.stop_running();
            })?;
        }
        Ok((count, start.elapsed().as_secs_f64()))
    }

    /// Stops the running epoch's producer (in a forked child, where it does not run, nothing).
    pub(crate) fn stop_running(&self) -> PyResult<()> {
        if !self.owner.is_here() {
            return Ok(());
        }
        self.stop(&mut self.lock())
    }
}

/// The most ranks a loader's batches are sliced for.
const MAX_RANKS: usize = 1 << 20;

/// Fails unless `rank` is one of `ranks` ranks (a loader takes slice `rank` of every global
/// batch).
pub(crate) fn check_rank(rank: usize, ranks: usize) -> PyResult<()> {
    if ranks == 0 || rank >= ranks {
        return Err(invalid(format!("rank {rank} of {ranks} ranks")));
    }
    if ranks > MAX_RANKS {
        return Err(invalid(format!("ranks {ranks}: at most {MAX_RANKS}")));
    }
    Ok(())
}
