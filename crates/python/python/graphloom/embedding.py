"""Tables in the store (WholeGraph's embeddings): creating, filling, reading and saving them."""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from ._arrays import dtype_name, from_view, ids_array, int_list, rows_bytes
from ._extension import checked, extension as _graphloom
from .comm import Communicator, handle, track

__all__ = [
    "Embedding",
    "create_embedding",
    "create_embedding_from_filelist",
    "load_embedding",
]


class Embedding:
    """A table in the store: rows spread over the ranks of a communicator by a layout
    (``continuous``, ``chunked``, ``distributed``) and held in a location (``host``,
    ``shared``, ``mmap``). Trainable when made with an ``optimizer``.

    Creation, ``scatter``, ``save``, ``load``, ``apply_gradients`` and every gather of a
    distributed table are collective: every rank calls them in the same order."""

    def __init__(self, table: _graphloom.Table, comm: Communicator | None = None) -> None:
        self._table = table
        # The job's view of the ranks, when it is not the table's own (a torchrun job's).
        self._comm = comm
        track(self)

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

    def get_chunk_tensor(self, rank: int) -> tuple[Any, int]:
        """Rank ``rank``'s rows without a copy, and the id of its first row: every rank's in
        the continuous and chunked layouts (which every process of the machine maps), only
        this rank's in the distributed one."""
        view, first = self._table.chunk_view(rank)
        return from_view(view), first

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

    @property
    def parts(self) -> int:
        """The number of part files :meth:`save` writes: the ranks the rows are spread over."""
        return self._table.ranks

    def load(self, prefix: str | os.PathLike, saved_ranks: int) -> None:
        """Refills a trainable table and its optimizer state from :meth:`save`'s files of a
        job of ``saved_ranks`` ranks (any number)."""
        checked(self._table.restore)(os.fspath(prefix), saved_ranks)

    def barrier(self) -> None:
        """Waits for every rank of the table."""
        self._table.barrier()

    def close(self) -> None:
        """Releases the table; later calls raise. Tensors already returned keep their memory."""
        self._table.close()

    def time_gather(self, ids: Any, repeats: int = 3) -> list[float]:
        """Seconds of each of ``repeats`` gathers of ``ids`` run inside the extension, without
        Python between them: the baseline for the speed of :meth:`gather`."""
        return checked(self._table.time_gather)(ids_array(ids), repeats)

    def gather_stats(self) -> dict[str, float]:
        """Gathers so far: calls, rows and seconds."""
        calls, rows, seconds = self._table.gather_stats()
        return {"calls": calls, "rows": rows, "seconds": seconds}

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.layout}, {self.location}"
        return f"Embedding(shape={self.shape}, dtype={self.dtype}, {state})"


def location_name(location: str) -> str:
    """The store's name of a location (WholeGraph's ``cpu`` is ``host``)."""
    return {"cpu": "host"}.get(location, location)


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
    optimizer_params: dict[str, float] | None = None,
) -> Embedding:
    """Creates a table of ``shape`` over the ranks of ``comm`` (collective).

    ``layout``: continuous, chunked or distributed (WholeGraph's memory types).
    ``location``: host (or ``cpu``), shared (memory shared by the processes of a machine) or
    mmap (the file ``path``, created when missing and ``writable``). Rows start at zero.
    ``optimizer``: sgd, lazy_adam, adagrad or rmsprop makes a trainable float32 table whose
    rows start uniform in ``[-init_scale, init_scale)`` (default ``1/sqrt(columns)``), drawn
    from ``seed`` so that any number of ranks gives the same table; ``optimizer_params`` sets
    its hyper-parameters by WholeGraph's names (``beta1``, ``beta2``, ``epsilon``, ``adam_w``,
    ``alpha``)."""
    dims = int_list(shape, "shape")
    scale = 0.0
    if optimizer is not None:
        scale = init_scale if init_scale is not None else 1.0 / np.sqrt(max(dims[-1], 1))
    table = _graphloom.Table.create(
        handle(comm),
        dims,
        dtype_name(dtype),
        layout,
        location_name(location),
        os.fspath(path) if path is not None else None,
        writable,
        optimizer,
        weight_decay,
        float(scale),
        seed,
        [(str(k), float(v)) for k, v in (optimizer_params or {}).items()],
    )
    return Embedding(table, comm)


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
        handle(comm),
        [os.fspath(f) for f in files],
        row_shape,
        dtype_name(dtype),
        layout,
        location_name(location),
        os.fspath(path) if path is not None else None,
        optimizer,
        weight_decay,
    )
    return Embedding(table, comm)


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
        handle(comm),
        os.fspath(prefix),
        saved_ranks,
        dim,
        layout,
        location_name(location),
        optimizer,
        os.fspath(path) if path is not None else None,
    )
    return Embedding(table, comm)
