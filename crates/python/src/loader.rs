//! [`Loader`]: a loader's Rust half, whatever its batches are (the node loader's seeds,
//! `node_loader`, or the link loader's pairs, `link_loader`). Each epoch ([`Epochs`]) a
//! producer thread makes the batches its [`Batches`] plan into a bounded queue ahead of the
//! consumer; [`Loader::drain`] consumes an epoch without Python, the baseline the Python loop
//! is measured against.

use std::sync::Arc;

use graphloom_nn::batches::rank_slice;
use pyo3::prelude::*;

use crate::epochs::{EpochPlan, Epochs};

/// What a loader batches: how many batches an epoch has and how each is made.
pub(crate) trait Batches: Send + Sync + 'static {
    /// The number of batches per epoch.
    fn count(&self) -> usize;

    /// Epoch `number`'s batches, drawn from `drawn` when given (a seed drawn for this epoch
    /// alone, from torch's generator, decides it whole, as PyG's: the same draw gives the same
    /// batches, whichever epoch it is), else from the loader's seed and the epoch.
    fn plan(self: Arc<Self>, drawn: Option<u64>, number: u64) -> EpochPlan<Made>;
}

/// A batch as its producer made it, turned into its Python object by the consumer.
pub(crate) trait IntoBatch: Send {
    /// The batch's Python object.
    fn into_py(self: Box<Self>, py: Python<'_>) -> PyResult<Py<PyAny>>;
}

/// A batch in the queue.
pub(crate) type Made = Box<dyn IntoBatch>;

/// A loader's producer and queue.
#[pyclass(module = "graphloom._graphloom", frozen)]
pub(crate) struct Loader {
    batches: Arc<dyn Batches>,
    epochs: Epochs<Made>,
}

impl Loader {
    /// The loader of `batches`, over `epochs`.
    pub(crate) fn new(batches: Arc<dyn Batches>, epochs: Epochs<Made>) -> Loader {
        Loader { batches, epochs }
    }
}

#[pymethods]
impl Loader {
    /// The number of batches per epoch.
    fn __len__(&self) -> usize {
        self.batches.count()
    }

    /// Starts the next epoch's producer (stopping one still running) and returns its number;
    /// its order and draws come from `seed` (default: the loader's).
    #[pyo3(signature = (seed=None))]
    fn start_epoch(&self, py: Python<'_>, seed: Option<u64>) -> PyResult<u64> {
        self.epochs.check_owner()?;
        py.detach(|| {
            self.epochs
                .start(|number| self.batches.clone().plan(seed, number))
        })
    }

    /// The next batch of the running epoch, or None at its end.
    fn next_batch(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.epochs.check_owner()?;
        let batch = py.detach(|| self.epochs.next())?;
        batch.map(|b| b.into_py(py)).transpose()
    }

    /// Runs one epoch with the consumer in Rust (every batch received and dropped) and returns
    /// (batches, seconds): the loader's speed without Python. Ctrl-C stops it between batches.
    fn drain(&self, py: Python<'_>) -> PyResult<(usize, f64)> {
        self.epochs.check_owner()?;
        py.detach(|| {
            self.epochs
                .drain(|number| self.batches.clone().plan(None, number))
        })
    }

    /// Stops the running epoch's producer (in a forked child, where it does not run, nothing).
    fn stop_running(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.epochs.stop_running())
    }
}

/// How a loader cuts its items (seeds or pairs) into the batches of an epoch.
pub(crate) struct Batching {
    /// The items of an epoch.
    pub(crate) items: usize,
    /// Items per global batch.
    pub(crate) batch_size: usize,
    /// Whether each epoch draws a new order.
    pub(crate) shuffle: bool,
    /// Whether a last global batch shorter than `batch_size` is left out.
    pub(crate) drop_last: bool,
    /// The loader's seed, for epochs without a drawn one.
    pub(crate) seed: u64,
    /// This rank takes slice `rank` of `ranks` of every global batch.
    pub(crate) rank: usize,
    pub(crate) ranks: usize,
}

impl Batching {
    /// The number of batches per epoch.
    pub(crate) fn count(&self) -> usize {
        let (full, rest) = (self.items / self.batch_size, self.items % self.batch_size);
        full + usize::from(rest > 0 && !self.drop_last)
    }

    /// The (seed, epoch) epoch `number` draws from: a seed drawn for this epoch alone (from
    /// torch's generator) decides it whole, as PyG's, whichever epoch it is.
    pub(crate) fn seed_and_epoch(&self, drawn: Option<u64>, number: u64) -> (u64, u64) {
        match drawn {
            Some(drawn) => (drawn, 0),
            None => (self.seed, number),
        }
    }

    /// The epoch's global batches: `shuffled()` when the loader shuffles, else `in_order()`;
    /// a short last batch left out when asked.
    pub(crate) fn global<T>(
        &self,
        shuffled: impl FnOnce() -> Vec<Vec<T>>,
        in_order: impl FnOnce() -> Vec<Vec<T>>,
    ) -> Vec<Vec<T>> {
        let mut global = if self.shuffle { shuffled() } else { in_order() };
        if self.drop_last && global.last().is_some_and(|b| b.len() < self.batch_size) {
            global.pop();
        }
        global
    }

    /// Epoch `number`'s batches of seed nodes (`input_nodes`, in order or shuffled by the
    /// trainer's `epoch_batches`), this rank's slice of each, with the (seed, epoch) they were
    /// drawn from: what the node loaders share.
    pub(crate) fn node_seed_slices(
        &self,
        input_nodes: &[usize],
        drawn: Option<u64>,
        number: u64,
    ) -> (u64, u64, Vec<Vec<graphloom_graph::NodeId>>) {
        let (seed, epoch) = self.seed_and_epoch(drawn, number);
        let global = self.global(
            || {
                graphloom_nn::batches::epoch_batches(
                    input_nodes,
                    seed,
                    epoch,
                    self.batch_size,
                    0,
                    1,
                )
            },
            || {
                input_nodes
                    .chunks(self.batch_size)
                    .map(|c| c.iter().map(|&v| v as graphloom_graph::NodeId).collect())
                    .collect()
            },
        );
        (seed, epoch, self.rank_slices(&global))
    }

    /// This rank's slice of each of the `global` batches.
    pub(crate) fn rank_slices<T: Clone>(&self, global: &[Vec<T>]) -> Vec<Vec<T>> {
        global
            .iter()
            .map(|b| rank_slice(b, self.rank, self.ranks).to_vec())
            .collect()
    }
}
