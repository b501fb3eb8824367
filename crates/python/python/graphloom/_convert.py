"""A PyG ``torch_geometric.data.Data`` written as a dataset directory (the extension's
``write_arrays``), for :meth:`graphloom.Dataset.from_pyg` and the loaders given a ``Data``
(:mod:`graphloom.pyg`).

Node ids are kept: node ``v`` of the dataset is node ``v`` of the ``Data``. Edges are kept as
given (``edge_index[0]`` sends to ``edge_index[1]``, as PyG's layers read it), duplicates and
self-loops included; the dataset stores them by destination (CSR)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ._arrays import loaded_torch
from ._extension import extension as _graphloom

__all__ = ["write_pyg"]

# Each split, and the attributes of a Data it is read from when not given (the first found).
_SPLITS = (
    ("train", ("train_mask", "train_idx")),
    ("valid", ("val_mask", "valid_mask", "val_idx", "valid_idx")),
    ("test", ("test_mask", "test_idx")),
)


def _cpu_numpy(t: Any, what: str) -> np.ndarray:
    """A torch tensor (or array) as a contiguous numpy array on the CPU, shared when it can be."""
    torch = loaded_torch()
    if torch is not None and isinstance(t, torch.Tensor):
        return t.detach().to("cpu").contiguous().numpy()
    if isinstance(t, np.ndarray):
        return np.ascontiguousarray(t)
    raise TypeError(f"{what}: expected a tensor, got {type(t).__name__}")


def _split_ids(value: Any, num_nodes: int, what: str) -> np.ndarray:
    """A split given as a boolean mask over the nodes or as node ids, as int64 ids."""
    array = _cpu_numpy(value, what)
    if array.dtype == np.bool_:
        if array.ndim == 2:
            raise ValueError(
                f"{what}: a mask of shape {tuple(array.shape)} holds several splits: pick one, "
                f"e.g. {what}=data.{what}[:, 0]"
            )
        if array.shape != (num_nodes,):
            raise ValueError(f"{what}: a mask of {array.shape[0]} entries for {num_nodes} nodes")
        return np.flatnonzero(array).astype(np.int64)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{what}: expected a boolean mask or a 1-D tensor of node ids, got "
                        f"{array.dtype} of shape {tuple(array.shape)}")
    return np.ascontiguousarray(array, dtype=np.int64)


def _labels(y: Any, num_nodes: int) -> np.ndarray:
    array = _cpu_numpy(y, "y")
    if array.ndim == 2 and array.shape[1] == 1:
        array = array.reshape(-1)
    if array.ndim != 1 or array.shape[0] != num_nodes:
        raise ValueError(
            f"y: shape {tuple(array.shape)}; GraphLoom's labels are one class per node "
            f"({num_nodes}), -1 for none"
        )
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"y: {array.dtype} values; labels written from Python are integer "
                        "classes: write multi-label or regression targets as node_label.npy "
                        "([N, T] of 0/1/-1, or floats) in the dataset directory")
    return np.ascontiguousarray(array, dtype=np.int64)


def _features(x: Any) -> tuple[np.ndarray, str]:
    """The feature table as a numpy array the writer reads, and its dtype's name."""
    torch = loaded_torch()
    if torch is not None and isinstance(x, torch.Tensor):
        if x.dim() != 2:
            raise ValueError(f"x: shape {tuple(x.shape)}; features are [num_nodes, F]")
        x = x.detach().to("cpu").contiguous()
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(np.uint16), "bf16"
        if x.dtype not in (torch.float32, torch.float64):
            if x.is_floating_point():
                x = x.float()
            else:
                raise TypeError(f"x: {x.dtype} features; expected floating point")
        return x.numpy(), "f64" if x.dtype == torch.float64 else "f32"
    array = _cpu_numpy(x, "x")
    if array.ndim != 2:
        raise ValueError(f"x: shape {tuple(array.shape)}; features are [num_nodes, F]")
    if array.dtype not in (np.float32, np.float64):
        if not np.issubdtype(array.dtype, np.floating):
            raise TypeError(f"x: {array.dtype} features; expected floating point")
        array = array.astype(np.float32)
    return array, "f64" if array.dtype == np.float64 else "f32"




