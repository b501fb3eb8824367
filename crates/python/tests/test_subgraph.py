"""The subgraph loaders: Cluster-GCN's clusters kept and reused, batches that are exactly the
subgraphs their nodes induce, GraphSAINT's normalisation on every batch, PyG ``Data`` in and
out, and a PyG model trained on them as PyG's examples train."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv

import graphloom as gl


@pytest.fixture(scope="module")
def ds(cora) -> gl.Dataset:
    gl.init()
    return gl.Dataset.open(cora)


@pytest.fixture(scope="module")
def edges(ds):
    ei = ds.edge_index().numpy()
    return set(zip(ei[0].tolist(), ei[1].tolist()))


def induced(edges: set, nodes: np.ndarray) -> set:
    """The edges between ``nodes``, from the whole graph's edge set."""
    inside = set(nodes.tolist())
    return {(u, v) for (u, v) in edges if u in inside and v in inside}


def batch_edges(batch) -> set:
    n_id = batch.n_id.numpy()
    ei = batch.edge_index.numpy()
    return set(zip(n_id[ei[0]].tolist(), n_id[ei[1]].tolist()))


def test_clusters_are_kept_and_reused(ds):
    first = gl.ClusterData(ds, num_parts=12)
    second = gl.ClusterData(ds, num_parts=12)
    assert "reused" in second.origin, second.origin
    members = np.concatenate([second.members(c) for c in range(len(second))])
    assert sorted(members.tolist()) == list(range(ds.num_nodes))
    assert len(first) == 12
    with pytest.raises(ValueError, match="num_parts"):
        gl.ClusterData(ds, num_parts=ds.num_nodes + 1)
    with pytest.raises(ValueError, match="recursive"):
        gl.ClusterData(ds, num_parts=4, recursive=True)


def test_cluster_batches_are_the_induced_subgraphs_of_their_clusters(ds, edges):
    data = gl.ClusterData(ds, num_parts=12)
    loader = gl.ClusterLoader(data, batch_size=4, shuffle=True, seed=3)
    assert len(loader) == 3
    features = ds.features.get_global_tensor()
    labels = ds.labels
    train = set(ds.train_idx.tolist())
    seen = []
    for batch in loader:
        assert isinstance(batch, Data)
        n_id = batch.n_id.numpy()
        assert (np.diff(n_id) > 0).all()
        assert batch_edges(batch) == induced(edges, n_id)
        assert batch.e_id.shape == (batch.edge_index.shape[1],)
        assert np.array_equal(batch.x.numpy(), features[n_id])
        assert torch.equal(batch.y, labels[batch.n_id])
        assert batch.train_mask.tolist() == [v in train for v in n_id.tolist()]
        assert not hasattr(batch, "node_norm") or batch.node_norm is None
        seen.extend(n_id.tolist())
    # An epoch takes every cluster once.
    assert sorted(seen) == list(range(ds.num_nodes))
    # The same seed gives the same batches; the clusters' order changes with the epoch.
    again = [b.n_id for b in gl.ClusterLoader(data, batch_size=4, shuffle=True, seed=3)]
    first = [b.n_id for b in gl.ClusterLoader(data, batch_size=4, shuffle=True, seed=3)]
    assert all(torch.equal(a, b) for a, b in zip(again, first))
    with pytest.raises(ValueError, match="batch_size"):
        gl.ClusterLoader(data, batch_size=13)


@pytest.mark.parametrize("sampler", ["node", "edge", "walk"])
def test_graphsaint_batches_carry_their_normalisation(ds, edges, sampler):
    common = dict(num_steps=3, sample_coverage=5, seed=1)
    if sampler == "node":
        loader = gl.GraphSAINTNodeSampler(ds, batch_size=400, **common)
    elif sampler == "edge":
        loader = gl.GraphSAINTEdgeSampler(ds, batch_size=200, **common)
    else:
        loader = gl.GraphSAINTRandomWalkSampler(ds, batch_size=100, walk_length=2, **common)
    assert len(loader) == 3
    batches = list(loader)
    assert len(batches) == 3
    for batch in batches:
        n_id = batch.n_id.numpy()
        assert batch_edges(batch) == induced(edges, n_id)
        assert batch.node_norm.shape == (len(n_id),) and batch.node_norm.dtype == torch.float32
        assert batch.edge_norm.shape == (batch.edge_index.shape[1],)
        assert (batch.node_norm > 0).all() and (batch.edge_norm >= 0).all()
        assert (batch.edge_norm <= 1e4).all()
    # No coverage: no normalisation, as PyG's sample_coverage=0.
    plain = next(iter(gl.GraphSAINTNodeSampler(ds, batch_size=100, seed=1)))
    assert getattr(plain, "node_norm", None) is None


