"""WholeGraph's tensors: a table of the store as ``WholeMemoryTensor`` (1-D or 2-D, rows spread
over the ranks), made zeroed or from raw files, and WholeGraph's names of part files."""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import torch

from .. import comm as _comm
from .._arrays import dtype_name
from ..embedding import Embedding
from ..embedding import create_embedding as _store_table
from ..embedding import create_embedding_from_filelist as _from_filelist
from .comm import WholeMemoryCommunicator
from .memory import _check_round_robin, _location, _memory_type, _torch_dtype

__all__ = [
    "WholeMemoryTensor",
    "create_wholememory_tensor",
    "create_wholememory_tensor_from_filelist",
    "destroy_wholememory_tensor",
    "get_part_file_name",
    "get_part_file_list",
]


def get_part_file_name(prefix: str, part_id: int, part_count: int) -> str:
    """WholeGraph's name of part ``part_id`` of ``part_count`` files."""
    return f"{prefix}_part_{part_id}_of_{part_count}"


def get_part_file_list(prefix: str, part_count: int) -> list[str]:
    """The names of the ``part_count`` part files of ``prefix``."""
    return [get_part_file_name(prefix, i, part_count) for i in range(part_count)]


def _as_tensor(value: Any) -> torch.Tensor:
    """``value`` (a torch tensor or a numpy array, as the store's calls return them) as a
    torch tensor sharing its memory."""
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

    @property
    def wmb_tensor(self) -> "WholeMemoryTensor":
        """WholeGraph's handle of the tensor for its ops (the binding's tensor there): here the
        tensor itself, which the ops take."""
        return self

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
        per rank of the job on this machine."""
        comm = self.embedding_comm()
        if comm.size > 1 and self.embedding.layout == "distributed":
            raise NotImplementedError(
                "get_all_chunked_tensor of a distributed table over several processes: each "
                "holds its own rows only (get_local_tensor), or use the chunked memory type"
            )
        parts = [self.embedding.get_chunk_tensor(r) for r in range(comm.size)]
        return [_as_tensor(t) for t, _ in parts], [int(first) for _, first in parts]

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
        _check_round_robin(round_robin_size)
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
        """Writes this rank's rows as its part of ``file_prefix`` (collective)."""
        comm = self.embedding_comm()
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
    table = _store_table(comm.comm, _memory_type(memory_type),
                       _location(memory_location, memory_type),
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
    table = _from_filelist(comm.comm, _memory_type(memory_type),
                       _location(memory_location, memory_type),
                           filelist, dtype_name(dtype), last_dim_size)
    _check_partition(tensor_entry_partition, table.shape[0], comm)
    return WholeMemoryTensor(table, comm)


def destroy_wholememory_tensor(wm_tensor: WholeMemoryTensor) -> None:
    """Releases the table."""
    wm_tensor.embedding.close()
