"""Subgraph loaders with PyG's signatures: Cluster-GCN's ``ClusterData`` and ``ClusterLoader``,
and GraphSAINT's ``GraphSAINTNodeSampler``, ``GraphSAINTEdgeSampler`` and
``GraphSAINTRandomWalkSampler``. Each batch is the subgraph a set of nodes induces (every edge
between them), drawn and gathered by GraphLoom on a thread of its own ahead of the consumer, as
a ``torch_geometric.data.Data`` (a :class:`~graphloom.loader.Batch` without PyG)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ._arrays import dtype_name, from_view, loaded_torch
from ._extension import checked, extension as _graphloom
from .dataset import Dataset
from .embedding import Embedding
from .loader import _draw_seed, _SampledLoader, sliced_attributes

__all__ = [
    "ClusterData",
    "ClusterLoader",
    "GraphSAINTNodeSampler",
    "GraphSAINTEdgeSampler",
    "GraphSAINTRandomWalkSampler",
]

# The fields a subgraph batch is made with; a Data's attributes of the same names are not
# sliced over them.
_BATCH_FIELDS = ("x", "edge_index", "n_id", "e_id", "node_norm", "edge_norm", "num_nodes")

# torch DataLoader options that mean nothing here: batches come from GraphLoom's producer
# thread, not from worker processes.
_IGNORED = ("num_workers", "persistent_workers", "prefetch_factor", "timeout", "worker_init_fn",
            "multiprocessing_context", "pin_memory_device", "drop_last", "collate_fn")


def _dataset_of(data: Any) -> Dataset:
    """The dataset a loader of ``data`` (a :class:`Dataset` or a PyG ``Data``) reads."""
    from . import pyg

    if pyg.is_pyg_data(data):
        return pyg.dataset_of(data)
    if isinstance(data, Dataset):
        return data
    raise TypeError(
        f"data: expected a graphloom.Dataset or a torch_geometric.data.Data, got "
        f"{type(data).__name__}"
    )


def _check_options(name: str, options: dict[str, Any]) -> None:
    for key in options:
        if key not in _IGNORED:
            raise TypeError(f"{name} got an unexpected keyword argument {key!r}")


def _count(value: Any, what: str) -> int:
    """A positive count given as an int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what}: expected a positive int, got {value!r}")
    return int(value)


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


class _SubgraphLoader(_SampledLoader):
    """What the subgraph loaders share: batches from the extension, as PyG ``Data``."""

    def _setup_subgraphs(self, data: Any, batch_size: Any, seed: int | None, generator: Any,
                         features: Embedding | None, transform: Any, pin_memory: bool) -> None:
        self._setup(data, features, batch_size, 0, transform, pin_memory, seed, generator)
        self._masks: dict[str, Any] | None = None

    def _split_masks(self) -> dict[str, Any]:
        """A :class:`Dataset`'s splits as PyG's masks over every node (made once)."""
        if self._masks is None:
            torch = loaded_torch()
            n = self.dataset.num_nodes
            self._masks = {}
            for name, ids in (("train_mask", self.dataset.train_idx),
                              ("val_mask", self.dataset.valid_idx),
                              ("test_mask", self.dataset.test_idx)):
                mask = torch.zeros(n, dtype=torch.bool) if torch else np.zeros(n, dtype=bool)
                mask[ids] = True
                self._masks[name] = mask
        return self._masks

    def _batch(self, batch: Any) -> Any:
        """The extension's batch as PyG's ``Data``: ``x``, ``y`` (or the ``Data``'s node and
        edge attributes sliced), ``edge_index``, ``n_id``, ``e_id``, and GraphSAINT's
        ``node_norm`` and ``edge_norm`` when estimated."""
        n_id, e_id = from_view(batch.n_id), from_view(batch.e_id)
        source = self._source
        if source.edge_order is not None:
            e_id = source.edge_order[e_id]
            fields = sliced_attributes(self.data, n_id, e_id, _BATCH_FIELDS)
        else:
            fields = {"y": from_view(batch.y)}
            fields.update({k: m[n_id] for k, m in self._split_masks().items()})
        if source.has_x:
            fields["x"] = from_view(batch.x)
        if batch.node_norm is not None:
            fields["node_norm"] = from_view(batch.node_norm)
            fields["edge_norm"] = from_view(batch.edge_norm)
        return self._finish(source.data_class(
            edge_index=from_view(batch.edge_index), n_id=n_id, e_id=e_id,
            num_nodes=len(n_id), **fields,
        ))


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
                 features: Embedding | None = None, queue_depth: int = 4,
                 x_dtype: Any = "float32", transform: Callable[[Any], Any] | None = None,
                 pin_memory: bool = False, **options: Any) -> None:
        if not isinstance(cluster_data, ClusterData):
            raise TypeError(f"cluster_data: expected a graphloom.ClusterData, got "
                            f"{type(cluster_data).__name__}")
        _check_options("ClusterLoader", options)
        c = cluster_data
        self._setup_subgraphs(c.data, _count(batch_size, "batch_size"), seed, generator,
                              features, transform, pin_memory)
        self._inner = _graphloom.subgraph_loader(
            c.dataset._inner, self.features._table, self.batch_size,
            clusters=c._clusters, shuffle=bool(shuffle), seed=0 if seed is None else int(seed),
            queue_depth=queue_depth, x_dtype=dtype_name(x_dtype),
        )


