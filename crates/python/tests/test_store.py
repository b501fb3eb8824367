"""The store from Python: WholeGraph's verbs against numpy references, zero-copy views, files,
and clear exceptions for bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import graphloom as gl

LAYOUTS = ["continuous", "chunked", "distributed"]


@pytest.fixture(scope="module")
def comm() -> gl.Communicator:
    return gl.init()


def filled(comm, layout, location, rows=50, cols=6, dtype=torch.float32, path=None):
    emb = gl.create_embedding(comm, layout, location, dtype, (rows, cols), path=path)
    values = torch.arange(rows * cols, dtype=torch.float64).reshape(rows, cols).to(dtype)
    emb.scatter(torch.arange(rows), values)
    return emb, values


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("location", ["host", "shared", "mmap"])
def test_gather_and_scatter_match_numpy(comm, tmp_path, layout, location):
    path = tmp_path / "table.bin" if location == "mmap" else None
    emb, values = filled(comm, layout, location, path=path)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 50, 200)
    assert torch.equal(emb.gather(torch.from_numpy(ids)), values[ids])
    assert torch.equal(emb.gather(ids.astype(np.int32)), values[ids])
    assert torch.equal(emb.gather(list(ids[:5])), values[ids[:5]])
    new = torch.full((3, 6), -1.0)
    emb.scatter([7, 0, 49], new)
    values[[7, 0, 49]] = new
    assert torch.equal(emb.gather(torch.arange(50)), values)
    assert emb.gather(torch.zeros(0, dtype=torch.int64)).shape == (0, 6)
    emb.close()


def test_bf16_and_integer_tables(comm):
    emb, values = filled(comm, "continuous", "host", dtype=torch.bfloat16)
    assert emb.gather([3, 2]).dtype == torch.bfloat16
    assert torch.equal(emb.gather([3, 2]), values[[3, 2]])
    ints = gl.create_embedding(comm, "chunked", "host", "int64", (10,))
    ints.scatter([1, 2], torch.tensor([5, 6]))
    assert ints.gather([2, 1, 0]).tolist() == [6, 5, 0]


def test_views_share_memory_both_ways(comm):
    emb, values = filled(comm, "continuous", "host")
    whole = emb.get_global_tensor()
    local, first = emb.get_local_tensor()
    assert first == 0 and whole.data_ptr() == local.data_ptr()
    assert torch.equal(whole, values)
    whole[4] = 100.0                     # a write through the view is seen by the store
    assert torch.equal(emb.gather([4]), torch.full((1, 6), 100.0))
    emb.scatter([5], torch.full((1, 6), 7.0))  # and a store write by the view
    assert torch.equal(local[5], torch.full((6,), 7.0))
    emb.close()
    assert whole[4, 0].item() == 100.0   # the view keeps its memory after close


def test_global_tensor_is_only_for_the_continuous_layout(comm):
    emb, _ = filled(comm, "chunked", "host")
    with pytest.raises(ValueError, match="continuous"):
        emb.get_global_tensor()
    local, first = emb.get_local_tensor()
    assert first == 0 and local.shape == (50, 6)


def test_read_only_map_is_exported_read_only(comm, tmp_path):
    data = np.arange(40, dtype=np.float32).reshape(10, 4)
    np.save(tmp_path / "feat.npy", data)
    (tmp_path / "meta.json").write_text("{}")
    emb = gl.create_embedding(comm, "continuous", "mmap", "float32", (10, 4),
                              path=tmp_path / "feat.npy", writable=False)
    assert not emb.writable
    view = emb.get_global_tensor()
    assert isinstance(view, np.ndarray) and not view.flags.writeable
    assert np.array_equal(view, data)
    with pytest.raises(ValueError, match="read-only"):
        view[0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        emb.scatter([0], torch.zeros(1, 4))
    assert torch.equal(emb.gather([9]), torch.from_numpy(data[[9]]))


def test_writable_map_persists(comm, tmp_path):
    path = tmp_path / "table.bin"
    emb, values = filled(comm, "continuous", "mmap", path=path)
    emb.close()
    on_disk = np.fromfile(path, dtype=np.float32).reshape(50, 6)
    assert np.array_equal(on_disk, values.numpy())


def test_files_round_trip(comm, tmp_path):
    parts = [np.arange(i * 12, (i + 1) * 12, dtype=np.float32).reshape(4, 3) for i in range(3)]
    for i, p in enumerate(parts):
        p.tofile(tmp_path / f"part{i}.bin")
    emb = gl.create_embedding_from_filelist(
        comm, "chunked", "host", [tmp_path / f"part{i}.bin" for i in range(3)], "float32", 3)
    assert emb.shape == (12, 3)
    assert np.array_equal(emb.gather(torch.arange(12)).numpy(), np.concatenate(parts))
    emb.save(tmp_path / "saved")
    again = gl.create_embedding_from_filelist(
        comm, "distributed", "host", [tmp_path / "saved_part_0_of_1"], "float32", 3)
    assert torch.equal(again.gather(torch.arange(12)), emb.gather(torch.arange(12)))
    np.save(tmp_path / "x.npy", parts[0])
    npy = gl.create_embedding_from_filelist(comm, "continuous", "shared", tmp_path / "x.npy",
                                            "float32", 3)
    assert np.array_equal(npy.gather([1]).numpy(), parts[0][[1]])


def test_all_reduce_one_rank_keeps_values(comm):
    t = torch.arange(5, dtype=torch.float64)
    assert gl.all_reduce(t) is t
    assert t.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(TypeError):
        gl.all_reduce(torch.ones(3, dtype=torch.int16))


def test_bad_input_raises_clear_errors(comm, tmp_path):
    emb, _ = filled(comm, "continuous", "host")
    with pytest.raises(TypeError, match="int64 or int32"):
        emb.gather(torch.tensor([1.0]))
    with pytest.raises(ValueError, match="on meta"):
        emb.gather(torch.zeros(2, dtype=torch.int64, device="meta"))
    with pytest.raises(ValueError, match="1-D"):
        emb.gather(torch.zeros((2, 2), dtype=torch.int64))
    with pytest.raises(IndexError, match="row id 50 out of range"):
        emb.gather([0, 50])
    with pytest.raises(IndexError, match="row id -1"):
        emb.gather([-1])
    with pytest.raises(TypeError, match="f32"):
        emb.scatter([0], torch.zeros((1, 6), dtype=torch.float64))
    with pytest.raises(ValueError, match="shape"):
        emb.scatter([0, 1], torch.zeros((1, 6)))
    with pytest.raises(ValueError, match="needs a path"):
        gl.create_embedding(comm, "continuous", "mmap", "float32", (4, 4))
    with pytest.raises(ValueError, match="not host, shared or mmap"):
        gl.create_embedding(comm, "continuous", "gpu", "float32", (4, 4))
    with pytest.raises(ValueError, match="layout 'striped'"):
        gl.create_embedding(comm, "striped", "host", "float32", (4, 4))
    with pytest.raises(TypeError, match="not supported"):
        gl.create_embedding(comm, "continuous", "host", torch.complex64, (4, 4))
    with pytest.raises(FileNotFoundError, match="nope.bin"):
        gl.create_embedding_from_filelist(comm, "continuous", "host", [tmp_path / "nope.bin"],
                                          "float32", 4)
    emb.close()
    with pytest.raises(ValueError, match="closed"):
        emb.gather([0])
    with pytest.raises(FileNotFoundError, match="no such directory"):
        gl.Dataset.open(tmp_path / "missing")


def test_trainable_needs_float32_rows(comm):
    with pytest.raises(ValueError, match="2-D f32"):
        gl.create_embedding(comm, "continuous", "host", "bfloat16", (4, 4), optimizer="sgd")
    with pytest.raises(ValueError, match="unknown sparse optimizer"):
        gl.create_embedding(comm, "continuous", "host", "float32", (4, 4), optimizer="adam2")
