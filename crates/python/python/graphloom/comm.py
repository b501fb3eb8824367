"""The job and its communicators: one process by default, the ranks of an mpirun job, or the
processes of a torchrun (torch.distributed) job."""

from __future__ import annotations

import atexit
import os
import sys
import weakref
from typing import Any

from ._arrays import dense_array
from ._extension import extension as _graphloom

__all__ = [
    "Communicator",
    "TorchCommunicator",
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


class TorchCommunicator(Communicator):
    """The processes of a torchrun job (or any job of torch.distributed): ranks and sizes
    from torch.distributed's process group when one is initialised, else from torchrun's
    ``RANK``/``WORLD_SIZE`` (``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` for the ranks of one
    machine). Tables made over it are spread over the processes as over an mpirun job's
    (distributed: each holds its slice; continuous and chunked in shared memory: one copy per
    machine), their messages carried by torch.distributed's point-to-point sends (gloo), so
    the job needs a process group before its first table
    (``torch.distributed.init_process_group("gloo")``); dense collectives
    (:meth:`all_reduce`) are torch.distributed's."""

    def __init__(self, inner: _graphloom.Comm, rank: int, size: int, node: bool) -> None:
        super().__init__(inner)
        self._rank, self._size, self._node = rank, size, node

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self._rank

    @property
    def size(self) -> int:
        """The number of ranks."""
        return self._size

    @property
    def backend(self) -> str:
        """``torch``."""
        return "torch"

    def _group(self) -> Any:
        """torch.distributed, with a process group over this communicator's ranks."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "this torchrun job has no process group: call torch.distributed."
                "init_process_group('gloo') (or 'nccl') before graphloom's collectives"
            )
        if self._node and self._size != dist.get_world_size():
            raise NotImplementedError(
                "collectives over the ranks of one machine of a job on several machines: "
                "use the global communicator"
            )
        return dist

    def barrier(self) -> None:
        """Waits for every rank."""
        if self._size > 1:
            self._group().barrier()

    def all_reduce(self, tensor: Any, op: str = "sum") -> Any:
        """Reduces a dense CPU tensor (torch or numpy) in place over the ranks with
        torch.distributed's all_reduce, and returns it."""
        array, _ = dense_array(tensor, "all_reduce")
        ops = ("sum", "max", "min")
        if op not in ops:
            raise ValueError(f"all_reduce: op '{op}' is not sum, max or min")
        if self._size > 1:
            import torch

            dist = self._group()
            reduce_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                         "min": dist.ReduceOp.MIN}[op]
            dist.all_reduce(torch.from_numpy(array), op=reduce_op)
        return tensor

    def __repr__(self) -> str:
        return f"Comm(rank={self._rank}, size={self._size}, backend=torch)"


def torch_world() -> tuple[int, int, int, int] | None:
    """``(rank, size, local_rank, local_size)`` of a torch.distributed job: from its process
    group when one is initialised, else from the variables torchrun sets; None outside one."""
    env = os.environ
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        rank, size = dist.get_rank(), dist.get_world_size()
    elif "RANK" in env and "WORLD_SIZE" in env:
        try:
            rank, size = int(env["RANK"]), int(env["WORLD_SIZE"])
        except ValueError:
            raise ValueError(
                f"RANK={env['RANK']!r} and WORLD_SIZE={env['WORLD_SIZE']!r} are not ranks"
            ) from None
    else:
        return None
    try:
        local_rank = int(env.get("LOCAL_RANK", rank))
        local_size = int(env.get("LOCAL_WORLD_SIZE", size))
    except ValueError:
        raise ValueError(
            f"LOCAL_RANK={env.get('LOCAL_RANK')!r} and LOCAL_WORLD_SIZE="
            f"{env.get('LOCAL_WORLD_SIZE')!r} are not ranks"
        ) from None
    if not (0 <= rank < size and 0 <= local_rank < local_size <= size):
        raise ValueError(f"rank {rank} of {size} (local rank {local_rank} of {local_size}) "
                         "is not a rank of the job")
    return rank, size, local_rank, local_size


def _launched_by_mpirun() -> bool:
    return "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ


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

    ``backend``: ``auto`` (the ranks of an mpirun job when launched by one, else those of a
    torchrun job (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, or an
    initialised torch.distributed process group), else one rank), ``local``, ``mpi`` or
    ``torch`` (see :class:`TorchCommunicator`). The job ends at exit, or with
    :func:`finalize`."""
    global _global_comm, _node_comm
    if backend not in ("auto", "local", "mpi", "torch"):
        raise ValueError(f"init: backend '{backend}' is not auto, local, mpi or torch")
    world = torch_world() if backend == "torch" or (
        backend == "auto" and not _launched_by_mpirun()) else None
    if backend == "torch" and world is None:
        raise ValueError("init: backend 'torch' outside a torchrun job (no RANK and WORLD_SIZE, "
                         "no torch.distributed process group)")
    if world is None:
        inner_world, inner_node = _graphloom.init(backend)
        _global_comm, _node_comm = Communicator(inner_world), Communicator(inner_node)
    else:
        rank, size, local_rank, local_size = world
        from ._torch_transport import Transport

        inner_world, inner_node = _graphloom.init("torch", world, Transport())
        _global_comm = TorchCommunicator(inner_world, rank, size, node=False)
        _node_comm = TorchCommunicator(inner_node, local_rank, local_size, node=True)
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
