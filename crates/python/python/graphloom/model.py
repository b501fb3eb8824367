"""Trained models: inference with a saved model file (PyG's side is :mod:`graphloom.torch`)."""

from __future__ import annotations

import os
from typing import Any

from ._arrays import from_view, ids_array
from ._extension import extension as _graphloom

__all__ = ["predict"]


def predict(
    model: str | os.PathLike,
    dataset: str | os.PathLike,
    nodes: Any = None,
    *,
    layer: int | None = None,
    inference_memory_gib: float | None = None,
    scratch_dir: str | os.PathLike | None = None,
) -> Any:
    """Log-probabilities of a saved model (``graphloom train --save-model`` or
    :func:`graphloom.torch.save_for_graphloom`) on a dataset directory, by exact
    full-neighbour inference, as ``graphloom predict``: ``(len(nodes), classes)``, every node by
    default. With ``layer=k``, the output of the model's first ``k`` layers instead (node
    embeddings, as ``graphloom embed --layer k``). With ``inference_memory_gib``, inference runs
    layer by layer over the mapped dataset within that many GiB, layer outputs that do not fit
    in scratch files in ``scratch_dir`` (default: the system's temporary folder), as the same
    options of ``graphloom predict`` do."""
    ids = ids_array(nodes, "nodes") if nodes is not None else None
    scratch = os.fspath(scratch_dir) if scratch_dir is not None else None
    return from_view(
        _graphloom.predict(
            os.fspath(model), os.fspath(dataset), ids, layer, inference_memory_gib, scratch
        )
    )
