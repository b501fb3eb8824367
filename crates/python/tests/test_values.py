"""Multi-label classification and regression from Python: the loaders' ``y`` holds each
node's targets (float32 ``[n, T]``, NaN where missing) as ``node_label.npy`` does, and the
ROC-AUC ``graphloom train --task multilabel`` reports is scikit-learn's on the same logits,
averaged over labels as OGB's ogbn-proteins evaluator does."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import r2_score, roc_auc_score

import graphloom as gl


def planted(root: Path, cli: Path, kind: str, *extra: str) -> Path:
    out = root / kind
    subprocess.run([cli, "prepare", "synthetic", "--nodes", "600", "--avg-degree", "8",
                    "--feat-dim", "16", "--targets", kind, "--out", out, *extra],
                   check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def multilabel(tmp_path_factory: pytest.TempPathFactory, graphloom_cli: Path) -> Path:
    return planted(tmp_path_factory.mktemp("values"), graphloom_cli, "multilabel",
                   "--num-targets", "5", "--missing-targets", "0.2")


def train_and_predict(cli: Path, ds: Path, task: str) -> tuple[dict, np.ndarray]:
    folder = ds.parent
    model, summary, pred = (folder / f"{task}.safetensors", folder / f"{task}.json",
                            folder / f"{task}.npy")
    subprocess.run([cli, "train", "--dataset", ds, "--task", task, "--epochs", "20",
                    "--quiet", "--save-model", model, "--summary-json", summary],
                   check=True, capture_output=True)
    subprocess.run([cli, "predict", "--model", model, "--dataset", ds, "--out", pred],
                   check=True, capture_output=True)
    return json.loads(summary.read_text()), np.load(pred)


def test_the_rocauc_of_a_run_is_scikit_learns(multilabel: Path, graphloom_cli: Path):
    summary, logits = train_and_predict(graphloom_cli, multilabel, "multilabel")
    y = np.load(multilabel / "node_label.npy")
    assert logits.shape == y.shape == (600, 5)
    for split, key in (("test", "test_rocauc"), ("valid", "best_val_rocauc")):
        nodes = np.load(multilabel / f"{split}_idx.npy")
        per_label = []
        for j in range(y.shape[1]):
            present = y[nodes, j] >= 0
            labels, scores = y[nodes, j][present], logits[nodes, j][present]
            if 0 < labels.sum() < len(labels):
                per_label.append(roc_auc_score(labels, scores))
        assert abs(np.mean(per_label) - summary[key]) < 1e-9, split


def test_the_r2_of_a_run_is_scikit_learns(tmp_path: Path, graphloom_cli: Path):
    ds = planted(tmp_path, graphloom_cli, "regression", "--num-targets", "2")
    summary, predicted = train_and_predict(graphloom_cli, ds, "regression")
    y = np.load(ds / "node_label.npy")
    test = np.load(ds / "test_idx.npy")
    want = r2_score(y[test].astype(np.float64), predicted[test].astype(np.float64))
    assert abs(want - summary["test_r2"]) < 1e-9


def test_loaders_return_each_nodes_targets(multilabel: Path):
    ds = gl.Dataset.open(multilabel)
    on_disk = np.load(multilabel / "node_label.npy").astype(np.float32)
    on_disk[on_disk < 0] = np.nan
    assert ds.labels.dtype == torch.float32 and ds.labels.shape == (600, 5)
    assert np.array_equal(ds.labels.numpy(), on_disk, equal_nan=True)
    for batch in gl.NeighborLoader(ds, [4, 4], batch_size=64, seed=2):
        assert batch.y.shape == (len(batch.n_id), 5)
        assert np.array_equal(batch.y.numpy(), on_disk[batch.n_id.numpy()], equal_nan=True)