class _SaintSampler(_SubgraphLoader):
    """GraphSAINT's batches (PyG's ``GraphSAINTSampler``): ``num_steps`` samples per epoch, each
    the subgraph its sampled nodes induce. With ``sample_coverage`` above 0, the normalisation
    is estimated first from samples drawn ahead until they hold ``sample_coverage`` times the
    graph's nodes, and each batch carries ``node_norm`` (PyG's ``M / (C_v N)``, for weighing
    each node's loss) and ``edge_norm`` (``C_v / C_uv`` of edge ``u -> v``, clamped to ``[0,
    1e4]``, for weighing each edge in aggregation). ``edge_norm`` divides by the count of the
    edge's destination, the node that aggregates over it (GraphSAINT's ``alpha_{u,v}``), where
    PyG's divides by its source's; on a symmetric graph PyG's coefficient of ``u -> v`` is this
    one's of ``v -> u``. Draws come from ``seed`` and the epoch (without ``seed``, from torch's
    generator)."""

    _kind = ""

    def __init__(self, data: Any, batch_size: int, walk_length: int = 0, num_steps: int = 1,
                 sample_coverage: int = 0, save_dir: Any = None, log: bool = True, *,
                 seed: int | None = None, generator: Any = None,
                 features: Embedding | None = None, queue_depth: int = 4,
                 x_dtype: Any = "float32", transform: Callable[[Any], Any] | None = None,
                 pin_memory: bool = False, **options: Any) -> None:
        _check_options(type(self).__name__, options)
        self._setup_subgraphs(data, _count(batch_size, "batch_size"), seed, generator,
                              features, transform, pin_memory)
        dataset = self.dataset
        if isinstance(sample_coverage, bool) or not isinstance(sample_coverage,
                                                                (int, np.integer)) \
                or sample_coverage < 0:
            raise ValueError(f"sample_coverage: expected an int of 0 or more, got "
                             f"{sample_coverage!r}")
        # The normalisation's draws: from the seed, or one drawn from torch's generator.
        norm_seed = int(seed) if seed is not None else _draw_seed(generator)
        self.num_steps = _count(num_steps, "num_steps")
        self._inner = _graphloom.subgraph_loader(
            dataset._inner, self.features._table, self.batch_size,
            kind=self._kind, walk_length=int(walk_length), num_steps=self.num_steps,
            sample_coverage=int(sample_coverage), seed=norm_seed, queue_depth=queue_depth,
            x_dtype=dtype_name(x_dtype),
        )


class GraphSAINTNodeSampler(_SaintSampler):
    """GraphSAINT's node sampler: ``batch_size`` draws with replacement, a node drawn in
    proportion to its in-degree. See :class:`_SaintSampler` for the normalisation."""

    _kind = "node"

    def __init__(self, data: Any, batch_size: int, num_steps: int = 1,
                 sample_coverage: int = 0, save_dir: Any = None, log: bool = True,
                 **options: Any) -> None:
        super().__init__(data, batch_size, 0, num_steps, sample_coverage, save_dir, log,
                         **options)


class GraphSAINTEdgeSampler(_SaintSampler):
    """GraphSAINT's edge sampler: ``batch_size`` edges drawn with replacement, ``u -> v`` in
    proportion to ``1/deg(u) + 1/deg(v)`` (the paper's; PyG weighs ``deg(u) + deg(v)``), and
    both ends of each."""

    _kind = "edge"

    def __init__(self, data: Any, batch_size: int, num_steps: int = 1,
                 sample_coverage: int = 0, save_dir: Any = None, log: bool = True,
                 **options: Any) -> None:
        super().__init__(data, batch_size, 0, num_steps, sample_coverage, save_dir, log,
                         **options)


class GraphSAINTRandomWalkSampler(_SaintSampler):
    """GraphSAINT's random-walk sampler: ``batch_size`` roots drawn uniformly, each walking
    ``walk_length`` steps to a uniform in-neighbour; every node visited is in the batch."""

    _kind = "walk"
