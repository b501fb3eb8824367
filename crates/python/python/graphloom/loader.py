"""The neighbour loader: mini-batches of sampled neighbourhoods, as PyG ``Data``, with PyG's
``NeighborLoader`` signature."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ._arrays import dtype_name, from_view, ids_array, int_list, is_torch, loaded_torch, torch_or_none
from ._extension import extension as _graphloom
from .comm import get_global_communicator
from .dataset import Dataset
from .embedding import Embedding

__all__ = ["Batch", "NeighborLoader"]


class Batch:
    """A sampled batch with PyG's fields, for when torch_geometric is not installed."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        def describe(v: Any) -> str:
            if hasattr(v, "shape"):
                return str(list(v.shape))
            if isinstance(v, list):
                return f"[{len(v)}]"
            return repr(v)

        fields = ", ".join(f"{k}={describe(v)}" for k, v in self.__dict__.items())
        return f"Batch({fields})"


# PyG options GraphLoom does not have, with what to do instead.
_REFUSED = {
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

# torch DataLoader options that mean nothing here: batches come from GraphLoom's producer
# thread, not from worker processes.
_IGNORED = ("persistent_workers", "prefetch_factor", "timeout", "worker_init_fn",
            "multiprocessing_context", "filter_per_worker", "pin_memory_device", "is_sorted",
            "directed", "transform_sampler_output", "temporal_strategy", "in_order")


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
        raise TypeError("input_nodes: (node_type, ids) is for HeteroData, which the loader "
                        "does not sample")
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


def _check_options(loader: str, options: dict[str, Any]) -> None:
    """Refuses PyG options GraphLoom does not have (unless at their default) and unknown
    keywords; ignores torch DataLoader options that mean nothing here."""
    for name, value in options.items():
        if name in _REFUSED:
            default, why = _REFUSED[name]
            if value != default:
                raise ValueError(f"{name}={value!r} is not supported: {why}")
        elif name not in _IGNORED:
            raise TypeError(f"{loader} got an unexpected keyword argument {name!r}")


def _fanouts(num_neighbors: Any, fanouts: Any, loader: str) -> list[int]:
    """``num_neighbors`` or its other name ``fanouts``, checked."""
    if num_neighbors is not None and fanouts is not None:
        raise TypeError("give num_neighbors or fanouts (the same argument), not both")
    fanouts = num_neighbors if num_neighbors is not None else fanouts
    if fanouts is None:
        raise TypeError(f"{loader} needs num_neighbors (e.g. [25, 10])")
    if isinstance(fanouts, dict):
        raise TypeError("num_neighbors: a dict is for HeteroData; give a list of ints")
    return int_list(fanouts, "num_neighbors")


def sliced_attributes(data: Any, n_id: Any, e_id: Any, skip: Sequence[str]) -> dict[str, Any]:
    """The node and edge attributes of the PyG ``Data`` ``data`` (but those named in
    ``skip``) sliced to a batch's nodes ``n_id`` and edges ``e_id`` (columns of
    ``data.edge_index``), as PyG's loaders slice them."""
    fields = {}
    for key in data.keys():
        if key in skip:
            continue
        value = data[key]
        if data.is_node_attr(key):
            fields[key] = value[n_id]
        elif data.is_edge_attr(key):
            fields[key] = value[e_id]
    return fields


def _draw_seed(generator: Any) -> int:
    """A seed from torch's generator (``generator``, else the default one), as torch's own
    ``DataLoader`` draws its base seed: ``torch.manual_seed`` decides the batches. 0 without
    torch."""
    torch = torch_or_none()
    if torch is None:
        return 0
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


class _Source:
    """What the node and link loaders share: the dataset a ``Data`` or :class:`Dataset` is,
    the table input rows come from, and the conversion of a sampled neighbourhood into PyG's
    ``Data``."""

    def __init__(self, data: Any, features: Embedding | None, batch_size: Any,
                 num_workers: Any) -> None:
        from . import pyg

        if pyg.is_pyg_data(data):
            dataset = pyg.dataset_of(data)
            self.edge_order = pyg.csr_order(data)
            self.default_nodes = np.arange(dataset.num_nodes, dtype=np.int64)
        elif isinstance(data, Dataset):
            dataset, self.edge_order, self.default_nodes = data, None, None
        else:
            raise TypeError(
                f"data: expected a graphloom.Dataset or a torch_geometric.data.Data, got "
                f"{type(data).__name__}"
            )
        if features is not None and not isinstance(features, Embedding):
            raise TypeError(
                f"features: expected a graphloom.Embedding (a store table), got "
                f"{type(features).__name__}"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
            raise TypeError(f"batch_size: expected an int, got {batch_size!r}")
        if not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
            raise ValueError(f"num_workers: expected a count of threads (0 or more), got "
                             f"{num_workers!r}")
        self.data, self.dataset = data, dataset
        self.batch_size = int(batch_size)
        # A Data without x or y makes batches without them, as PyG's loader does.
        self.has_x = features is not None or dataset.feat_dim > 0
        if not self.has_x:
            # Rows of no columns, gathered for nothing.
            from .embedding import create_embedding

            features = create_embedding(get_global_communicator(), "continuous", "host",
                                        "float32", (dataset.num_nodes, 0))
        self.features = features if features is not None else dataset.features
        try:
            from torch_geometric.data import Data
        except ImportError:
            Data = Batch
        self.data_class = Data

    def data_of(self, sampled: Any, **extra: Any) -> Any:
        """A sampled neighbourhood (the extension's) as PyG's ``Data``, with ``extra``
        fields."""
        n_id, e_id = from_view(sampled.n_id), from_view(sampled.e_id)
        fields = {}
        if self.edge_order is not None:
            # Back to the Data's own edge order, and its attributes but x (y of any shape or
            # dtype, masks, edge_attr, ...) sliced to the batch, as PyG's loader does.
            e_id = self.edge_order[e_id]
            fields = sliced_attributes(self.data, n_id, e_id, (*_BATCH_FIELDS, *extra))
        else:
            fields["y"] = from_view(sampled.y)
        if self.has_x:
            fields["x"] = from_view(sampled.x)
        return self.data_class(
            edge_index=from_view(sampled.edge_index),
            n_id=n_id,
            e_id=e_id,
            num_sampled_nodes=sampled.num_sampled_nodes,
            num_sampled_edges=sampled.num_sampled_edges,
            blocks=[(from_view(e), s, d) for e, s, d in sampled.blocks],
            **fields,
            **extra,
        )


class _SampledLoader:
    """What the node and link loaders share: their source (:class:`_Source`), options, and
    iterations: one epoch at a time on the extension's producer, each drawing its seed from
    torch's generator unless the loader has a seed of its own."""

    _inner: Any

    def _setup(self, data: Any, features: Embedding | None, batch_size: Any, num_workers: Any,
               transform: Callable[[Any], Any] | None, pin_memory: bool, seed: int | None,
               generator: Any) -> None:
        self._source = _Source(data, features, batch_size, num_workers)
        self.data, self.dataset = data, self._source.dataset
        self.features = self._source.features
        self.batch_size = self._source.batch_size
        self.transform = transform
        self.pin_memory = bool(pin_memory)
        self._seed = seed
        self._generator = generator
        # Iterators of one loader share its producer: starting one ends the one before.
        self._started = 0

    def _finish(self, batch: Any) -> Any:
        """``batch`` pinned when asked, then transformed."""
        if self.pin_memory:
            batch = _pinned(batch)
        return self.transform(batch) if self.transform is not None else batch

    def __len__(self) -> int:
        return len(self._inner)

    def __iter__(self) -> Iterator[Any]:
        name = type(self).__name__
        self._started += 1
        mine = self._started
        seed = None if self._seed is not None else _draw_seed(self._generator)
        self._inner.start_epoch(seed)
        try:
            while (batch := self._inner.next_batch()) is not None:
                yield self._batch(batch)
                if self._started != mine:
                    raise RuntimeError(
                        f"{name}: another iteration of this loader started (one epoch runs at "
                        "a time; make a second loader to iterate two at once)"
                    )
        finally:
            if self._started == mine:
                self._inner.stop_running()

    def time_rust_epoch(self) -> dict[str, float]:
        """Runs one epoch with the consumer in Rust (each batch received and dropped), the
        loader's speed without Python: ``{"batches": n, "seconds": s}``. It advances the
        epoch counter like an iteration."""
        self._started += 1
        batches, seconds = self._inner.drain()
        return {"batches": batches, "seconds": seconds}


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

    One epoch runs at a time: starting a second iteration (or :meth:`time_rust_epoch`) ends
    the first, which then raises if resumed. Tables and loaders may be shared between Python
    threads; calls on one table run one at a time."""

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
        queue_depth: int = 4,
        x_dtype: Any = "float32",
        rank: int | None = None,
        ranks: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        **pyg_options: Any,
    ) -> None:
        _check_options("NeighborLoader", pyg_options)
        fanouts = _fanouts(num_neighbors, fanouts, "NeighborLoader")
        self._setup(data, features, batch_size, num_workers, transform, pin_memory, seed,
                    generator)
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
        return self._finish(self._source.data_of(batch.sampled,
                                                 input_id=from_view(batch.input_id),
                                                 batch_size=batch.batch_size))


def _pinned(batch: Any) -> Any:
    """``batch`` with its tensors in pinned memory when CUDA is available (else as it is)."""
    torch = loaded_torch()
    if torch is None or not torch.cuda.is_available():
        return batch
    keys = list(vars(batch)) if isinstance(batch, Batch) else list(batch.keys())
    for key in keys:
        value = getattr(batch, key)
        if isinstance(value, torch.Tensor):
            setattr(batch, key, value.pin_memory())
    return batch
