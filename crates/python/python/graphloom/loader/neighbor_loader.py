"""The neighbour loader: mini-batches of sampled neighbourhoods, as PyG ``Data``, with PyG's
``NeighborLoader`` signature; and what the link-neighbour loader shares with it (the
neighbourhood of a batch's seeds as a ``Data``, the sampler's options)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .._arrays import dtype_name, from_view, ids_array, int_list, is_torch, loaded_torch
from .._extension import extension as _graphloom
from ..comm import get_global_communicator
from ..embedding import Embedding
from .base import _SampledLoader, _Source

__all__ = ["NeighborLoader"]

# PyG's sampler options GraphLoom does not have, with what to do instead.
_SAMPLER_REFUSED = {
    "replace": (False, "GraphLoom samples without replacement"),
    "disjoint": (False, "each batch is one subgraph over all its seeds"),
    "input_time": (None, "temporal sampling is not supported"),
    "time_attr": (None, "temporal sampling is not supported"),
    "weight_attr": (None, "weighted sampling is not supported by the loader"),
    "subgraph_type": ("directional", "the batch holds the sampled (directed) edges only"),
    "neighbor_sampler": (None, "the sampler is GraphLoom's"),
    "collate_fn": (None, "batches are built by GraphLoom; use transform="),
    "sampler": (None, "use input_nodes= and shuffle="),
    "batch_sampler": (None, "use input_nodes=, batch_size= and shuffle="),
}

# PyG's sampler options that change nothing here.
_SAMPLER_IGNORED = ("filter_per_worker", "is_sorted", "directed", "transform_sampler_output",
                    "temporal_strategy")

# The fields a batch is made with; a Data's attributes of the same names are not sliced over
# them.
_BATCH_FIELDS = ("x", "edge_index", "n_id", "e_id", "input_id", "batch_size",
                 "num_sampled_nodes", "num_sampled_edges", "blocks", "num_nodes")


def _input_ids(input_nodes: Any, num_nodes: int) -> np.ndarray:
    """PyG's ``input_nodes`` (node ids or a boolean mask over the nodes) as int64 ids."""
    if isinstance(input_nodes, (int, np.integer)) and not isinstance(input_nodes, bool):
        raise TypeError(
            f"input_nodes: got the number {input_nodes}; the third argument is PyG's "
            "input_nodes (node ids or a boolean mask): write batch_size= by name"
        )
    if isinstance(input_nodes, tuple):
        raise TypeError("input_nodes: (node_type, ids) is for a heterogeneous graph; this "
                        "one has one node type")
    torch = loaded_torch()
    is_mask = (is_torch(input_nodes) and input_nodes.dtype == torch.bool) or (
        isinstance(input_nodes, np.ndarray) and input_nodes.dtype == np.bool_)
    if is_mask:
        mask = input_nodes.detach().cpu().numpy() if is_torch(input_nodes) else input_nodes
        if mask.shape != (num_nodes,):
            raise ValueError(f"input_nodes: a mask of shape {tuple(mask.shape)} for "
                             f"{num_nodes} nodes")
        return np.flatnonzero(mask).astype(np.int64)
    return ids_array(input_nodes, "input_nodes")


def _fanouts(num_neighbors: Any, fanouts: Any, loader: str) -> list[int]:
    """``num_neighbors`` or its other name ``fanouts``, checked."""
    if num_neighbors is not None and fanouts is not None:
        raise TypeError("give num_neighbors or fanouts (the same argument), not both")
    fanouts = num_neighbors if num_neighbors is not None else fanouts
    if fanouts is None:
        raise TypeError(f"{loader} needs num_neighbors (e.g. [25, 10])")
    if isinstance(fanouts, dict):
        raise TypeError("num_neighbors: a dict by edge type is for a heterogeneous graph; "
                        "give a list of ints")
    return int_list(fanouts, "num_neighbors")


def _neighbourhood_data(source: _Source, sampled: Any, **extra: Any) -> Any:
    """A sampled neighbourhood (the extension's) of ``source`` as PyG's ``Data``, with
    ``extra`` fields."""
    n_id = from_view(sampled.n_id)
    e_id, fields = source.fields(n_id, from_view(sampled.e_id), sampled.y, sampled.x,
                                 (*_BATCH_FIELDS, *extra))
    return source.data_class(
        edge_index=from_view(sampled.edge_index),
        n_id=n_id,
        e_id=e_id,
        num_sampled_nodes=sampled.num_sampled_nodes,
        num_sampled_edges=sampled.num_sampled_edges,
        blocks=[(from_view(e), s, d) for e, s, d in sampled.blocks],
        **fields,
        **extra,
    )


