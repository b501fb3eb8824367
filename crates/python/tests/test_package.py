"""The package's shape and its errors: modules that mirror the crates, `graphloom.torch` on
first use, and exceptions of Python's kinds whose messages name Python's arguments."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import pytest

import graphloom as gl


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_importing_graphloom_does_not_import_torch():
    result = run_python("""
        import sys
        import graphloom
        assert "torch" not in sys.modules, "import graphloom imported torch"
        assert "torch" in dir(graphloom)
        load = graphloom.torch.load_pyg      # reached as an attribute, imported now
        assert "torch" in sys.modules and "graphloom.torch" in sys.modules
        import graphloom.torch as glt
        assert load is glt.load_pyg and graphloom.torch is glt
        print("ok")
    """)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_public_names_and_modules():
    for name in gl.__all__:
        assert getattr(gl, name) is not None, name
    assert gl.Embedding.__module__ == "graphloom.embedding"
    assert gl.NeighborLoader.__module__ == "graphloom.loader.neighbor_loader"
    # Every loader is graphloom.loader's (as PyG's are torch_geometric.loader's) and graphloom's.
    for name in gl.loader.__all__:
        assert getattr(gl.loader, name) is getattr(gl, name), name
    assert gl.Dataset.__module__ == "graphloom.dataset"
    assert gl.Communicator.__module__ == "graphloom.comm"
    assert gl.predict.__module__ == "graphloom.model"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        gl.nothing
    assert issubclass(gl.GraphLoomError, RuntimeError)
    # It pickles, as a worker process's error must to reach its parent.
    error = pickle.loads(pickle.dumps(gl.GraphLoomError("rank 1 failed")))
    assert type(error) is gl.GraphLoomError and str(error) == "rank 1 failed"


def test_predict_with_a_bad_node_names_the_argument(cora, cora_models):
    with pytest.raises((IndexError, ValueError)) as raised:
        gl.predict(cora_models["gcn"], cora, nodes=[0, 2708])
    message = str(raised.value)
    assert message.startswith("nodes ") and "2708" in message, message
    assert "--" not in message, message


def test_errors_are_of_python_kinds(cora, cora_models, tmp_path):
    comm = gl.init()
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        gl.predict(tmp_path / "missing.safetensors", cora)
    with pytest.raises(FileNotFoundError, match="nope.bin"):
        gl.create_embedding_from_filelist(comm, "continuous", "host", [tmp_path / "nope.bin"],
                                          "float32", 4)
    (tmp_path / "junk.safetensors").write_bytes(b"not a model")
    with pytest.raises(gl.GraphLoomError, match="junk.safetensors"):
        gl.predict(tmp_path / "junk.safetensors", cora)
    # A dataset that does not fit the model: an argument error, named as Python's argument.
    other = tmp_path / "other"
    other.mkdir()
    for f in cora.iterdir():
        (other / f.name).symlink_to(f)
    (other / "partition.json").write_text("{}")
    with pytest.raises(ValueError, match="^dataset is partitioned"):
        gl.predict(cora_models["gcn"], other)
