"""The neighbour loader: mini-batches of sampled neighbourhoods, as PyG ``Data``."""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from . import _graphloom
from ._arrays import dtype_name, from_view, ids_array, int_list
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


class NeighborLoader:
    """Mini-batches of sampled neighbourhoods, made by GraphLoom's sampler and gathers on a
    thread of their own, ahead of the consumer.

    Each batch is a ``torch_geometric.data.Data`` (a :class:`Batch` without PyG) with ``x``
    (input rows), ``y`` (labels), ``n_id`` (original node ids, the ``batch_size`` seeds first),
    ``batch_size``, ``edge_index`` (int64 ``(2, E)`` over positions in ``n_id``) and
    ``blocks``.

    ``fanouts`` are written from the seeds outwards (``[25, 10]``: 25 neighbours of each seed,
    then 10 of each of those; -1 takes all). GraphLoom samples DGL-style: hop ``h`` draws a
    fresh neighbour set for every node reached so far. ``edge_index`` is PyG's view of that:
    each node's in-edges come from the hop that first reached it (the seeds' from hop 1, the
    nodes new at hop 1 from hop 2, ...), so every node is sampled once, as PyG's own loader
    does. ``blocks`` is DGL's view: per layer, input layer first, a tuple ``(edge_index,
    num_src, num_dst)`` over the same local ids, each layer's destinations being the first
    ``num_dst`` nodes.

    Seeds are ``input_nodes`` (distinct; default the training split), in an order drawn from
    ``(seed, epoch)`` when ``shuffle``, else in the given order; ``drop_last`` drops a last
    batch shorter than ``batch_size``. Input rows come from ``features`` (a store table of
    ``num_nodes`` rows, continuous or chunked; default :attr:`Dataset.features`), cast to
    ``x_dtype`` (float32, float64 or bfloat16). The producer runs up to ``queue_depth``
    batches ahead. Under mpirun each rank takes its slice of every global batch of
    ``batch_size`` seeds (``rank``/``ranks`` default to the global communicator's).

    One epoch runs at a time: starting a second iteration (or :meth:`time_rust_epoch`) ends
    the first, which then raises if resumed. Tables and loaders may be shared between Python
    threads; calls on one table run one at a time."""

    def __init__(
        self,
        dataset: Dataset,
        fanouts: Sequence[int],
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        *,
        input_nodes: Any = None,
        features: Embedding | None = None,
        drop_last: bool = False,
        queue_depth: int = 4,
        x_dtype: Any = "float32",
        rank: int | None = None,
        ranks: int | None = None,
    ) -> None:
        if not isinstance(dataset, Dataset):
            raise TypeError(f"dataset: expected a graphloom.Dataset, got {type(dataset).__name__}")
        if features is not None and not isinstance(features, Embedding):
            raise TypeError(
                f"features: expected a graphloom.Embedding (a store table), got "
                f"{type(features).__name__}"
            )
        comm = get_global_communicator()
        self.dataset = dataset
        self.features = features if features is not None else dataset.features
        self.batch_size = int(batch_size)
        nodes = ids_array(input_nodes, "input_nodes") if input_nodes is not None else None
        self._inner = _graphloom.Loader(
            dataset._inner,
            self.features._table,
            int_list(fanouts, "fanouts"),
            self.batch_size,
            shuffle,
            seed,
            nodes,
            drop_last,
            queue_depth,
            dtype_name(x_dtype),
            comm.rank if rank is None else rank,
            comm.size if ranks is None else ranks,
        )
        # Iterators of one loader share its producer: starting one ends the one before.
        self._epochs_started = 0
        try:
            from torch_geometric.data import Data
        except ImportError:
            Data = Batch
        self._data_class = Data

    def __len__(self) -> int:
        return len(self._inner)

    def __iter__(self) -> Iterator[Any]:
        self._epochs_started += 1
        mine = self._epochs_started
        self._inner.start_epoch()
        try:
            while (batch := self._inner.next_batch()) is not None:
                yield self._data_class(
                    x=from_view(batch.x),
                    y=from_view(batch.y),
                    n_id=from_view(batch.n_id),
                    edge_index=from_view(batch.edge_index),
                    batch_size=batch.batch_size,
                    blocks=[(from_view(e), s, d) for e, s, d in batch.blocks],
                )
                if self._epochs_started != mine:
                    raise RuntimeError(
                        "NeighborLoader: another iteration of this loader started (one epoch "
                        "runs at a time; make a second loader to iterate two at once)"
                    )
        finally:
            if self._epochs_started == mine:
                self._inner.stop_running()

    def time_rust_epoch(self) -> dict[str, float]:
        """Runs one epoch with the consumer in Rust (each batch received and dropped), the
        loader's speed without Python: ``{"batches": n, "seconds": s}``. It advances the
        epoch counter like an iteration."""
        self._epochs_started += 1
        batches, seconds = self._inner.drain()
        return {"batches": batches, "seconds": seconds}
