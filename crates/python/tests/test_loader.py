"""The NeighborLoader: batches that PyG takes, built from real edges, covering the seeds once
per epoch, reproducible, with uniform neighbour draws."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

import graphloom as gl


@pytest.fixture(scope="module")
def ds(cora) -> gl.Dataset:
    gl.init()
    return gl.Dataset.open(cora)


@pytest.fixture(scope="module")
def graph(ds):
    ei = ds.edge_index().numpy()
    edges = set(zip(ei[0].tolist(), ei[1].tolist()))
    in_degree = np.bincount(ei[1], minlength=ds.num_nodes)
    return edges, in_degree, ei


def test_dataset_fields(ds):
    assert (ds.num_nodes, ds.num_classes, ds.feat_dim) == (2708, 7, 1433)
    assert len(ds.train_idx) == 140 and len(ds.valid_idx) == 500 and len(ds.test_idx) == 1000
    assert ds.labels.dtype == torch.int64 and ds.labels.shape == (2708,)
    assert ds.edge_index().shape == (2, ds.num_edges)
    x = ds.features.get_global_tensor()     # mapped read-only: numpy, no copy
    assert x.shape == (2708, 1433) and not x.flags.writeable


def test_batches_are_pyg_data_over_real_edges(ds, graph):
    edges, in_degree, _ = graph
    fanouts = [25, 10]
    loader = gl.NeighborLoader(ds, fanouts, batch_size=32, seed=1)
    seeds_seen = []
    features, labels = ds.features, ds.labels
    for batch in loader:
        assert isinstance(batch, Data)
        n_id, b = batch.n_id, batch.batch_size
        assert len(set(n_id.tolist())) == len(n_id)
        seeds_seen.extend(n_id[:b].tolist())
        assert torch.equal(batch.x, features.gather(n_id))
        assert torch.equal(batch.y, labels[n_id])
        src, dst = batch.edge_index
        for s, d in zip(n_id[src].tolist(), n_id[dst].tolist()):
            assert (s, d) in edges
        # Each node's in-edges come from the hop that first reached it: min(degree, fanout).
        (last_block, n_src, n_dst), (first_block, _, hop1_nodes) = batch.blocks[-1], batch.blocks[0]
        assert n_dst == b and first_block.shape[0] == 2
        per_dst = torch.bincount(dst, minlength=len(n_id))
        want = torch.zeros(len(n_id), dtype=torch.int64)
        deg = torch.from_numpy(in_degree)[n_id]
        want[:b] = deg[:b].clamp(max=fanouts[0])
        want[b:hop1_nodes] = deg[b:hop1_nodes].clamp(max=fanouts[1])
        assert torch.equal(per_dst, want)
        # The seeds' edges in edge_index are the last block's.
        seed_edges = dst < b
        assert torch.equal(torch.stack([src[seed_edges], dst[seed_edges]]), last_block)
    assert sorted(seeds_seen) == sorted(ds.train_idx.tolist())
    assert loader.time_rust_epoch()["batches"] == len(loader) == 5


def test_epochs_are_reproducible_and_differ(ds):
    def orders(seed):
        loader = gl.NeighborLoader(ds, [5], batch_size=64, shuffle=True, seed=seed)
        return [[b.n_id[: b.batch_size].tolist() for b in loader] for _ in range(2)]

    first = orders(7)
    assert first == orders(7)
    assert first[0] != first[1]
    assert first != orders(8)


def test_input_nodes_in_order_and_drop_last(ds):
    nodes = torch.tensor([10, 3, 2000, 7, 5])
    loader = gl.NeighborLoader(ds, [-1], batch_size=2, shuffle=False, input_nodes=nodes)
    assert [b.n_id[: b.batch_size].tolist() for b in loader] == [[10, 3], [2000, 7], [5]]
    loader = gl.NeighborLoader(ds, [-1], batch_size=2, shuffle=False, input_nodes=nodes,
                               drop_last=True)
    assert len(loader) == 2


def test_breaking_off_an_epoch_is_fine(ds):
    loader = gl.NeighborLoader(ds, [10, 5], batch_size=16)
    for i, _ in enumerate(loader):
        if i == 1:
            break
    assert sum(1 for _ in loader) == len(loader)


def test_neighbour_draws_are_uniform(ds, graph):
    """A chi-square test of the draws of 3 of a node's in-neighbours over 400 epochs."""
    _, in_degree, ei = graph
    node = int(np.flatnonzero(in_degree == 12)[0])
    neighbours = ei[0][ei[1] == node]
    loader = gl.NeighborLoader(ds, [3], batch_size=1, input_nodes=[node], seed=5)
    counts = dict.fromkeys(neighbours.tolist(), 0)
    epochs = 400
    for _ in range(epochs):
        (batch,) = list(loader)
        drawn = batch.n_id[batch.edge_index[0]].tolist()
        assert len(set(drawn)) == 3
        for v in drawn:
            counts[v] += 1
    expected = epochs * 3 / len(neighbours)
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    k = len(neighbours) - 1
    # Wilson-Hilferty: the chi-square quantile at p = 0.001 (z = 3.09).
    critical = k * (1 - 2 / (9 * k) + 3.09 * math.sqrt(2 / (9 * k))) ** 3
    assert chi2 < critical, (chi2, critical, counts)


def test_bad_loader_arguments(ds):
    with pytest.raises(ValueError, match="fanouts"):
        gl.NeighborLoader(ds, [0], batch_size=4)
    with pytest.raises(ValueError, match="batch_size"):
        gl.NeighborLoader(ds, [5], batch_size=0)
    with pytest.raises(IndexError, match="input_nodes"):
        gl.NeighborLoader(ds, [5], batch_size=4, input_nodes=[5000])
    with pytest.raises(TypeError, match="graphloom.Dataset"):
        gl.NeighborLoader("data/cora", [5], batch_size=4)
    table = gl.create_embedding(gl.get_global_communicator(), "continuous", "host", "float32",
                                (10, 4))
    with pytest.raises(ValueError, match="2708 nodes"):
        gl.NeighborLoader(ds, [5], batch_size=4, features=table)
    features = ds.feature_table(location="host")
    loader = gl.NeighborLoader(ds, [5], batch_size=4, features=features)
    features.close()
    with pytest.raises(ValueError, match="closed"):
        next(iter(loader))
