"""PyG's GraphSAGE trained on Cora with GraphLoom's NeighborLoader and features (the README's
example) reaches PyG's accuracy: at least 79% mean test accuracy over 5 seeds, evaluated on the
whole graph in PyG."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import graphloom as gl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from pyg_cora import train_one  # noqa: E402


def test_graphsage_on_cora_reaches_79_percent(cora, tmp_path):
    gl.init()
    ds = gl.Dataset.open(cora)
    accuracies = [train_one(ds, seed, epochs=50)[0] for seed in range(5)]
    assert statistics.mean(accuracies) >= 0.79, accuracies
