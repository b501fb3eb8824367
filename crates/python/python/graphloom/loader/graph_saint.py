"""GraphSAINT's samplers with PyG's signatures: ``GraphSAINTNodeSampler``,
``GraphSAINTEdgeSampler`` and ``GraphSAINTRandomWalkSampler``, with GraphSAINT's
normalisation."""

from __future__ import annotations

from typing import Any, Callable

from .._arrays import dtype_name
from .._extension import extension as _graphloom
from ..embedding import Embedding
from .base import _draw_seed
from .subgraph_loader import _count, _SubgraphLoader

__all__ = ["GraphSAINTNodeSampler", "GraphSAINTEdgeSampler", "GraphSAINTRandomWalkSampler"]


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
                 features: Embedding | None = None,
                 queue_depth: int = _graphloom.DEFAULT_QUEUE_DEPTH,
                 x_dtype: Any = "float32", transform: Callable[[Any], Any] | None = None,
                 pin_memory: bool = False, **options: Any) -> None:
        self._setup_subgraphs(data, _count(batch_size, "batch_size"), seed, generator,
                              features, transform, pin_memory, options)
        dataset = self.dataset
        sample_coverage = _count(sample_coverage, "sample_coverage", least=0)
        # The normalisation's draws: from the seed, or one drawn from torch's generator.
        norm_seed = int(seed) if seed is not None else _draw_seed(generator)
        self.num_steps = _count(num_steps, "num_steps")
        self._inner = _graphloom.subgraph_loader(
            dataset._inner, self.features._table, self.batch_size,
            kind=self._kind, walk_length=int(walk_length), num_steps=self.num_steps,
            sample_coverage=sample_coverage, seed=norm_seed, queue_depth=queue_depth,
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
