"""Fixtures of the Python tests: the `graphloom` binary (built by cargo with the tests'
profile), Cora prepared from the raw files in testdata/, and models trained on it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def graphloom_binary() -> Path:
    """The CLI: $GRAPHLOOM_BIN (the test script passes the one the Rust tests built), or
    built here by cargo with the tests' profile."""
    if os.environ.get("GRAPHLOOM_BIN"):
        return Path(os.environ["GRAPHLOOM_BIN"])
    subprocess.run(["cargo", "build", "--quiet", "-p", "graphloom"], cwd=REPO, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "debug" / "graphloom"


@pytest.fixture(scope="session")
def graphloom_cli() -> Path:
    return graphloom_binary()


@pytest.fixture(scope="session")
def cora(tmp_path_factory: pytest.TempPathFactory, graphloom_cli: Path) -> Path:
    out = tmp_path_factory.mktemp("data") / "cora"
    subprocess.run(
        [graphloom_cli, "prepare", "planetoid", "--raw", REPO / "testdata" / "planetoid",
         "--name", "cora", "--out", out],
        check=True, capture_output=True,
    )
    return out


@pytest.fixture(scope="session")
def cora_models(tmp_path_factory: pytest.TempPathFactory, graphloom_cli: Path, cora: Path) -> dict:
    """Every model family trained on Cora by `graphloom train` (SGC with 3 hops, so that its
    parameterless layers are more than one)."""
    folder = tmp_path_factory.mktemp("models")
    models = {}
    for arch in ("gcn", "sage", "gat", "gatv2", "gin", "sgc", "appnp"):
        path = folder / f"{arch}.safetensors"
        layers = ["--layers", "3"] if arch == "sgc" else []
        subprocess.run(
            [graphloom_cli, "train", "--dataset", cora, "--model", arch, "--epochs", "50",
             *layers, "--save-model", path],
            check=True, capture_output=True,
        )
        models[arch] = path
    return models