def test_bad_sampler_arguments_are_errors(ds):
    with pytest.raises(ValueError, match="walk_length"):
        gl.GraphSAINTRandomWalkSampler(ds, batch_size=10, walk_length=0)
    with pytest.raises(ValueError, match="batch_size"):
        gl.GraphSAINTNodeSampler(ds, batch_size=0)
    with pytest.raises(ValueError, match="num_steps"):
        gl.GraphSAINTNodeSampler(ds, batch_size=10, num_steps=0)
    with pytest.raises(ValueError, match="sample_coverage"):
        gl.GraphSAINTNodeSampler(ds, batch_size=10, sample_coverage=-1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        gl.GraphSAINTNodeSampler(ds, batch_size=10, bogus=1)


def test_graphsaint_sizes_beyond_the_graph_are_value_errors(ds):
    # Cora: 2708 nodes, 10556 edges. Each of these aborted or hung the interpreter.
    for make, says in [
        (lambda: gl.GraphSAINTRandomWalkSampler(ds, batch_size=10**8, walk_length=100),
         "^batch_size: 100000000 is more than the graph's 2708 nodes: give at most 2708$"),
        (lambda: gl.GraphSAINTNodeSampler(ds, batch_size=2**32),
         "^batch_size: 4294967296 is more than the graph's 2708 nodes"),
        (lambda: gl.GraphSAINTEdgeSampler(ds, batch_size=10**6),
         "^batch_size: 1000000 is more than the graph's 10556 edges"),
        (lambda: gl.GraphSAINTRandomWalkSampler(ds, batch_size=5, walk_length=10**12),
         "^walk_length: 1000000000000 steps are more than the graph's 2708 nodes"),
        (lambda: gl.GraphSAINTRandomWalkSampler(ds, batch_size=2**32, walk_length=2**32),
         "^batch_size: 4294967296 is more than"),
        (lambda: gl.GraphSAINTEdgeSampler(ds, batch_size=10, num_steps=2**40),
         "^num_steps: 1099511627776 samples per epoch: give 1 to the graph's 2708 nodes"),
        (lambda: gl.GraphSAINTEdgeSampler(ds, batch_size=100, num_steps=2**40,
                                          sample_coverage=2),
         "^num_steps: 1099511627776 samples per epoch"),
    ]:
        with pytest.raises(ValueError, match=says):
            make()
    # At the bounds, they sample.
    batch = next(iter(gl.GraphSAINTRandomWalkSampler(ds, batch_size=2708, walk_length=2708,
                                                     num_steps=1, seed=0)))
    assert 0 < batch.n_id.numel() <= 2708


def cora_data(ds) -> Data:
    """Cora as a PyG ``Data`` with masks, from the dataset."""
    n = ds.num_nodes
    masks = {}
    for name, ids in (("train_mask", ds.train_idx), ("val_mask", ds.valid_idx),
                      ("test_mask", ds.test_idx)):
        masks[name] = torch.zeros(n, dtype=torch.bool)
        masks[name][ids] = True
    x = torch.from_numpy(np.array(ds.features.get_global_tensor()))
    return Data(x=x, y=ds.labels, edge_index=ds.edge_index(), **masks)


def test_a_pyg_data_gets_its_attributes_sliced_and_its_edge_ids(ds):
    data = cora_data(ds)
    data.edge_attr = torch.arange(data.num_edges, dtype=torch.float32)
    loader = gl.ClusterLoader(gl.ClusterData(data, num_parts=8), batch_size=2, shuffle=False)
    for batch in loader:
        n_id = batch.n_id
        assert torch.equal(batch.train_mask, data.train_mask[n_id])
        assert torch.equal(batch.y, data.y[n_id])
        # e_id is a column of the Data's edge_index.
        assert torch.equal(data.edge_index[:, batch.e_id], n_id[batch.edge_index])
        assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])


class GCN(torch.nn.Module):
    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.conv1 = GCNConv(in_dim, 16)
        self.conv2 = GCNConv(16, out_dim)

    def forward(self, x, edge_index, edge_weight=None):
        x = F.dropout(x, p=0.5, training=self.training)
        x = F.relu(self.conv1(x, edge_index, edge_weight))
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index, edge_weight)


def train_pyg(data: Data, loader, saint: bool) -> float:
    """PyG's examples' loops (cluster_gcn_*.py, graph_saint.py) over ``loader``; the test
    accuracy of the whole graph."""
    torch.manual_seed(0)
    model = GCN(data.num_features, int(data.y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(40):
        model.train()
        for batch in loader:
            opt.zero_grad()
            if saint:
                out = model(batch.x, batch.edge_index, batch.edge_norm)
                loss = F.cross_entropy(out, batch.y, reduction="none")
                loss = (loss * batch.node_norm)[batch.train_mask].sum()
                loss = loss * data.num_nodes / int(data.train_mask.sum())
            else:
                out = model(batch.x, batch.edge_index)
                loss = F.cross_entropy(out[batch.train_mask], batch.y[batch.train_mask])
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(dim=-1)
    return float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())


def test_pyg_gcn_learns_cora_from_the_subgraph_loaders(ds):
    data = cora_data(ds)
    clusters = gl.ClusterLoader(gl.ClusterData(data, num_parts=16), batch_size=4,
                                shuffle=True)
    assert train_pyg(data, clusters, saint=False) > 0.7
    saint = gl.GraphSAINTRandomWalkSampler(data, batch_size=500, walk_length=2, num_steps=2,
                                           sample_coverage=50)
    assert train_pyg(data, saint, saint=True) > 0.7
