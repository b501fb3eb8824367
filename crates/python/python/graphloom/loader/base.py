"""What every loader shares: the one check of the options it is given beyond its own
arguments, its source (the dataset a ``Data`` or :class:`~graphloom.Dataset` is, and the table
input rows come from) and its epochs on the extension's producer."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .._arrays import from_view, loaded_torch, torch_or_none
from ..comm import get_global_communicator
from ..dataset import Dataset
from ..embedding import Embedding, create_embedding

__all__ = ["Batch"]


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


# torch DataLoader options that mean nothing to any loader here: batches come from GraphLoom's
# producer thread, not from worker processes.
_DATALOADER_OPTIONS = ("persistent_workers", "prefetch_factor", "timeout", "worker_init_fn",
                       "multiprocessing_context", "pin_memory_device", "in_order")


def _dataset_of(data: Any) -> Dataset:
    """The dataset a loader of ``data`` (a :class:`Dataset` or a PyG ``Data``) reads."""
    # Imported on first use, as the package's __getattr__ imports it.
    from .. import pyg

    if pyg.is_pyg_data(data):
        return pyg.dataset_of(data)
    if isinstance(data, Dataset):
        return data
    raise TypeError(
        f"data: expected a graphloom.Dataset or a torch_geometric.data.Data, got "
        f"{type(data).__name__}"
    )


def _sliced_attributes(data: Any, n_id: Any, e_id: Any, skip: Sequence[str]) -> dict[str, Any]:
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


class _Source:
    """What every loader reads: the dataset a ``Data`` or :class:`Dataset` is, the table input
    rows come from, and the fields of a batch as PyG's ``Data`` holds them."""

    def __init__(self, data: Any, features: Embedding | None, batch_size: Any,
                 num_workers: Any) -> None:
        dataset = _dataset_of(data)
        if isinstance(data, Dataset):
            self.edge_order, self.default_nodes = None, None
        else:
            from .. import pyg

            self.edge_order = pyg.csr_order(data)
            self.default_nodes = np.arange(dataset.num_nodes, dtype=np.int64)
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
        # A Data's edge_attr is sliced with its other attributes; a Dataset's is its file's.
        self.has_edge_attr = self.edge_order is None and dataset.has_edge_attr
        self.batch_size = int(batch_size)
        # A Data without x or y makes batches without them, as PyG's loader does.
        self.has_x = features is not None or dataset.feat_dim > 0
        if not self.has_x:
            # Rows of no columns, gathered for nothing.
            features = create_embedding(get_global_communicator(), "continuous", "host",
                                        "float32", (dataset.num_nodes, 0))
        self.features = features if features is not None else dataset.features
        try:
            from torch_geometric.data import Data
        except ImportError:
            Data = Batch
        self.data_class = Data

    def fields(self, n_id: Any, e_id: Any, y: Any, x: Any,
               skip: Sequence[str]) -> tuple[Any, dict[str, Any]]:
        """A batch's edge ids ``e_id`` as the source numbers them, and its node fields: from a
        ``Data``, its edge ids in its own edge order and its attributes but ``x`` (``y`` of any
        shape or dtype, masks, ``edge_attr``, ...) sliced to the batch, but those named in
        ``skip``, as PyG's loaders do; from a :class:`Dataset`, its labels ``y`` (a view) and,
        when it has ``edge_feat.npy``, the batch's edges' rows as ``edge_attr``; ``x`` (a view)
        when the source has features."""
        if self.edge_order is not None:
            e_id = self.edge_order[e_id]
            fields = _sliced_attributes(self.data, n_id, e_id, skip)
        else:
            fields = {"y": from_view(y)}
            if self.has_edge_attr and "edge_attr" not in skip:
                fields["edge_attr"] = self.dataset.edge_attr(e_id)
        if self.has_x:
            fields["x"] = from_view(x)
        return e_id, fields


class _SampledLoader:
    """What every loader shares: its source (:class:`_Source`), the check of its options, and
    iterations: one epoch at a time on the extension's producer, each drawing its seed from
    torch's generator unless the loader has a seed of its own, each batch made PyG's ``Data``
    by the loader's ``_batch``."""

    #: PyG options the loader does not have, each with the one value it accepts (PyG's
    #: default) and what to do instead.
    _refused_options: dict[str, tuple[Any, str]] = {}
    #: Options the loader accepts and ignores, beyond torch DataLoader's.
    _ignored_options: tuple[str, ...] = ()
    _inner: Any

    def _check_options(self, options: dict[str, Any]) -> None:
        """Refuses the options the loader does not have (unless at their default) and unknown
        keywords; ignores those that mean nothing here."""
        for name, value in options.items():
            if name in self._refused_options:
                default, why = self._refused_options[name]
                if value != default:
                    raise ValueError(f"{name}={value!r} is not supported: {why}")
            elif name not in _DATALOADER_OPTIONS and name not in self._ignored_options:
                raise TypeError(f"{type(self).__name__} got an unexpected keyword argument "
                                f"{name!r}")

    def _setup(self, data: Any, features: Embedding | None, batch_size: Any, num_workers: Any,
               transform: Callable[[Any], Any] | None, pin_memory: bool, seed: int | None,
               generator: Any, options: dict[str, Any]) -> None:
        self._setup_iteration(transform, pin_memory, seed, generator, options)
        self._source = _Source(data, features, batch_size, num_workers)
        self.data, self.dataset = data, self._source.dataset
        self.features = self._source.features
        self.batch_size = self._source.batch_size

    def _setup_iteration(self, transform: Callable[[Any], Any] | None, pin_memory: bool,
                         seed: int | None, generator: Any, options: dict[str, Any]) -> None:
        """What every loader's iterations need, whatever its source: its options checked,
        the transform, pinning, and where each epoch's seed comes from."""
        self._check_options(options)
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
