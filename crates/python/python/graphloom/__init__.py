"""GraphLoom from Python: the store, datasets, the neighbour loader and trained models.

The store follows WholeGraph's verbs (``pylibwholegraph.torch``)::

    import graphloom as gl
    gl.init()                                   # one process, or the ranks of an mpirun job
    comm = gl.get_global_communicator()
    emb = gl.create_embedding(comm, "continuous", "host", "float32", (1000, 64))
    rows = emb.gather(torch.tensor([3, 1, 4]))  # a torch tensor
    emb.scatter(ids, rows)
    local, first_row = emb.get_local_tensor()   # zero copy
    whole = emb.get_global_tensor()             # zero copy, continuous layout

Datasets and PyG::

    ds = gl.Dataset.open("data/cora")
    loader = gl.NeighborLoader(ds, [25, 10], batch_size=32)
    for batch in loader:                        # torch_geometric.data.Data
        out = model(batch.x, batch.edge_index)[: batch.batch_size]

Models: ``graphloom.torch.load_pyg`` and ``graphloom.torch.save_for_graphloom``.
"""

from __future__ import annotations

import atexit
import os
import weakref
from typing import Any, Iterator, Sequence

import numpy as np

from . import _graphloom
from ._arrays import dense_array, dtype_name, from_view, ids_array, int_list, rows_bytes
from ._graphloom import GraphLoomError

__all__ = [
    "GraphLoomError",
    "Communicator",
    "init",
    "finalize",
    "is_initialized",
    "get_global_communicator",
    "get_local_node_communicator",
    "all_reduce",
    "Embedding",
    "create_embedding",
    "create_embedding_from_filelist",
    "load_embedding",
    "Dataset",
    "NeighborLoader",
    "Batch",
    "predict",
    "mpi_available",
]

#: Whether this build can run the ranks of an mpirun job.
mpi_available: bool = _graphloom.mpi_available

_global_comm: "Communicator | None" = None
_node_comm: "Communicator | None" = None
# Every live table, closed before the job ends (a table holds its communicator).
_tables: "weakref.WeakSet[Embedding]" = weakref.WeakSet()


class Communicator:
    """A group of ranks: the job's global one, or the ranks on this machine."""

    def __init__(self, inner: _graphloom.Comm) -> None:
        self._inner = inner

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self._inner.rank

    @property
    def size(self) -> int:
        """The number of ranks."""
        return self._inner.size

    @property
    def backend(self) -> str:
        """``local`` (one process) or ``mpi``."""
        return self._inner.backend

    def get_rank(self) -> int:
        """This process's rank (WholeGraph's spelling)."""
        return self.rank

    def get_size(self) -> int:
        """The number of ranks (WholeGraph's spelling)."""
        return self.size

    def barrier(self) -> None:
        """Waits for every rank."""
        self._inner.barrier()

    def all_reduce(self, tensor: Any, op: str = "sum") -> Any:
        """Reduces a dense CPU tensor (float32, float64 or int64; torch or numpy) in place over
        the ranks and returns it. Every rank gets the same bits (slices are added in rank
        order), so data-parallel models stay identical."""
        array, name = dense_array(tensor, "all_reduce")
        self._inner.all_reduce(array, name, op)
        return tensor

    def __repr__(self) -> str:
        return repr(self._inner)


def init(backend: str = "auto") -> Communicator:
    """Starts the job once per process and returns the global communicator.

    ``backend``: ``auto`` (the ranks of an mpirun job when launched by one, else one rank),
    ``local`` or ``mpi``. The job ends at exit, or with :func:`finalize`."""
    global _global_comm, _node_comm
    world, node = _graphloom.init(backend)
    _global_comm, _node_comm = Communicator(world), Communicator(node)
    return _global_comm


def is_initialized() -> bool:
    """Whether a job is running."""
    return _graphloom.is_initialized()


def finalize() -> None:
    """Closes every table and ends the job (under MPI, finalises it)."""
    global _global_comm, _node_comm
    for table in list(_tables):
        table.close()
    _global_comm = _node_comm = None
    _graphloom.finalize()


atexit.register(finalize)


def get_global_communicator() -> Communicator:
    """Every rank of the job (starting a one-process job if none is running)."""
    if _global_comm is None or not is_initialized():
        init()
    assert _global_comm is not None
    return _global_comm


