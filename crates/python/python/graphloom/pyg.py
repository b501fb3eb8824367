"""PyG data in GraphLoom: a ``torch_geometric.data.Data`` opened as a dataset directory
(written by :mod:`graphloom._convert`, as :meth:`graphloom.Dataset.from_pyg` writes it), and
the one a loader given a ``Data`` (:mod:`graphloom.loader`) samples from, with the maps back to
the ``Data``'s own edge order.

Node ids are kept: node ``v`` of the dataset is node ``v`` of the ``Data``. The dataset stores
the edges by destination (CSR), so its edge ids differ from the ``Data``'s column order, and
:func:`csr_order` maps one to the other.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import Any

from ._arrays import torch_or_none
from ._convert import write_pyg
from ._extension import extension as _graphloom
from .dataset import Dataset

__all__ = ["from_pyg", "dataset_of", "csr_order", "is_pyg_data"]


def is_pyg_data(obj: Any) -> bool:
    """Whether ``obj`` is a homogeneous ``torch_geometric.data.Data`` (without importing
    torch_geometric when no one has)."""
    import sys

    data_module = sys.modules.get("torch_geometric.data")
    return data_module is not None and isinstance(obj, data_module.Data)


def from_pyg(
    data: Any,
    path: str | os.PathLike,
    *,
    name: str | None = None,
    train_mask: Any = None,
    val_mask: Any = None,
    test_mask: Any = None,
    edge_weight: Any = None,
    graph_only: bool = False,
) -> Dataset:
    """Writes ``data`` as the dataset directory ``path`` and opens it; see
    :meth:`graphloom.Dataset.from_pyg`. ``graph_only`` writes the edges and features alone
    (no labels, empty splits), for a loader that takes the rest from the ``Data``."""
    write_pyg(data, path, name=name, train_mask=train_mask, val_mask=val_mask,
              test_mask=test_mask, edge_weight=edge_weight, graph_only=graph_only)
    return Dataset.open(path)


# Datasets made for the loaders of a Data, by id(data): each is removed with its Data.
_converted: dict[int, Dataset] = {}


# The temporary folders of converted Data: named after the process, so that a process killed
# before it could remove them (SIGKILL, or SIGTERM without a handler) has them removed by the
# next process that converts one.
_FOLDER_PREFIX = "graphloom-pyg-"


def dataset_of(data: Any) -> Dataset:
    """The dataset a loader given the PyG ``Data`` ``data`` samples from: written once per
    ``Data`` to a temporary folder, removed when ``data`` is freed or the process ends (a
    ``Data`` changed after its first loader is not written again); the folders of processes
    that were killed are removed first."""
    key = id(data)
    if key not in _converted:
        _graphloom.remove_abandoned(tempfile.gettempdir(), _FOLDER_PREFIX)
        folder = tempfile.mkdtemp(prefix=f"{_FOLDER_PREFIX}{os.getpid()}-")
        ds = from_pyg(data, os.path.join(folder, "data"), graph_only=True)
        _converted[key] = ds

        def forget(key: int = key, folder: str = folder) -> None:
            _converted.pop(key, None)
            shutil.rmtree(folder, ignore_errors=True)

        weakref.finalize(data, forget)
    return _converted[key]


def csr_order(data: Any) -> Any:
    """For each edge of the dataset made from ``data`` (in its CSR order), the column of
    ``data.edge_index`` it came from: edges sorted by destination, then source, ties in their
    order in ``edge_index`` (the order the writer keeps)."""
    torch = torch_or_none()
    edge_index = data.edge_index.to("cpu")
    key = edge_index[1] * int(data.num_nodes) + edge_index[0]
    return torch.sort(key, stable=True).indices

