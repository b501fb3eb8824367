"""WholeGraph's spelling of the store: a script written for ``pylibwholegraph.torch`` runs on
GraphLoom's host tables with its import changed and ``"cuda"`` locations made ``"cpu"``::

    import graphloom.wholegraph as wgth

    global_comm, local_comm = wgth.init_torch_env_and_create_wm_comm(rank, size, local_rank,
                                                                      local_size)
    emb = wgth.create_embedding(global_comm, "distributed", "cpu", torch.float32, [n, 64],
                                random_init=True)
    opt = wgth.create_wholememory_optimizer(emb, "adam", {"weight_decay": 0.0})
    module = wgth.WholeMemoryEmbeddingModule(emb)
    loss = f(module(ids)); loss.backward(); opt.step(lr)

Names, signatures and return shapes are WholeGraph's: ``get_local_tensor()`` and
``get_global_tensor()`` return ``(tensor, offset)`` (the offset is the first row's index),
``get_all_chunked_tensor()`` returns ``(tensors, offsets)``. What differs:

- tables live in host memory: ``memory_location="cuda"`` raises, and ``host_view`` is
  accepted and changes nothing; ``cache_policy`` (a GPU cache of host rows) is accepted and
  ignored;
- the optimizers are GraphLoom's sparse ones with WholeGraph's parameters (``"sgd"``;
  ``"adam"``, GraphLoom's lazy Adam; ``"adagrad"``; ``"rmsprop"``);
- under torchrun every process holds whole tables (their gradients are gathered from every
  rank at each step, so the copies stay the same); under mpirun tables are spread over the
  ranks as the memory type says;
- ``embedding_entry_partition`` must be the store's even partition (or None), and the
  optimizer states are not exposed as tensors.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import torch

from . import comm as _comm
from ._arrays import dtype_name, from_view, ids_array
from .embedding import Embedding
from .embedding import create_embedding as _store_table
from .embedding import create_embedding_from_filelist as _from_filelist

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
    "WholeMemoryTensor",
    "create_wholememory_tensor",
    "create_wholememory_tensor_from_filelist",
    "destroy_wholememory_tensor",
    "WholeMemoryEmbedding",
    "create_embedding",
    "create_embedding_from_filelist",
    "destroy_embedding",
    "WholeMemoryEmbeddingModule",
    "WholeMemoryOptimizer",
    "create_wholememory_optimizer",
    "destroy_wholememory_optimizer",
    "WholeMemoryCachePolicy",
    "create_builtin_cache_policy",
    "create_wholememory_cache_policy",
    "destroy_wholememory_cache_policy",
    "get_part_file_name",
    "get_part_file_list",
    "get_rank",
    "get_world_size",
    "get_local_rank",
    "get_local_size",
]

_MEMORY_TYPES = ("continuous", "chunked", "distributed")
# WholeGraph's optimizer names, and the store's.
_OPTIMIZERS = {"sgd": "sgd", "adam": "lazy_adam", "lazy_adam": "lazy_adam",
               "adagrad": "adagrad", "rmsprop": "rmsprop"}


def _location(memory_location: str) -> str:
    """The store's location of WholeGraph's ``memory_location``."""
    if memory_location == "cuda":
        raise ValueError(
            'memory_location="cuda": this build of graphloom keeps tables in host memory; '
            'pass memory_location="cpu"'
        )
    if memory_location != "cpu":
        raise ValueError(f'memory_location={memory_location!r}: expected "cpu" (or "cuda")')
    return "host"


def _memory_type(memory_type: str) -> str:
    if memory_type not in _MEMORY_TYPES:
        raise ValueError(f"memory_type={memory_type!r}: expected continuous, chunked or "
                         "distributed")
    return memory_type


# --- the job -------------------------------------------------------------------------------


def init(world_rank: int, world_size: int, local_rank: int, local_size: int) -> None:
    """Records this process's place in the job (torchrun's variables) and starts it."""
    _set_world(world_rank, world_size, local_rank, local_size)
    _comm.init()


def _set_world(world_rank: int, world_size: int, local_rank: int, local_size: int) -> None:
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
    # A torchrun process's tables are its own already; under mpirun, a group of one rank
    # would need a communicator of its own.
    if isinstance(world, _comm.TorchCommunicator):
        return WholeMemoryCommunicator(_comm.TorchCommunicator(world._inner, 0, 1, node=False))
    raise NotImplementedError("a communicator of one rank of an mpirun job")


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


# --- tensors -------------------------------------------------------------------------------


def _torch_dtype(name: str) -> torch.dtype:
    return {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16,
            "i32": torch.int32, "i64": torch.int64}[name]


def get_part_file_name(prefix: str, part_id: int, part_count: int) -> str:
    """WholeGraph's name of part ``part_id`` of ``part_count`` files."""
    return f"{prefix}_part_{part_id}_of_{part_count}"


