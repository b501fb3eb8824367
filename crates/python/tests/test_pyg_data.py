"""PyG data in GraphLoom and PyG's loader signature: a ``Data`` written by ``from_pyg`` keeps its
nodes, edges, splits and weights; the loader takes PyG's arguments and a ``Data``, its batches
carry PyG's fields (``trim_to_layer`` runs on them), and torch's generator decides them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

import graphloom as gl

SCRIPT = Path(__file__).with_name("pyg_script.py")


@pytest.fixture(scope="module")
def ds(cora) -> gl.Dataset:
    gl.init()
    return gl.Dataset.open(cora)


@pytest.fixture(scope="module")
def cora_data(ds) -> Data:
    """Cora as PyG's ``Planetoid`` gives it: features, labels, edge index and masks."""
    n = ds.num_nodes
    masks = {}
    for name, ids in (("train_mask", ds.train_idx), ("val_mask", ds.valid_idx),
                      ("test_mask", ds.test_idx)):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[ids] = True
        masks[name] = mask
    x = torch.from_numpy(np.array(ds.features.get_global_tensor()))
    return Data(x=x, y=ds.labels.clone(), edge_index=ds.edge_index().clone(), **masks)


def test_from_pyg_keeps_nodes_edges_and_splits(cora_data, ds, tmp_path):
    out = gl.Dataset.from_pyg(cora_data, tmp_path / "cora")
    assert (out.num_nodes, out.num_edges, out.num_classes, out.feat_dim) == (2708, 10556, 7, 1433)
    assert out.name == "cora"
    assert torch.equal(out.train_idx, ds.train_idx)
    assert torch.equal(out.valid_idx, ds.valid_idx)
    assert sorted(out.test_idx.tolist()) == sorted(ds.test_idx.tolist())
    assert torch.equal(out.labels, ds.labels)
    assert np.array_equal(np.asarray(out.features.get_global_tensor()), cora_data.x.numpy())
    edges = lambda ei: sorted(zip(ei[0].tolist(), ei[1].tolist()))  # noqa: E731
    assert edges(out.edge_index()) == edges(cora_data.edge_index)
    # A second write to a folder of the user's is refused, the folder kept.
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match="mine: holds files"):
        gl.Dataset.from_pyg(cora_data, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_from_pyg_takes_index_splits_weights_and_column_labels(tmp_path):
    # A directed path 0 -> 1 -> 2 -> 3 with a duplicate edge and weights.
    edge_index = torch.tensor([[0, 1, 2, 1], [1, 2, 3, 2]])
    weight = torch.tensor([0.5, 1.5, 2.5, 3.5])
    data = Data(x=torch.randn(4, 3, dtype=torch.float64), y=torch.tensor([[0], [1], [1], [0]]),
                edge_index=edge_index, edge_weight=weight, num_nodes=4)
    ds = gl.Dataset.from_pyg(data, tmp_path / "path", split_idx={
        "train": torch.tensor([0, 1]), "valid": torch.tensor([2]), "test": torch.tensor([3])})
    assert ds.train_idx.tolist() == [0, 1] and ds.test_idx.tolist() == [3]
    assert ds.labels.tolist() == [0, 1, 1, 0]
    assert np.allclose(np.asarray(ds.features.get_global_tensor()), data.x.float().numpy())
    # Each weight is at its edge's place in the CSR (rows by destination).
    row_ptr = np.load(tmp_path / "path" / "csr_row_ptr.npy")
    col = np.load(tmp_path / "path" / "csr_col_idx.npy")
    w = np.load(tmp_path / "path" / "edge_weight.npy")
    placed = {}
    for d in range(4):
        for k in range(row_ptr[d], row_ptr[d + 1]):
            placed.setdefault((int(col[k]), d), []).append(float(w[k]))
    assert placed == {(0, 1): [0.5], (1, 2): [1.5, 3.5], (2, 3): [2.5]}
    # A negative weight is the caller's argument, refused before anything is written.
    negative = Data(edge_index=edge_index, edge_weight=-weight, num_nodes=4)
    with pytest.raises(ValueError, match="^edge_weight: weight of edge 0 is -0.5: weights must "
                                         "be finite and not negative"):
        gl.Dataset.from_pyg(negative, tmp_path / "negative")
    assert not (tmp_path / "negative").exists()


def test_from_pyg_refuses_what_it_cannot_keep(tmp_path):
    edge_index = torch.tensor([[0, 1], [1, 0]])
    data = Data(x=torch.randn(2, 2), y=torch.tensor([0.5, 1.0]), edge_index=edge_index)
    with pytest.raises(TypeError, match="^y: "):
        gl.Dataset.from_pyg(data, tmp_path / "a")
    data = Data(x=torch.randn(2, 2), y=torch.tensor([0, 1]), edge_index=edge_index,
                train_mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"train_mask.*pick one"):
        gl.Dataset.from_pyg(data, tmp_path / "b")
    data = Data(x=torch.randn(2, 2), y=torch.tensor([0, 1]), edge_index=torch.tensor([[0], [5]]))
    with pytest.raises(ValueError, match="edge_index"):
        gl.Dataset.from_pyg(data, tmp_path / "c")
    assert not (tmp_path / "c").exists()



@pytest.mark.parametrize("edge_index, dtype", [
    (torch.tensor([[1.5, 0.2], [2.7, 3.9]]), "float32"),
    (np.array([[1.5, 0.2], [2.7, 3.9]]), "float64"),
    (torch.tensor([[True, False], [False, True]]), "bool"),
])
def test_from_pyg_refuses_edge_index_of_no_integer_dtype(edge_index, dtype, tmp_path):
    # Cast, the floats would be edges (1, 2) and (0, 3), and the bools edges of nodes 0 and 1.
    data = Data(x=torch.randn(4, 2), y=torch.tensor([0, 1, 0, 1]), edge_index=edge_index,
                num_nodes=4)
    with pytest.raises(ValueError, match=f"^edge_index: dtype {dtype}; expected integer"):
        gl.Dataset.from_pyg(data, tmp_path / "ds")
    assert not (tmp_path / "ds").exists()

def test_pyg_signature_and_masks(ds, cora_data):
    mask = cora_data.train_mask
    loader = gl.NeighborLoader(ds, [5, 5], mask, batch_size=64)
    assert len(loader) == 3
    first = next(iter(loader))
    assert first.n_id[: first.batch_size].tolist() == ds.train_idx[:64].tolist()
    assert first.input_id.tolist() == list(range(64))
    same = gl.NeighborLoader(ds, num_neighbors=[5, 5], input_nodes=ds.train_idx, batch_size=64)
    assert torch.equal(next(iter(same)).n_id[:64], first.n_id[:64])
    with pytest.raises(TypeError, match="batch_size= by name"):
        gl.NeighborLoader(ds, [5], 32)
    with pytest.raises(ValueError, match="replace=True is not supported"):
        gl.NeighborLoader(ds, [5], replace=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        gl.NeighborLoader(ds, [5], bogus=1)
    # DataLoader options that mean nothing here are accepted.
    loader = gl.NeighborLoader(ds, [5], mask, batch_size=70, num_workers=2, pin_memory=True,
                               persistent_workers=True, transform=lambda b: ("seen", b))
    tag, batch = next(iter(loader))
    assert tag == "seen" and batch.batch_size == 70


def test_torch_generator_decides_the_batches(ds):
    def first_seeds(torch_seed):
        torch.manual_seed(torch_seed)
        loader = gl.NeighborLoader(ds, [5], batch_size=16, shuffle=True)
        return [b.n_id[: b.batch_size].tolist() for b in loader][0]

    assert first_seeds(1) == first_seeds(1)
    assert first_seeds(1) != first_seeds(2)
    g = torch.Generator().manual_seed(3)
    loader = gl.NeighborLoader(ds, [5], batch_size=16, shuffle=True, generator=g)
    a = next(iter(loader)).n_id[:16].tolist()
    g.manual_seed(3)
    assert next(iter(loader)).n_id[:16].tolist() == a
    # Without shuffle, the seeds come in the given order (PyG's default).
    loader = gl.NeighborLoader(ds, [5], batch_size=16)
    assert next(iter(loader)).n_id[:16].tolist() == ds.train_idx[:16].tolist()


def test_batches_carry_pyg_fields_and_trim_to_layer_runs(ds):
    from torch_geometric.nn import SAGEConv
    from torch_geometric.utils import trim_to_layer

    fanouts = [4, 3]
    loader = gl.NeighborLoader(ds, fanouts, batch_size=8, shuffle=True, seed=2)
    csr_sources = torch.from_numpy(np.load(f"{ds.path}/csr_col_idx.npy").astype(np.int64))
    row_ptr = torch.from_numpy(np.load(f"{ds.path}/csr_row_ptr.npy"))
    convs = torch.nn.ModuleList([SAGEConv(ds.feat_dim, 16), SAGEConv(16, 7)])
    for batch in loader:
        nodes, edges = batch.num_sampled_nodes, batch.num_sampled_edges
        assert len(nodes) == len(fanouts) + 1 and len(edges) == len(fanouts)
        assert sum(nodes) == len(batch.n_id) and sum(edges) == batch.edge_index.shape[1]
        assert nodes[0] == batch.batch_size
        # e_id: each edge's place in the dataset's CSR, whose row is its destination.
        src = batch.n_id[batch.edge_index[0]]
        dst = batch.n_id[batch.edge_index[1]]
        assert torch.equal(csr_sources[batch.e_id], src)
        assert torch.all(row_ptr[dst] <= batch.e_id) and torch.all(batch.e_id < row_ptr[dst + 1])
        # The edges of hop h point into the nodes hop h - 1 added.
        first_edge = first_node = 0
        for h, count in enumerate(edges):
            d = batch.edge_index[1, first_edge:first_edge + count]
            assert torch.all((first_node <= d) & (d < first_node + nodes[h]))
            first_edge, first_node = first_edge + count, first_node + nodes[h]
        # PyG's hierarchical forward: each layer trims what later layers no longer need, and
        # the seeds' outputs are those of the untrimmed forward.
        x, edge_index = batch.x, batch.edge_index
        full = batch.x
        for conv in convs:
            full = conv(full, batch.edge_index)
        for i, conv in enumerate(convs):
            x, edge_index, _ = trim_to_layer(i, nodes, edges, x, edge_index)
            x = conv(x, edge_index)
        b = batch.batch_size
        assert torch.allclose(x[:b], full[:b], atol=1e-5)


def test_a_pyg_data_is_loaded_with_its_own_ids_and_attributes(cora_data, ds):
    data = cora_data.clone()
    data.edge_weight = torch.arange(data.num_edges, dtype=torch.float32)
    loader = gl.NeighborLoader(data, [10, 5], batch_size=32, input_nodes=data.train_mask,
                               shuffle=True)
    seen = []
    for batch in loader:
        b = batch.batch_size
        seen.extend(batch.n_id[:b].tolist())
        assert torch.equal(batch.x, data.x[batch.n_id])
        assert torch.equal(batch.train_mask, data.train_mask[batch.n_id])
        # e_id are columns of the Data's edge_index, and edge attributes follow them.
        assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
        assert torch.equal(batch.edge_weight, data.edge_weight[batch.e_id])
    assert sorted(seen) == sorted(data.train_mask.nonzero().view(-1).tolist())
    # PyG's default input_nodes: every node.
    assert len(gl.NeighborLoader(data, [2], batch_size=1000)) == 3


def test_a_pyg_neighborloader_script_runs_with_its_import_changed(cora_data, tmp_path):
    path = tmp_path / "cora.pt"
    torch.save(cora_data, path)
    out = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    # PyG's GraphSAGE on Cora after 20 epochs of 5 batches, evaluated layer by layer.
    assert report["test_acc"] > 0.75, report
    text = SCRIPT.read_text()
    assert "from graphloom import NeighborLoader  # was: from torch_geometric.loader" in text


def test_a_data_without_features_or_classes_loads_as_pyg_does():
    # A regression target, no x: batches have y sliced from the Data, and no x.
    data = Data(edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]]), num_nodes=4,
                y=torch.randn(4, 2))
    for batch in gl.NeighborLoader(data, [2], batch_size=3):
        assert "x" not in batch
        assert torch.equal(batch.y, data.y[batch.n_id])


def test_opening_a_pyg_download_names_the_command_that_converts_it(tmp_path):
    raw = tmp_path / "Planetoid" / "Cora" / "raw"
    raw.mkdir(parents=True)
    (raw / "ind.cora.x").write_bytes(b"")
    with pytest.raises(ValueError, match="graphloom prepare planetoid --raw .* --name cora"):
        gl.Dataset.open(tmp_path / "Planetoid")
    processed = tmp_path / "Reddit" / "processed"
    processed.mkdir(parents=True)
    (processed / "data.pt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"graphloom.Dataset.from_pyg"):
        gl.Dataset.open(tmp_path / "Reddit")
