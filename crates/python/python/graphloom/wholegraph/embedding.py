"""WholeGraph's embeddings: ``WholeMemoryEmbedding`` (a 2-D table, trainable once it has an
optimizer), ``WholeMemoryEmbeddingModule`` (its rows in autograd), the sparse optimizers
(GraphLoom's, with WholeGraph's names and parameters) and the cache policies embeddings accept
and ignore."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from ..embedding import create_embedding as _store_table
from .comm import WholeMemoryCommunicator
from .memory import _check_round_robin
from .tensor import (
    WholeMemoryTensor,
    create_wholememory_tensor,
    create_wholememory_tensor_from_filelist,
)

__all__ = [
    "WholeMemoryCachePolicy",
    "create_wholememory_cache_policy",
    "create_builtin_cache_policy",
    "destroy_wholememory_cache_policy",
    "WholeMemoryOptimizer",
    "create_wholememory_optimizer",
    "destroy_wholememory_optimizer",
    "WholeMemoryEmbedding",
    "create_embedding",
    "create_embedding_from_filelist",
    "destroy_embedding",
    "WholeMemoryEmbeddingModule",
]


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


# WholeGraph's optimizer names, and the store's.
_OPTIMIZERS = {"sgd": "sgd", "adam": "lazy_adam", "lazy_adam": "lazy_adam",
               "adagrad": "adagrad", "rmsprop": "rmsprop"}
# The states each optimizer keeps per row, by WholeGraph's names (the store keeps them).
_STATE_NAMES = {"sgd": [], "adam": ["m", "v", "beta12t"], "lazy_adam": ["m", "v", "beta12t"],
                "adagrad": ["state_sum"], "rmsprop": ["v"]}


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
        if self.wmb_optimizer is None:
            return []
        return list(_STATE_NAMES[self.wmb_optimizer.optimizer_type])

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


# Rows drawn per generator in ``_xavier_uniform_rows``: each block of the table has a seed of
# its own, so a rank draws only the blocks its rows fall in.
_INIT_BLOCK_ROWS = 65_536


def _xavier_uniform_rows(tensor: "WholeMemoryTensor") -> None:
    """Fills this rank's rows of ``tensor`` as ``xavier_uniform_`` fills the whole table (its
    bound from the whole shape), from one draw of torch's generator: rank-independent."""
    rows, cols = tensor.shape
    bound = (6.0 / (rows + cols)) ** 0.5
    # Rank 0's draw on every rank, whatever each rank's generator holds.
    seed = np.array([int(torch.randint(0, 2**62, ()).item())], dtype=np.int64)
    if tensor.get_comm().comm.rank != 0:
        seed[0] = 0
    tensor.get_comm().comm.all_reduce(seed, "max")
    seed = int(seed[0])
    local, first = tensor.get_local_tensor()
    end = first + local.shape[0]
    for block in range(first // _INIT_BLOCK_ROWS, -(-end // _INIT_BLOCK_ROWS)):
        start = block * _INIT_BLOCK_ROWS
        stop = min(start + _INIT_BLOCK_ROWS, rows)
        generator = torch.Generator().manual_seed(seed + block)
        values = torch.empty(stop - start, cols).uniform_(-bound, bound, generator=generator)
        lo, hi = max(start, first), min(stop, end)
        local[lo - first:hi - first] = values[lo - start:hi - start].to(local.dtype)


def create_embedding(comm: WholeMemoryCommunicator, memory_type: str, memory_location: str,
                     dtype: torch.dtype, sizes: Sequence[int], *,
                     optimizer: WholeMemoryOptimizer | None = None,
                     cache_policy: WholeMemoryCachePolicy | None = None,
                     embedding_entry_partition: Sequence[int] | None = None,
                     random_init: bool = False, gather_sms: int = -1,
                     round_robin_size: int = 0) -> WholeMemoryEmbedding:
    """A zeroed 2-D embedding table (collective); ``random_init`` fills it as
    ``torch.nn.init.xavier_uniform_`` fills a tensor of its shape, each rank its own rows
    (torch's generator decides them, the same table for any number of ranks). ``optimizer``
    (WholeGraph's earlier spelling) makes it trainable now. ``cache_policy`` and
    ``gather_sms`` are accepted and ignored."""
    sizes = [int(s) for s in sizes]
    if len(sizes) != 2:
        raise ValueError(f"sizes={sizes}: an embedding is 2-D")
    _check_round_robin(round_robin_size)
    wm_tensor = create_wholememory_tensor(comm, memory_type, memory_location, sizes, dtype,
                                          tensor_entry_partition=embedding_entry_partition)
    wm_embedding = WholeMemoryEmbedding(wm_tensor, cache_policy)
    if optimizer is not None:
        optimizer.add_embedding(wm_embedding)
    if random_init:
        _xavier_uniform_rows(wm_embedding.get_embedding_tensor())
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
    _check_round_robin(round_robin_size)
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