def write_pyg(
    data: Any,
    path: str | os.PathLike,
    *,
    name: str | None = None,
    train_mask: Any = None,
    val_mask: Any = None,
    test_mask: Any = None,
    edge_weight: Any = None,
    graph_only: bool = False,
) -> None:
    """Writes ``data`` as the dataset directory ``path``; see
    :meth:`graphloom.Dataset.from_pyg`. ``graph_only`` writes the edges and features alone
    (no labels, empty splits), for a loader that takes the rest from the ``Data``."""
    if not hasattr(data, "edge_index") or getattr(data, "edge_index", None) is None:
        if hasattr(data, "node_types"):
            raise TypeError("from_pyg: HeteroData is not supported; give a homogeneous Data "
                            "(data.to_homogeneous())")
        if getattr(data, "adj_t", None) is not None:
            raise ValueError("from_pyg: data has adj_t, not edge_index: make it without the "
                             "ToSparseTensor transform")
        raise TypeError(f"from_pyg: expected a torch_geometric.data.Data with edge_index, got "
                        f"{type(data).__name__}")
    num_nodes = int(data.num_nodes)
    edge_index = _cpu_numpy(data.edge_index, "edge_index")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index: shape {tuple(edge_index.shape)}; expected [2, E]")
    # A cast would store float ids truncated and a bool mask's 0s and 1s as nodes.
    if not np.issubdtype(edge_index.dtype, np.integer):
        raise ValueError(f"edge_index: dtype {edge_index.dtype}; expected integer node ids")
    edge_index = np.ascontiguousarray(edge_index, dtype=np.int64)
    x = getattr(data, "x", None)
    features, x_dtype = _features(x) if x is not None else (None, "f32")
    y = None if graph_only else getattr(data, "y", None)
    labels = _labels(y, num_nodes) if y is not None else None
    given = {"train": train_mask, "valid": val_mask, "test": test_mask}
    splits, names = [], []
    for split, keys in _SPLITS:
        value, what = given[split], f"{keys[0]}"
        if value is None and not graph_only:
            key = next((k for k in keys if getattr(data, k, None) is not None), None)
            if key is not None:
                value, what = getattr(data, key), key
        splits.append(_split_ids(value, num_nodes, what) if value is not None
                      else np.zeros(0, np.int64))
        names.append(what)
    weight = edge_weight if edge_weight is not None else getattr(data, "edge_weight", None)
    if graph_only:
        weight = None
    if weight is not None:
        weight = np.ascontiguousarray(_cpu_numpy(weight, "edge_weight").reshape(-1),
                                      dtype=np.float32)
    attr = None if graph_only else getattr(data, "edge_attr", None)
    # Checked before anything is written, so a bad edge_attr leaves no dataset behind.
    edge_rows = _edge_attr_rows(data, attr) if attr is not None else None
    path = os.fspath(path)
    _graphloom.write_arrays(
        path,
        name or os.path.basename(os.path.normpath(path)),
        num_nodes,
        edge_index,
        features,
        x_dtype,
        labels,
        splits,
        names,
        weight,
    )
    if edge_rows is not None:
        # Beside the dataset's files under a temporary name, then renamed into place.
        final = os.path.join(path, "edge_feat.npy")
        temporary = os.path.join(path, f".edge_feat.npy.tmp-{os.getpid()}")
        with open(temporary, "wb") as f:
            np.save(f, edge_rows)
        os.replace(temporary, final)


def _edge_attr_rows(data: Any, attr: Any) -> np.ndarray:
    """``data.edge_attr`` in the dataset's CSR edge order, as ``edge_feat.npy`` holds it:
    float32 (other numbers cast), or bfloat16 as its uint16 bits; ``[E]`` as ``[E, 1]``."""
    torch = loaded_torch()
    if torch is None or not isinstance(attr, torch.Tensor):
        raise TypeError(f"edge_attr: expected a tensor, got {type(attr).__name__}")
    num_edges = int(data.edge_index.shape[1])
    if attr.ndim not in (1, 2) or attr.shape[0] != num_edges:
        raise ValueError(f"edge_attr: shape {tuple(attr.shape)}; expected [{num_edges}, D] "
                         f"(a row per column of edge_index)")
    from .pyg import csr_order

    rows = attr.detach().to("cpu")[csr_order(data)].reshape(num_edges, -1)
    if rows.dtype == torch.bfloat16:
        array = rows.contiguous().view(torch.int16).numpy().view(np.uint16)
    else:
        array = rows.to(torch.float32).contiguous().numpy()
        if not np.isfinite(array).all():
            raise ValueError("edge_attr: holds NaN or infinity")
    return array
