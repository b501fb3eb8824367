"""A job of the store, trainable tables and all_reduce, run by test_mpi.py on one process and
under `mpirun -np 2`: it writes what both runs must agree on under OUT.

    python mpi_job.py OUT            # one process
    mpirun -np 2 python mpi_job.py OUT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

import graphloom as gl
import graphloom.torch as glt

ROWS, DIM, STEPS, BATCH = 40, 6, 10, 12


def train(comm, optimizer: str) -> tuple[np.ndarray, dict]:
    """10 steps on a distributed trainable table; each rank takes its slice of every global
    batch. Returns the final table and, per rank, which of its own rows changed."""
    emb = gl.create_embedding(comm, "distributed", "host", "float32", (ROWS, DIM),
                              optimizer=optimizer, seed=11)
    module = glt.EmbeddingModule(emb)
    opt = glt.SparseOptimizer([module], lr=0.05)
    before, first = emb.get_local_tensor()
    before = before.clone()
    touched = set()
    for step in range(STEPS):
        rng = np.random.default_rng(step)
        ids = rng.integers(0, ROWS, BATCH)
        target = torch.from_numpy(rng.standard_normal((BATCH, DIM)).astype(np.float32))
        touched.update(ids.tolist())
        lo, hi = BATCH * comm.rank // comm.size, BATCH * (comm.rank + 1) // comm.size
        rows = module(ids[lo:hi])
        ((rows - target[lo:hi]) ** 2).sum().backward()
        opt.step()
    after, _ = emb.get_local_tensor()
    changed = [first + int(i) for i in (after != before).any(dim=1).nonzero().flatten()]
    owned = range(first, first + len(after))
    table = emb.gather(torch.arange(ROWS)).numpy()
    emb.close()
    return table, {"changed": changed, "expected": sorted(t for t in touched if t in owned)}


def store_verbs(comm) -> None:
    """Every rank writes its own rows; every rank reads every row; views share memory."""
    node = gl.get_local_node_communicator()
    for layout in ("continuous", "chunked", "distributed"):
        emb = gl.create_embedding(node, layout, "shared", "float32", (10, 3))
        lo, hi = emb.local_rows()
        mine = torch.arange(lo, hi)
        emb.scatter(mine, mine.float().unsqueeze(1).repeat(1, 3) + 100 * comm.rank)
        emb.barrier()
        got = emb.gather(torch.arange(10))
        owners = torch.tensor([0] * 5 + [1] * 5) if comm.size == 2 else torch.zeros(10)
        expected = torch.arange(10).float().unsqueeze(1).repeat(1, 3) + 100 * owners.unsqueeze(1)
        assert torch.equal(got, expected), (layout, got)
        local, first = emb.get_local_tensor()
        assert first == lo and torch.equal(local, expected[lo:hi])
        if layout == "continuous":
            whole = emb.get_global_tensor()
            emb.barrier()
            if comm.rank == 0:
                whole[9] = -1.0          # written by rank 0, seen by every rank
            emb.barrier()
            assert torch.equal(emb.gather([9]), torch.full((1, 3), -1.0))
        emb.close()
    # Bad ids on one rank only: every rank raises (that rank IndexError, the others a
    # GraphLoomError naming it), and the job goes on in step.
    dist = gl.create_embedding(comm, "distributed", "host", "float32", (10, 3))
    try:
        dist.gather([1000] if comm.rank == 0 else [1])
    except (IndexError, gl.GraphLoomError) as e:
        if comm.rank == 0:
            assert isinstance(e, IndexError) and "out of range" in str(e), e
        else:
            assert isinstance(e, gl.GraphLoomError) and "rank 0 failed" in str(e), e
    else:
        raise AssertionError("a gather with bad ids on one rank succeeded")
    assert dist.gather([1, 9]).shape == (2, 3)
    dist.close()
    if comm.size > 1:
        try:
            gl.create_embedding(comm, "continuous", "host", "float32", (4, 4))
        except ValueError as e:
            assert "private to one process" in str(e), e
        else:
            raise AssertionError("a continuous host table over processes was accepted")


def main() -> None:
    out = Path(sys.argv[1])
    comm = gl.init()
    store_verbs(comm)
    t = torch.full((5,), float(comm.rank + 1))
    gl.all_reduce(t)
    assert t.tolist() == [comm.size * (comm.size + 1) / 2] * 5, t
    grads = torch.arange(4, dtype=torch.float64) * (comm.rank + 1)
    comm.all_reduce(grads, op="max")
    assert grads.tolist() == [0.0, comm.size, 2.0 * comm.size, 3.0 * comm.size]
    report = {"ranks": comm.size}
    for optimizer in ("sgd", "lazy_adam"):
        table, rows = train(comm, optimizer)
        report[f"{optimizer}_rank{comm.rank}"] = rows
        if comm.rank == 0:
            np.save(out / f"{optimizer}.npy", table)
    (out / f"report_rank{comm.rank}.json").write_text(json.dumps(report))
    gl.finalize()


if __name__ == "__main__":
    main()