def get_part_file_list(prefix: str, part_count: int) -> list[str]:
    """The names of the ``part_count`` part files of ``prefix``."""
    return [get_part_file_name(prefix, i, part_count) for i in range(part_count)]


def _as_tensor(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))


class WholeMemoryTensor:
    """A table of the store as WholeGraph's tensor: 1-D or 2-D, rows spread over the ranks of
    its communicator (GraphLoom's :class:`~graphloom.Embedding` is ``embedding``)."""

    def __init__(self, embedding: Embedding, comm: WholeMemoryCommunicator) -> None:
        self.embedding = embedding
        self._wm_comm = comm

    @property
    def dtype(self) -> torch.dtype:
        """The element type."""
        return _torch_dtype(self.embedding.dtype)

    def dim(self) -> int:
        """1 or 2."""
        return len(self.embedding.shape)

    @property
    def shape(self) -> torch.Size:
        """The table's shape."""
        return torch.Size(self.embedding.shape)

    def stride(self) -> tuple[int, ...]:
        """Row-major strides."""
        return (self.shape[1], 1) if self.dim() == 2 else (1,)

    def storage_offset(self) -> int:
        """0: tables are never views of others."""
        return 0

    def get_comm(self) -> WholeMemoryCommunicator:
        """The ranks the table is spread over."""
        return self._wm_comm

    def gather(self, indice: torch.Tensor, *, force_dtype: torch.dtype | None = None
               ) -> torch.Tensor:
        """Rows ``indice`` (a 1-D tensor), as ``force_dtype`` when given."""
        out = _as_tensor(self.embedding.gather(indice))
        if self.dim() == 1:
            out = out.reshape(-1)
        return out.to(force_dtype) if force_dtype is not None else out

    def scatter(self, input_tensor: torch.Tensor, indice: torch.Tensor) -> None:
        """Writes ``input_tensor``'s rows at ``indice`` (collective)."""
        rows = input_tensor.detach().to("cpu").to(self.dtype).contiguous()
        if self.dim() == 2 and rows.dim() == 1:
            rows = rows.reshape(-1, 1)
        self.embedding.scatter(indice, rows)

    def get_local_tensor(self, host_view: bool = False) -> tuple[torch.Tensor, int]:
        """This rank's rows without a copy, and the index of the first."""
        local, first = self.embedding.get_local_tensor()
        return _as_tensor(local), int(first)

    def get_global_tensor(self, host_view: bool = False) -> tuple[torch.Tensor, int]:
        """The whole table without a copy (the continuous memory type, or one rank), and 0."""
        return _as_tensor(self.embedding.get_global_tensor()), 0

    def get_all_chunked_tensor(self, host_view: bool = False
                               ) -> tuple[list[torch.Tensor], list[int]]:
        """Every rank's rows without a copy, and the index of each part's first row: one part
        per rank of the job on this machine (each process's own whole table under
        torchrun)."""
        comm = self.embedding_comm()
        local, first = self.get_local_tensor()
        if comm.size == 1 or isinstance(comm, _comm.TorchCommunicator):
            return [local], [first]
        if self.embedding.layout != "continuous":
            raise NotImplementedError(
                "get_all_chunked_tensor of a chunked or distributed table under mpirun: "
                "use get_local_tensor, or the continuous memory type"
            )
        ranges = np.zeros((comm.size, 2), dtype=np.int64)
        ranges[comm.rank] = self.embedding.local_rows()
        comm.all_reduce(ranges)
        whole, _ = self.get_global_tensor()
        return [whole[a:b] for a, b in ranges], [int(a) for a, _ in ranges]

    def embedding_comm(self) -> _comm.Communicator:
        """GraphLoom's communicator of the table."""
        return self._wm_comm.comm

    def get_sub_tensor(self, starts: Sequence[int], ends: Sequence[int]) -> torch.Tensor:
        """Rows (and columns) ``starts`` to ``ends`` (-1: to the end) of the whole table, as a
        tensor sharing its memory (the continuous memory type, or one rank)."""
        whole, _ = self.get_global_tensor()
        index = tuple(slice(a, None if b == -1 else b) for a, b in zip(starts, ends))
        return whole[index]

    def from_filelist(self, filelist: Sequence[str] | str, round_robin_size: int = 0) -> None:
        """Fills this rank's rows from raw row-major files, logically concatenated."""
        if round_robin_size:
            raise NotImplementedError("round_robin_size: rows are partitioned in blocks")
        if isinstance(filelist, (str, os.PathLike)):
            filelist = [filelist]
        np_dtype = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64,
                    "bf16": np.uint16}[self.embedding.dtype]
        row = self.shape[1] if self.dim() == 2 else 1
        parts = [np.memmap(os.fspath(f), dtype=np_dtype, mode="r") for f in filelist]
        total = sum(len(p) for p in parts)
        if total != self.shape[0] * row:
            raise ValueError(f"the files hold {total} values; the table holds "
                             f"{self.shape[0] * row}")
        local, first = self.get_local_tensor()
        flat = np.concatenate(parts) if len(parts) > 1 else parts[0]
        rows = flat[first * row:(first + local.shape[0]) * row].reshape(local.shape)
        local.copy_(torch.from_numpy(rows.copy()).view(local.dtype))

    def from_file_prefix(self, file_prefix: str, part_count: int | None = None) -> None:
        """:meth:`from_filelist` of the ``part_count`` files of ``file_prefix`` (default: as
        many as this table is saved in)."""
        count = part_count if part_count is not None else self.embedding.parts
        self.from_filelist(get_part_file_list(file_prefix, count))

    def local_to_file(self, filename: str) -> None:
        """Writes this rank's rows as a raw file."""
        local, _ = self.get_local_tensor()
        with open(filename, "wb") as f:
            f.write(local.contiguous().view(torch.uint8).numpy().tobytes())

    def to_file_prefix(self, file_prefix: str) -> None:
        """Writes this rank's rows as its part of ``file_prefix`` (collective; in a torchrun
        job, where every process holds the whole table, rank 0 writes it as one part)."""
        comm = self.embedding_comm()
        if self.embedding.replicated:
            if comm.rank == 0:
                self.local_to_file(get_part_file_name(file_prefix, 0, 1))
        else:
            self.local_to_file(get_part_file_name(file_prefix, comm.rank, comm.size))
        comm.barrier()


