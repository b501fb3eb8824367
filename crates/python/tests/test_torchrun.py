"""torchrun jobs: ``graphloom.init()`` reads the ranks torchrun sets, loaders take their rank's
slice of every batch, and the DDP example trains on two processes as on one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ddp_cora.py"

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="needs torch.distributed with gloo")


def clean_env(**extra: str) -> dict:
    """This process's environment without another launcher's variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMI_", "PMIX_")) and k not in
           ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", **extra)
    return env


def test_init_reads_torchruns_ranks_and_loaders_take_their_slice(cora):
    code = textwrap.dedent(f"""
        import graphloom as gl
        comm = gl.init()
        node = gl.get_local_node_communicator()
        ds = gl.Dataset.open({str(cora)!r})
        loader = gl.NeighborLoader(ds, [2], ds.train_idx, batch_size=10)
        batch = next(iter(loader))
        print(comm.backend, comm.rank, comm.size, node.rank, node.size,
              batch.n_id[:batch.batch_size].tolist())
    """)
    env = clean_env(RANK="3", WORLD_SIZE="4", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    backend, rank, size, local_rank, local_size, seeds = out.stdout.split(maxsplit=5)
    assert (backend, rank, size, local_rank, local_size) == ("torch", "3", "4", "1", "2")
    import graphloom as gl

    train = gl.Dataset.open(cora).train_idx
    # Rank 3 of 4 takes the last quarter of the first global batch of 10 seeds.
    assert json.loads(seeds) == train[7:10].tolist()


def torchrun(processes: int, cora: Path, out: Path) -> list[float]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", str(processes), str(EXAMPLE), "--dataset", str(cora),
               "--epochs", "3", "--dropout", "0", "--out", str(out), "--json"]
    result = subprocess.run(command, env=clean_env(), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    line = [ln for ln in result.stdout.splitlines() if ln.startswith("{")][-1]
    report = json.loads(line)
    assert report["ranks"] == processes
    return report["losses"] + [report["test_acc"]]


def test_two_processes_train_like_one(cora, tmp_path):
    one = torchrun(1, cora, tmp_path / "one.pt")
    two = torchrun(2, cora, tmp_path / "two.pt")
    assert one == pytest.approx(two, rel=1e-5), (one, two)
    a, b = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-5), name
    assert one[-2] < one[0], "training lowered the loss"
    assert one[-1] > 0.3, "test accuracy above chance (1/7) after 3 epochs"
