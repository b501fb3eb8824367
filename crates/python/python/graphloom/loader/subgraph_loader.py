"""What the subgraph loaders (:mod:`~graphloom.loader.cluster`'s and
:mod:`~graphloom.loader.graph_saint`'s) share: each batch is the subgraph a set of nodes induces
(every edge between them), drawn and gathered by GraphLoom on a thread of its own ahead of the
consumer, as a ``torch_geometric.data.Data`` (a :class:`~graphloom.loader.Batch` without PyG)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._arrays import from_view, loaded_torch
from ..embedding import Embedding
from .base import _SampledLoader

# The fields a subgraph batch is made with; a Data's attributes of the same names are not
# sliced over them.
_BATCH_FIELDS = ("x", "edge_index", "n_id", "e_id", "node_norm", "edge_norm", "num_nodes")


def _count(value: Any, what: str, least: int = 1) -> int:
    """A count given as an int of ``least`` or more."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{what}: expected an int of {least} or more, got {value!r}")
    return int(value)


class _SubgraphLoader(_SampledLoader):
    """What the subgraph loaders share: batches from the extension, as PyG ``Data``."""

    # torch DataLoader options that mean nothing here, beyond those no loader uses: the
    # producer thread makes the batches, whole.
    _ignored_options = ("num_workers", "drop_last", "collate_fn")

    def _setup_subgraphs(self, data: Any, batch_size: Any, seed: int | None, generator: Any,
                         features: Embedding | None, transform: Any, pin_memory: bool,
                         options: dict[str, Any]) -> None:
        self._setup(data, features, batch_size, 0, transform, pin_memory, seed, generator,
                    options)
        self._masks: dict[str, Any] | None = None

    def _split_masks(self) -> dict[str, Any]:
        """A :class:`~graphloom.Dataset`'s splits as PyG's masks over every node (made
        once)."""
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
        source = self._source
        n_id = from_view(batch.n_id)
        e_id, fields = source.fields(n_id, from_view(batch.e_id), batch.y, batch.x,
                                     _BATCH_FIELDS)
        if source.edge_order is None:
            fields.update({k: m[n_id] for k, m in self._split_masks().items()})
        if batch.node_norm is not None:
            fields["node_norm"] = from_view(batch.node_norm)
            fields["edge_norm"] = from_view(batch.edge_norm)
        return self._finish(source.data_class(
            edge_index=from_view(batch.edge_index), n_id=n_id, e_id=e_id,
            num_nodes=len(n_id), **fields,
        ))
