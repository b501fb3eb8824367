"""Link prediction's metrics, as OGB's evaluators compute them (the same code that scores
``graphloom train --task link``): AUC, Hits@K and MRR of positive and negative scores."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import is_torch
from ._extension import extension as _graphloom

__all__ = ["auc", "hits_at_k", "mrr"]


def _scores(values: Any, what: str) -> np.ndarray:
    """Scores (a tensor, array or sequence of numbers) as a contiguous float64 array."""
    if is_torch(values):
        values = values.detach().cpu().double().numpy()
    array = np.ascontiguousarray(values, dtype=np.float64)
    if np.isnan(array).any():
        raise ValueError(f"{what}: a score is NaN")
    if array.size == 0:
        raise ValueError(f"{what}: no scores (a metric of no pairs is undefined)")
    return array


def auc(pos: Any, neg: Any) -> float:
    """The area under the ROC curve of positive scores ``pos`` against negative scores
    ``neg``: the chance a positive scores above a negative, ties counting one half."""
    return _graphloom.auc(_scores(pos, "pos").reshape(-1), _scores(neg, "neg").reshape(-1))


def hits_at_k(pos: Any, neg: Any, k: int) -> float:
    """OGB's Hits@K: the share of ``pos`` scoring strictly above the ``k``-th highest of
    ``neg`` (1.0 with fewer than ``k`` negatives, as OGB's evaluator)."""
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"k: expected a positive int, got {k!r}")
    return _graphloom.hits_at_k(_scores(pos, "pos").reshape(-1), _scores(neg, "neg").reshape(-1),
                                int(k))


def mrr(pos: Any, neg: Any) -> float:
    """OGB's mean reciprocal rank: each positive ``pos[i]`` ranked among its own negatives
    ``neg[i]`` (an ``(E, K)`` array), rank ``1 + (optimistic + pessimistic) / 2`` for ties."""
    pos = _scores(pos, "pos").reshape(-1)
    neg = _scores(neg, "neg")
    if neg.ndim != 2 or neg.shape[0] != pos.shape[0]:
        raise ValueError(f"neg: shape {neg.shape}; expected ({pos.shape[0]}, K), a row of "
                         "negatives per positive")
    return _graphloom.mrr(pos, neg.reshape(-1), neg.shape[1])
