"""``graphloom.wholegraph``: WholeGraph's names, signatures and return shapes on host tables,
and a script written for pylibwholegraph.torch that runs with its import and location
changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import graphloom as gl
import graphloom.wholegraph as wgth

SCRIPT = Path(__file__).with_name("wholegraph_script.py")


@pytest.fixture(scope="module")
def comm():
    # WholeGraph's init sets torchrun's variables; the other tests' jobs are not torchrun's.
    saved = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                            "LOCAL_WORLD_SIZE")}
    global_comm, local_comm = wgth.init_torch_env_and_create_wm_comm(0, 1, 0, 1)
    assert (global_comm.get_rank(), global_comm.get_size()) == (0, 1)
    assert local_comm.get_size() == 1
    yield global_comm
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    gl.init()


def test_cuda_location_says_to_pass_cpu(comm):
    with pytest.raises(ValueError, match='host memory; pass memory_location="cpu"'):
        wgth.create_embedding(comm, "continuous", "cuda", torch.float32, [4, 2])


def test_tensor_views_have_wholegraphs_shapes(comm):
    emb = wgth.create_embedding(comm, "continuous", "cpu", torch.float32, [6, 3])
    tensor = emb.get_embedding_tensor()
    assert (tensor.dim(), tuple(tensor.shape), tensor.stride(), tensor.dtype) == (
        2, (6, 3), (3, 1), torch.float32)
    local, offset = tensor.get_local_tensor()
    whole, zero = tensor.get_global_tensor(host_view=True)
    chunks, offsets = tensor.get_all_chunked_tensor()
    assert (tuple(local.shape), offset, tuple(whole.shape), zero) == ((6, 3), 0, (6, 3), 0)
    assert [tuple(c.shape) for c in chunks] == [(6, 3)] and offsets == [0]
    local[2] = 7.0  # a view: the table sees the write
    assert emb.gather(torch.tensor([2]), force_dtype=torch.float64).tolist() == [[7.0] * 3]
    assert emb.gather(torch.tensor([2])).dtype == torch.float32
    with pytest.raises(NotImplementedError, match="partitions rows evenly"):
        wgth.create_embedding(comm, "continuous", "cpu", torch.float32, [6, 3],
                              embedding_entry_partition=[2, 4])


def test_both_optimizer_spellings_train_rows(comm):
    # Earlier WholeGraph: the optimizer first, given to create_embedding.
    old = wgth.create_wholememory_optimizer("sgd", {})
    a = wgth.create_embedding(comm, "distributed", "cpu", torch.float32, [5, 2], optimizer=old)
    # Current WholeGraph: the optimizer made over existing embeddings, whose rows it keeps.
    b = wgth.create_embedding(comm, "chunked", "cpu", torch.float32, [5, 2], random_init=True)
    before = b.gather(torch.arange(5))
    assert before.abs().sum() > 0
    new = wgth.create_wholememory_optimizer([b], "adam", {"beta1": 0.8, "epsilon": 1e-6})
    assert torch.equal(b.gather(torch.arange(5)), before)
    for emb, opt in ((a, old), (b, new)):
        module = wgth.WholeMemoryEmbeddingModule(emb)
        module.train()
        ids = torch.tensor([1, 3, 1])
        module(ids).sum().backward()
        opt.step(0.1)
        after = emb.gather(torch.arange(5))
        changed = (after != (before if emb is b else torch.zeros(5, 2))).any(dim=1)
        assert changed.tolist() == [False, True, False, True, False]
    with pytest.raises(ValueError, match="'alpha' is not a parameter of lazy_adam"):
        c = wgth.create_embedding(comm, "continuous", "cpu", torch.float32, [2, 2])
        wgth.create_wholememory_optimizer(c, "adam", {"alpha": 0.5})
    with pytest.raises(ValueError, match="optimizer_type='momentum'"):
        wgth.create_wholememory_optimizer("momentum", {})


def run_script(launcher: list, root: Path, feat_dim: int, classes: int, out: Path) -> dict:
    out.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    result = subprocess.run(
        launcher + [str(SCRIPT), "--root", str(root), "--feat-dim", str(feat_dim),
                    "--classes", str(classes), "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=dict(env, OMP_NUM_THREADS="1"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads([ln for ln in result.stdout.splitlines() if ln.startswith("{")][-1])


def test_a_wholegraph_script_runs_with_its_import_and_location_changed(ds_files, tmp_path):
    root, feat_dim, classes = ds_files
    report = run_script([sys.executable], root, feat_dim, classes, tmp_path / "one")
    assert report["ranks"] == 1
    # A linear head on Cora's features and learnt node embeddings: well above chance (1/7).
    assert report["test_accuracy"] > 0.3, report
    assert report["losses"][1] < report["losses"][0] / 2, report
    assert report["local"] == [[2708, 16], 0]
    assert report["chunks"] == [[[2708, feat_dim]], [0]]
    assert report["global"] == [[2708], 0, True]
    assert report["reloaded"]
    text = SCRIPT.read_text()
    assert "import graphloom.wholegraph as wgth  # was: import pylibwholegraph.torch as wgth" in text
    # Under torchrun, as WholeGraph's scripts are launched: every process holds the tables,
    # and the same training gives the same results.
    two = run_script([sys.executable, "-m", "torch.distributed.run", "--standalone",
                      "--nproc_per_node", "2"], root, feat_dim, classes, tmp_path / "two")
    assert two.pop("ranks") == 2 and report.pop("ranks") == 1
    assert two.pop("losses") == pytest.approx(report.pop("losses"), rel=1e-4)
    assert two.pop("test_accuracy") == pytest.approx(report.pop("test_accuracy"), abs=0.01)
    assert two == report


@pytest.fixture(scope="module")
def ds_files(cora, tmp_path_factory):
    """Cora as WholeGraph's examples keep it: raw feature rows, labels and splits."""
    gl.init()
    ds = gl.Dataset.open(cora)
    root = tmp_path_factory.mktemp("wholegraph")
    np.asarray(ds.features.get_global_tensor(), dtype=np.float32).tofile(root / "node_feat.bin")
    np.save(root / "node_label.npy", ds.labels.numpy())
    np.save(root / "train_idx.npy", ds.train_idx.numpy())
    np.save(root / "test_idx.npy", ds.test_idx.numpy())
    return root, ds.feat_dim, ds.num_classes
