"""Bad input and awkward use from Python: clear exceptions, never a crash or a hang."""

from __future__ import annotations

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
        gl.NeighborLoader(ds, [5], 4, input_nodes=[1, 2, 1])
    with pytest.raises(ValueError, match="x_dtype"):
        gl.NeighborLoader(ds, [5], 4, x_dtype="int64")
    with pytest.raises(ValueError, match="queue_depth"):
        gl.NeighborLoader(ds, [5], 4, queue_depth=2**62)
    with pytest.raises(TypeError, match="fanouts"):
        gl.NeighborLoader(ds, "5", 4)
    with pytest.raises(TypeError, match="graphloom.Embedding"):
        gl.NeighborLoader(ds, [5], 4, features=torch.zeros(3))


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
