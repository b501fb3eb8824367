"""Bad input and awkward use from Python: clear exceptions, never a crash or a hang."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch_geometric.nn.models import GAT, GCN

import graphloom as gl
import graphloom.torch as glt


@pytest.fixture(scope="module")
def comm() -> gl.Communicator:
    return gl.init()


def run_python(code: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)


def test_threads_sharing_a_table_and_a_loader_do_not_deadlock(cora):
    result = run_python(f"""
        import threading, numpy as np, graphloom as gl
        comm = gl.init()
        e = gl.create_embedding(comm, "continuous", "host", "float32", (1000, 64))
        ds = gl.Dataset.open({str(cora)!r})
        loader = gl.NeighborLoader(ds, [5, 5], batch_size=8)
        def gathers():
            for _ in range(200):
                e.gather(np.random.randint(0, 1000, 5000))
                e.writable
        def scatters():
            for _ in range(200):
                e.scatter(np.arange(10), np.ones((10, 64), np.float32))
        def loads():
            for _ in range(3):
                for b in loader:
                    ds.features.gather(b.n_id)
        threads = [threading.Thread(target=f) for f in (gathers, gathers, scatters, loads)]
        for t in threads: t.start()
        for t in threads: t.join()
        print("done")
    """)
    assert result.returncode == 0 and "done" in result.stdout, result.stderr


@pytest.mark.parametrize("shape", [(2**61, 4), (2**32, 2**32), (2**63,)])
def test_sizes_too_large_to_address_are_refused(comm, shape):
    with pytest.raises(ValueError, match="too large"):
        gl.create_embedding(comm, "continuous", "host", "float32", shape)


def test_loader_arguments_are_checked_up_front(cora):
    ds = gl.Dataset.open(cora)
    with pytest.raises(ValueError, match="appears twice"):
        gl.NeighborLoader(ds, [5], batch_size=4, input_nodes=[1, 2, 1])
    with pytest.raises(ValueError, match="x_dtype"):
        gl.NeighborLoader(ds, [5], batch_size=4, x_dtype="int64")
    with pytest.raises(ValueError, match="queue_depth"):
        gl.NeighborLoader(ds, [5], batch_size=4, queue_depth=2**62)
    with pytest.raises(TypeError, match="num_neighbors"):
        gl.NeighborLoader(ds, "5", batch_size=4)
    with pytest.raises(TypeError, match="graphloom.Embedding"):
        gl.NeighborLoader(ds, [5], batch_size=4, features=torch.zeros(3))


def test_a_second_iteration_ends_the_first_loudly(cora):
    ds = gl.Dataset.open(cora)
    loader = gl.NeighborLoader(ds, [5], batch_size=16)
    first = iter(loader)
    next(first)
    second = iter(loader)
    assert sum(1 for _ in second) == len(loader)
    with pytest.raises(RuntimeError, match="another iteration"):
        next(first)
    assert sum(1 for _ in loader) == len(loader)


def test_arguments_of_the_wrong_kind(comm, tmp_path):
    with pytest.raises(TypeError, match="Communicator"):
        gl.create_embedding(None, "continuous", "host", "float32", (4, 4))
    with pytest.raises(TypeError, match="shape"):
        gl.create_embedding(comm, "continuous", "host", "float32", "10")
    with pytest.raises(TypeError, match="dtype"):
        gl.create_embedding(comm, "continuous", "host", None, (4, 4))
    emb = gl.create_embedding(comm, "continuous", "host", "float32", (4, 4))
    with pytest.raises(TypeError, match="rows"):
        emb.scatter([0], None)
    with pytest.raises(TypeError, match="bfloat16"):
        gl.all_reduce(torch.ones(3, dtype=torch.bfloat16))
    path = tmp_path / "ro.npy"
    np.save(path, np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="writable"):
        gl.create_embedding(comm, "continuous", "mmap", "float32", (4, 4), path=path,
                            writable=False, optimizer="sgd")
    with pytest.raises(ValueError, match="saved_ranks"):
        gl.load_embedding(comm, tmp_path / "x", 2**62, 4, "continuous", "host", "sgd")


def test_ints_out_of_their_range_are_value_errors_naming_the_argument(comm, cora):
    ds = gl.Dataset.open(cora)
    too_big = "is more than 18446744073709551615 (2**64 - 1)"
    for make, says in [
        (lambda: gl.NeighborLoader(ds, [5], batch_size=-1), "^batch_size: -1 is negative"),
        (lambda: gl.NeighborLoader(ds, [5], batch_size=4, seed=-1), "^seed: -1 is negative"),
        (lambda: gl.NeighborLoader(ds, [5], batch_size=4, seed=2**70),
         rf"^seed: {2**70} {re.escape(too_big)}"),
        (lambda: gl.metrics.hits_at_k([1.0, 2.0], [0.5], k=2**70),
         rf"^k: {2**70} {re.escape(too_big)}"),
        (lambda: gl.ClusterLoader(gl.ClusterData(ds, 8), seed=-5), "^seed: -5 is negative"),
        (lambda: gl.ClusterData(ds, 8).members(-1), "^cluster: -1 is negative"),
        (lambda: gl.create_embedding(comm, "continuous", "host", "float32", [10, -4]),
         "^shape: -4 is negative: expected an int of 0 or more$"),
    ]:
        with pytest.raises(ValueError, match=says):
            make()
    # Fanouts take -1 by right: the negative batch size is the one named.
    with pytest.raises(ValueError, match="^batch_size: -1"):
        gl.NeighborLoader(ds, [-1], batch_size=-1)


def test_arguments_that_do_not_fit_their_files_are_value_errors(comm, tmp_path):
    rows = tmp_path / "rows.bin"
    np.zeros(10, np.float32).tofile(rows)
    with pytest.raises(ValueError, match="40 bytes is not a whole number of rows of 12 bytes"):
        gl.create_embedding_from_filelist(comm, "continuous", "host", [rows], "float32", 3)
    with pytest.raises(ValueError, match="is a file, not a dataset directory"):
        gl.Dataset.open(rows)


def test_activations_that_do_not_map_are_refused(tmp_path):
    with pytest.raises(ValueError, match="alpha"):
        glt.save_for_graphloom(GAT(8, 16, 2, 3, heads=2, act=torch.nn.ELU(alpha=2.0)),
                               tmp_path / "m")

    class Custom(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = GCN(8, 16, 2, 3).convs

    with pytest.raises(ValueError, match="no `act`"):
        glt.save_for_graphloom(Custom(), tmp_path / "m")
    custom = Custom()
    custom.act = torch.nn.ReLU()
    glt.save_for_graphloom(custom, tmp_path / "m")
    assert (tmp_path / "m").exists()


def test_layers_that_would_map_to_other_shapes_are_refused(tmp_path):
    from torch_geometric.nn import GATConv, SAGEConv

    class Uneven(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.act = torch.nn.ELU()
            # The middle layer's 4 heads of 16 have the shapes of 8 heads of 8.
            self.convs = torch.nn.ModuleList([
                GATConv(8, 8, heads=8), GATConv(64, 16, heads=4), GATConv(64, 3, heads=2, concat=False)
            ])

    with pytest.raises(ValueError, match="layer 1"):
        glt.save_for_graphloom(Uneven(), tmp_path / "m")

    class Reversed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.act = torch.nn.ReLU()
            self.convs = torch.nn.ModuleList([SAGEConv(8, 4, flow="target_to_source"), SAGEConv(4, 3)])

    with pytest.raises(ValueError, match="flow"):
        glt.save_for_graphloom(Reversed(), tmp_path / "m")
    model = GCN(8, 16, 2, 3)
    model.input_embedding = torch.zeros(5, 8)
    with pytest.raises(ValueError, match="input embedding"):
        glt.save_for_graphloom(model, tmp_path / "m")


def test_big_endian_rows_are_written_by_value(comm):
    emb = gl.create_embedding(comm, "continuous", "host", "float32", (3, 2))
    emb.scatter([1], np.array([[1.5, -2.0]], dtype=">f4"))
    assert emb.gather([1]).tolist() == [[1.5, -2.0]]


def test_gradients_go_to_the_ids_of_the_forward_pass(comm):
    emb = gl.create_embedding(comm, "continuous", "host", "float32", (6, 2), optimizer="sgd")
    module = glt.EmbeddingModule(emb)
    opt = glt.SparseOptimizer([module], lr=1.0)
    before = emb.gather(torch.arange(6)).clone()
    ids = np.array([1, 2], dtype=np.int64)
    module(ids).sum().backward()
    ids[:] = [4, 5]                        # the caller reuses its buffer before the step
    opt.step()
    changed = (emb.gather(torch.arange(6)) != before).any(dim=1).nonzero().flatten().tolist()
    assert changed == [1, 2]