def get_local_node_communicator() -> Communicator:
    """The ranks of the job on this machine, which can share memory."""
    get_global_communicator()
    assert _node_comm is not None
    return _node_comm


def all_reduce(tensor: Any, op: str = "sum", comm: Communicator | None = None) -> Any:
    """Reduces a dense CPU tensor in place over the ranks of ``comm`` (default: global); see
    :meth:`Communicator.all_reduce`."""
    return (comm or get_global_communicator()).all_reduce(tensor, op)


class Embedding:
    """A table in the store: rows spread over the ranks of a communicator by a layout
    (``continuous``, ``chunked``, ``distributed``) and held in a location (``host``,
    ``shared``, ``mmap``). Trainable when made with an ``optimizer``.

    Creation, ``scatter``, ``save``, ``load``, ``apply_gradients`` and every gather of a
    distributed table are collective: every rank calls them in the same order."""

    def __init__(self, table: _graphloom.Table) -> None:
        self._table = table
        _tables.add(self)

    @property
    def shape(self) -> tuple[int, ...]:
        """``(rows,)`` or ``(rows, columns)``."""
        return tuple(self._table.shape)

    @property
    def dtype(self) -> str:
        """The element type: f32, f64, bf16, i32 or i64."""
        return self._table.dtype

    @property
    def layout(self) -> str:
        """continuous, chunked or distributed."""
        return self._table.layout

    @property
    def location(self) -> str:
        """host, shared or mmap."""
        return self._table.location

    @property
    def optimizer(self) -> str | None:
        """The sparse optimizer of a trainable table."""
        return self._table.optimizer

    @property
    def writable(self) -> bool:
        """False for a table mapped read-only."""
        return self._table.writable

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._table.closed

    def gather(self, ids: Any) -> Any:
        """Rows ``ids`` (int64 or int32, CPU torch tensor, numpy array or list; any order,
        repeats allowed) as a new tensor of shape ``(len(ids), columns)``."""
        return from_view(self._table.gather(ids_array(ids)))

    def scatter(self, ids: Any, rows: Any) -> None:
        """Writes ``rows`` (the table's dtype, ``(len(ids), columns)``) at ``ids``; each row
        is written by the rank that owns it."""
        ids = ids_array(ids)
        shape = (len(ids),) + self.shape[1:]
        self._table.scatter(ids, rows_bytes(rows, self.dtype, shape))

    def get_local_tensor(self) -> tuple[Any, int]:
        """This rank's rows without a copy, and the id of its first row."""
        first, _ = self._table.local_rows()
        return from_view(self._table.local_view()), first

    def get_global_tensor(self) -> Any:
        """The whole table as one tensor without a copy (continuous layout only): writes are
        seen by the table and every rank of this machine."""
        return from_view(self._table.global_view())

    def local_rows(self) -> tuple[int, int]:
        """The rows this rank owns: ``(first, end)``."""
        return self._table.local_rows()

    def apply_gradients(self, ids: Any, grads: Any, lr: float) -> None:
        """One sparse optimizer step on a trainable table, from float32 gradients
        ``(len(ids), columns)`` of rows ``ids`` (which may repeat and belong to any rank).
        Gradients are summed at each row's owner in one canonical order, so 1 and N ranks give
        the same bits."""
        ids = ids_array(ids)
        if hasattr(grads, "detach"):
            grads = grads.detach().to("cpu").contiguous().float().numpy()
        grads = np.ascontiguousarray(grads, dtype=np.float32)
        self._table.apply_gradients(ids, grads, float(lr))

    def save(self, prefix: str | os.PathLike) -> None:
        """Writes this rank's rows (and a trainable table's optimizer state) under ``prefix``,
        one file per rank: ``{prefix}_part_{rank}_of_{ranks}`` for a frozen table (load it with
        :func:`create_embedding_from_filelist`), ``{prefix}_table_part_...`` and the state's
        files for a trainable one (load them with :meth:`load` or :func:`load_embedding`)."""
        self._table.save(os.fspath(prefix))

    def load(self, prefix: str | os.PathLike, saved_ranks: int) -> None:
        """Refills a trainable table and its optimizer state from :meth:`save`'s files of a
        job of ``saved_ranks`` ranks (any number)."""
        self._table.restore(os.fspath(prefix), saved_ranks)

    def barrier(self) -> None:
        """Waits for every rank of the table."""
        self._table.barrier()

    def close(self) -> None:
        """Releases the table; later calls raise. Tensors already returned keep their memory."""
        self._table.close()

    def time_gather(self, ids: Any, repeats: int = 3) -> list[float]:
        """Seconds of each of ``repeats`` gathers of ``ids`` run inside the extension, without
        Python between them: the baseline for the speed of :meth:`gather`."""
        return self._table.time_gather(ids_array(ids), repeats)

    def gather_stats(self) -> dict[str, float]:
        """Gathers so far: calls, rows and seconds."""
        calls, rows, seconds = self._table.gather_stats()
        return {"calls": calls, "rows": rows, "seconds": seconds}

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.layout}, {self.location}"
        return f"Embedding(shape={self.shape}, dtype={self.dtype}, {state})"


