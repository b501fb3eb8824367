"""A PyG ``torch_geometric.data.HeteroData`` written as a heterogeneous dataset directory (the
extension's ``write_hetero_arrays``), for :meth:`graphloom.Dataset.from_pyg` and the neighbour
loader given a ``HeteroData``.

Node ids are kept per type: node ``v`` of type ``t`` is node ``v`` of ``data[t]``. Each
relation's edges are kept as given (``edge_index[0]``, ids of the source type, sends to
``edge_index[1]``, ids of the destination type), duplicates included; the dataset stores them
by destination (CSR)."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from ._convert import _cpu_numpy, _features, _labels, _split_ids, _SPLITS
from ._extension import extension as _graphloom

__all__ = ["is_hetero_data", "write_pyg_hetero"]


def is_hetero_data(obj: Any) -> bool:
    """Whether ``obj`` is a ``torch_geometric.data.HeteroData`` (without importing
    torch_geometric when no one has)."""
    data_module = sys.modules.get("torch_geometric.data")
    return data_module is not None and isinstance(obj, data_module.HeteroData)


def _target_type(data: Any, target_node_type: str | None) -> str:
    """The node type that carries the labels: the one given, else the one type with ``y``."""
    if target_node_type is not None:
        if target_node_type not in data.node_types:
            raise ValueError(f"target_node_type {target_node_type!r} is not one of the node "
                             f"types {data.node_types}")
        if getattr(data[target_node_type], "y", None) is None:
            raise ValueError(f"from_pyg: target_node_type {target_node_type!r} has no labels y")
        return target_node_type
    labelled = [t for t in data.node_types if getattr(data[t], "y", None) is not None]
    if len(labelled) != 1:
        found = f"types {labelled} have" if labelled else "no type has"
        raise ValueError(f"from_pyg: {found} labels y; say which with target_node_type=")
    return labelled[0]


def _type_splits(split_idx: dict[str, Any] | None, target: str) -> dict[str, Any]:
    """OGB's ``split_idx`` of a heterogeneous dataset (``{"train": {"paper": ids}, ...}``) or
    of the target type alone (``{"train": ids, ...}``), by split."""
    if split_idx is None:
        return {}
    unknown = set(split_idx) - {"train", "valid", "test"}
    if unknown:
        raise ValueError(f"split_idx: keys {sorted(unknown)}; expected train, valid, test")
    out = {}
    for split, value in split_idx.items():
        if isinstance(value, dict):
            if target not in value:
                raise ValueError(f"split_idx[{split!r}] has no ids of the target type {target!r}")
            value = value[target]
        out[split] = value
    return out


def write_pyg_hetero(
    data: Any,
    path: str | os.PathLike,
    *,
    name: str | None = None,
    target_node_type: str | None = None,
    masks: dict[str, Any] | None = None,
    split_idx: dict[str, Any] | None = None,
    graph_only: bool = False,
) -> None:
    """Writes the ``HeteroData`` ``data`` as the heterogeneous dataset directory ``path``; see
    :meth:`graphloom.Dataset.from_pyg`. ``masks`` holds the splits given by the caller
    (``train``, ``valid``, ``test``). ``graph_only`` writes the relations and features alone
    (labels -1, empty splits), for a loader that takes the rest from the ``HeteroData``."""
    if not data.node_types:
        raise ValueError("from_pyg: the HeteroData has no node types")
    target = data.node_types[0] if graph_only else _target_type(data, target_node_type)
    node_types = []
    for t in data.node_types:
        n = data[t].num_nodes
        if n is None:
            raise ValueError(f"from_pyg: node type {t!r} has neither x nor num_nodes; set "
                             f"data[{t!r}].num_nodes")
        x = getattr(data[t], "x", None)
        if x is None:
            node_types.append((t, int(n), None))
        else:
            rows, dtype = _features(x)
            if rows.shape[0] != n:
                raise ValueError(f"x of {t!r}: {rows.shape[0]} rows for {n} nodes")
            node_types.append((t, int(n), (rows, int(rows.shape[1]), dtype)))
    relations = []
    for edge_type in data.edge_types:
        store = data[edge_type]
        what = f"edge_index of {edge_type}"
        if getattr(store, "edge_index", None) is None:
            hint = (" (it has adj_t: make it without the ToSparseTensor transform)"
                    if getattr(store, "adj_t", None) is not None else "")
            raise ValueError(f"from_pyg: {edge_type} has no edge_index{hint}")
        edge_index = _cpu_numpy(store.edge_index, what)
        if edge_index.ndim != 2 or edge_index.shape[0] != 2:
            raise ValueError(f"{what}: shape {tuple(edge_index.shape)}; expected [2, E]")
        if not np.issubdtype(edge_index.dtype, np.integer):
            raise ValueError(f"{what}: dtype {edge_index.dtype}; expected integer node ids")
        relations.append((tuple(edge_type), np.ascontiguousarray(edge_index, dtype=np.int64)))
    n_target = int(data[target].num_nodes)
    y = None if graph_only else getattr(data[target], "y", None)
    labels = _labels(y, n_target) if y is not None else np.full(n_target, -1, np.int64)
    given = {**_type_splits(split_idx, target), **(masks or {})}
    splits, names = [], []
    for split, keys in _SPLITS:
        value, what = given.get(split), keys[0]
        if value is None and not graph_only:
            key = next((k for k in keys if getattr(data[target], k, None) is not None), None)
            if key is not None:
                value, what = getattr(data[target], key), key
        splits.append(_split_ids(value, n_target, what) if value is not None
                      else np.zeros(0, np.int64))
        names.append(what)
    path = os.fspath(path)
    _graphloom.write_hetero_arrays(
        path,
        name or os.path.basename(os.path.normpath(path)),
        node_types,
        relations,
        target,
        labels,
        splits,
        names,
    )
