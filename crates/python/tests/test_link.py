"""Link prediction from Python: the dataset's link split, LinkNeighborLoader's batches (pairs,
negatives, neighbourhoods, exclusion, ranks) checked against the split itself, the negatives'
uniformity by a chi-square test, and the metrics against naive numpy references."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import graphloom as gl

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def cora_link(tmp_path_factory: pytest.TempPathFactory, graphloom_cli: Path, cora: Path) -> Path:
    out = tmp_path_factory.mktemp("link") / "cora-link"
    subprocess.run([graphloom_cli, "prepare", "link-split", "--dataset", cora, "--valid", "0.05",
                    "--test", "0.1", "--seed", "0", "--out", out], check=True, capture_output=True)
    return out


def graph_edges(ds: gl.Dataset) -> set[tuple[int, int]]:
    src, dst = ds.edge_index().tolist()
    return set(zip(src, dst))


def test_the_link_split_is_read_as_written(cora_link: Path, cora: Path):
    ds = gl.Dataset.open(cora_link)
    assert ds.has_link_split and not gl.Dataset.open(cora).has_link_split
    split = ds.link_split()
    for name in ("train_pos", "valid_pos", "test_pos", "valid_neg", "test_neg"):
        on_disk = np.load(cora_link / "link_split" / f"{name}.npy")
        assert np.array_equal(split[name].numpy(), on_disk), name
    assert split["test_neg_dst"].shape == (split["test_pos"].shape[1], 100)
    with pytest.raises(FileNotFoundError, match="link-split"):
        gl.Dataset.open(cora).link_split()


def global_pairs(batch) -> np.ndarray:
    n_id = batch.n_id.numpy()
    return n_id[batch.edge_label_index.numpy()]


def test_binary_batches_hold_their_positives_then_negatives_of_the_same_source(cora_link: Path):
    ds = gl.Dataset.open(cora_link)
    train = ds.link_split()["train_pos"].numpy()
    loader = gl.LinkNeighborLoader(ds, [5, 5], edge_label_index=train, neg_sampling=
                                   {"mode": "binary", "amount": 2}, batch_size=300,
                                   shuffle=True, seed=3)
    seen = []
    for batch in loader:
        b = len(batch.input_id)
        pairs = global_pairs(batch)
        assert pairs.shape == (2, 3 * b)
        assert np.array_equal(pairs[:, :b], train[:, batch.input_id.numpy()])
        # Two negatives per positive, in the positives' order, each keeping its source.
        assert np.array_equal(pairs[0, b:], np.repeat(pairs[0, :b], 2))
        assert batch.edge_label.tolist() == [1.0] * b + [0.0] * (2 * b)
        # The seeds are every node of the pairs, sorted, first in n_id.
        seeds = batch.n_id[: batch.num_sampled_nodes[0]].numpy()
        assert np.array_equal(seeds, np.unique(pairs))
        seen.extend(batch.input_id.tolist())
    assert sorted(seen) == list(range(train.shape[1])), "an epoch takes every pair once"
    assert len(loader) == -(-train.shape[1] // 300)


def test_excluded_supervision_edges_leave_the_neighbourhood(cora_link: Path):
    ds = gl.Dataset.open(cora_link)
    train = ds.link_split()["train_pos"].numpy()
    found = {}
    for exclude in (False, True):
        loader = gl.LinkNeighborLoader(ds, [-1], edge_label_index=train, batch_size=200,
                                       exclude_supervision=exclude, seed=1)
        found[exclude] = 0
        for batch in loader:
            n_id = batch.n_id.numpy()
            src, dst = n_id[batch.edge_index.numpy()]
            edges = set(zip(src.tolist(), dst.tolist()))
            pos = train[:, batch.input_id.numpy()].T.tolist()
            found[exclude] += sum((u, v) in edges or (v, u) in edges for u, v in pos)
    # Supervision pairs are edges of the graph: with every neighbour taken, they are there
    # unless excluded.
    assert found[False] == train.shape[1]
    assert found[True] == 0
    # A rank hides its whole global batch's positives, not only its slice's.
    common = dict(edge_label_index=train, batch_size=200, exclude_supervision=True, seed=1)
    whole = gl.LinkNeighborLoader(ds, [-1], **common)
    half = gl.LinkNeighborLoader(ds, [-1], rank=0, ranks=2, **common)
    for w, h in zip(whole, half):
        n_id = h.n_id.numpy()
        src, dst = n_id[h.edge_index.numpy()]
        edges = set(zip(src.tolist(), dst.tolist()))
        for u, v in train[:, w.input_id.numpy()].T.tolist():
            assert (u, v) not in edges and (v, u) not in edges


def test_triplet_batches_and_labels_given_by_the_user(cora_link: Path):
    ds = gl.Dataset.open(cora_link)
    train = ds.link_split()["train_pos"].numpy()
    loader = gl.LinkNeighborLoader(ds, [5], edge_label_index=train, neg_sampling="triplet",
                                   batch_size=128, seed=0)
    batch = next(iter(loader))
    n_id = batch.n_id.numpy()
    assert batch.dst_neg_index.shape == (128,)
    assert np.array_equal(n_id[batch.src_index.numpy()], train[0, :128])
    assert np.array_equal(n_id[batch.dst_pos_index.numpy()], train[1, :128])
    for spelling in (dict(neg_sampling=dict(mode="triplet", amount=3)),
                     dict(neg_sampling="triplet", neg_ratio=3)):
        loader = gl.LinkNeighborLoader(ds, [5], edge_label_index=train, batch_size=128, seed=0,
                                       **spelling)
        assert next(iter(loader)).dst_neg_index.shape == (128, 3)
    labels = torch.arange(train.shape[1]) % 3
    loader = gl.LinkNeighborLoader(ds, [5], edge_label_index=torch.from_numpy(train),
                                   edge_label=labels, neg_sampling="binary", batch_size=64)
    batch = next(iter(loader))
    # PyG's convention: given labels shift by one when negatives (label 0) come with them.
    assert batch.edge_label.tolist() == (labels[:64] + 1).tolist() + [0] * 64


def test_ranks_slice_the_same_batches(cora_link: Path):
    ds = gl.Dataset.open(cora_link)
    train = ds.link_split()["train_pos"]
    common = dict(edge_label_index=train, neg_sampling="binary", batch_size=100, shuffle=True,
                  seed=7)
    whole = [global_pairs(b) for b in gl.LinkNeighborLoader(ds, [3], **common)]
    halves = [[global_pairs(b) for b in gl.LinkNeighborLoader(ds, [3], rank=r, ranks=2, **common)]
              for r in range(2)]
    assert len(halves[0]) == len(halves[1]) == len(whole)
    for w, a, b in zip(whole, *halves):
        p = w.shape[1] // 2
        pa, pb = a.shape[1] // 2, b.shape[1] // 2
        assert pa + pb == p
        # Positives, then negatives: each rank's slice of each, drawn the same way.
        assert np.array_equal(np.hstack([a[:, :pa], b[:, :pb]]), w[:, :p])
        assert np.array_equal(np.hstack([a[:, pa:], b[:, pb:]]), w[:, p:])


def test_negative_destinations_are_uniform_over_the_nodes(cora_link: Path):
    ds = gl.Dataset.open(cora_link)
    loader = gl.LinkNeighborLoader(ds, [1], neg_sampling=dict(mode="binary", amount=4),
                                   batch_size=1000, seed=11)
    negatives = []
    for batch in loader:
        b = len(batch.input_id)
        negatives.append(global_pairs(batch)[1, b:])
    dst = np.concatenate(negatives)
    bins = 16
    observed = np.bincount(dst % bins, minlength=bins)
    # The share of node ids in each residue class, exactly.
    expected = np.bincount(np.arange(ds.num_nodes) % bins, minlength=bins) / ds.num_nodes
    expected = expected * len(dst)
    chi2 = ((observed - expected) ** 2 / expected).sum()
    assert chi2 < 37.7, f"chi-square {chi2:.1f} over 15 degrees of freedom (p < 0.001)"


def test_bad_arguments_are_clear_errors(cora_link: Path):
    ds = gl.Dataset.open(cora_link)
    with pytest.raises(ValueError, match="shape"):
        gl.LinkNeighborLoader(ds, [5], edge_label_index=np.zeros((3, 4), np.int64))
    with pytest.raises(IndexError, match="not in 0"):
        gl.LinkNeighborLoader(ds, [5], edge_label_index=np.array([[0], [10**6]]))
    with pytest.raises(ValueError, match="mode"):
        gl.LinkNeighborLoader(ds, [5], neg_sampling="ternary")
    with pytest.raises(ValueError, match="whole number"):
        gl.LinkNeighborLoader(ds, [5], neg_sampling=dict(mode="binary", amount=0.5))
    with pytest.raises(ValueError, match="labels for"):
        gl.LinkNeighborLoader(ds, [5], edge_label=torch.ones(3))
    with pytest.raises(TypeError, match="unexpected keyword"):
        gl.LinkNeighborLoader(ds, [5], num_negatives=3)
    with pytest.raises(ValueError, match="not both"):
        gl.LinkNeighborLoader(ds, [5], neg_sampling="binary", neg_ratio=2, neg_sampling_ratio=3)


def naive_auc(pos, neg):
    diff = pos[:, None] - neg[None, :]
    return ((diff > 0) + 0.5 * (diff == 0)).mean()


def test_metrics_match_naive_references():
    rng = np.random.default_rng(0)
    # Rounded scores, so ties occur.
    pos = np.round(rng.normal(1.0, 1.0, 300), 1)
    neg = np.round(rng.normal(0.0, 1.0, 500), 1)
    assert gl.metrics.auc(pos, neg) == pytest.approx(naive_auc(pos, neg), abs=1e-12)
    assert gl.metrics.auc(torch.from_numpy(pos), neg) == pytest.approx(naive_auc(pos, neg))
    for k in (1, 20, 50):
        kth = np.sort(neg)[::-1][k - 1]
        assert gl.metrics.hits_at_k(pos, neg, k) == pytest.approx((pos > kth).mean())
    assert gl.metrics.hits_at_k(pos, neg[:10], 20) == 1.0
    neg_rows = np.round(rng.normal(0.0, 1.0, (300, 50)), 1)
    optimistic = (neg_rows > pos[:, None]).sum(1)
    pessimistic = (neg_rows >= pos[:, None]).sum(1)
    reference = (1.0 / (0.5 * (optimistic + pessimistic) + 1)).mean()
    assert gl.metrics.mrr(pos, neg_rows) == pytest.approx(reference, abs=1e-12)
    with pytest.raises(ValueError, match="NaN"):
        gl.metrics.auc([np.nan], [0.0])
    with pytest.raises(ValueError, match="no scores"):
        gl.metrics.auc(pos, [])
    with pytest.raises(ValueError, match="row of negatives"):
        gl.metrics.mrr(pos, neg_rows[:10])


def test_the_pyg_link_example_learns(cora_link: Path):
    sys.path.insert(0, str(EXAMPLES))
    try:
        from pyg_link import train_one
    finally:
        sys.path.remove(str(EXAMPLES))
    result = train_one(gl.Dataset.open(cora_link), seed=0, epochs=3)
    # A model that learnt nothing scores 0.5; three epochs reach about 0.8.
    assert result["test_auc"] > 0.7, result
    assert 0.0 < result["test_mrr"] <= 1.0