def _location(location: str) -> str:
    return {"cpu": "host"}.get(location, location)


def _comm(comm: Any) -> _graphloom.Comm:
    if not isinstance(comm, Communicator):
        raise TypeError(
            f"comm: expected a graphloom.Communicator (gl.init(), "
            f"gl.get_global_communicator()), got {type(comm).__name__}"
        )
    return comm._inner


def create_embedding(
    comm: Communicator,
    layout: str,
    location: str,
    dtype: Any,
    shape: Sequence[int],
    *,
    path: str | os.PathLike | None = None,
    writable: bool = True,
    optimizer: str | None = None,
    weight_decay: float = 0.0,
    init_scale: float | None = None,
    seed: int = 0,
) -> Embedding:
    """Creates a table of ``shape`` over the ranks of ``comm`` (collective).

    ``layout``: continuous, chunked or distributed (WholeGraph's memory types).
    ``location``: host (or ``cpu``), shared (memory shared by the processes of a machine) or
    mmap (the file ``path``, created when missing and ``writable``). Rows start at zero.
    ``optimizer``: sgd, lazy_adam, adagrad or rmsprop makes a trainable float32 table whose
    rows start uniform in ``[-init_scale, init_scale)`` (default ``1/sqrt(columns)``), drawn
    from ``seed`` so that any number of ranks gives the same table."""
    dims = int_list(shape, "shape")
    scale = 0.0
    if optimizer is not None:
        scale = init_scale if init_scale is not None else 1.0 / np.sqrt(max(dims[-1], 1))
    table = _graphloom.Table.create(
        _comm(comm),
        dims,
        dtype_name(dtype),
        layout,
        _location(location),
        os.fspath(path) if path is not None else None,
        writable,
        optimizer,
        weight_decay,
        float(scale),
        seed,
    )
    return Embedding(table)


def create_embedding_from_filelist(
    comm: Communicator,
    layout: str,
    location: str,
    files: Sequence[str | os.PathLike] | str | os.PathLike,
    dtype: Any,
    last_dim_size: int,
    *,
    path: str | os.PathLike | None = None,
    optimizer: str | None = None,
    weight_decay: float = 0.0,
) -> Embedding:
    """Creates a table from files (collective): raw row-major ``.bin`` parts, logically
    concatenated (WholeGraph's file lists), or ``.npy`` arrays. Rows are ``last_dim_size``
    wide (0 for a 1-D table); each rank reads only its own rows. ``location`` and ``path`` as
    in :func:`create_embedding` (to map a file in place read-only, see
    :meth:`Dataset.features`)."""
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    row_shape = [int(last_dim_size)] if last_dim_size else []
    table = _graphloom.Table.from_files(
        _comm(comm),
        [os.fspath(f) for f in files],
        row_shape,
        dtype_name(dtype),
        layout,
        _location(location),
        os.fspath(path) if path is not None else None,
        optimizer,
        weight_decay,
    )
    return Embedding(table)


def load_embedding(
    comm: Communicator,
    prefix: str | os.PathLike,
    saved_ranks: int,
    dim: int,
    layout: str,
    location: str,
    optimizer: str,
    *,
    path: str | os.PathLike | None = None,
) -> Embedding:
    """A trainable table and its optimizer state from :meth:`Embedding.save`'s files of a job
    of ``saved_ranks`` ranks (collective). ``dim`` must be the saved width: the part files are
    raw rows, without a shape to check it against."""
    table = _graphloom.Table.load_trainable(
        _comm(comm),
        os.fspath(prefix),
        saved_ranks,
        dim,
        layout,
        _location(location),
        optimizer,
        os.fspath(path) if path is not None else None,
    )
    return Embedding(table)


