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
                    "--classes", str(classes), "--out", str(out), "--dropout", "0"],
        capture_output=True, text=True, timeout=300, env=dict(env, OMP_NUM_THREADS="1"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads([ln for ln in result.stdout.splitlines() if ln.startswith("{")][-1])


def test_a_wholegraph_script_runs_with_its_import_and_location_changed(ds_files, tmp_path):
    root, feat_dim, classes = ds_files
    report = run_script([sys.executable], root, feat_dim, classes, tmp_path / "one")
    assert report["ranks"] == 1
    # Two SAGE layers on sampled blocks of Cora's features and learnt node embeddings: well
    # above chance (1/7).
    assert report["test_accuracy"] > 0.3, report
    assert report["losses"][1] < report["losses"][0] / 2, report
    assert report["local"] == [[2708, 16], 0]
    assert report["chunks"] == [[[2708, feat_dim]], [0], True]
    assert report["global"] == [[2708], 0, True]
    assert report["reloaded"]
    text = SCRIPT.read_text()
    assert "import graphloom.wholegraph as wgth  # was: import pylibwholegraph.torch as wgth" in text
    # Under torchrun, as WholeGraph's scripts are launched: the tables spread over the two
    # processes, each training on its half of every batch, give one process's results.
    two = run_script([sys.executable, "-m", "torch.distributed.run", "--standalone",
                      "--nproc_per_node", "2"], root, feat_dim, classes, tmp_path / "two")
    assert two.pop("ranks") == 2 and report.pop("ranks") == 1
    assert two.pop("losses") == pytest.approx(report.pop("losses"), rel=1e-4, abs=1e-5)
    assert two.pop("test_accuracy") == pytest.approx(report.pop("test_accuracy"), abs=0.01)
    # Rank 0's share: half the rows of the distributed table; the chunked features' parts,
    # one per rank, both mapped by each process.
    half = 2708 // 2
    assert two.pop("local") == [[half, 16], 0]
    assert two.pop("chunks") == [[[half, feat_dim], [half, feat_dim]], [0, half], True]
    for key in ("local", "chunks"):
        report.pop(key)
    assert two == report


@pytest.fixture(scope="module")
def ds_files(cora, tmp_path_factory):
    """Cora as WholeGraph's examples keep it: raw feature rows, labels and splits."""
    gl.init()
    ds = gl.Dataset.open(cora)
    root = tmp_path_factory.mktemp("wholegraph")
    np.asarray(ds.features.get_global_tensor(), dtype=np.float32).tofile(root / "node_feat.bin")
    row_ptr, col = (np.load(Path(cora) / f) for f in ("csr_row_ptr.npy", "csr_col_idx.npy"))
    row_ptr.astype(np.int64).tofile(root / "csr_row_ptr.bin")
    col.astype(np.int32).tofile(root / "csr_col_ind.bin")
    np.save(root / "node_label.npy", ds.labels.numpy())
    np.save(root / "train_idx.npy", ds.train_idx.numpy())
    np.save(root / "test_idx.npy", ds.test_idx.numpy())
    return root, ds.feat_dim, ds.num_classes


def random_csr(rng: np.random.Generator, nodes: int, max_degree: int):
    degrees = rng.integers(0, max_degree + 1, nodes)
    row_ptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    col = rng.integers(0, nodes, int(row_ptr[-1])).astype(np.int32)
    return row_ptr, col


def wm_tensor(comm, values: np.ndarray, layout: str = "continuous"):
    dtype = {np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32,
             np.dtype(np.float32): torch.float32}[values.dtype]
    t = wgth.create_wholememory_tensor(comm, layout, "cpu", [len(values)], dtype)
    t.scatter(torch.from_numpy(values), torch.arange(len(values)))
    return t


@pytest.mark.parametrize("layout", ["continuous", "chunked", "distributed"])
def test_sampling_without_replacement_keeps_wholegraphs_outputs(comm, layout):
    rng = np.random.default_rng(5)
    row_ptr, col = random_csr(rng, 300, 40)
    graph = wgth.GraphStructure()
    graph.set_csr_graph(wm_tensor(comm, row_ptr, layout), wm_tensor(comm, col, layout))
    centers = torch.from_numpy(rng.integers(0, 300, 120))
    k = 7
    offsets, dest, local, edges = graph.unweighted_sample_without_replacement_one_hop(
        centers, k, random_seed=11, need_center_local_output=True, need_edge_output=True)
    assert (offsets.dtype, dest.dtype, local.dtype, edges.dtype) == (
        torch.int32, torch.int32, torch.int32, torch.int64)
    for i, c in enumerate(centers.tolist()):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        degree = int(row_ptr[c + 1] - row_ptr[c])
        assert hi - lo == min(degree, k)
        got = edges[lo:hi].numpy()
        assert len(set(got)) == len(got), "without replacement"
        assert ((got >= row_ptr[c]) & (got < row_ptr[c + 1])).all()
        assert (dest[lo:hi].numpy() == col[got]).all()
        assert (local[lo:hi] == i).all()
    again = wgth.unweighted_sample_without_replacement(
        graph.csr_row_ptr.wmb_tensor, graph.csr_col_ind.wmb_tensor, centers, k, 11)
    assert torch.equal(again[0], offsets) and torch.equal(again[1], dest)
    # -1 takes every neighbour.
    offsets_all, _ = wgth.unweighted_sample_without_replacement(
        graph.csr_row_ptr, graph.csr_col_ind, centers, -1, 3)
    assert offsets_all[-1] == int(sum(row_ptr[c + 1] - row_ptr[c] for c in centers.tolist()))


def test_uniform_sampling_draws_every_subset_equally_by_chi_square(comm):
    # One centre of degree 6, k = 2: the 15 pairs over 6000 seeds. 36.12 is chi-square's 0.999
    # quantile at 14 degrees of freedom: a correct sampler fails this fixed test with
    # probability 1e-3.
    row_ptr = np.array([0, 6], dtype=np.int64)
    col = np.arange(6, dtype=np.int64)
    r, c = wm_tensor(comm, row_ptr), wm_tensor(comm, col)
    counts: dict = {}
    draws = 6000
    for seed in range(draws):
        _, dest = wgth.unweighted_sample_without_replacement(r, c, torch.tensor([0]), 2, seed)
        key = tuple(sorted(dest.tolist()))
        counts[key] = counts.get(key, 0) + 1
    assert len(counts) == 15
    expected = draws / 15
    chi2 = sum((n - expected) ** 2 / expected for n in counts.values())
    assert chi2 < 36.12, counts


def test_weighted_sampling_follows_the_weights_by_chi_square(comm):
    # k = 1 of three edges weighted 1, 2, 3 (and one of weight 0, never drawn while others
    # remain): frequencies 1/6, 2/6, 3/6; 13.82 is chi-square's 0.999 quantile at 2 degrees.
    row_ptr = np.array([0, 4], dtype=np.int64)
    col = np.array([10, 11, 12, 13], dtype=np.int64)
    weights = np.array([1.0, 2.0, 3.0, 0.0], dtype=np.float32)
    graph = wgth.GraphStructure()
    graph.set_csr_graph(wm_tensor(comm, row_ptr), wm_tensor(comm, col))
    graph.set_edge_attribute("w", wm_tensor(comm, weights))
    draws = 6000
    counts = np.zeros(4)
    for seed in range(draws):
        _, dest = graph.weighted_sample_without_replacement_one_hop(
            "w", torch.tensor([0]), 1, random_seed=seed)
        counts[int(dest[0]) - 10] += 1
    assert counts[3] == 0
    expected = draws * np.array([1, 2, 3]) / 6
    chi2 = float(((counts[:3] - expected) ** 2 / expected).sum())
    assert chi2 < 13.82, counts
    _, dest = graph.weighted_sample_without_replacement_one_hop("w", torch.tensor([0]), 4)
    assert sorted(dest.tolist()) == [10, 11, 12, 13]


def test_append_unique_and_self_loops_against_naive_versions():
    rng = np.random.default_rng(2)
    for _ in range(20):
        target = torch.from_numpy(rng.choice(50, rng.integers(0, 10), replace=False))
        neighbours = torch.from_numpy(rng.integers(0, 50, rng.integers(0, 30)))
        unique, mapping = wgth.append_unique(target, neighbours,
                                             need_neighbor_raw_to_unique=True)
        expected = list(target.tolist())
        for v in neighbours.tolist():
            if v not in expected:
                expected.append(v)
        assert unique.tolist() == expected
        assert mapping.dtype == torch.int32
        assert [expected[i] for i in mapping.tolist()] == neighbours.tolist()
    row_ptr = torch.tensor([0, 2, 2, 5])
    col = torch.tensor([1, 2, 0, 1, 1])
    looped_ptr, looped_col = wgth.add_csr_self_loop(row_ptr, col)
    assert looped_ptr.tolist() == [0, 3, 4, 8]
    assert looped_col.tolist() == [0, 1, 2, 1, 2, 0, 1, 1]
    with pytest.raises(ValueError, match="never decrease"):
        wgth.add_csr_self_loop(torch.tensor([0, 2, 1]), torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="the last row pointer is 5, the columns hold 2"):
        wgth.add_csr_self_loop(torch.tensor([0, 2, 5]), torch.tensor([1, 0]))


def test_multilayer_sampling_gives_blocks_of_the_graph(comm):
    rng = np.random.default_rng(9)
    row_ptr, col = random_csr(rng, 200, 12)
    graph = wgth.GraphStructure()
    graph.set_csr_graph(wm_tensor(comm, row_ptr), wm_tensor(comm, col))
    seeds = torch.tensor([3, 17, 150, 42])
    gids, edges, ptrs, cols = graph.multilayer_sample_without_replacement(seeds, [5, 3])
    assert torch.equal(gids[2], seeds) and len(edges) == 2
    neighbours = {v: set(col[row_ptr[v]:row_ptr[v + 1]].tolist()) for v in range(200)}
    for layer in (0, 1):
        src_nodes, dst_nodes = gids[layer], gids[layer + 1]
        assert torch.equal(src_nodes[:len(dst_nodes)], dst_nodes), "each layer starts with the next"
        assert len(set(src_nodes.tolist())) == len(src_nodes)
        src, dst = edges[layer]
        assert torch.equal(src, cols[layer])
        assert len(ptrs[layer]) == len(dst_nodes) + 1
        for s, d in zip(src.tolist(), dst.tolist()):
            assert int(src_nodes[s]) in neighbours[int(dst_nodes[d])]
    # The layer nearest the seeds draws at most the first fanout per seed.
    assert (torch.diff(ptrs[1]) <= 5).all() and (torch.diff(ptrs[0]) <= 3).all()


def test_bad_graph_arguments_are_refused_by_kind(comm):
    r = wm_tensor(comm, np.array([0, 1, 2], dtype=np.int64))
    c = wm_tensor(comm, np.array([1, 0], dtype=np.int64))
    with pytest.raises(IndexError, match="node 2 is not in 0..2"):
        wgth.unweighted_sample_without_replacement(r, c, torch.tensor([0, 2]), 1)
    with pytest.raises(TypeError, match="expected int64"):
        wgth.GraphStructure().set_csr_graph(wm_tensor(comm, np.array([0, 1], np.int32)), c)
    with pytest.raises(KeyError, match="no edge attribute 'w'"):
        g = wgth.GraphStructure()
        g.set_csr_graph(r, c)
        g.weighted_sample_without_replacement_one_hop("w", torch.tensor([0]), 1)
    with pytest.raises(ValueError, match="node attribute 'x': 3 rows for 2 nodes"):
        g.set_node_attribute("x", wm_tensor(comm, np.zeros(3, np.float32)))
    decreasing = wm_tensor(comm, np.array([0, 2, 1], dtype=np.int64))
    with pytest.raises(ValueError, match="row pointers must not decrease"):
        wgth.unweighted_sample_without_replacement(decreasing, c, torch.tensor([1]), 1)
