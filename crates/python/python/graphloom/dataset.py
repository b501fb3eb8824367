"""Dataset directories (``graphloom prepare``'s format) opened in place."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from ._arrays import from_view, ids_array, torch_or_none
from ._convert import write_pyg
from ._convert_hetero import is_hetero_data, write_pyg_hetero
from ._extension import extension as _graphloom
from .comm import Communicator, get_global_communicator, handle
from .embedding import Embedding, location_name
from .hetero import HeteroDataset

__all__ = ["Dataset"]


def _is_hetero_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a heterogeneous dataset (``"format": "hetero"`` in its
    ``meta.json``); a header that cannot be read is left to the homogeneous reader's
    errors."""
    try:
        with open(os.path.join(path, "meta.json"), encoding="utf-8") as f:
            return json.load(f).get("format") == "hetero"
    except (OSError, ValueError, AttributeError):
        return False


class Dataset:
    """A dataset directory (``graphloom prepare``'s format) opened in place: arrays are
    mapped, not loaded, and each file's checks run once."""

    def __init__(self, inner: _graphloom.Dataset) -> None:
        self._inner = inner
        self._features: Embedding | None = None
        self._link_split: dict[str, Any] | None = None
        self._edge_attr: Any = None

    @staticmethod
    def open(path: str | os.PathLike) -> "Dataset | HeteroDataset":
        """Opens the directory at ``path``: a :class:`~graphloom.HeteroDataset` when its
        ``meta.json`` says ``"format": "hetero"``."""
        if _is_hetero_dir(path):
            return HeteroDataset.open(path)
        return Dataset(_graphloom.Dataset.open(os.fspath(path)))

    @staticmethod
    def from_pyg(
        data: Any,
        path: str | os.PathLike,
        *,
        name: str | None = None,
        train_mask: Any = None,
        val_mask: Any = None,
        test_mask: Any = None,
        split_idx: dict[str, Any] | None = None,
        edge_weight: Any = None,
        target_node_type: str | None = None,
    ) -> "Dataset | HeteroDataset":
        """Writes a PyG ``torch_geometric.data.Data`` as the dataset directory ``path`` (which
        must not hold anything of the user's) and opens it.

        A ``HeteroData`` is written as a heterogeneous directory (README: "Heterogeneous
        dataset directory") and opened as a :class:`~graphloom.HeteroDataset`: every node
        type with its ``num_nodes`` and ``x`` (if any), every edge type's ``edge_index`` (ids
        of the source type in row 0, of the destination type in row 1), and on the target
        type (``target_node_type``, default the one type with ``y``) its labels and splits,
        read from the arguments, from OGB's ``split_idx`` (``{"train": {"paper": ids}}``) or
        from that type's masks. Edge attributes and weights are not written (the relational
        models take each relation's mean).

        Written: ``x`` (float32 or float64 as float32, bfloat16 as bfloat16), ``y`` (one
        class per node, ``[N]`` or ``[N, 1]``; -1 for a node without one), ``edge_index``
        (kept as given: ``edge_index[0]`` sends to ``edge_index[1]``, duplicates and self-loops
        included), ``edge_weight`` and ``edge_attr`` (as ``edge_feat.npy``, float32 or
        bfloat16, in the dataset's edge order; loaders give it back sliced). The splits are ``train_mask``, ``val_mask`` and
        ``test_mask`` (each a boolean mask or node ids; by default the ``Data``'s masks, or its
        ``train_idx``/``val_idx``/``test_idx``), or OGB's ``split_idx`` (``dataset.
        get_idx_split()``: ``{"train", "valid", "test"}``); a split found nowhere is empty.
        Node ids are kept. The CSR is built in bounded passes over ``edge_index`` and the
        features are copied a chunk at a time, so the writer holds little beyond the
        ``Data``'s own tensors. ``name`` defaults to the folder's name."""
        if is_hetero_data(data):
            if edge_weight is not None:
                raise ValueError("from_pyg: a heterogeneous dataset keeps no edge weights")
            given = {"train": train_mask, "valid": val_mask, "test": test_mask}
            write_pyg_hetero(data, path, name=name, target_node_type=target_node_type,
                             masks={k: v for k, v in given.items() if v is not None},
                             split_idx=split_idx)
            return HeteroDataset.open(path)
        if target_node_type is not None:
            raise TypeError("target_node_type is for a HeteroData")
        if split_idx is not None:
            unknown = set(split_idx) - {"train", "valid", "test"}
            if unknown:
                raise ValueError(f"split_idx: keys {sorted(unknown)}; expected train, valid, test")
            if any(m is not None for m in (train_mask, val_mask, test_mask)):
                raise TypeError("give split_idx or the masks, not both")
            train_mask, val_mask, test_mask = (split_idx.get(k) for k in ("train", "valid", "test"))
        write_pyg(data, path, name=name, train_mask=train_mask, val_mask=val_mask,
                  test_mask=test_mask, edge_weight=edge_weight)
        return Dataset.open(path)

    @property
    def name(self) -> str:
        """The dataset's name."""
        return self._inner.name

    @property
    def path(self) -> str:
        """The directory."""
        return self._inner.path

    @property
    def num_nodes(self) -> int:
        """The number of nodes."""
        return self._inner.num_nodes

    @property
    def num_edges(self) -> int:
        """The number of directed edges (an undirected edge counts twice)."""
        return self._inner.num_edges

    @property
    def num_classes(self) -> int:
        """The number of classes."""
        return self._inner.num_classes

    @property
    def feat_dim(self) -> int:
        """The width of a feature row."""
        return self._inner.feat_dim

    @property
    def feat_dtype(self) -> str:
        """The features' dtype on disk (f32 or bf16)."""
        return self._inner.feat_dtype

    @property
    def train_idx(self) -> Any:
        """Training node ids (int64)."""
        return from_view(self._inner.split("train"))

    @property
    def valid_idx(self) -> Any:
        """Validation node ids (int64)."""
        return from_view(self._inner.split("valid"))

    @property
    def test_idx(self) -> Any:
        """Test node ids (int64)."""
        return from_view(self._inner.split("test"))

    @property
    def labels(self) -> Any:
        """Every node's label (int64; -1 where a node has none)."""
        return from_view(self._inner.labels())

    def edge_index(self) -> Any:
        """The whole graph as PyG's ``edge_index``: int64 ``(2, num_edges)``, sources in row 0,
        destinations in row 1."""
        return from_view(self._inner.edge_index())

    @property
    def has_edge_attr(self) -> bool:
        """Whether the directory holds edge features (``edge_feat.npy``)."""
        return os.path.exists(os.path.join(self.path, "edge_feat.npy"))

    def edge_attr(self, e_id: Any = None) -> Any:
        """The edge features (``edge_feat.npy``, ``[num_edges, edge_dim]``, float32 or
        bfloat16) of the edges ``e_id`` (a batch's, in the graph's CSR order; all without
        it), as PyG's ``edge_attr``: a torch tensor (numpy without torch; bfloat16 needs
        torch). The file is mapped read-only on first use and checked for its shape; ``None``
        without one."""
        if self._edge_attr is None:
            if not self.has_edge_attr:
                return None
            path = os.path.join(self.path, "edge_feat.npy")
            attr = np.load(path, mmap_mode="r")
            if attr.ndim != 2 or attr.shape[0] != self.num_edges:
                raise ValueError(
                    f"{path}: shape {attr.shape}; edge features are [num_edges, edge_dim] "
                    f"with num_edges = {self.num_edges}, in the order of csr_col_idx.npy")
            if attr.dtype not in (np.float32, np.uint16):
                raise ValueError(f"{path}: holds {attr.dtype}; edge features are float32, "
                                 "or bfloat16 stored as uint16")
            self._edge_attr = attr
        attr = self._edge_attr
        # A copy either way: torch has no read-only tensors.
        rows = np.array(attr) if e_id is None else attr[ids_array(e_id, "e_id")]
        torch = torch_or_none()
        if torch is None:
            if rows.dtype == np.uint16:
                raise TypeError("bfloat16 edge features need torch (numpy has no bfloat16)")
            return rows
        rows = torch.from_numpy(rows)
        return rows.view(torch.bfloat16) if attr.dtype == np.uint16 else rows

    @property
    def has_link_split(self) -> bool:
        """Whether the directory holds a link split (``link_split/``)."""
        return os.path.exists(os.path.join(self.path, "link_split", "train_pos.npy"))

    def link_split(self) -> dict[str, Any]:
        """The dataset's link split (``graphloom prepare link-split``, or one written by another
        tool in the README's format), checked against the graph once: ``train_pos``,
        ``valid_pos``, ``test_pos``, ``valid_neg``, ``test_neg`` as int64 ``(2, E)`` pairs and,
        when present, ``valid_neg_dst`` and ``test_neg_dst`` as int64 ``(E, K)`` negative
        destinations. Raises ``FileNotFoundError`` without one."""
        if self._link_split is None:
            self._link_split = {name: from_view(view)
                                for name, view in self._inner.link_split()}
        return dict(self._link_split)

    @property
    def features(self) -> Embedding:
        """The node features as a table, mapped read-only from ``node_feat.npy`` (made on
        first use; see :meth:`feature_table` for other layouts and locations)."""
        if self._features is None or self._features.closed:
            self._features = self.feature_table()
        return self._features

    def feature_table(
        self,
        layout: str = "continuous",
        location: str = "mmap",
        comm: Communicator | None = None,
    ) -> Embedding:
        """The node features as a new table (collective): ``mmap`` maps the file read-only;
        ``host`` and ``shared`` copy it into memory."""
        comm = comm or get_global_communicator()
        table = self._inner.feature_table(handle(comm), layout, location_name(location))
        return Embedding(table, comm)

    def __repr__(self) -> str:
        return repr(self._inner)