class Dataset:
    """A dataset directory (``graphloom prepare``'s format) opened in place: arrays are
    mapped, not loaded, and each file's checks run once."""

    def __init__(self, inner: _graphloom.Dataset) -> None:
        self._inner = inner
        self._features: Embedding | None = None

    @staticmethod
    def open(path: str | os.PathLike) -> "Dataset":
        """Opens the directory at ``path``."""
        return Dataset(_graphloom.Dataset.open(os.fspath(path)))

    @property
    def name(self) -> str:
        """The dataset's name."""
        return self._inner.name

    @property
    def path(self) -> str:
        """The directory."""
        return self._inner.path

    @property
    def num_nodes(self) -> int:
        """The number of nodes."""
        return self._inner.num_nodes

    @property
    def num_edges(self) -> int:
        """The number of directed edges (an undirected edge counts twice)."""
        return self._inner.num_edges

    @property
    def num_classes(self) -> int:
        """The number of classes."""
        return self._inner.num_classes

    @property
    def feat_dim(self) -> int:
        """The width of a feature row."""
        return self._inner.feat_dim

    @property
    def feat_dtype(self) -> str:
        """The features' dtype on disk (f32 or bf16)."""
        return self._inner.feat_dtype

    @property
    def train_idx(self) -> Any:
        """Training node ids (int64)."""
        return from_view(self._inner.split("train"))

    @property
    def valid_idx(self) -> Any:
        """Validation node ids (int64)."""
        return from_view(self._inner.split("valid"))

    @property
    def test_idx(self) -> Any:
        """Test node ids (int64)."""
        return from_view(self._inner.split("test"))

    @property
    def labels(self) -> Any:
        """Every node's label (int64; -1 where a node has none)."""
        return from_view(self._inner.labels())

    def edge_index(self) -> Any:
        """The whole graph as PyG's ``edge_index``: int64 ``(2, num_edges)``, sources in row 0,
        destinations in row 1."""
        return from_view(self._inner.edge_index())

    @property
    def features(self) -> Embedding:
        """The node features as a table, mapped read-only from ``node_feat.npy`` (made on
        first use; see :meth:`feature_table` for other layouts and locations)."""
        if self._features is None or self._features.closed:
            self._features = self.feature_table()
        return self._features

    def feature_table(
        self,
        layout: str = "continuous",
        location: str = "mmap",
        comm: Communicator | None = None,
    ) -> Embedding:
        """The node features as a new table (collective): ``mmap`` maps the file read-only;
        ``host`` and ``shared`` copy it into memory."""
        comm = comm or get_global_communicator()
        return Embedding(self._inner.feature_table(_comm(comm), layout, _location(location)))

    def __repr__(self) -> str:
        return repr(self._inner)


