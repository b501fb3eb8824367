"""Edge features from Python: loaders give each batch's ``edge_attr`` (the rows of its ``e_id``),
``from_pyg`` writes a ``Data``'s ``edge_attr`` in the dataset's edge order, and GINE and GATv2
with edge features cross to PyG's ``GINEConv`` and ``GATv2Conv(edge_dim)`` and back with the
same log-probabilities."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GATv2Conv, GINEConv

import graphloom as gl
import graphloom.torch as glt
from graphloom.loader import NeighborLoader


@pytest.fixture(scope="module")
def edge_dataset(tmp_path_factory, graphloom_cli):
    """A 300-node synthetic dataset with 4 edge features per edge."""
    path = tmp_path_factory.mktemp("edges") / "ds"
    subprocess.run(
        [graphloom_cli, "prepare", "synthetic", "--nodes", "300", "--feat-dim", "8",
         "--classes", "3", "--edge-features", "4", "--out", path],
        check=True, capture_output=True,
    )
    gl.init()
    return path


def test_loader_batches_carry_their_edges_rows(edge_dataset):
    ds = gl.Dataset.open(edge_dataset)
    assert ds.has_edge_attr
    every = np.load(edge_dataset / "edge_feat.npy")
    assert torch.equal(ds.edge_attr(), torch.from_numpy(every))
    sources = np.load(edge_dataset / "csr_col_idx.npy")
    row_ptr = np.load(edge_dataset / "csr_row_ptr.npy")
    destinations = np.repeat(np.arange(len(row_ptr) - 1), np.diff(row_ptr))
    loader = NeighborLoader(ds, num_neighbors=[3, 2], batch_size=64, input_nodes=ds.train_idx)
    batches = 0
    for batch in loader:
        assert batch.edge_attr.shape == (batch.edge_index.shape[1], 4)
        e_id = batch.e_id.numpy()
        # Each column of edge_index is the dataset's edge e_id: its ends and its row.
        assert np.array_equal(batch.n_id[batch.edge_index[0]].numpy(), sources[e_id])
        assert np.array_equal(batch.n_id[batch.edge_index[1]].numpy(), destinations[e_id])
        assert torch.equal(batch.edge_attr, torch.from_numpy(every[e_id]))
        batches += 1
    assert batches > 1


def test_from_pyg_writes_edge_attr_in_the_dataset_s_edge_order(tmp_path):
    gl.init()
    g = torch.Generator().manual_seed(0)
    n, e = 40, 160
    edge_index = torch.randint(0, n, (2, e), generator=g)
    edge_attr = torch.randn(e, 3, generator=g)
    data = Data(x=torch.randn(n, 5, generator=g), edge_index=edge_index, edge_attr=edge_attr,
                y=torch.randint(0, 2, (n,), generator=g))
    ds = gl.Dataset.from_pyg(data, tmp_path / "ds")
    written = ds.edge_attr()
    # Row k of the file is the edge at CSR position k: (source, destination) as stored.
    sources = np.load(tmp_path / "ds" / "csr_col_idx.npy")
    row_ptr = np.load(tmp_path / "ds" / "csr_row_ptr.npy")
    destinations = np.repeat(np.arange(n), np.diff(row_ptr))
    for k in range(e):
        same = (edge_index[0] == int(sources[k])) & (edge_index[1] == int(destinations[k]))
        assert any(torch.equal(written[k], edge_attr[c]) for c in torch.nonzero(same).flatten())
    with pytest.raises(ValueError, match="edge_attr"):
        gl.Dataset.from_pyg(Data(x=data.x, edge_index=edge_index, edge_attr=edge_attr[:5],
                                 y=data.y), tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def _gin_mlp(a, b):
    return torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.ReLU(), torch.nn.Linear(b, b))


def test_gine_crosses_to_pyg_and_back(edge_dataset, graphloom_cli, tmp_path):
    ds = gl.Dataset.open(edge_dataset)
    x = ds.features.gather(torch.arange(ds.num_nodes))
    edge_index, edge_attr = ds.edge_index(), ds.edge_attr()
    path = tmp_path / "gine.safetensors"
    subprocess.run(
        [graphloom_cli, "train", "--dataset", edge_dataset, "--model", "gine", "--epochs", "20",
         "--save-model", path],
        check=True, capture_output=True,
    )
    model = glt.load_pyg(path)
    assert isinstance(model.convs[0], GINEConv)
    with torch.no_grad():
        ours = model(x, edge_index, edge_attr)
    reference = gl.predict(path, edge_dataset)
    scale = max(1.0, reference.abs().max().item())
    assert (ours - reference).abs().max().item() < 1e-5 * scale
    with pytest.raises(ValueError, match="edge_attr"):
        model(x, edge_index)

    class Convs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList([
                GINEConv(_gin_mlp(8, 16), train_eps=True, edge_dim=4),
                GINEConv(_gin_mlp(16, 3), train_eps=True, edge_dim=4),
            ])
            self.act = torch.nn.ReLU()

        def forward(self, x, edge_index, edge_attr):
            x = self.act(self.convs[0](x, edge_index, edge_attr))
            return self.convs[1](x, edge_index, edge_attr)

    torch.manual_seed(0)
    theirs_model = Convs().eval()
    with torch.no_grad():
        theirs = F.log_softmax(theirs_model(x, edge_index, edge_attr), dim=-1)
    saved = tmp_path / "pyg.safetensors"
    glt.save_for_graphloom(theirs_model, saved)
    ours = gl.predict(saved, edge_dataset)
    scale = max(1.0, theirs.abs().max().item())
    assert (ours - theirs).abs().max().item() < 1e-5 * scale


def test_gatv2_with_edge_features_crosses_to_pyg_and_back(edge_dataset, graphloom_cli, tmp_path):
    ds = gl.Dataset.open(edge_dataset)
    x = ds.features.gather(torch.arange(ds.num_nodes))
    edge_index, edge_attr = ds.edge_index(), ds.edge_attr()
    path = tmp_path / "gatv2.safetensors"
    subprocess.run(
        [graphloom_cli, "train", "--dataset", edge_dataset, "--model", "gatv2", "--epochs", "20",
         "--save-model", path],
        check=True, capture_output=True,
    )
    model = glt.load_pyg(path)
    assert model.convs[0].lin_edge is not None
    with torch.no_grad():
        ours = model(x, edge_index, edge_attr)
    reference = gl.predict(path, edge_dataset)
    scale = max(1.0, reference.abs().max().item())
    assert (ours - reference).abs().max().item() < 1e-5 * scale

    class Convs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList([
                GATv2Conv(8, 4, heads=2, edge_dim=4, fill_value="mean"),
                GATv2Conv(8, 3, heads=1, concat=False, edge_dim=4, fill_value="mean"),
            ])
            self.act = torch.nn.ELU()

        def forward(self, x, edge_index, edge_attr):
            x = self.act(self.convs[0](x, edge_index, edge_attr))
            return self.convs[1](x, edge_index, edge_attr)

    torch.manual_seed(1)
    theirs_model = Convs().eval()
    for p in theirs_model.parameters():
        p.data.add_(0.05 * torch.randn_like(p))
    with torch.no_grad():
        theirs = F.log_softmax(theirs_model(x, edge_index, edge_attr), dim=-1)
    saved = tmp_path / "pyg-gatv2.safetensors"
    glt.save_for_graphloom(theirs_model, saved)
    ours = gl.predict(saved, edge_dataset)
    scale = max(1.0, theirs.abs().max().item())
    assert (ours - theirs).abs().max().item() < 1e-5 * scale
