"""The loaders, laid out as PyG's ``torch_geometric.loader``: one module per family, each with
PyG's signature, and the base they share (:mod:`~graphloom.loader.base`: the check of their
options, their source and their epochs)::

    from graphloom.loader import NeighborLoader   # was: from torch_geometric.loader import ...

- :mod:`~graphloom.loader.neighbor_loader`: ``NeighborLoader``, mini-batches of sampled
  neighbourhoods;
- :mod:`~graphloom.loader.link_neighbor_loader`: ``LinkNeighborLoader``, node pairs with their
  sampled neighbourhoods and negatives;
- :mod:`~graphloom.loader.cluster`: Cluster-GCN's ``ClusterData`` and ``ClusterLoader``;
- :mod:`~graphloom.loader.graph_saint`: GraphSAINT's node, edge and random-walk samplers (with
  :mod:`~graphloom.loader.cluster`'s loader, on :mod:`~graphloom.loader.subgraph_loader`).
"""

from __future__ import annotations

from .base import Batch
from .cluster import ClusterData, ClusterLoader
from .graph_saint import GraphSAINTEdgeSampler, GraphSAINTNodeSampler, GraphSAINTRandomWalkSampler
from .link_neighbor_loader import LinkNeighborLoader
from .neighbor_loader import NeighborLoader

__all__ = [
    "Batch",
    "NeighborLoader",
    "LinkNeighborLoader",
    "ClusterData",
    "ClusterLoader",
    "GraphSAINTNodeSampler",
    "GraphSAINTEdgeSampler",
    "GraphSAINTRandomWalkSampler",
]