def _check_partition(partition: Sequence[int] | None, rows: int,
                     comm: WholeMemoryCommunicator) -> None:
    """Refuses an entry partition other than the store's even one."""
    if partition is None:
        return
    size = comm.get_size()
    even = [rows * (r + 1) // size - rows * r // size for r in range(size)]
    if list(partition) != even:
        raise NotImplementedError(
            f"embedding_entry_partition={list(partition)}: the store partitions rows evenly "
            f"({even}); pass None"
        )


def create_wholememory_tensor(comm: WholeMemoryCommunicator, memory_type: str,
                              memory_location: str, sizes: Sequence[int], dtype: torch.dtype,
                              strides: Sequence[int] | None = None,
                              tensor_entry_partition: Sequence[int] | None = None
                              ) -> WholeMemoryTensor:
    """A zeroed 1-D or 2-D table (collective); ``strides`` must be row-major."""
    sizes = [int(s) for s in sizes]
    if len(sizes) not in (1, 2):
        raise ValueError("Only dim 1 or 2 is supported now.")
    if strides is not None and list(strides) != ([sizes[1], 1] if len(sizes) == 2 else [1]):
        raise NotImplementedError(f"strides={list(strides)}: tables are row-major")
    _check_partition(tensor_entry_partition, sizes[0], comm)
    table = _store_table(comm.comm, _memory_type(memory_type), _location(memory_location),
                    dtype_name(dtype), sizes)
    return WholeMemoryTensor(table, comm)


def create_wholememory_tensor_from_filelist(comm: WholeMemoryCommunicator, memory_type: str,
                                            memory_location: str,
                                            filelist: Sequence[str] | str, dtype: torch.dtype,
                                            last_dim_size: int = 0, last_dim_strides: int = -1,
                                            tensor_entry_partition: Sequence[int] | None = None
                                            ) -> WholeMemoryTensor:
    """A table read from raw row-major files (collective); 1-D when ``last_dim_size`` is 0."""
    if last_dim_strides not in (-1, last_dim_size if last_dim_size else 1):
        raise NotImplementedError("last_dim_strides: rows are stored without padding")
    table = _from_filelist(comm.comm, _memory_type(memory_type), _location(memory_location),
                           filelist, dtype_name(dtype), last_dim_size)
    _check_partition(tensor_entry_partition, table.shape[0], comm)
    return WholeMemoryTensor(table, comm)


def destroy_wholememory_tensor(wm_tensor: WholeMemoryTensor) -> None:
    """Releases the table."""
    wm_tensor.embedding.close()


# --- embeddings ----------------------------------------------------------------------------


class WholeMemoryCachePolicy:
    """A cache policy: accepted and ignored (tables are in host memory already)."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings


def create_wholememory_cache_policy(cache_comm: WholeMemoryCommunicator, *,
                                    memory_type: str = "chunked",
                                    memory_location: str = "cuda",
                                    access_type: str = "readonly",
                                    ratio: float = 0.5) -> WholeMemoryCachePolicy:
    """A cache policy, which embeddings accept and ignore."""
    return WholeMemoryCachePolicy(memory_type=memory_type, memory_location=memory_location,
                                  access_type=access_type, ratio=ratio)


def create_builtin_cache_policy(builtin_cache_type: str, embedding_memory_type: str,
                                embedding_memory_location: str, access_type: str,
                                cache_ratio: float, *, cache_memory_type: str = "",
                                cache_memory_location: str = ""
                                ) -> WholeMemoryCachePolicy | None:
    """None for ``"none"``, else a cache policy that embeddings accept and ignore."""
    if builtin_cache_type not in ("none", "local_device", "local_node", "all_devices"):
        raise ValueError(f"builtin_cache_type={builtin_cache_type} not supported, should be "
                         "none, local_device, local_node or all_devices")
    if builtin_cache_type == "none":
        return None
    return WholeMemoryCachePolicy(builtin_cache_type=builtin_cache_type,
                                  access_type=access_type, ratio=cache_ratio)


def destroy_wholememory_cache_policy(cache_policy: WholeMemoryCachePolicy) -> None:
    """Nothing to release."""


class WholeMemoryOptimizer:
    """A sparse optimizer over one or more embeddings: :meth:`step` applies the gradients each
    gathered in training since the last step."""

    def __init__(self, optimizer_type: str, param_dict: dict[str, float]) -> None:
        if optimizer_type not in _OPTIMIZERS:
            raise ValueError(f"optimizer_type={optimizer_type!r}: expected sgd, adam, adagrad "
                             "or rmsprop")
        self.optimizer_type = optimizer_type
        self.param_dict = {str(k): float(v) for k, v in dict(param_dict or {}).items()}
        self.embeddings: list[WholeMemoryEmbedding] = []

    @property
    def store_name(self) -> str:
        """The store's name of the optimizer."""
        return _OPTIMIZERS[self.optimizer_type]

    def add_embedding(self, wm_embedding: "WholeMemoryEmbedding") -> None:
        """Makes ``wm_embedding`` trainable with this optimizer (its rows are kept)."""
        if wm_embedding.wmb_optimizer is not None:
            raise ValueError("optimizer can only be set once.")
        wm_embedding._make_trainable(self)
        self.embeddings.append(wm_embedding)

    def step(self, lr: float) -> None:
        """Applies every embedding's pending gradients with learning rate ``lr``
        (collective)."""
        for wm_embedding in self.embeddings:
            wm_embedding.apply_gradients(lr)
        if self.embeddings:
            self.embeddings[0].get_embedding_tensor().get_comm().barrier()


def create_wholememory_optimizer(embeddings: Any, optimizer_type: Any = None,
                                 param_dict: dict[str, float] | None = None
                                 ) -> WholeMemoryOptimizer:
    """WholeGraph's two spellings: ``(embeddings, optimizer_type, param_dict)`` makes
    ``embeddings`` (one or a list) trainable now; ``(optimizer_type, param_dict)`` makes an
    optimizer for :func:`create_embedding`'s ``optimizer=``. ``optimizer_type`` is ``sgd``,
    ``adam``, ``adagrad`` or ``rmsprop``; ``param_dict`` holds WholeGraph's parameters
    (``weight_decay``; ``beta1``, ``beta2``, ``epsilon``, ``adam_w``; ``alpha``)."""
    if isinstance(embeddings, str):
        return WholeMemoryOptimizer(embeddings, optimizer_type or {})
    optimizer = WholeMemoryOptimizer(optimizer_type, param_dict or {})
    for e in embeddings if isinstance(embeddings, (list, tuple)) else [embeddings]:
        optimizer.add_embedding(e)
    return optimizer


def destroy_wholememory_optimizer(optimizer: WholeMemoryOptimizer) -> None:
    """Forgets the optimizer's embeddings."""
    optimizer.embeddings = []


class _LookupFn(torch.autograd.Function):
    """Gathers rows for a forward pass; the backward pass hands their gradients to the
    embedding for its optimizer's next step."""

    @staticmethod
    def forward(ctx: Any, indice: torch.Tensor, dummy: torch.Tensor,
                wm_embedding: "WholeMemoryEmbedding", is_training: bool,
                force_dtype: torch.dtype | None) -> torch.Tensor:
        learns = is_training and wm_embedding.need_grad()
        ctx.wm_embedding, ctx.indice = (wm_embedding, indice) if learns else (None, None)
        return wm_embedding.gather(indice, is_training=is_training, force_dtype=force_dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        if ctx.wm_embedding is not None:
            ctx.wm_embedding.add_gradients(ctx.indice, grad)
        return None, None, None, None, None


class WholeMemoryEmbedding:
    """A 2-D table of embeddings, trainable once it has an optimizer."""

    def __init__(self, tensor: WholeMemoryTensor, cache_policy: Any = None) -> None:
        self.embedding_tensor = tensor
        self.wmb_cache_policy = cache_policy
        self.wmb_optimizer: WholeMemoryOptimizer | None = None
        # Autograd runs a Function's backward only when an input requires grad.
        self.dummy_input = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
        self.need_apply = False
        self.sparse_indices: list[torch.Tensor] = []
        self.sparse_grads: list[torch.Tensor] = []

    def _make_trainable(self, optimizer: WholeMemoryOptimizer) -> None:
        """Remakes the table as a trainable one of ``optimizer``, keeping its rows."""
        old = self.embedding_tensor
        if old.dtype != torch.float32:
            raise TypeError(f"a trainable embedding is float32, this one {old.dtype}")
        e = old.embedding
        new = _store_table(old.embedding_comm(), e.layout, e.location, "float32", e.shape,
                      optimizer=optimizer.store_name, init_scale=0.0,
                      optimizer_params=optimizer.param_dict)
        rows, first = old.get_local_tensor()
        mine = torch.arange(first, first + rows.shape[0])
        new.scatter(mine, rows.contiguous())
        e.close()
        self.embedding_tensor = WholeMemoryTensor(new, old.get_comm())
        self.wmb_optimizer = optimizer
        self.dummy_input.requires_grad_(True)

    def dim(self) -> int:
        """2."""
        return self.embedding_tensor.dim()

    @property
    def shape(self) -> torch.Size:
        """``(rows, columns)``."""
        return self.embedding_tensor.shape

    def need_grad(self) -> bool:
        """Whether the embedding is trainable."""
        return self.wmb_optimizer is not None

    def set_adjust_cache(self, adjust_cache: bool) -> None:
        """Accepted and ignored (no cache)."""

    def writeback_all_cache(self) -> None:
        """Nothing to write back (no cache)."""

    def drop_all_cache(self) -> None:
        """Nothing to drop (no cache)."""

    def gather(self, indice: torch.Tensor, *, is_training: bool = False,
               force_dtype: torch.dtype | None = None) -> torch.Tensor:
        """Rows ``indice`` (a 1-D tensor), as ``force_dtype`` when given. In training, the
        embedding expects their gradients before its optimizer's next step."""
        if indice.dim() != 1:
            raise ValueError(f"indice: expected a 1-D tensor, got shape {tuple(indice.shape)}")
        if is_training and self.need_grad():
            self.need_apply = True
        return self.embedding_tensor.gather(indice, force_dtype=force_dtype)

    def add_gradients(self, indice: torch.Tensor, grad_outputs: torch.Tensor) -> None:
        """Keeps the gradients of rows ``indice`` for the next step."""
        self.sparse_indices.append(indice.detach().to("cpu"))
        self.sparse_grads.append(grad_outputs.detach().to("cpu").float())

    def apply_gradients(self, lr: float) -> None:
        """One step of the optimizer with the kept gradients (collective: a rank without any
        takes part with none)."""
        if self.wmb_optimizer is None:
            raise ValueError("this embedding has no optimizer: create_wholememory_optimizer")
        dim = self.shape[1]
        ids = (torch.cat(self.sparse_indices) if self.sparse_indices
               else torch.zeros(0, dtype=torch.int64))
        grads = torch.cat(self.sparse_grads) if self.sparse_grads else torch.zeros(0, dim)
        self.embedding_tensor.embedding.apply_gradients(ids, grads.reshape(-1, dim), lr)
        self.sparse_indices, self.sparse_grads, self.need_apply = [], [], False

    def get_embedding_tensor(self) -> WholeMemoryTensor:
        """The table."""
        return self.embedding_tensor

    def get_optimizer_state_names(self) -> list[str]:
        """The optimizer's state names (the states are kept inside the store)."""
        return {None: [], "sgd": [], "adam": ["m", "v", "beta12t"], "lazy_adam": ["m", "v", "beta12t"],
                "adagrad": ["state_sum"], "rmsprop": ["v"]}[
            self.wmb_optimizer.optimizer_type if self.wmb_optimizer else None]

    def get_optimizer_state(self, state_name: str) -> Any:
        """Not exposed: the store keeps the optimizer's states; :meth:`save` writes them."""
        raise NotImplementedError("optimizer states are kept inside the store: save() writes "
                                  "them with the rows")

    def save(self, file_prefix: str) -> None:
        """Writes this rank's rows (and a trainable table's optimizer state) under
        ``file_prefix`` (collective)."""
        if self.need_grad():
            self.embedding_tensor.embedding.save(file_prefix)
        else:
            self.embedding_tensor.to_file_prefix(file_prefix + "_embedding_tensor")

    def load(self, file_prefix: str, *, ignore_embedding: bool = False,
             part_count: int | None = None) -> None:
        """Reads what :meth:`save` wrote, from a job of ``part_count`` ranks (default this
        one's)."""
        count = part_count if part_count is not None else self.embedding_tensor.embedding.parts
        if self.need_grad():
            if ignore_embedding:
                raise NotImplementedError("ignore_embedding: rows and states load together")
            self.embedding_tensor.embedding.load(file_prefix, count)
        elif not ignore_embedding:
            self.embedding_tensor.from_file_prefix(file_prefix + "_embedding_tensor", count)


def create_embedding(comm: WholeMemoryCommunicator, memory_type: str, memory_location: str,
                     dtype: torch.dtype, sizes: Sequence[int], *,
                     optimizer: WholeMemoryOptimizer | None = None,
                     cache_policy: WholeMemoryCachePolicy | None = None,
                     embedding_entry_partition: Sequence[int] | None = None,
                     random_init: bool = False, gather_sms: int = -1,
                     round_robin_size: int = 0) -> WholeMemoryEmbedding:
    """A zeroed 2-D embedding table (collective); ``random_init`` fills this rank's rows with
    ``torch.nn.init.xavier_uniform_`` (torch's generator decides them). ``optimizer``
    (WholeGraph's earlier spelling) makes it trainable now. ``cache_policy`` and
    ``gather_sms`` are accepted and ignored."""
    sizes = [int(s) for s in sizes]
    if len(sizes) != 2:
        raise ValueError(f"sizes={sizes}: an embedding is 2-D")
    if round_robin_size:
        raise NotImplementedError("round_robin_size: rows are partitioned in blocks")
    wm_tensor = create_wholememory_tensor(comm, memory_type, memory_location, sizes, dtype,
                                          tensor_entry_partition=embedding_entry_partition)
    wm_embedding = WholeMemoryEmbedding(wm_tensor, cache_policy)
    if optimizer is not None:
        optimizer.add_embedding(wm_embedding)
    if random_init:
        local, _ = wm_embedding.get_embedding_tensor().get_local_tensor()
        if local.shape[0]:
            torch.nn.init.xavier_uniform_(local)
    comm.barrier()
    return wm_embedding


def create_embedding_from_filelist(comm: WholeMemoryCommunicator, memory_type: str,
                                   memory_location: str, filelist: Sequence[str] | str,
                                   dtype: torch.dtype, last_dim_size: int, *,
                                   optimizer: WholeMemoryOptimizer | None = None,
                                   cache_policy: WholeMemoryCachePolicy | None = None,
                                   embedding_entry_partition: Sequence[int] | None = None,
                                   gather_sms: int = -1, round_robin_size: int = 0
                                   ) -> WholeMemoryEmbedding:
    """An embedding table read from raw row-major files of ``last_dim_size`` columns
    (collective); each rank reads its own rows."""
    if last_dim_size <= 0:
        raise ValueError(f"last_dim_size={last_dim_size}: an embedding's rows have columns")
    if round_robin_size:
        raise NotImplementedError("round_robin_size: rows are partitioned in blocks")
    wm_tensor = create_wholememory_tensor_from_filelist(
        comm, memory_type, memory_location, filelist, dtype, last_dim_size,
        tensor_entry_partition=embedding_entry_partition)
    wm_embedding = WholeMemoryEmbedding(wm_tensor, cache_policy)
    if optimizer is not None:
        optimizer.add_embedding(wm_embedding)
    return wm_embedding


def destroy_embedding(wm_embedding: WholeMemoryEmbedding) -> None:
    """Releases the table."""
    wm_embedding.embedding_tensor.embedding.close()


class WholeMemoryEmbeddingModule(torch.nn.Module):
    """An embedding as a module: ``module(indice)`` gathers rows that take part in autograd
    when the module is training; their gradients wait in the embedding for its optimizer's
    ``step(lr)``."""

    def __init__(self, wm_embedding: WholeMemoryEmbedding) -> None:
        super().__init__()
        self.wm_embedding = wm_embedding

    def forward(self, indice: torch.Tensor, force_dtype: torch.dtype | None = None
                ) -> torch.Tensor:
        """Rows ``indice``, as ``force_dtype`` when given."""
        return _LookupFn.apply(indice, self.wm_embedding.dummy_input, self.wm_embedding,
                               self.training, force_dtype)
