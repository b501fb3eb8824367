"""WholeGraph's graph ops (``pylibwholegraph.torch.graph_ops``) on CPU tensors: the unique
nodes of a hop (``append_unique``) and self loops added to a sampled CSR
(``add_csr_self_loop``)."""

from __future__ import annotations

import torch

__all__ = ["append_unique", "add_csr_self_loop"]


def _check_1d(what: str, t: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor) or t.dim() != 1:
        raise ValueError(f"{what}: expected a 1-D tensor")


def append_unique(
    target_node_tensor: torch.Tensor,
    neighbor_node_tensor: torch.Tensor,
    need_neighbor_raw_to_unique: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``target_node_tensor`` unchanged, followed by the neighbours not among it, each once, in
    the order they first appear; with ``need_neighbor_raw_to_unique``, also each neighbour's
    index in that output (int32; a neighbour that is a target maps to its first position)."""
    _check_1d("target_node_tensor", target_node_tensor)
    _check_1d("neighbor_node_tensor", neighbor_node_tensor)
    target = target_node_tensor
    both = torch.cat([target, neighbor_node_tensor.to(target.dtype)])
    n_target = len(target)
    values, inverse = torch.unique(both, return_inverse=True)
    # Where each distinct value first appears in `both`.
    first = torch.full((len(values),), len(both), dtype=torch.int64).scatter_reduce_(
        0, inverse, torch.arange(len(both)), reduce="amin")
    new = first >= n_target
    order = torch.argsort(first[new])
    index = first.clone()
    index_of_new = torch.empty(len(order), dtype=torch.int64)
    index_of_new[order] = torch.arange(len(order)) + n_target
    index[new] = index_of_new
    unique = torch.cat([target, values[new][order]])
    if not need_neighbor_raw_to_unique:
        return unique
    return unique, index[inverse[n_target:]].to(torch.int32)


def add_csr_self_loop(
    csr_row_ptr_tensor: torch.Tensor, csr_col_ptr_tensor: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The CSR with a loop added first in every row (row ``i`` gains column ``i``; loops
    already there are not looked for), as ``(row_ptr, col)``."""
    _check_1d("csr_row_ptr_tensor", csr_row_ptr_tensor)
    _check_1d("csr_col_ptr_tensor", csr_col_ptr_tensor)
    rows = len(csr_row_ptr_tensor) - 1
    if rows < 0:
        raise ValueError("csr_row_ptr_tensor: a CSR's row pointers hold at least one entry")
    steps = torch.diff(csr_row_ptr_tensor)
    if int(csr_row_ptr_tensor[0]) != 0 or (len(steps) and int(steps.min()) < 0):
        raise ValueError("csr_row_ptr_tensor: row pointers start at 0 and never decrease")
    if int(csr_row_ptr_tensor[-1]) != len(csr_col_ptr_tensor):
        raise ValueError(f"csr_row_ptr_tensor: the last row pointer is "
                         f"{int(csr_row_ptr_tensor[-1])}, the columns hold "
                         f"{len(csr_col_ptr_tensor)}")
    row_ptr = csr_row_ptr_tensor + torch.arange(rows + 1, dtype=csr_row_ptr_tensor.dtype)
    col = torch.empty(len(csr_col_ptr_tensor) + rows, dtype=csr_col_ptr_tensor.dtype)
    loops = row_ptr[:-1].long()
    col[loops] = torch.arange(rows, dtype=col.dtype)
    rest = torch.ones(len(col), dtype=torch.bool)
    rest[loops] = False
    col[rest] = csr_col_ptr_tensor
    return row_ptr, col
