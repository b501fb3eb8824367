"""The link-neighbour loader: mini-batches of node pairs with their sampled neighbourhoods, as
PyG ``Data``, with PyG's ``LinkNeighborLoader`` signature."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .._arrays import dtype_name, from_view, is_torch, loaded_torch
from .._extension import extension as _graphloom
from ..comm import get_global_communicator
from ..dataset import Dataset
from ..embedding import Embedding
from .base import _SampledLoader
from .neighbor_loader import _SAMPLER_IGNORED, _SAMPLER_REFUSED, _fanouts, _neighbourhood_data

__all__ = ["LinkNeighborLoader"]


def _negative_sampling(neg_sampling: Any, neg_sampling_ratio: Any,
                       neg_ratio: Any) -> tuple[str, float]:
    """PyG's ``neg_sampling`` (None, "binary", "triplet", a dict with ``mode`` and
    ``amount``, or a ``torch_geometric.sampler.NegativeSampling``) as (mode, amount);
    ``neg_ratio`` is the amount of a mode given by name (the command line's ``--neg-ratio``)."""
    if neg_ratio is not None:
        if neg_sampling_ratio is not None:
            raise ValueError("give neg_ratio or neg_sampling_ratio, not both")
        if not isinstance(neg_sampling, str):
            raise ValueError("neg_ratio: give it with neg_sampling='binary' or 'triplet' (a "
                             "dict or NegativeSampling carries its own amount)")
        neg_sampling = {"mode": neg_sampling, "amount": neg_ratio}
    if neg_sampling is None and neg_sampling_ratio:
        # PyG's older spelling: binary negatives at this ratio (0 means none, as in PyG).
        neg_sampling = {"mode": "binary", "amount": neg_sampling_ratio}
    if neg_sampling is None:
        return "none", 1
    if isinstance(neg_sampling, str):
        mode, amount = neg_sampling, 1
    elif isinstance(neg_sampling, dict):
        unknown = set(neg_sampling) - {"mode", "amount"}
        if unknown:
            raise ValueError(f"neg_sampling: unknown keys {sorted(unknown)} (mode, amount)")
        mode, amount = neg_sampling.get("mode"), neg_sampling.get("amount", 1)
    elif hasattr(neg_sampling, "mode") and hasattr(neg_sampling, "amount"):
        if getattr(neg_sampling, "weight", None) is not None:
            raise ValueError("neg_sampling: weighted negatives are not supported (negatives "
                             "are drawn uniformly)")
        mode, amount = str(getattr(neg_sampling.mode, "value", neg_sampling.mode)), neg_sampling.amount
    else:
        raise TypeError(f"neg_sampling: expected None, 'binary', 'triplet', a dict or a "
                        f"NegativeSampling, got {type(neg_sampling).__name__}")
    if mode not in ("binary", "triplet"):
        raise ValueError(f"neg_sampling: mode {mode!r}; the modes are 'binary' and 'triplet'")
    if isinstance(amount, bool) or not isinstance(amount, (int, float, np.integer, np.floating)):
        raise ValueError(f"neg_sampling: amount {amount!r}; expected a number of negatives "
                         "per positive")
    amount = float(amount)
    if not (amount > 0 and np.isfinite(amount)):
        raise ValueError(f"neg_sampling: amount {amount!r}; it must be positive (as PyG's)")
    if mode == "triplet" and amount != int(amount):
        raise ValueError(f"neg_sampling: amount {amount!r}; triplet sampling draws a whole "
                         "number of negative destinations per positive (as PyG's)")
    return mode, amount


def _pairs(edge_label_index: Any, num_nodes: int) -> np.ndarray:
    """``edge_label_index`` (a ``[2, E]`` array or tensor of node ids) as a contiguous int64
    ``[2, E]`` array."""
    if isinstance(edge_label_index, tuple):
        raise TypeError("edge_label_index: (edge_type, pairs) is for HeteroData, which the "
                        "loader does not sample")
    if is_torch(edge_label_index):
        edge_label_index = edge_label_index.detach().cpu().numpy()
    pairs = np.asarray(edge_label_index)
    if pairs.ndim != 2 or pairs.shape[0] != 2:
        raise ValueError(f"edge_label_index: shape {tuple(pairs.shape)}; expected [2, E]")
    if not np.issubdtype(pairs.dtype, np.integer):
        raise ValueError(f"edge_label_index: dtype {pairs.dtype}; expected integer node ids")
    return np.ascontiguousarray(pairs, dtype=np.int64)


class LinkNeighborLoader(_SampledLoader):
    """Mini-batches of node pairs and the sampled neighbourhood of their nodes, made by
    GraphLoom's sampler and gathers on a thread of their own, with PyG's
    ``LinkNeighborLoader`` signature::

        split = dataset.link_split()                  # graphloom prepare link-split
        loader = LinkNeighborLoader(dataset, num_neighbors=[15, 10],
                                    edge_label_index=split["train_pos"],
                                    neg_sampling="binary", batch_size=512, shuffle=True)
        for batch in loader:
            h = model(batch.x, batch.edge_index)
            src, dst = batch.edge_label_index
            loss = F.binary_cross_entropy_with_logits((h[src] * h[dst]).sum(-1),
                                                      batch.edge_label)

    ``data`` is a :class:`Dataset` or a PyG ``Data``, as for :class:`NeighborLoader`. The
    supervision pairs are ``edge_label_index`` (``[2, E]`` node ids; default: the
    dataset's link split's ``train_pos`` when it has one, else every edge of the graph, as
    PyG), ``batch_size`` of them per batch. The seeds of a batch are every node of its pairs
    (negatives included), and its neighbourhood is sampled around them exactly as
    :class:`NeighborLoader` samples around its seeds: ``x``, ``y``, ``n_id`` (the seeds
    first), ``edge_index``, ``e_id``, ``num_sampled_nodes``, ``num_sampled_edges`` and
    ``blocks`` mean the same. ``input_id`` gives each positive's column in
    ``edge_label_index``.

    ``neg_sampling`` is PyG's, with PyG's semantics: ``None`` (the pairs alone;
    ``edge_label`` is the given ``edge_label`` or ones), ``"binary"`` (``edge_label_index``
    holds a batch's ``P`` positives then ``ceil(amount * P)`` negatives, pairs whose two ends
    are both drawn uniformly over the nodes; ``edge_label`` is 1 for a positive and 0 for a
    negative; a given ``edge_label`` is kept for the positives, shifted by one when its
    smallest value is 0 so that 0 stays the negatives', as PyG does), ``"triplet"``
    (``src_index``, ``dst_pos_index`` and ``dst_neg_index`` of ``amount`` columns, squeezed
    when 1: each positive's source kept and a destination drawn uniformly), or a
    ``dict``/``NegativeSampling`` with ``mode`` and ``amount`` (a fraction allowed for
    binary, as in PyG); ``neg_sampling_ratio`` is PyG's older spelling of binary sampling;
    ``neg_ratio=k`` with a mode's name is the same as ``amount`` k. Every draw is keyed by
    the seed, the epoch and the pair (the command line's negatives), so the negatives are the
    same for any number of ranks; a drawn negative may happen to be an edge, as in PyG and
    DGL. All indices are local: positions in ``n_id``.

    ``exclude_supervision`` hides each batch's positive edges (both directions) from its
    sampled neighbourhood, so a model cannot read the answer off the graph (DGL's
    ``exclude="reverse_id"``); the default keeps them, as PyG's loader does (whose
    ``RandomLinkSplit(disjoint_train_ratio=...)`` serves the same end).

    ``shuffle``, ``drop_last``, ``seed``/``generator``, ``features``, ``x_dtype``,
    ``queue_depth``, ``num_workers``, ``pin_memory``, ``transform`` and ``rank``/``ranks``
    are :class:`NeighborLoader`'s."""

    _refused_options = _SAMPLER_REFUSED
    _ignored_options = _SAMPLER_IGNORED

    def __init__(
        self,
        data: Any,
        num_neighbors: Sequence[int] | None = None,
        edge_label_index: Any = None,
        edge_label: Any = None,
        *,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        neg_sampling: Any = None,
        neg_sampling_ratio: float | None = None,
        neg_ratio: int | None = None,
        exclude_supervision: bool = False,
        fanouts: Sequence[int] | None = None,
        seed: int | None = None,
        generator: Any = None,
        features: Embedding | None = None,
        queue_depth: int = _graphloom.DEFAULT_QUEUE_DEPTH,
        x_dtype: Any = "float32",
        rank: int | None = None,
        ranks: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        **pyg_options: Any,
    ) -> None:
        fanouts = _fanouts(num_neighbors, fanouts, "LinkNeighborLoader")
        self._setup(data, features, batch_size, num_workers, transform, pin_memory, seed,
                    generator, pyg_options)
        dataset = self.dataset
        self.mode, self.amount = _negative_sampling(neg_sampling, neg_sampling_ratio, neg_ratio)
        if edge_label_index is None:
            edge_label_index = self._default_pairs(data, dataset)
        self.edge_label_index = _pairs(edge_label_index, dataset.num_nodes)
        self.edge_label = self._labels(edge_label)
        comm = get_global_communicator()
        self._inner = _graphloom.link_neighbor_loader(
            dataset._inner,
            self.features._table,
            fanouts,
            self.edge_label_index,
            self.batch_size,
            self.mode,
            self.amount,
            bool(exclude_supervision),
            bool(shuffle),
            0 if seed is None else int(seed),
            bool(drop_last),
            queue_depth,
            dtype_name(x_dtype),
            comm.rank if rank is None else rank,
            comm.size if ranks is None else ranks,
            int(num_workers),
        )

    @staticmethod
    def _default_pairs(data: Any, dataset: Dataset) -> Any:
        """PyG's default supervision pairs: a ``Data``'s ``edge_index``; a dataset's link
        split's ``train_pos``, else its edges."""
        if not isinstance(data, Dataset):
            return data.edge_index
        if dataset.has_link_split:
            return dataset.link_split()["train_pos"]
        return dataset.edge_index()

    def _labels(self, edge_label: Any) -> Any:
        """The positives' labels, checked (None: ones), as PyG's loader keeps them: under
        binary sampling, labels whose smallest value is 0 are shifted by one, so that 0 is
        the negatives' alone."""
        if edge_label is None:
            return None
        if self.mode == "triplet":
            raise ValueError("edge_label: triplet batches have no labels (PyG refuses them "
                             "too)")
        edge_label = (edge_label.detach().cpu().numpy() if is_torch(edge_label)
                      else np.asarray(edge_label))
        if len(edge_label) != self.edge_label_index.shape[1]:
            raise ValueError(f"edge_label: {len(edge_label)} labels for "
                             f"{self.edge_label_index.shape[1]} pairs")
        if self.mode == "binary" and len(edge_label) > 0 and edge_label.min() == 0:
            edge_label = edge_label + 1
        return edge_label

    def _batch(self, batch: Any) -> Any:
        """The extension's batch as PyG's ``Data``."""
        input_id = from_view(batch.input_id)
        extra: dict[str, Any] = {"input_id": input_id}
        if self.mode == "triplet":
            src, dst_pos, dst_neg = (from_view(v) for v in batch.triplet)
            if self.amount == 1:
                dst_neg = dst_neg.reshape(-1)
            extra.update(src_index=src, dst_pos_index=dst_pos, dst_neg_index=dst_neg)
        else:
            extra["edge_label_index"] = from_view(batch.edge_label_index)
            extra["edge_label"] = self._batch_labels(from_view(batch.edge_label), input_id)
        return self._finish(_neighbourhood_data(self._source, batch.sampled, **extra))

    def _batch_labels(self, labels: Any, input_id: Any) -> Any:
        """The batch's labels: ones and zeros, or the given labels of its positives (see
        :meth:`_labels`) and zeros for its negatives."""
        if self.edge_label is None:
            return labels
        given = self.edge_label[np.asarray(input_id)]
        negatives = np.zeros((len(labels) - len(given),) + given.shape[1:], dtype=given.dtype)
        out = np.concatenate([given, negatives])
        return loaded_torch().from_numpy(out) if is_torch(labels) else out
