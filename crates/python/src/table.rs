//! [`Table`]: a store table (`graphloom_store::Embedding`: frozen, or trainable with a sparse
//! optimizer) behind a lock, so the Python object and a loader's producer thread can share it,
//! and closable, so the job can end while Python still holds the object.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use graphloom_comm::Communicator;
use graphloom_store::{
    check_support, Embedding, Layout, Location, SparseOptimizer, StoreSpec, StoreTensor, Topology,
};
use graphloom_tensor::{DType, Tensor};
use pyo3::prelude::*;

use crate::buffers::Held;
use crate::errors::{self, invalid};
use crate::job::Comm;
use crate::process::Owner;
use crate::view::View;

/// The most ranks a saved table is read back from (one file each).
const MAX_SAVED_RANKS: usize = 1 << 16;

/// The table, or nothing once closed.
pub(crate) type Shared = Arc<Mutex<Option<Embedding>>>;

/// Locks a shared table and fails when it was closed.
pub(crate) fn open_table<'a>(
    shared: &'a Shared,
    op: &str,
) -> PyResult<MutexGuard<'a, Option<Embedding>>> {
    let guard = shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if guard.is_none() {
        return Err(invalid(format!("{op}: the table is closed")));
    }
    Ok(guard)
}

pub(crate) fn parse_dtype(name: &str) -> PyResult<DType> {
    DType::parse(name).ok_or_else(|| {
        invalid(format!(
            "dtype '{name}' is not one of float32, float64, bfloat16, int32, int64"
        ))
    })
}

pub(crate) fn parse_layout(name: &str) -> PyResult<Layout> {
    Layout::parse(name).ok_or_else(|| {
        invalid(format!(
            "layout '{name}' is not continuous, chunked or distributed"
        ))
    })
}

/// `host` (also WholeGraph's `cpu`), `shared`, or `mmap` with a path.
pub(crate) fn parse_location(
    name: &str,
    path: Option<PathBuf>,
    writable: bool,
) -> PyResult<Location> {
    match (name, path) {
        ("host" | "cpu", None) => Ok(Location::Host),
        ("shared", None) => Ok(Location::SharedHost),
        ("mmap", Some(path)) => Ok(Location::Mmap { path, writable }),
        ("mmap", None) => Err(invalid("location 'mmap' needs a path: the file to map")),
        ("host" | "cpu" | "shared", Some(_)) => Err(invalid(format!(
            "location '{name}' takes no path (only mmap does)"
        ))),
        ("cuda" | "device", _) => Err(invalid(
            "location 'cuda': this build keeps tables in host memory (host, shared or mmap)",
        )),
        (other, _) => Err(invalid(format!(
            "location '{other}' is not host, shared or mmap"
        ))),
    }
}

/// Fails before any collective step when the layout and location cannot go together in this
/// job (a Chunked table in private memory over several processes, say).
fn check_pair(comm: &Arc<dyn Communicator>, layout: Layout, location: &Location) -> PyResult<()> {
    let topology = Topology {
        ranks: comm.size(),
        ranks_on_node: crate::job::node_ranks().min(comm.size()),
        one_process: comm.backend() == "local" || comm.size() == 1,
    };
    check_support(layout, location, topology).map_err(errors::raise)
}

/// `table`, trainable with the sparse optimizer `optimizer` (with `weight_decay` and the
/// hyper-parameters `params`, by WholeGraph's names) when one is named.
fn with_optimizer(
    table: StoreTensor,
    optimizer: Option<&str>,
    weight_decay: f32,
    params: &[(String, f32)],
) -> PyResult<Embedding> {
    match optimizer {
        None => Ok(Embedding::frozen(table)),
        Some(name) => {
            let mut optimizer = SparseOptimizer::parse(name)
                .map_err(errors::raise)?
                .with_weight_decay(weight_decay);
            for (param, value) in params {
                optimizer = optimizer.with_param(param, *value).map_err(errors::raise)?;
            }
            Embedding::trainable(table, optimizer).map_err(errors::raise)
        }
    }
}

/// A table in the store: this rank's handle on rows spread over the ranks of a communicator.
#[pyclass(module = "graphloom._graphloom", frozen)]
pub(crate) struct Table {
    pub(crate) shared: Shared,
    spec: StoreSpec,
    rank: usize,
    ranks: usize,
    owner: Owner,
}

impl Table {
    pub(crate) fn wrap(embedding: Embedding) -> Table {
        let table = embedding.table();
        Table {
            spec: table.spec().clone(),
            rank: table.comm().rank(),
            ranks: table.comm().size(),
            owner: Owner::here(),
            shared: Arc::new(Mutex::new(Some(embedding))),
        }
    }