class NeighborLoader(_SampledLoader):
    """Mini-batches of sampled neighbourhoods, made by GraphLoom's sampler and gathers on a
    thread of their own, ahead of the consumer, with PyG's ``NeighborLoader`` signature::

        loader = NeighborLoader(data, num_neighbors=[25, 10], input_nodes=data.train_mask,
                                batch_size=32, shuffle=True)

    ``data`` is a :class:`Dataset` or a PyG ``Data`` (written once to a temporary dataset
    directory: for graphs larger than memory, write it with :meth:`Dataset.from_pyg` and open
    that). Each batch is a ``torch_geometric.data.Data`` (a :class:`Batch` without PyG) with
    PyG's fields: ``x`` (input rows), ``y`` (labels), ``n_id`` (original node ids, the
    ``batch_size`` seeds first), ``batch_size``, ``edge_index`` (int64 ``(2, E)`` over positions
    in ``n_id``), ``e_id`` (each edge's id: a column of the ``Data``'s ``edge_index``, or a
    position in a :class:`Dataset`'s CSR), ``input_id`` (each seed's position in
    ``input_nodes``), ``num_sampled_nodes`` and ``num_sampled_edges`` (per hop, for
    ``torch_geometric.utils.trim_to_layer``), and ``blocks``. From a ``Data``, its other node
    and edge attributes (masks, ``edge_attr``, ...) come sliced to the batch as well.

    ``num_neighbors`` (also spelt ``fanouts``) are written from the seeds outwards (``[25,
    10]``: 25 neighbours of each seed, then 10 of each of those; -1 takes all), drawn uniformly
    without replacement. GraphLoom samples DGL-style: hop ``h`` draws a fresh neighbour set for
    every node reached so far. ``edge_index`` is PyG's view of that: each node's in-edges come
    from the hop that first reached it, so every node is sampled once, as PyG's own loader
    does, and edges are in hop order. ``blocks`` is DGL's view: per layer, input layer first, a
    tuple ``(edge_index, num_src, num_dst)`` over the same local ids, each layer's
    destinations being the first ``num_dst`` nodes.

    Seeds are ``input_nodes``: node ids or a boolean mask; by default every node of a ``Data``
    (as PyG) and the training split of a :class:`Dataset`. ``shuffle`` puts them in an order
    drawn anew each epoch, else they come in the given order; ``drop_last`` drops a last batch
    shorter than ``batch_size``. The order and the neighbour draws come from ``seed`` and the
    epoch; without ``seed``, each epoch draws one from torch's generator (``generator=``, else
    the default one), so ``torch.manual_seed`` decides the batches as it does PyG's.

    Input rows come from ``features`` (a store table of ``num_nodes`` rows, continuous or
    chunked; default :attr:`Dataset.features`), cast to ``x_dtype`` (float32, float64 or
    bfloat16); ``transform`` is applied to each batch. The producer makes up to
    ``queue_depth`` batches ahead on one thread whose sampling and gathering loops run on
    ``num_workers`` threads of its own (0: the process's thread pool, shared with the
    consumer's kernels); no worker processes are started. ``pin_memory`` pins each batch's
    tensors for copies to a GPU when CUDA is available, and does nothing on a CPU-only
    machine.

    In a job of several ranks (torchrun, mpirun), each rank takes its slice of every global
    batch of ``batch_size`` seeds (``rank``/``ranks`` default to the global communicator's):
    the slices of a step are that step's batch on one process, and every rank runs the same
    number of steps. Every draw is keyed by node, so a node's sampled neighbourhood is the
    same whichever rank samples it.

    Given a PyG ``HeteroData`` or a :class:`~graphloom.HeteroDataset`, it makes a
    :class:`~graphloom.loader.hetero_neighbor_loader.HeteroNeighborLoader` (PyG's hetero
    spelling: ``num_neighbors`` a list or a dict by edge type, ``input_nodes=("paper",
    mask)``; batches are ``HeteroData``).

    One epoch runs at a time: starting a second iteration (or :meth:`time_rust_epoch`) ends
    the first, which then raises if resumed. Tables and loaders may be shared between Python
    threads; calls on one table run one at a time."""

    _refused_options = _SAMPLER_REFUSED
    _ignored_options = _SAMPLER_IGNORED

    def __new__(cls, data: Any = None, *args: Any, **kwargs: Any) -> Any:
        # A heterogeneous graph's loader is a class of its own, with the same signature.
        from .hetero_neighbor_loader import HeteroNeighborLoader, is_hetero

        if cls is NeighborLoader and is_hetero(data):
            return HeteroNeighborLoader(data, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        data: Any,
        num_neighbors: Sequence[int] | None = None,
        input_nodes: Any = None,
        *,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
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
        fanouts = _fanouts(num_neighbors, fanouts, "NeighborLoader")
        self._setup(data, features, batch_size, num_workers, transform, pin_memory, seed,
                    generator, pyg_options)
        dataset = self.dataset
        if input_nodes is None:
            nodes = self._source.default_nodes
        else:
            nodes = _input_ids(input_nodes, dataset.num_nodes)
        comm = get_global_communicator()
        self._inner = _graphloom.neighbor_loader(
            dataset._inner,
            self.features._table,
            fanouts,
            self.batch_size,
            bool(shuffle),
            0 if seed is None else int(seed),
            nodes,
            drop_last,
            queue_depth,
            dtype_name(x_dtype),
            comm.rank if rank is None else rank,
            comm.size if ranks is None else ranks,
            int(num_workers),
        )

    def _batch(self, batch: Any) -> Any:
        """The extension's batch as PyG's ``Data``."""
        return self._finish(_neighbourhood_data(self._source, batch.sampled,
                                                input_id=from_view(batch.input_id),
                                                batch_size=batch.batch_size))
