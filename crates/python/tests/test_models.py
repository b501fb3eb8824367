"""Models across the boundary: GraphLoom's model files as PyG modules (log-probabilities
within 1e-5 of the largest) and PyG models as GraphLoom model files (predict reproduces PyG)."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, GATv2Conv, GINConv, SAGEConv
from torch_geometric.nn.models import GAT, GCN, GraphSAGE

import graphloom as gl
import graphloom.torch as glt


@pytest.fixture(scope="module")
def cora_inputs(cora):
    gl.init()
    ds = gl.Dataset.open(cora)
    return ds, ds.features.gather(torch.arange(ds.num_nodes)), ds.edge_index()


@pytest.mark.parametrize("arch", ["gcn", "sage", "gat", "gatv2", "gin", "sgc", "appnp"])
def test_load_pyg_reproduces_graphloom(cora, cora_models, cora_inputs, arch, tmp_path):
    ds, x, edge_index = cora_inputs
    model = glt.load_pyg(cora_models[arch])
    with torch.no_grad():
        ours = model(x, edge_index)
    reference = gl.predict(cora_models[arch], cora)
    assert ours.shape == (ds.num_nodes, ds.num_classes)
    # Relative to the largest value: GIN's sums make log-probabilities in the hundreds.
    scale = max(1.0, reference.abs().max().item())
    assert (ours - reference).abs().max().item() < 1e-5 * scale
    accuracy = (ours.argmax(1)[ds.test_idx] == ds.labels[ds.test_idx]).float().mean()
    assert accuracy > 0.7
    # And back: the same file contents give the same predictions.
    glt.save_for_graphloom(model, tmp_path / "back.safetensors")
    again = gl.predict(tmp_path / "back.safetensors", cora)
    assert (again - reference).abs().max().item() < 1e-6


@pytest.mark.parametrize(
    "make",
    [
        lambda d, c: GCN(d, 32, num_layers=2, out_channels=c),
        lambda d, c: GraphSAGE(d, 32, num_layers=3, out_channels=c, dropout=0.5),
        lambda d, c: GAT(d, 32, num_layers=2, out_channels=c, heads=4, act="elu"),
    ],
    ids=["gcn", "sage", "gat"],
)
def test_pyg_models_predict_in_graphloom(cora, cora_inputs, make, tmp_path, graphloom_cli):
    ds, x, edge_index = cora_inputs
    torch.manual_seed(0)
    model = make(ds.feat_dim, ds.num_classes).eval()
    for p in model.parameters():   # not only PyG's zero biases: every parameter matters
        p.data.add_(0.05 * torch.randn_like(p))
    with torch.no_grad():
        theirs = F.log_softmax(model(x, edge_index), dim=-1)
    path = tmp_path / "pyg.safetensors"
    glt.save_for_graphloom(model, path)
    ours = gl.predict(path, cora)
    assert (ours - theirs).abs().max().item() < 1e-5
    # The CLI reads it too.
    out = tmp_path / "pred.npy"
    subprocess.run([graphloom_cli, "predict", "--model", path, "--dataset", cora, "--out", out],
                   check=True, capture_output=True)


class Convs(torch.nn.Module):
    """A user's model as PyG's examples write one: ``conv -> act -> dropout`` per hidden
    layer over a ``convs`` list."""

    def __init__(self, convs, act):
        super().__init__()
        self.convs = torch.nn.ModuleList(convs)
        self.act = act

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i + 1 < len(self.convs):
                x = self.act(x)
        return x


def _gin_mlp(a, b):
    return torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.ReLU(), torch.nn.Linear(b, b))


@pytest.mark.parametrize(
    "make",
    [
        lambda d, c: Convs([GATv2Conv(d, 8, heads=4), GATv2Conv(32, c, heads=2, concat=False)],
                           torch.nn.ELU()),
        lambda d, c: Convs([GINConv(_gin_mlp(d, 16), train_eps=True), GINConv(_gin_mlp(16, c))],
                           torch.nn.ReLU()),
    ],
    ids=["gatv2", "gin"],
)
def test_pyg_gatv2_and_gin_layers_predict_in_graphloom(cora, cora_inputs, make, tmp_path):
    ds, x, edge_index = cora_inputs
    torch.manual_seed(0)
    model = make(ds.feat_dim, ds.num_classes).eval()
    for p in model.parameters():
        p.data.add_(0.05 * torch.randn_like(p))
    with torch.no_grad():
        theirs = F.log_softmax(model(x, edge_index), dim=-1)
    path = tmp_path / "pyg.safetensors"
    glt.save_for_graphloom(model, path)
    ours = gl.predict(path, cora)
    scale = max(1.0, theirs.abs().max().item())
    assert (ours - theirs).abs().max().item() < 1e-5 * scale


def test_unmappable_models_are_refused(tmp_path):
    with pytest.raises(ValueError, match="jk"):
        glt.save_for_graphloom(GraphSAGE(8, 16, 2, 3, jk="cat"), tmp_path / "m")
    with pytest.raises(ValueError, match="activation|ReLU"):
        glt.save_for_graphloom(GCN(8, 16, 2, 3, act="tanh"), tmp_path / "m")
    with pytest.raises(ValueError, match="uses ELU"):
        glt.save_for_graphloom(GAT(8, 16, 2, 3, heads=2), tmp_path / "m")   # PyG's default ReLU
    with pytest.raises(ValueError, match="aggr"):
        glt.save_for_graphloom(GraphSAGE(8, 16, 2, 3, aggr="max"), tmp_path / "m")

    class Mixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList([SAGEConv(8, 4), GATConv(4, 3)])

    with pytest.raises(ValueError, match="all be"):
        glt.save_for_graphloom(Mixed(), tmp_path / "m")
    with pytest.raises(ValueError, match="share_weights=False"):
        glt.save_for_graphloom(Convs([GATv2Conv(8, 3, share_weights=True)], torch.nn.ELU()),
                               tmp_path / "m")
    with pytest.raises(ValueError, match="Sequential"):
        glt.save_for_graphloom(Convs([GINConv(torch.nn.Linear(8, 3))], torch.nn.ReLU()),
                               tmp_path / "m")
    with pytest.raises(ValueError, match="no `convs`"):
        glt.save_for_graphloom(torch.nn.Linear(3, 3), tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_bad_model_files(tmp_path):
    (tmp_path / "junk.safetensors").write_bytes(b"not a model")
    with pytest.raises(gl.GraphLoomError):
        glt.load_pyg(tmp_path / "junk.safetensors")
    with pytest.raises(FileNotFoundError):
        glt.load_pyg(tmp_path / "missing.safetensors")


@pytest.mark.parametrize("arch", ["gcn", "gat"])
def test_predict_reaches_the_inference_settings_of_the_command_line(
    cora, cora_models, tmp_path, graphloom_cli, arch
):
    """Layer-wise inference within a budget (scratch files included) and embeddings of the
    first layers, as `graphloom predict`/`embed` compute them."""
    whole = gl.predict(cora_models[arch], cora)
    layerwise = gl.predict(cora_models[arch], cora, inference_memory_gib=0.0001,
                           scratch_dir=tmp_path)
    np.testing.assert_allclose(layerwise, whole, rtol=1e-4, atol=1e-5)
    assert list(tmp_path.iterdir()) == []  # the scratch files are gone
    embedded = gl.predict(cora_models[arch], cora, layer=1)
    out = tmp_path / "h.npy"
    subprocess.run([graphloom_cli, "embed", "--model", cora_models[arch], "--dataset", cora,
                    "--layer", "1", "--out", out], check=True, capture_output=True)
    np.testing.assert_array_equal(embedded, np.load(out))
    with pytest.raises(ValueError, match="^inference_memory_gib must be a positive number"):
        gl.predict(cora_models[arch], cora, inference_memory_gib=-1.0)
