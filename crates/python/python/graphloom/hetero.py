"""Heterogeneous dataset directories (``"format": "hetero"``: node types, relations, labels on
one target type), opened with :meth:`graphloom.Dataset.open` or written from a PyG
``HeteroData`` with :meth:`graphloom.Dataset.from_pyg`."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ._arrays import from_view, torch_or_none
from ._extension import extension as _graphloom
from .comm import Communicator, get_global_communicator, handle
from .embedding import Embedding, create_embedding, location_name

__all__ = ["HeteroDataset"]

#: A relation as PyG names it: ``(source type, relation, destination type)``.
EdgeType = tuple[str, str, str]


class HeteroDataset:
    """A heterogeneous dataset directory, its relations read into memory and checked against
    the types' sizes once. Node ids are per type (``0..num_nodes[t]``); labels and splits
    belong to :attr:`target_node_type`."""

    def __init__(self, inner: _graphloom.HeteroDataset) -> None:
        self._inner = inner
        self._features: dict[str, Embedding] = {}

    @staticmethod
    def open(path: str | os.PathLike) -> "HeteroDataset":
        """Opens the heterogeneous dataset directory at ``path``."""
        return HeteroDataset(_graphloom.HeteroDataset.open(os.fspath(path)))

    @property
    def name(self) -> str:
        """The dataset's name."""
        return self._inner.name

    @property
    def path(self) -> str:
        """The directory."""
        return os.fspath(self._inner.path)

    @property
    def node_types(self) -> list[str]:
        """The node types, in name order."""
        return list(self._inner.node_types)

    @property
    def edge_types(self) -> list[EdgeType]:
        """The relations as ``(src, rel, dst)``, in ``meta.json``'s order."""
        return [tuple(e) for e in self._inner.edge_types]

    @property
    def num_nodes(self) -> dict[str, int]:
        """Nodes of each type."""
        return dict(zip(self._inner.node_types, self._inner.type_sizes))

    @property
    def feat_dim(self) -> dict[str, int]:
        """Each type's feature width (0 for a type without features)."""
        return {t: dim for t, (dim, _) in zip(self._inner.node_types, self._inner.features)}

    @property
    def target_node_type(self) -> str:
        """The type whose nodes carry labels and splits."""
        return self._inner.target_node_type

    @property
    def num_classes(self) -> int:
        """The number of classes of the target type's labels."""
        return self._inner.num_classes

    @property
    def train_idx(self) -> Any:
        """Training ids of the target type (int64)."""
        return from_view(self._inner.split("train"))

    @property
    def valid_idx(self) -> Any:
        """Validation ids of the target type (int64)."""
        return from_view(self._inner.split("valid"))

    @property
    def test_idx(self) -> Any:
        """Test ids of the target type (int64)."""
        return from_view(self._inner.split("test"))

    @property
    def labels(self) -> Any:
        """The target type's label of each node (int64; -1 where a node has none)."""
        return from_view(self._inner.labels())

    def relation_index(self, edge_type: Any) -> int:
        """The position of ``edge_type`` among :attr:`edge_types`: a ``(src, rel, dst)``
        triple, or a relation's name alone when no other relation has it (PyG's shorthand)."""
        types = self.edge_types
        if isinstance(edge_type, str):
            matches = [i for i, e in enumerate(types) if e[1] == edge_type]
            if len(matches) == 1:
                return matches[0]
            if not matches:
                raise ValueError(f"relation {edge_type!r} is not the name of any edge type "
                                 f"{types}")
            raise ValueError(f"relation {edge_type!r} names {len(matches)} of the edge types "
                             f"{types}: give the (src, rel, dst) triple")
        key = tuple(edge_type)
        if key not in types:
            raise ValueError(f"edge type {key} is not one of {types}")
        return types.index(key)

    def edge_index(self, edge_type: Any) -> Any:
        """Relation ``edge_type`` as PyG's ``edge_index``: int64 ``(2, E)``, ids of the source
        type in row 0, of the destination type in row 1, ordered by destination."""
        return from_view(self._inner.edge_index(self.relation_index(edge_type)))

    @property
    def features(self) -> dict[str, Embedding]:
        """The features of each type that has them, as tables mapped read-only from its
        ``node_feat.npy`` (made on first use; see :meth:`feature_table`)."""
        for t, dim in self.feat_dim.items():
            if dim > 0 and (t not in self._features or self._features[t].closed):
                self._features[t] = self.feature_table(t)
        return dict(self._features)

    def feature_table(
        self,
        node_type: str,
        layout: str = "continuous",
        location: str = "mmap",
        comm: Communicator | None = None,
    ) -> Embedding:
        """Type ``node_type``'s features as a new table (collective): ``mmap`` maps the file
        read-only; ``host`` and ``shared`` copy it into memory."""
        comm = comm or get_global_communicator()
        table = self._inner.feature_table(node_type, handle(comm), layout,
                                          location_name(location))
        return Embedding(table, comm)

    def embedding_tables(
        self,
        dim: int,
        *,
        optimizer: str = "lazy_adam",
        layout: str = "distributed",
        location: str = "host",
        comm: Communicator | None = None,
        node_types: list[str] | None = None,
        seed: int = 0,
        **options: Any,
    ) -> dict[str, Embedding]:
        """A trainable table of ``dim`` columns for each featureless type (or for
        ``node_types``), as WholeGraph gives ogbn-mag's authors, institutions and fields their
        learnt inputs: ``num_nodes[t]`` rows each, with ``optimizer``'s state (train them
        through :class:`graphloom.torch.EmbeddingModule` and
        :class:`graphloom.torch.SparseOptimizer`). Type ``i`` of them draws its rows from
        ``seed + i``; ``options`` go to :func:`graphloom.create_embedding` (``init_scale``,
        ``weight_decay``, ``optimizer_params``)."""
        comm = comm or get_global_communicator()
        dims = self.feat_dim
        types = node_types if node_types is not None else [t for t in dims if dims[t] == 0]
        unknown = [t for t in types if t not in dims]
        if unknown:
            raise ValueError(f"node types {unknown} are not among {list(dims)}")
        return {
            t: create_embedding(comm, layout, location, "float32", (self.num_nodes[t], dim),
                                optimizer=optimizer, seed=seed + i, **options)
            for i, t in enumerate(types)
        }

    def to_pyg(self) -> Any:
        """The whole dataset as a ``torch_geometric.data.HeteroData``: each type's
        ``num_nodes`` and ``x`` (copied from its features), each relation's ``edge_index``,
        and on the target type ``y`` and ``train_mask``/``val_mask``/``test_mask``."""
        torch = torch_or_none()
        try:
            from torch_geometric.data import HeteroData
        except ImportError as e:
            raise ImportError("to_pyg needs torch_geometric (pip install torch_geometric)") from e
        data = HeteroData()
        for t, n in self.num_nodes.items():
            data[t].num_nodes = n
        for t, table in self.features.items():
            data[t].x = table.gather(torch.arange(self.num_nodes[t]))
        for e in self.edge_types:
            data[e].edge_index = torch.as_tensor(np.asarray(self.edge_index(e)))
        target = self.target_node_type
        data[target].y = torch.as_tensor(np.asarray(self.labels))
        n = self.num_nodes[target]
        for key, ids in (("train_mask", self.train_idx), ("val_mask", self.valid_idx),
                         ("test_mask", self.test_idx)):
            mask = torch.zeros(n, dtype=torch.bool)
            mask[torch.as_tensor(np.asarray(ids))] = True
            data[target][key] = mask
        return data

    def __repr__(self) -> str:
        return repr(self._inner)
