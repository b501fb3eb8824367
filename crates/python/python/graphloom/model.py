"""Trained models: inference with a saved model file (PyG's side is :mod:`graphloom.torch`)."""

from __future__ import annotations

import os
from typing import Any

from . import _graphloom
from ._arrays import from_view, ids_array

__all__ = ["predict"]


def predict(model: str | os.PathLike, dataset: str | os.PathLike, nodes: Any = None) -> Any:
    """Log-probabilities of a saved model (``graphloom train --save-model`` or
    :func:`graphloom.torch.save_for_graphloom`) on a dataset directory, by exact
    full-neighbour inference, as ``graphloom predict``: ``(len(nodes), classes)``, every node by
    default."""
    ids = ids_array(nodes, "nodes") if nodes is not None else None
    return from_view(_graphloom.predict(os.fspath(model), os.fspath(dataset), ids))
