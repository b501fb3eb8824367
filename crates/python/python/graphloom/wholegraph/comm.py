"""The job and its communicators as WholeGraph's: ``init``/``init_torch_env`` (torchrun's
variables, torch.distributed's process group, then GraphLoom's job), ``finalize``, the ranks,
and ``WholeMemoryCommunicator`` over GraphLoom's :class:`~graphloom.Communicator`."""

from __future__ import annotations

import os

from .. import comm as _comm
from .memory import _MEMORY_TYPES

__all__ = [
    "init",
    "init_torch_env",
    "init_torch_env_and_create_wm_comm",
    "finalize",
    "WholeMemoryCommunicator",
    "get_global_communicator",
    "get_local_node_communicator",
    "get_local_device_communicator",
    "create_group_communicator",
    "destroy_communicator",
    "get_rank",
    "get_world_size",
    "get_local_rank",
    "get_local_size",
]


def init(world_rank: int, world_size: int, local_rank: int, local_size: int) -> None:
    """Records this process's place in the job (torchrun's variables) and starts it."""
    _set_world(world_rank, world_size, local_rank, local_size)
    _comm.init()


def _set_world(world_rank: int, world_size: int, local_rank: int, local_size: int) -> None:
    """Sets torchrun's variables, from which GraphLoom's job learns its ranks."""
    for name, value in (("RANK", world_rank), ("WORLD_SIZE", world_size),
                        ("LOCAL_RANK", local_rank), ("LOCAL_WORLD_SIZE", local_size)):
        os.environ[name] = str(int(value))


def init_torch_env(world_rank: int, world_size: int, local_rank: int, local_size: int,
                   wm_log_level: str = "info") -> None:
    """Starts the job as WholeGraph does: torch.distributed's process group (gloo, from
    ``MASTER_ADDR``/``MASTER_PORT``, default localhost:12335) when there are several ranks and
    none is initialised yet, then GraphLoom's job over it."""
    _set_world(world_rank, world_size, local_rank, local_size)
    import torch.distributed as dist

    if world_size > 1 and not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "localhost")
        os.environ.setdefault("MASTER_PORT", "12335")
        dist.init_process_group(backend="gloo", init_method="env://")
    _comm.init()


def init_torch_env_and_create_wm_comm(world_rank: int, world_size: int, local_rank: int,
                                      local_size: int, distributed_backend_type: str = "nccl",
                                      wm_log_level: str = "info"
                                      ) -> tuple["WholeMemoryCommunicator",
                                                 "WholeMemoryCommunicator"]:
    """:func:`init_torch_env`, then the global and local node communicators.
    ``distributed_backend_type`` is accepted for WholeGraph's scripts: the store's transport
    is GraphLoom's own."""
    init_torch_env(world_rank, world_size, local_rank, local_size, wm_log_level)
    return get_global_communicator(), get_local_node_communicator()


def finalize() -> None:
    """Closes every table and ends the job."""
    _comm.finalize()


def get_rank() -> int:
    """This process's rank in the job."""
    return _comm.get_global_communicator().rank


def get_world_size() -> int:
    """The number of ranks of the job."""
    return _comm.get_global_communicator().size


def get_local_rank() -> int:
    """This process's rank on its machine."""
    return _comm.get_local_node_communicator().rank


def get_local_size() -> int:
    """The number of ranks on this machine."""
    return _comm.get_local_node_communicator().size


class WholeMemoryCommunicator:
    """A group of ranks (GraphLoom's :class:`~graphloom.Communicator` is ``comm``)."""

    def __init__(self, comm: _comm.Communicator) -> None:
        self.comm = comm

    def get_rank(self) -> int:
        """This process's rank in the group."""
        return self.comm.rank

    def get_size(self) -> int:
        """The number of ranks in the group."""
        return self.comm.size

    def barrier(self) -> None:
        """Waits for every rank of the group."""
        self.comm.barrier()

    def support_type_location(self, memory_type: str, memory_location: str) -> bool:
        """Whether tables of this memory type and location can be made: every memory type, in
        host memory."""
        return memory_type in _MEMORY_TYPES and memory_location == "cpu"

    def destroy(self) -> None:
        """Nothing to release: the job owns its communicators."""

    def __repr__(self) -> str:
        return f"WholeMemoryCommunicator({self.comm!r})"


def get_global_communicator(distributed_backend: str = "nccl") -> WholeMemoryCommunicator:
    """Every rank of the job."""
    return WholeMemoryCommunicator(_comm.get_global_communicator())


def get_local_node_communicator() -> WholeMemoryCommunicator:
    """The ranks on this machine."""
    return WholeMemoryCommunicator(_comm.get_local_node_communicator())


def get_local_device_communicator() -> WholeMemoryCommunicator:
    """This process alone (a table over it is this process's own)."""
    world = _comm.get_global_communicator()
    if world.size == 1:
        return WholeMemoryCommunicator(world)
    raise NotImplementedError("a communicator of one rank of a job of several processes")


def create_group_communicator(group_size: int = -1, comm_stride: int = 1
                              ) -> WholeMemoryCommunicator:
    """The job's communicator (``group_size`` -1 or the job's size), this machine's ranks
    (its size) or this process (1); other groups are not supported."""
    world = _comm.get_global_communicator()
    if group_size in (-1, world.size) and comm_stride == 1:
        return get_global_communicator()
    if group_size == _comm.get_local_node_communicator().size and comm_stride == 1:
        return get_local_node_communicator()
    if group_size == 1:
        return get_local_device_communicator()
    raise NotImplementedError(f"a group of {group_size} ranks with stride {comm_stride}: "
                              "groups are the job, a machine or one rank")


def destroy_communicator(wm_comm: WholeMemoryCommunicator | None) -> None:
    """Nothing to release: the job owns its communicators."""
