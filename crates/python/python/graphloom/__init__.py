"""GraphLoom from Python: the store, datasets, the neighbour loader and trained models.

The store follows WholeGraph's verbs (``pylibwholegraph.torch``)::

    import graphloom as gl
    gl.init()                                   # one process, or the ranks of an mpirun job
    comm = gl.get_global_communicator()
    emb = gl.create_embedding(comm, "continuous", "host", "float32", (1000, 64))
    rows = emb.gather(torch.tensor([3, 1, 4]))  # a torch tensor
    emb.scatter(ids, rows)
    local, first_row = emb.get_local_tensor()   # zero copy
    whole = emb.get_global_tensor()             # zero copy, continuous layout

Datasets and PyG::

    ds = gl.Dataset.open("data/cora")           # or gl.Dataset.from_pyg(data, "data/cora")
    loader = gl.NeighborLoader(ds, num_neighbors=[25, 10], batch_size=32, shuffle=True)
    for batch in loader:                        # torch_geometric.data.Data
        out = model(batch.x, batch.edge_index)[: batch.batch_size]

``NeighborLoader`` takes PyG's signature and a PyG ``Data`` too, as do the subgraph loaders
``ClusterData``/``ClusterLoader`` (Cluster-GCN) and ``GraphSAINTNodeSampler``,
``GraphSAINTEdgeSampler`` and ``GraphSAINTRandomWalkSampler``. Under torchrun, ``gl.init()``
reads the job's ranks and loaders take their slice of every batch.

Heterogeneous graphs: ``gl.Dataset.from_pyg(hetero_data, path)`` (or ``gl.Dataset.open`` of a
heterogeneous directory) gives a :class:`HeteroDataset`; ``gl.NeighborLoader`` given one, or a
``HeteroData``, takes PyG's hetero spelling (``input_nodes=("paper", mask)``, ``num_neighbors``
a list or a dict by edge type) and yields ``HeteroData`` batches for ``to_hetero`` models;
``ds.embedding_tables(dim)`` gives featureless types learnt inputs with a sparse optimizer.

Link prediction: ``gl.LinkNeighborLoader`` (PyG's signature, binary and triplet negatives) over
``ds.link_split()`` (``graphloom prepare link-split``), scored with :mod:`~graphloom.metrics`
(AUC, Hits@K, MRR as OGB computes them).

Models: ``graphloom.torch.load_pyg`` and ``graphloom.torch.save_for_graphloom``.
WholeGraph's spelling of the store: ``import graphloom.wholegraph as wgth``. (``graphloom.torch``
and ``graphloom.wholegraph`` are imported on first use, so ``import graphloom`` does not import
torch.)

The modules mirror the Rust crates: :mod:`~graphloom.comm` (the job), :mod:`~graphloom.embedding`
(store tables), :mod:`~graphloom.dataset`, :mod:`~graphloom.loader`, :mod:`~graphloom.model`
(inference with model files) and :mod:`~graphloom.torch` (autograd and PyG). Errors are
Python's by kind: ``ValueError`` for an invalid argument, ``IndexError`` for an id out of
range, ``FileNotFoundError``/``OSError`` for files, :class:`GraphLoomError` (a
``RuntimeError``) for a failure inside GraphLoom, such as a failed rank.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import _graphloom
from ._graphloom import GraphLoomError
from .comm import (
    Communicator,
    TorchCommunicator,
    all_reduce,
    finalize,
    get_global_communicator,
    get_local_node_communicator,
    init,
    is_initialized,
)
from .dataset import Dataset
from .hetero import HeteroDataset
from .embedding import Embedding, create_embedding, create_embedding_from_filelist, load_embedding
from .loader import (
    Batch,
    ClusterData,
    ClusterLoader,
    GraphSAINTEdgeSampler,
    GraphSAINTNodeSampler,
    GraphSAINTRandomWalkSampler,
    LinkNeighborLoader,
    NeighborLoader,
)
from . import metrics
from .model import predict

__all__ = [
    "GraphLoomError",
    "Communicator",
    "TorchCommunicator",
    "init",
    "finalize",
    "is_initialized",
    "get_global_communicator",
    "get_local_node_communicator",
    "all_reduce",
    "Embedding",
    "create_embedding",
    "create_embedding_from_filelist",
    "load_embedding",
    "Dataset",
    "HeteroDataset",
    "NeighborLoader",
    "LinkNeighborLoader",
    "metrics",
    "Batch",
    "ClusterData",
    "ClusterLoader",
    "GraphSAINTNodeSampler",
    "GraphSAINTEdgeSampler",
    "GraphSAINTRandomWalkSampler",
    "predict",
    "mpi_available",
    "__version__",
]

#: The package's version: the workspace's, which ``graphloom --version`` prints too.
__version__: str = _graphloom.__version__

#: Whether this build can run the ranks of an mpirun job.
mpi_available: bool = _graphloom.mpi_available

# Submodules imported when first reached as attributes (PEP 562), for what needs torch.
_LAZY_SUBMODULES = ("torch", "wholegraph", "pyg")


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        # Importing a submodule binds it on the package, so this runs once per name.
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))
