"""torchrun jobs: ``graphloom.init()`` reads the ranks torchrun sets, tables spread over the
processes (each holding its share, messages over torch.distributed), loaders take their rank's
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


def test_init_reads_torchruns_ranks_and_a_table_needs_a_process_group(cora):
    code = textwrap.dedent(f"""
        import graphloom as gl
        comm = gl.init()
        node = gl.get_local_node_communicator()
        print(comm.backend, comm.rank, comm.size, node.rank, node.size, flush=True)
        gl.Dataset.open({str(cora)!r}).features   # a table over the job: collective
    """)
    env = clean_env(RANK="3", WORLD_SIZE="4", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == ["torch", "3", "4", "1", "2"], out.stderr
    assert out.returncode == 1
    assert "call torch.distributed.init_process_group('gloo') before graphloom's tables" in (
        out.stderr)


def test_a_loader_takes_its_ranks_slice_of_every_batch(cora):
    import graphloom as gl

    ds = gl.Dataset.open(cora)
    loader = gl.NeighborLoader(ds, [2], ds.train_idx, batch_size=10, rank=3, ranks=4)
    batch = next(iter(loader))
    # Rank 3 of 4 takes the last quarter of the first global batch of 10 seeds.
    assert batch.n_id[:batch.batch_size].tolist() == ds.train_idx[7:10].tolist()


SHARDS = textwrap.dedent("""
    import json, sys
    import numpy as np, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    import graphloom as gl

    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * 4096

    comm = gl.init()
    rows, width = 100_000, 256            # 100 MB of float32
    before = rss()
    table = gl.create_embedding(comm, sys.argv[1], sys.argv[2], "float32", (rows, width))
    local, first = table.get_local_tensor()
    local[:] = torch.arange(first, first + len(local), dtype=torch.float32)[:, None]
    held = rss() - before
    table.barrier()                       # every rank's rows written before any reads them
    ids = np.random.default_rng(comm.rank).integers(0, rows, 5000)
    right = bool((table.gather(ids)[:, 0].numpy() == ids).all())
    trained = gl.create_embedding(comm, "distributed", "host", "float32", (50, 4),
                                  optimizer="sgd", seed=3)
    # Each rank's gradients of its rows: the owners apply every rank's.
    trained.apply_gradients(np.array([comm.rank, 49]), np.ones((2, 4), np.float32), 0.5)
    report = {"rank": comm.rank, "local_rows": len(local), "held": held, "right": right,
              "trained": trained.gather(np.arange(50)).tolist()}
    # A file per rank: the processes share stdout, and their lines could run together.
    with open(f"{sys.argv[3]}/rank{comm.rank}.json", "w") as f:
        json.dump(report, f)
""")


def shards(processes: int, layout: str, location: str, tmp_path: Path) -> list[dict]:
    script = tmp_path / "shards.py"
    script.write_text(SHARDS)
    out = tmp_path / f"{processes}-{layout}-{location}"
    out.mkdir()
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
               str(processes), str(script), layout, location, str(out)]
    result = subprocess.run(command, env=clean_env(), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(processes)]


def test_tables_shard_over_the_processes_of_a_torchrun_job(tmp_path):
    whole = 100_000 * 256 * 4
    one, = shards(1, "distributed", "host", tmp_path)
    two = shards(2, "distributed", "host", tmp_path)
    assert [r["local_rows"] for r in two] == [50_000, 50_000]
    assert all(r["right"] for r in [one] + two)
    # Each of two processes holds half the table (the pages it wrote), one process all of it.
    assert one["held"] > 0.9 * whole
    for r in two:
        assert 0.4 * whole < r["held"] < 0.6 * whole, r["held"] / whole
    # The owners applied both ranks' gradients: one process's result with the other rank's
    # row stepped too, row 49 twice.
    expect = torch.tensor(one["trained"])
    expect[1] -= 0.5
    expect[49] -= 0.5
    for r in two:
        assert torch.allclose(torch.tensor(r["trained"]), expect, atol=1e-6)
    # Continuous in shared memory: one copy the two processes map.
    shared = shards(2, "continuous", "shared", tmp_path)
    assert [r["local_rows"] for r in shared] == [50_000, 50_000]
    assert all(r["right"] for r in shared)


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
