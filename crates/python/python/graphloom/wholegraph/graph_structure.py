"""WholeGraph's ``GraphStructure``: one relation's CSR (row pointers and columns as WholeMemory
tensors) with node and edge attributes, sampled one hop at a time or over several hops into
the per-layer blocks a GNN runs on."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from . import graph_ops, wholegraph_ops
from .tensor import WholeMemoryTensor

__all__ = ["GraphStructure"]


class GraphStructure:
    """A graph of one relation in CSR: row ``v`` lists the neighbours ``v`` samples from (for
    message passing, its in-neighbours), with attributes per node and per edge."""

    def __init__(self) -> None:
        self.node_count = 0
        self.edge_count = 0
        self.csr_row_ptr: WholeMemoryTensor | None = None
        self.csr_col_ind: WholeMemoryTensor | None = None
        self.node_attributes: dict[str, WholeMemoryTensor] = {}
        self.edge_attributes: dict[str, WholeMemoryTensor] = {}

    def set_csr_graph(self, csr_row_ptr: WholeMemoryTensor, csr_col_ind: WholeMemoryTensor
                      ) -> None:
        """Sets the CSR: ``csr_row_ptr`` int64 of ``node_count + 1`` entries, ``csr_col_ind``
        int32 or int64."""
        wholegraph_ops._check_csr(csr_row_ptr, csr_col_ind)
        if csr_row_ptr.shape[0] < 2:
            raise ValueError("csr_row_ptr: a graph of at least one node has two row pointers")
        self.node_count = csr_row_ptr.shape[0] - 1
        self.edge_count = csr_col_ind.shape[0]
        self.csr_row_ptr = csr_row_ptr
        self.csr_col_ind = csr_col_ind

    def _set_attribute(self, kind: str, attributes: dict, count: int, name: str,
                       tensor: WholeMemoryTensor) -> None:
        if name in attributes:
            raise ValueError(f"{kind} attribute {name!r} is set already")
        if tensor.shape[0] != count:
            raise ValueError(f"{kind} attribute {name!r}: {tensor.shape[0]} rows for "
                             f"{count} {kind}s")
        attributes[name] = tensor

    def set_node_attribute(self, attr_name: str, attr_tensor: WholeMemoryTensor) -> None:
        """Sets a node attribute (a row per node), once per name."""
        self._set_attribute("node", self.node_attributes, self.node_count, attr_name,
                            attr_tensor)

    def set_edge_attribute(self, attr_name: str, attr_tensor: WholeMemoryTensor) -> None:
        """Sets an edge attribute (a row per edge, in the CSR's order), once per name."""
        self._set_attribute("edge", self.edge_attributes, self.edge_count, attr_name,
                            attr_tensor)

    def _csr(self) -> tuple[WholeMemoryTensor, WholeMemoryTensor]:
        if self.csr_row_ptr is None or self.csr_col_ind is None:
            raise RuntimeError("the graph has no CSR yet: call set_csr_graph first")
        return self.csr_row_ptr, self.csr_col_ind

    def unweighted_sample_without_replacement_one_hop(
        self, center_nodes_tensor: torch.Tensor, max_sample_count: int, *,
        random_seed: int | None = None, need_center_local_output: bool = False,
        need_edge_output: bool = False) -> tuple[torch.Tensor, ...]:
        """One hop of uniform sampling: see
        :func:`~graphloom.wholegraph.unweighted_sample_without_replacement`."""
        row_ptr, col = self._csr()
        return wholegraph_ops.unweighted_sample_without_replacement(
            row_ptr, col, center_nodes_tensor, max_sample_count, random_seed,
            need_center_local_output, need_edge_output)

    def weighted_sample_without_replacement_one_hop(
        self, weight_name: str, center_nodes_tensor: torch.Tensor, max_sample_count: int, *,
        random_seed: int | None = None, need_center_local_output: bool = False,
        need_edge_output: bool = False) -> tuple[torch.Tensor, ...]:
        """One hop of sampling by the edge attribute ``weight_name``: see
        :func:`~graphloom.wholegraph.weighted_sample_without_replacement`."""
        if weight_name not in self.edge_attributes:
            raise KeyError(f"no edge attribute {weight_name!r} (set_edge_attribute sets one)")
        row_ptr, col = self._csr()
        return wholegraph_ops.weighted_sample_without_replacement(
            row_ptr, col, self.edge_attributes[weight_name], center_nodes_tensor,
            max_sample_count, random_seed, need_center_local_output, need_edge_output)

    def multilayer_sample_without_replacement(
        self, node_ids: torch.Tensor, max_neighbors: Sequence[int],
        weight_name: str | None = None) -> tuple[list, list, list, list]:
        """Samples ``len(max_neighbors)`` hops outwards from ``node_ids``, ``max_neighbors[0]``
        at the first. Returns, for the layers from the input side (index 0) to the seeds:
        ``target_gids`` (the nodes of each layer; the last is ``node_ids``, and each layer
        starts with the next one's nodes), ``edge_indice`` (``[2, E]``: sources as indices in
        the layer's nodes, destinations as indices in the next layer's), and the sampled CSR
        of each layer (``csr_row_ptr`` per destination, ``csr_col_ind`` the sources' indices).
        """
        hops = len(max_neighbors)
        target_gids: list[Any] = [None] * hops + [node_ids]
        edge_indice: list[Any] = [None] * hops
        csr_row_ptr: list[Any] = [None] * hops
        csr_col_ind: list[Any] = [None] * hops
        for layer in reversed(range(hops)):
            centers = target_gids[layer + 1]
            fanout = max_neighbors[hops - 1 - layer]
            if weight_name is None:
                offsets, neighbours, dst = self.unweighted_sample_without_replacement_one_hop(
                    centers, fanout, need_center_local_output=True)
            else:
                offsets, neighbours, dst = self.weighted_sample_without_replacement_one_hop(
                    weight_name, centers, fanout, need_center_local_output=True)
            nodes, src = graph_ops.append_unique(centers, neighbours,
                                                 need_neighbor_raw_to_unique=True)
            target_gids[layer] = nodes
            csr_row_ptr[layer] = offsets
            csr_col_ind[layer] = src
            edge_indice[layer] = torch.stack([src, dst])
        return target_gids, edge_indice, csr_row_ptr, csr_col_ind