    /// Locks the open table, in the process that made it (see [`open_table`]).
    pub(crate) fn open(&self, op: &str) -> PyResult<MutexGuard<'_, Option<Embedding>>> {
        self.owner.check("this table")?;
        open_table(&self.shared, op)
    }

    /// Runs `f` on the open table with the interpreter lock released, taking the table's
    /// lock only then: a thread never holds the table while it waits for the interpreter, so
    /// Python threads sharing a table cannot deadlock.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        op: &str,
        f: impl FnOnce(&mut Embedding) -> PyResult<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut guard = self.open(op)?;
            f(guard.as_mut().expect("open_table checked"))
        })
    }
}

#[pymethods]
impl Table {
    /// Creates a table of `shape` (collective). `optimizer` makes it trainable (2-D float32),
    /// its rows then drawn uniformly in `[-init_scale, init_scale)` from `seed`.
    #[staticmethod]
    #[pyo3(signature = (comm, shape, dtype, layout, location, path=None, writable=true,
                        optimizer=None, weight_decay=0.0, init_scale=0.0, seed=0,
                        optimizer_params=Vec::new()))]
    fn create(
        py: Python<'_>,
        comm: &Comm,
        shape: Vec<usize>,
        dtype: &str,
        layout: &str,
        location: &str,
        path: Option<PathBuf>,
        writable: bool,
        optimizer: Option<&str>,
        weight_decay: f32,
        init_scale: f32,
        seed: u64,
        optimizer_params: Vec<(String, f32)>,
    ) -> PyResult<Table> {
        let comm = comm.get()?;
        let (dtype, layout) = (parse_dtype(dtype)?, parse_layout(layout)?);
        let location = parse_location(location, path, writable)?;
        if shape.is_empty() || shape.len() > 2 {
            return Err(invalid(format!(
                "shape {shape:?}: a table is [rows] or [rows, columns]"
            )));
        }
        check_pair(&comm, layout, &location)?;
        if optimizer.is_some()
            && matches!(
                location,
                Location::Mmap {
                    writable: false,
                    ..
                }
            )
        {
            return Err(invalid(
                "a trainable table must be writable: it changes every step",
            ));
        }
        let spec = StoreSpec::new(&shape, dtype, layout, location);
        let embedding = py.detach(|| -> PyResult<Embedding> {
            let table = StoreTensor::new(comm, spec).map_err(errors::raise)?;
            let mut embedding = with_optimizer(table, optimizer, weight_decay, &optimizer_params)?;
            if embedding.optimizer().is_some() && init_scale != 0.0 {
                embedding
                    .init_uniform(seed, init_scale)
                    .map_err(errors::raise)?;
            }
            Ok(embedding)
        })?;
        Ok(Table::wrap(embedding))
    }

    /// Creates a table from files (collective): raw row-major `.bin` parts, logically
    /// concatenated, or `.npy` arrays; each rank reads only its own rows.
    #[staticmethod]
    #[pyo3(signature = (comm, files, row_shape, dtype, layout, location, path=None,
                        optimizer=None, weight_decay=0.0, optimizer_params=Vec::new()))]
    fn from_files(
        py: Python<'_>,
        comm: &Comm,
        files: Vec<PathBuf>,
        row_shape: Vec<usize>,
        dtype: &str,
        layout: &str,
        location: &str,
        path: Option<PathBuf>,
        optimizer: Option<&str>,
        weight_decay: f32,
        optimizer_params: Vec<(String, f32)>,
    ) -> PyResult<Table> {
        let comm = comm.get()?;
        let (dtype, layout) = (parse_dtype(dtype)?, parse_layout(layout)?);
        let location = parse_location(location, path, true)?;
        if files.is_empty() {
            return Err(invalid("the file list is empty"));
        }
        if row_shape.len() > 1 {
            return Err(invalid(format!(
                "row shape {row_shape:?}: rows are scalars or vectors"
            )));
        }
        check_pair(&comm, layout, &location)?;
        let embedding = py.detach(|| -> PyResult<Embedding> {
            let table = StoreTensor::from_files(comm, &files, &row_shape, dtype, layout, location)
                .map_err(|e| match e {
                    // The files are the caller's: one that does not hold rows of the shape
                    // and dtype given is an argument that does not fit, not a damaged file.
                    graphloom_store::StoreError::File(f @ graphloom_io::Error::Format { .. }) => {
                        invalid(f.to_string())
                    }
                    other => errors::raise(other),
                })?;
            with_optimizer(table, optimizer, weight_decay, &optimizer_params)
        })?;
        Ok(Table::wrap(embedding))
    }

    /// Loads a trainable float32 table and its optimizer state saved by [`Table::save`] from a
    /// job of `saved_ranks` ranks (collective).
    #[staticmethod]
    #[pyo3(signature = (comm, prefix, saved_ranks, dim, layout, location, optimizer, path=None))]
    fn load_trainable(
        py: Python<'_>,
        comm: &Comm,
        prefix: PathBuf,
        saved_ranks: usize,
        dim: usize,
        layout: &str,
        location: &str,
        optimizer: &str,
        path: Option<PathBuf>,
    ) -> PyResult<Table> {
        let comm = comm.get()?;
        let layout = parse_layout(layout)?;
        let location = parse_location(location, path, true)?;
        check_pair(&comm, layout, &location)?;
        if saved_ranks == 0 || saved_ranks > MAX_SAVED_RANKS {
            return Err(invalid(format!(
                "saved_ranks {saved_ranks}: the number of ranks that saved the table, 1 to \
                 {MAX_SAVED_RANKS}"
            )));
        }
        let optimizer = SparseOptimizer::parse(optimizer).map_err(errors::raise)?;
        let embedding = py
            .detach(|| {
                Embedding::load(
                    comm,
                    &prefix,
                    saved_ranks,
                    dim,
                    layout,
                    location,
                    Some(optimizer),
                )
            })
            .map_err(errors::raise)?;
        Ok(Table::wrap(embedding))
    }

    /// Gathers rows `ids` (a contiguous int64 array) into a new tensor (collective for the
    /// distributed layout).
    fn gather(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<View> {
        let ids = crate::buffers::ids(ids, "gather: ids")?;
        let ids = ids.as_slice();
        let rows = self.with(py, "gather", |e| e.gather(ids).map_err(errors::raise))?;
        Ok(View::new(graphloom_store::DlpackView::of_tensor(rows)))
    }

    /// Seconds of each of `repeats` gathers of `ids` run in Rust, each into a new tensor as
    /// [`Table::gather`] makes: the baseline that the Python call is measured against.
    fn time_gather(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        repeats: usize,
    ) -> PyResult<Vec<f64>> {
        let ids = crate::buffers::ids(ids, "time_gather: ids")?;
        let ids = ids.as_slice();
        self.with(py, "time_gather", |e| {
            (0..repeats)
                .map(|_| {
                    let start = std::time::Instant::now();
                    let rows = e.gather(ids)?;
                    let seconds = start.elapsed().as_secs_f64();
                    drop(rows);
                    Ok(seconds)
                })
                .collect::<graphloom_store::Result<Vec<f64>>>()
                .map_err(errors::raise)
        })
    }

    /// Writes rows: `rows` holds the bytes of `len(ids)` rows in the table's dtype
    /// (collective; every row is written by its owner).
    fn scatter(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        rows: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let ids = crate::buffers::ids(ids, "scatter: ids")?;
        let rows = Held::<u8>::new(rows, "scatter: rows")?;
        let (ids, rows) = (ids.as_slice(), rows.bytes());
        self.with(py, "scatter", |e| {
            e.table().scatter_bytes(ids, rows).map_err(errors::raise)
        })
    }

    /// One sparse optimizer step with learning rate `lr` from float32 gradients
    /// `[len(ids), dim]` of rows `ids` (collective; ids may repeat and belong to any rank).
    fn apply_gradients(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        grads: &Bound<'_, PyAny>,
        lr: f32,
    ) -> PyResult<()> {
        let ids = crate::buffers::ids(ids, "apply_gradients: ids")?;
        let grads = Held::<f32>::new(grads, "apply_gradients: grads")?;
        let dim = self.spec.shape.get(1).copied().unwrap_or(1);
        let grads = Tensor::from_vec(grads.slice().to_vec(), &[ids.as_slice().len(), dim])
            .map_err(|_| {
                invalid(format!(
                    "apply_gradients: {} gradient values for {} ids of width {dim}",
                    grads.slice().len(),
                    ids.as_slice().len()
                ))
            })?;
        let ids = ids.as_slice();
        self.with(py, "apply_gradients", |e| {
            e.apply_gradients(ids, &grads, lr).map_err(errors::raise)
        })
    }

    /// This rank's rows, sharing the table's memory.
    fn local_view(&self, py: Python<'_>) -> PyResult<View> {
        self.with(py, "get_local_tensor", |e| {
            Ok(View::new(e.table().local_view()))
        })
    }

    /// Rank `rank`'s rows and the first one's index, sharing their memory (where this process
    /// maps them: every rank's in the continuous and chunked layouts).
    fn chunk_view(&self, py: Python<'_>, rank: usize) -> PyResult<(View, usize)> {
        self.with(py, "get_all_chunked_tensor", |e| {
            let first = e.table().partition().range(rank).start;
            e.table()
                .chunk_view(rank)
                .map(|v| (View::new(v), first))
                .map_err(errors::raise)
        })
    }

    /// The whole table, sharing its memory (continuous layout only).
    fn global_view(&self, py: Python<'_>) -> PyResult<View> {
        self.with(py, "get_global_tensor", |e| {
            e.table()
                .global_view()
                .map(View::new)
                .map_err(errors::raise)
        })
    }

    /// The rows this rank owns, as (first, end).
    fn local_rows(&self, py: Python<'_>) -> PyResult<(usize, usize)> {
        self.with(py, "local_rows", |e| {
            let r = e.table().local_rows();
            Ok((r.start, r.end))
        })
    }

    /// Saves this rank's rows (with a trainable table's optimizer state) under `prefix`, one
    /// file per rank and component (collective). Returns nothing; files are
    /// `{prefix}_part_{rank}_of_{ranks}` (frozen) or `{prefix}_table_part_...` (trainable).
    fn save(&self, py: Python<'_>, prefix: PathBuf) -> PyResult<()> {
        self.with(py, "save", |e| {
            if e.optimizer().is_some() {
                e.save(&prefix)
            } else {
                e.table().save(&prefix).map(|_| ())
            }
            .map_err(errors::raise)
        })
    }

    /// Refills a trainable table and its optimizer state from [`Table::save`]'s files of a job
    /// of `saved_ranks` ranks (collective).
    fn restore(&self, py: Python<'_>, prefix: PathBuf, saved_ranks: usize) -> PyResult<()> {
        self.with(py, "load", |e| {
            if e.optimizer().is_none() {
                return Err(invalid(
                    "load: a frozen table is loaded with create_embedding_from_filelist",
                ));
            }
            if saved_ranks == 0 || saved_ranks > MAX_SAVED_RANKS {
                return Err(invalid(format!(
                    "saved_ranks {saved_ranks}: the number of ranks that saved the table, 1 \
                     to {MAX_SAVED_RANKS}"
                )));
            }
            e.restore(&prefix, saved_ranks).map_err(errors::raise)
        })
    }

    /// Waits for every rank of the table's communicator.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, "barrier", |e| {
            e.table().barrier().map_err(errors::raise)
        })
    }

    /// Releases the table's memory (views already exported keep theirs). Later calls fail.
    /// In a forked child it does nothing: the memory is the parent's.
    fn close(&self, py: Python<'_>) {
        if !self.owner.is_here() {
            return;
        }
        py.detach(|| {
            let mut guard = self
                .shared
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            guard.take();
        })
    }

    /// Whether [`Table::close`] was called; always in a forked child, where the table cannot
    /// be used.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        !self.owner.is_here()
            || py.detach(|| {
                self.shared
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .is_none()
            })
    }

    /// The shape.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.spec.shape.clone()
    }

    /// The element type's name.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.spec.dtype.name()
    }

    /// The layout's name.
    #[getter]
    fn layout(&self) -> &'static str {
        self.spec.layout.name()
    }

    /// The location's kind: host, shared or mmap.
    #[getter]
    fn location(&self) -> &'static str {
        self.spec.location.kind()
    }

    /// Whether writes are allowed (false for a read-only file map).
    #[getter]
    fn writable(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, "writable", |e| Ok(e.table().is_writable()))
    }

    /// The sparse optimizer's name, for a trainable table.
    #[getter]
    fn optimizer(&self, py: Python<'_>) -> PyResult<Option<&'static str>> {
        self.with(py, "optimizer", |e| Ok(e.optimizer().map(|o| o.name())))
    }

    /// This process's rank among the table's ranks.
    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks the table is spread over.
    #[getter]
    fn ranks(&self) -> usize {
        self.ranks
    }

    /// Gather calls, rows and seconds so far.
    fn gather_stats(&self, py: Python<'_>) -> PyResult<(u64, u64, f64)> {
        self.with(py, "gather_stats", |e| {
            let s = e.table().stats();
            Ok((s.calls, s.rows, s.seconds))
        })
    }
}