class Batch:
    """A sampled batch with PyG's fields, for when torch_geometric is not installed."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        def describe(v: Any) -> str:
            if hasattr(v, "shape"):
                return str(list(v.shape))
            if isinstance(v, list):
                return f"[{len(v)}]"
            return repr(v)

        fields = ", ".join(f"{k}={describe(v)}" for k, v in self.__dict__.items())
        return f"Batch({fields})"


class NeighborLoader:
    """Mini-batches of sampled neighbourhoods, made by GraphLoom's sampler and gathers on a
    thread of their own, ahead of the consumer.

    Each batch is a ``torch_geometric.data.Data`` (a :class:`Batch` without PyG) with ``x``
    (input rows), ``y`` (labels), ``n_id`` (original node ids, the ``batch_size`` seeds first),
    ``batch_size``, ``edge_index`` (int64 ``(2, E)`` over positions in ``n_id``) and
    ``blocks``.

    ``fanouts`` are written from the seeds outwards (``[25, 10]``: 25 neighbours of each seed,
    then 10 of each of those; -1 takes all). GraphLoom samples DGL-style: hop ``h`` draws a
    fresh neighbour set for every node reached so far. ``edge_index`` is PyG's view of that:
    each node's in-edges come from the hop that first reached it (the seeds' from hop 1, the
    nodes new at hop 1 from hop 2, ...), so every node is sampled once, as PyG's own loader
    does. ``blocks`` is DGL's view: per layer, input layer first, a tuple ``(edge_index,
    num_src, num_dst)`` over the same local ids, each layer's destinations being the first
    ``num_dst`` nodes.

    Seeds are ``input_nodes`` (distinct; default the training split), in an order drawn from
    ``(seed, epoch)`` when ``shuffle``, else in the given order; ``drop_last`` drops a last
    batch shorter than ``batch_size``. Input rows come from ``features`` (a store table of
    ``num_nodes`` rows, continuous or chunked; default :attr:`Dataset.features`), cast to
    ``x_dtype`` (float32, float64 or bfloat16). The producer runs up to ``queue_depth``
    batches ahead. Under mpirun each rank takes its slice of every global batch of
    ``batch_size`` seeds (``rank``/``ranks`` default to the global communicator's).

    One epoch runs at a time: starting a second iteration (or :meth:`time_rust_epoch`) ends
    the first, which then raises if resumed. Tables and loaders may be shared between Python
    threads; calls on one table run one at a time."""

    def __init__(
        self,
        dataset: Dataset,
        fanouts: Sequence[int],
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        *,
        input_nodes: Any = None,
        features: Embedding | None = None,
        drop_last: bool = False,
        queue_depth: int = 4,
        x_dtype: Any = "float32",
        rank: int | None = None,
        ranks: int | None = None,
    ) -> None:
        if not isinstance(dataset, Dataset):
            raise TypeError(f"dataset: expected a graphloom.Dataset, got {type(dataset).__name__}")
        if features is not None and not isinstance(features, Embedding):
            raise TypeError(
                f"features: expected a graphloom.Embedding (a store table), got "
                f"{type(features).__name__}"
            )
        comm = get_global_communicator()
        self.dataset = dataset
        self.features = features if features is not None else dataset.features
        self.batch_size = int(batch_size)
        nodes = ids_array(input_nodes, "input_nodes") if input_nodes is not None else None
        self._inner = _graphloom.Loader(
            dataset._inner,
            self.features._table,
            int_list(fanouts, "fanouts"),
            self.batch_size,
            shuffle,
            seed,
            nodes,
            drop_last,
            queue_depth,
            dtype_name(x_dtype),
            comm.rank if rank is None else rank,
            comm.size if ranks is None else ranks,
        )
        # Iterators of one loader share its producer: starting one ends the one before.
        self._epochs_started = 0
        try:
            from torch_geometric.data import Data
        except ImportError:
            Data = Batch
        self._data_class = Data

    def __len__(self) -> int:
        return len(self._inner)

    def __iter__(self) -> Iterator[Any]:
        self._epochs_started += 1
        mine = self._epochs_started
        self._inner.start_epoch()
        try:
            while (batch := self._inner.next_batch()) is not None:
                yield self._data_class(
                    x=from_view(batch.x),
                    y=from_view(batch.y),
                    n_id=from_view(batch.n_id),
                    edge_index=from_view(batch.edge_index),
                    batch_size=batch.batch_size,
                    blocks=[(from_view(e), s, d) for e, s, d in batch.blocks],
                )
                if self._epochs_started != mine:
                    raise RuntimeError(
                        "NeighborLoader: another iteration of this loader started (one epoch "
                        "runs at a time; make a second loader to iterate two at once)"
                    )
        finally:
            if self._epochs_started == mine:
                self._inner.stop_running()

    def time_rust_epoch(self) -> dict[str, float]:
        """Runs one epoch with the consumer in Rust (each batch received and dropped), the
        loader's speed without Python: ``{"batches": n, "seconds": s}``. It advances the
        epoch counter like an iteration."""
        self._epochs_started += 1
        batches, seconds = self._inner.drain()
        return {"batches": batches, "seconds": seconds}


def predict(model: str | os.PathLike, dataset: str | os.PathLike, nodes: Any = None) -> Any:
    """Log-probabilities of a saved model (``graphloom train --save-model`` or
    :func:`graphloom.torch.save_for_graphloom`) on a dataset directory, by exact
    full-neighbour inference, as ``graphloom predict``: ``(len(nodes), classes)``, every node by
    default."""
    ids = ids_array(nodes, "nodes") if nodes is not None else None
    return from_view(_graphloom.predict(os.fspath(model), os.fspath(dataset), ids))
