"""Cluster-GCN's loaders with PyG's signatures: ``ClusterData`` (the METIS clusters of a graph,
kept in its dataset) and ``ClusterLoader`` (batches of whole clusters)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .._arrays import dtype_name
from .._extension import checked, extension as _graphloom
from ..embedding import Embedding
from .base import _dataset_of
from .subgraph_loader import _count, _SubgraphLoader

__all__ = ["ClusterData", "ClusterLoader"]


class ClusterData:
    """The METIS clusters of a graph (PyG's ``ClusterData``)::

        cluster_data = ClusterData(data, num_parts=1500)
        loader = ClusterLoader(cluster_data, batch_size=20, shuffle=True)

    ``data`` is a :class:`Dataset` or a PyG ``Data``. The clusters are computed once and kept
    in the dataset's ``clusters/`` folder, where the next ``ClusterData`` (or
    ``graphloom train --batching cluster``) of the same graph and count reads them back;
    :attr:`origin` says which happened. ``recursive`` is refused (GraphLoom's METIS call is
    k-way); ``save_dir`` and ``log`` are accepted and ignored."""

    def __init__(self, data: Any, num_parts: int, recursive: bool = False,
                 save_dir: Any = None, log: bool = True,
                 keep_inter_cluster_edges: bool = False) -> None:
        if recursive:
            raise ValueError("recursive=True is not supported: the clusters are METIS's k-way "
                             "parts")
        self.data = data
        self.dataset = _dataset_of(data)
        self.num_parts = _count(num_parts, "num_parts")
        self._clusters = _graphloom.Clusters(self.dataset._inner, self.num_parts)

    def __len__(self) -> int:
        return self.num_parts

    @property
    def origin(self) -> str:
        """Whether the clusters were computed now or read back, and where they are kept."""
        return self._clusters.origin

    def members(self, cluster: int) -> Any:
        """The node ids of cluster ``cluster``, in increasing order (int64)."""
        return np.asarray(checked(self._clusters.members)(cluster), dtype=np.int64)

    def __repr__(self) -> str:
        return f"ClusterData(num_parts={self.num_parts}, {self.origin})"


class ClusterLoader(_SubgraphLoader):
    """Cluster-GCN's batches (PyG's ``ClusterLoader``): each is the subgraph induced by
    ``batch_size`` clusters of ``cluster_data``, the edges between them included. With
    ``shuffle``, each epoch takes the clusters in an order drawn anew (from ``seed`` and the
    epoch, or without ``seed`` from torch's generator, so ``torch.manual_seed`` decides it);
    else in cluster order. A batch is a ``Data`` with ``x``, ``y``, ``edge_index`` (over
    positions in ``n_id``), ``n_id`` (its nodes' ids, increasing), ``e_id`` and, from a
    :class:`Dataset`, ``train_mask``, ``val_mask`` and ``test_mask``; from a PyG ``Data``, its
    node and edge attributes sliced to the batch."""

    def __init__(self, cluster_data: ClusterData, batch_size: int = 1, shuffle: bool = False,
                 *, seed: int | None = None, generator: Any = None,
                 features: Embedding | None = None,
                 queue_depth: int = _graphloom.DEFAULT_QUEUE_DEPTH,
                 x_dtype: Any = "float32", transform: Callable[[Any], Any] | None = None,
                 pin_memory: bool = False, **options: Any) -> None:
        if not isinstance(cluster_data, ClusterData):
            raise TypeError(f"cluster_data: expected a graphloom.ClusterData, got "
                            f"{type(cluster_data).__name__}")
        c = cluster_data
        self._setup_subgraphs(c.data, _count(batch_size, "batch_size"), seed, generator,
                              features, transform, pin_memory, options)
        self._inner = _graphloom.subgraph_loader(
            c.dataset._inner, self.features._table, self.batch_size,
            clusters=c._clusters, shuffle=bool(shuffle), seed=0 if seed is None else int(seed),
            queue_depth=queue_depth, x_dtype=dtype_name(x_dtype),
        )
