"""One process and two MPI processes give identical trainable rows after 10 steps, rows change
only on their owners, and the store's verbs and all_reduce work across processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphloom as gl

JOB = Path(__file__).with_name("mpi_job.py")

pytestmark = pytest.mark.skipif(
    not gl.mpi_available or shutil.which("mpirun") is None,
    reason="needs a build with MPI (scripts/python-install.sh --mpi) and mpirun",
)


def run(command: list, out: Path) -> None:
    env = dict(os.environ)
    if os.getuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
    out.mkdir()
    result = subprocess.run(command + [str(JOB), str(out)], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_two_processes_match_one(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    run([sys.executable], one)
    run(["mpirun", "-np", "2", sys.executable], two)
    for optimizer in ("sgd", "lazy_adam"):
        a, b = np.load(one / f"{optimizer}.npy"), np.load(two / f"{optimizer}.npy")
        assert a.tobytes() == b.tobytes(), f"{optimizer}: rows differ between 1 and 2 processes"
        initial_scale = 1 / np.sqrt(a.shape[1])
        assert np.abs(a).max() > initial_scale  # training moved them
    reports = [json.loads((two / f"report_rank{r}.json").read_text()) for r in range(2)]
    for r, report in enumerate(reports):
        assert report["ranks"] == 2
        for optimizer in ("sgd", "lazy_adam"):
            rows = report[f"{optimizer}_rank{r}"]
            assert rows["changed"] == rows["expected"], (r, optimizer, rows)
            assert rows["changed"], "each rank owns rows that were trained"
