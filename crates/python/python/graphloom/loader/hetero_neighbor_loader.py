"""The neighbour loader over a heterogeneous graph: what :class:`~graphloom.NeighborLoader`
becomes when given a PyG ``HeteroData`` or a :class:`~graphloom.HeteroDataset`. Batches are
PyG's ``HeteroData`` as PyG's own hetero ``NeighborLoader`` makes them, so that a model made
by ``torch_geometric.nn.to_hetero`` trains on them unchanged."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from .._arrays import dtype_name, from_view, ids_array, int_list, is_torch, loaded_torch
from .._convert_hetero import is_hetero_data, write_pyg_hetero
from .._extension import extension as _graphloom
from ..comm import get_global_communicator
from ..embedding import Embedding
from ..hetero import EdgeType, HeteroDataset
from .base import Batch, _SampledLoader
from .neighbor_loader import _SAMPLER_IGNORED, _SAMPLER_REFUSED

__all__ = ["HeteroNeighborLoader", "is_hetero"]

# A batch's fields, made by the loader: a HeteroData's attributes of these names are not
# sliced over the batch.
_NODE_FIELDS = ("x", "n_id", "num_nodes", "num_sampled_nodes", "input_id", "batch_size")
_EDGE_FIELDS = ("edge_index", "e_id", "num_sampled_edges")


def is_hetero(data: Any) -> bool:
    """Whether a loader given ``data`` samples a heterogeneous graph."""
    return isinstance(data, HeteroDataset) or is_hetero_data(data)


# Datasets made for the loaders of a HeteroData, by id(data): each removed with its data.
_converted: dict[int, HeteroDataset] = {}
_FOLDER_PREFIX = "graphloom-pyg-"


def _dataset_of(data: Any) -> HeteroDataset:
    """The dataset a loader of the ``HeteroData`` ``data`` samples: its relations and
    features written once to a temporary folder, removed when ``data`` is freed or the process
    ends (the folders of killed processes are removed first, as for a ``Data``)."""
    key = id(data)
    if key not in _converted:
        _graphloom.remove_abandoned(tempfile.gettempdir(), _FOLDER_PREFIX)
        folder = tempfile.mkdtemp(prefix=f"{_FOLDER_PREFIX}{os.getpid()}-")
        path = os.path.join(folder, "data")
        write_pyg_hetero(data, path, graph_only=True)
        _converted[key] = HeteroDataset.open(path)

        def forget(key: int = key, folder: str = folder) -> None:
            _converted.pop(key, None)
            shutil.rmtree(folder, ignore_errors=True)

        weakref.finalize(data, forget)
    return _converted[key]


def _edge_order(data: Any, edge_type: EdgeType) -> Any:
    """For each edge of relation ``edge_type`` of the dataset made from ``data`` (CSR order),
    the column of ``data[edge_type].edge_index`` it came from."""
    torch = loaded_torch()
    edge_index = data[edge_type].edge_index.to("cpu")
    key = edge_index[1] * int(data[edge_type[0]].num_nodes) + edge_index[0]
    return torch.sort(key, stable=True).indices


def _relation_key(key: Any, dataset: HeteroDataset) -> int:
    """A key of ``num_neighbors`` (a ``(src, rel, dst)`` triple, ``"src__rel__dst"``, or a
    relation's name alone) as a relation's index."""
    if isinstance(key, str) and key.count("__") == 2:
        key = tuple(key.split("__"))
    return dataset.relation_index(key)


def _fanouts(num_neighbors: Any, fanouts: Any, dataset: HeteroDataset) -> list[list[int]]:
    """``num_neighbors`` (or ``fanouts``) as neighbours per hop and relation: a list applies
    to every relation; a dict gives each relation its own, of one length (PyG's rule), a
    relation it leaves out drawing none."""
    if num_neighbors is not None and fanouts is not None:
        raise TypeError("give num_neighbors or fanouts (the same argument), not both")
    given = num_neighbors if num_neighbors is not None else fanouts
    if given is None:
        raise TypeError("NeighborLoader needs num_neighbors (e.g. [25, 20], or a dict by "
                        "edge type)")
    relations = len(dataset.edge_types)
    if not isinstance(given, dict):
        per_hop = int_list(given, "num_neighbors")
        return [[f] * relations for f in per_hop]
    lists: dict[int, list[int]] = {}
    for key, values in given.items():
        r = _relation_key(key, dataset)
        if r in lists:
            raise ValueError(f"num_neighbors: edge type {dataset.edge_types[r]} is given twice")
        lists[r] = int_list(values, f"num_neighbors[{key!r}]")
    hops = {len(v) for v in lists.values()}
    if len(hops) > 1:
        given_hops = {dataset.edge_types[r]: len(v) for r, v in lists.items()}
        raise ValueError(f"num_neighbors: the edge types have different numbers of hops "
                         f"{given_hops}: give every one the same (0 draws none at a hop)")
    hops_count = hops.pop() if hops else 0
    return [[lists[r][h] if r in lists else 0 for r in range(relations)]
            for h in range(hops_count)]


def _input(input_nodes: Any, dataset: HeteroDataset) -> tuple[str, Any]:
    """PyG's ``input_nodes`` of a heterogeneous graph: a node type (every node of it), or
    ``(node_type, ids or boolean mask or None)``; by default the target type's training ids
    of a :class:`HeteroDataset`."""
    if input_nodes is None:
        return dataset.target_node_type, None
    if isinstance(input_nodes, str):
        node_type, nodes = input_nodes, None
    elif isinstance(input_nodes, tuple) and len(input_nodes) == 2:
        node_type, nodes = input_nodes
    else:
        raise TypeError("input_nodes: a heterogeneous graph's seeds are a node type or "
                        "(node_type, ids or boolean mask), e.g. ('paper', data['paper']."
                        "train_mask)")
    n = dataset.num_nodes.get(node_type)
    if n is None:
        raise ValueError(f"input_nodes: node type {node_type!r} is not one of "
                         f"{dataset.node_types}")
    if nodes is None:
        return node_type, np.arange(n, dtype=np.int64)
    torch = loaded_torch()
    is_mask = (is_torch(nodes) and nodes.dtype == torch.bool) or (
        isinstance(nodes, np.ndarray) and nodes.dtype == np.bool_)
    if is_mask:
        mask = nodes.detach().cpu().numpy() if is_torch(nodes) else nodes
        if mask.shape != (n,):
            raise ValueError(f"input_nodes: a mask of shape {tuple(mask.shape)} for the {n} "
                             f"nodes of {node_type!r}")
        return node_type, np.flatnonzero(mask).astype(np.int64)
    return node_type, ids_array(nodes, "input_nodes")


class HeteroNeighborLoader(_SampledLoader):
    """Mini-batches of sampled neighbourhoods of a heterogeneous graph, PyG's hetero
    ``NeighborLoader``::

        loader = NeighborLoader(data, num_neighbors=[25, 20], batch_size=1024, shuffle=True,
                                input_nodes=("paper", data["paper"].train_mask))
        for batch in loader:                  # torch_geometric.data.HeteroData
            out = model(batch.x_dict, batch.edge_index_dict)["paper"][:batch["paper"].batch_size]

    Made by :class:`~graphloom.NeighborLoader` given a ``HeteroData`` (written once to a
    temporary dataset directory) or a :class:`~graphloom.HeteroDataset`. Each hop draws up to
    ``k`` in-neighbours of every relation for every node reached so far (DGL's meaning of a
    fanout on a heterograph, the command line's relational training's): ``num_neighbors`` is
    a list (the same for every relation, from the seeds outwards) or a dict by edge type
    (``(src, rel, dst)``, ``"src__rel__dst"`` or the relation's name alone; a relation left
    out draws none). ``input_nodes`` is a node type or ``(node_type, ids or boolean mask)``.

    Each batch has, per node type ``t``: ``batch[t].n_id`` (ids of the type, the seeds first
    for the input type), ``batch[t].x`` (input rows, for types with features or a table in
    ``features``) and ``batch[t].num_sampled_nodes`` (per hop); per relation: ``edge_index``
    (positions in the source and destination types' ``n_id``; each node's in-edges come from
    the hop that first reached it, as PyG's), ``e_id`` (columns of the ``HeteroData``'s
    ``edge_index``, or positions in the dataset's CSR) and ``num_sampled_edges``; on the input
    type ``batch_size`` and ``input_id``; on the labelled type ``y``. From a ``HeteroData``
    its other node and edge attributes come sliced to the batch as well. The other options
    mean what they mean for :class:`~graphloom.NeighborLoader`; ``features`` maps a node type
    to the table its rows come from (default: each type's own features)."""

    _refused_options = _SAMPLER_REFUSED
    _ignored_options = _SAMPLER_IGNORED

    def __init__(
        self,
        data: Any,
        num_neighbors: Sequence[int] | dict[Any, Sequence[int]] | None = None,
        input_nodes: Any = None,
        *,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        fanouts: Sequence[int] | dict[Any, Sequence[int]] | None = None,
        seed: int | None = None,
        generator: Any = None,
        features: dict[str, Embedding] | None = None,
        queue_depth: int = _graphloom.DEFAULT_QUEUE_DEPTH,
        x_dtype: Any = "float32",
        rank: int | None = None,
        ranks: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        **pyg_options: Any,
    ) -> None:
        self._setup_iteration(transform, pin_memory, seed, generator, pyg_options)
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
            raise TypeError(f"batch_size: expected an int, got {batch_size!r}")
        if not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
            raise ValueError(f"num_workers: expected a count of threads (0 or more), got "
                             f"{num_workers!r}")
        dataset = data if isinstance(data, HeteroDataset) else _dataset_of(data)
        self.data, self.dataset = data, dataset
        self.batch_size = int(batch_size)
        if isinstance(data, HeteroDataset) or input_nodes is not None:
            self.input_type, nodes = _input(input_nodes, dataset)
        else:
            raise TypeError("input_nodes: a HeteroData's loader needs the seeds' node type, "
                            "e.g. input_nodes=('paper', data['paper'].train_mask)")
        given = dict(features or {})
        unknown = set(given) - set(dataset.node_types)
        if unknown:
            raise ValueError(f"features: node types {sorted(unknown)} are not among "
                             f"{dataset.node_types}")
        if any(not isinstance(t, Embedding) for t in given.values()):
            raise TypeError("features: expected a graphloom.Embedding (a store table) per "
                            "node type")
        self.features = {**dataset.features, **given}
        self._edge_orders = None
        if not isinstance(data, HeteroDataset):
            self._edge_orders = [_edge_order(data, e) for e in dataset.edge_types]
        comm = get_global_communicator()
        self._inner = _graphloom.hetero_neighbor_loader(
            dataset._inner,
            [self.features[t]._table if t in self.features else None
             for t in dataset.node_types],
            _fanouts(num_neighbors, fanouts, dataset),
            self.input_type,
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

    def _batch(self, b: Any) -> Any:
        """The extension's batch as PyG's ``HeteroData`` (a :class:`Batch` of dicts without
        PyG)."""
        ds = self.dataset
        n_id = {t: from_view(v) for t, v in zip(ds.node_types, b.n_id)}
        x = {t: from_view(v) for t, v in zip(ds.node_types, b.x) if v is not None}
        edge_index = {e: from_view(v) for e, v in zip(ds.edge_types, b.edge_index)}
        e_id = {e: from_view(v) for e, v in zip(ds.edge_types, b.e_id)}
        if self._edge_orders is not None:
            e_id = {e: order[ids] for (e, ids), order in zip(e_id.items(), self._edge_orders)}
        try:
            from torch_geometric.data import HeteroData
        except ImportError:
            return self._finish(Batch(
                n_id_dict=n_id, x_dict=x, edge_index_dict=edge_index, e_id_dict=e_id,
                y=from_view(b.y), input_type=self.input_type, batch_size=b.batch_size,
                input_id=from_view(b.input_id)))
        out = HeteroData()
        for i, t in enumerate(ds.node_types):
            out[t].n_id = n_id[t]
            if t in x:
                out[t].x = x[t]
            out[t].num_sampled_nodes = b.num_sampled_nodes[i]
        for j, e in enumerate(ds.edge_types):
            out[e].edge_index = edge_index[e]
            out[e].e_id = e_id[e]
            out[e].num_sampled_edges = b.num_sampled_edges[j]
        if isinstance(self.data, HeteroDataset):
            out[ds.target_node_type].y = from_view(b.y)
        else:
            self._slice_attributes(out, n_id, e_id)
        out[self.input_type].input_id = from_view(b.input_id)
        out[self.input_type].batch_size = b.batch_size
        return self._finish(out)

    def _slice_attributes(self, out: Any, n_id: dict[str, Any], e_id: dict[Any, Any]) -> None:
        """The ``HeteroData``'s other node and edge attributes (``y``, masks, ``edge_attr``,
        ...) sliced to the batch's nodes and edges, as PyG's loader slices them."""
        data = self.data
        for t in data.node_types:
            store = data[t]
            for key in store.keys():
                if key not in _NODE_FIELDS and store.is_node_attr(key):
                    out[t][key] = store[key][n_id[t]]
        for e in data.edge_types:
            store = data[e]
            for key in store.keys():
                if key not in _EDGE_FIELDS and store.is_edge_attr(key):
                    out[e][key] = store[key][e_id[e]]
