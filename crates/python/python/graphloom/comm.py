"""The job and its communicators: one process by default, or the ranks of an mpirun job."""

from __future__ import annotations

import atexit
import weakref
from typing import Any

from . import _graphloom
from ._arrays import dense_array

__all__ = [
    "Communicator",
    "init",
    "finalize",
    "is_initialized",
    "get_global_communicator",
    "get_local_node_communicator",
    "all_reduce",
]


_global_comm: "Communicator | None" = None
_node_comm: "Communicator | None" = None
# Every live table, closed before the job ends (a table holds its communicator).
_tables: "weakref.WeakSet[Any]" = weakref.WeakSet()


def track(table: Any) -> None:
    """Closes `table` when the job ends (:func:`finalize`)."""
    _tables.add(table)


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


def handle(comm: Any) -> _graphloom.Comm:
    """The extension's communicator behind `comm`, refusing anything else."""
    if not isinstance(comm, Communicator):
        raise TypeError(
            f"comm: expected a graphloom.Communicator (gl.init(), "
            f"gl.get_global_communicator()), got {type(comm).__name__}"
        )
    return comm._inner


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
