"""WholeGraph's sampling ops (``pylibwholegraph.torch.wholegraph_ops``): up to ``k`` in-CSR
neighbours of each centre node, drawn without replacement, uniformly or by an edge weight,
over a CSR whose row pointers and columns are WholeMemory tensors in any layout.

The centres' ranges are gathered from the row-pointer table, the positions drawn in the
extension (Floyd's algorithm; A-Res for weights: the samplers of ``graphloom train``), and the
columns gathered at them, so a graph spread over the ranks of a job samples as one held whole.
A centre's draws are keyed by the seed and its id. Outputs are CPU tensors with WholeGraph's
dtypes: offsets and centre indices int32, sampled nodes the column table's dtype, edge ids
int64."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._arrays import from_view, ids_array
from .._extension import extension as _graphloom
from .tensor import WholeMemoryTensor

__all__ = ["unweighted_sample_without_replacement", "weighted_sample_without_replacement"]


def _seed(random_seed: int | None) -> int:
    """The draws' seed: the given one, or one from torch's generator (so ``torch.manual_seed``
    makes a run repeatable)."""
    if random_seed is None:
        return int(torch.randint(0, 2**62, ()).item())
    if not isinstance(random_seed, (int, np.integer)) or random_seed < 0:
        raise ValueError(f"random_seed: expected an int of 0 or more, got {random_seed!r}")
    return int(random_seed)


def _check_csr(row_ptr: Any, col: Any) -> None:
    for what, t in (("wm_csr_row_ptr_tensor", row_ptr), ("wm_csr_col_ptr_tensor", col)):
        if not isinstance(t, WholeMemoryTensor):
            raise TypeError(f"{what}: expected a WholeMemoryTensor, got {type(t).__name__}")
        if t.dim() != 1:
            raise ValueError(f"{what}: expected a 1-D tensor, got {t.dim()} dimensions")
    if row_ptr.dtype != torch.int64:
        raise TypeError(f"wm_csr_row_ptr_tensor: expected int64, got {row_ptr.dtype}")
    if col.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"wm_csr_col_ptr_tensor: expected int32 or int64, got {col.dtype}")


def _sample(row_ptr: WholeMemoryTensor, col: WholeMemoryTensor,
            weight: WholeMemoryTensor | None, center_nodes_tensor: Any, max_sample_count: int,
            random_seed: int | None, need_center_local_output: bool,
            need_edge_output: bool) -> tuple[torch.Tensor, ...]:
    _check_csr(row_ptr, col)
    if isinstance(max_sample_count, bool) or not isinstance(max_sample_count, (int, np.integer)):
        raise TypeError(f"max_sample_count: expected an int, got {max_sample_count!r}")
    centers = torch.from_numpy(ids_array(center_nodes_tensor, "center_nodes_tensor"))
    nodes = row_ptr.shape[0] - 1
    if len(centers) and (int(centers.min()) < 0 or int(centers.max()) >= nodes):
        bad = int(centers.min()) if int(centers.min()) < 0 else int(centers.max())
        raise IndexError(f"center_nodes_tensor: node {bad} is not in 0..{nodes}")
    starts = row_ptr.gather(centers)
    ends = row_ptr.gather(centers + 1)
    weights = None
    if weight is not None:
        # Every weight of every centre's range, the ranges one after the other.
        lengths = ends - starts
        firsts = torch.repeat_interleave(starts - (torch.cumsum(lengths, 0) - lengths), lengths)
        edges = firsts + torch.arange(int(lengths.sum()), dtype=torch.int64)
        weights = weight.gather(edges, force_dtype=torch.float32).contiguous().numpy()
    offsets, positions, center_local = (
        from_view(v) for v in _graphloom.sample_ranges(
            centers.numpy(), starts.contiguous().numpy(), ends.contiguous().numpy(),
            int(max_sample_count), _seed(random_seed), weights))
    dest = col.gather(positions)
    out = [offsets, dest]
    if need_center_local_output:
        out.append(center_local)
    if need_edge_output:
        out.append(positions)
    return tuple(out)


def unweighted_sample_without_replacement(
    wm_csr_row_ptr_tensor: WholeMemoryTensor,
    wm_csr_col_ptr_tensor: WholeMemoryTensor,
    center_nodes_tensor: torch.Tensor,
    max_sample_count: int,
    random_seed: int | None = None,
    need_center_local_output: bool = False,
    need_edge_output: bool = False,
) -> tuple[torch.Tensor, ...]:
    """Up to ``max_sample_count`` neighbours of each centre (all of a smaller neighbourhood;
    all when negative), each subset equally likely. Returns ``(sample_offset, sampled_nodes)``,
    then the centre index of each sampled node when ``need_center_local_output``, then each
    one's edge id (position in the column tensor) when ``need_edge_output``."""
    return _sample(wm_csr_row_ptr_tensor, wm_csr_col_ptr_tensor, None, center_nodes_tensor,
                   max_sample_count, random_seed, need_center_local_output, need_edge_output)


def weighted_sample_without_replacement(
    wm_csr_row_ptr_tensor: WholeMemoryTensor,
    wm_csr_col_ptr_tensor: WholeMemoryTensor,
    wm_csr_weight_ptr_tensor: WholeMemoryTensor,
    center_nodes_tensor: torch.Tensor,
    max_sample_count: int,
    random_seed: int | None = None,
    need_center_local_output: bool = False,
    need_edge_output: bool = False,
) -> tuple[torch.Tensor, ...]:
    """As :func:`unweighted_sample_without_replacement`, each neighbour drawn with probability
    proportional to its edge's weight (successive sampling without replacement; zero weights
    last)."""
    weight = wm_csr_weight_ptr_tensor
    if not isinstance(weight, WholeMemoryTensor) or weight.dim() != 1:
        raise TypeError("wm_csr_weight_ptr_tensor: expected a 1-D WholeMemoryTensor")
    if weight.shape[0] != wm_csr_col_ptr_tensor.shape[0]:
        raise ValueError(f"wm_csr_weight_ptr_tensor: {weight.shape[0]} weights for "
                         f"{wm_csr_col_ptr_tensor.shape[0]} edges")
    return _sample(wm_csr_row_ptr_tensor, wm_csr_col_ptr_tensor, weight, center_nodes_tensor,
                   max_sample_count, random_seed, need_center_local_output, need_edge_output)
