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


class _EdgeConvs(torch.nn.Module):
    """Two PyG layers that read edge features, ``act`` between them."""

    def __init__(self, convs, act):
        super().__init__()
        self.convs = torch.nn.ModuleList(convs)
        self.act = act

    def forward(self, x, edge_index, edge_attr):
        x = self.act(self.convs[0](x, edge_index, edge_attr))
        return self.convs[1](x, edge_index, edge_attr)


def _inputs(edge_dataset):
    """The dataset's features, ``edge_index`` and ``edge_attr``, as PyG's layers take them."""
    ds = gl.Dataset.open(edge_dataset)
    return ds.features.gather(torch.arange(ds.num_nodes)), ds.edge_index(), ds.edge_attr()


def _close(ours, theirs):
    scale = max(1.0, theirs.abs().max().item())
    assert (ours - theirs).abs().max().item() < 1e-5 * scale


def _trained_as_pyg(arch, edge_dataset, graphloom_cli, tmp_path):
    """``arch`` trained by ``graphloom train`` and loaded as PyG layers, after checking that
    they give ``graphloom predict``'s log-probabilities."""
    path = tmp_path / f"{arch}.safetensors"
    subprocess.run(
        [graphloom_cli, "train", "--dataset", edge_dataset, "--model", arch, "--epochs", "20",
         "--save-model", path],
        check=True, capture_output=True,
    )
    model = glt.load_pyg(path)
    with torch.no_grad():
        ours = model(*_inputs(edge_dataset))
    _close(ours, gl.predict(path, edge_dataset))
    return model


def _predicts_in_graphloom(theirs_model, edge_dataset, tmp_path):
    """A PyG model written by ``save_for_graphloom`` gives its own log-probabilities in
    ``graphloom predict``."""
    with torch.no_grad():
        theirs = F.log_softmax(theirs_model(*_inputs(edge_dataset)), dim=-1)
    saved = tmp_path / "pyg.safetensors"
    glt.save_for_graphloom(theirs_model, saved)
    _close(gl.predict(saved, edge_dataset), theirs)


def test_gine_crosses_to_pyg_and_back(edge_dataset, graphloom_cli, tmp_path):
    model = _trained_as_pyg("gine", edge_dataset, graphloom_cli, tmp_path)
    assert isinstance(model.convs[0], GINEConv)
    x, edge_index, _ = _inputs(edge_dataset)
    with pytest.raises(ValueError, match="edge_attr"):
        model(x, edge_index)
    torch.manual_seed(0)
    convs = [GINEConv(_gin_mlp(8, 16), train_eps=True, edge_dim=4),
             GINEConv(_gin_mlp(16, 3), train_eps=True, edge_dim=4)]
    _predicts_in_graphloom(_EdgeConvs(convs, torch.nn.ReLU()).eval(), edge_dataset, tmp_path)


def test_gatv2_with_edge_features_crosses_to_pyg_and_back(edge_dataset, graphloom_cli, tmp_path):
    model = _trained_as_pyg("gatv2", edge_dataset, graphloom_cli, tmp_path)
    assert model.convs[0].lin_edge is not None
    torch.manual_seed(1)
    convs = [GATv2Conv(8, 4, heads=2, edge_dim=4, fill_value="mean"),
             GATv2Conv(8, 3, heads=1, concat=False, edge_dim=4, fill_value="mean")]
    theirs_model = _EdgeConvs(convs, torch.nn.ELU()).eval()
    for p in theirs_model.parameters():
        p.data.add_(0.05 * torch.randn_like(p))
    _predicts_in_graphloom(theirs_model, edge_dataset, tmp_path)
