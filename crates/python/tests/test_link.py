"""Link prediction from Python: the dataset's link split, LinkNeighborLoader's batches (pairs,
negatives, neighbourhoods, exclusion, ranks) checked against the split itself, the negatives'
uniformity by a chi-square test, and the metrics against naive numpy references."""

from __future__ import annotations

import subprocess
import sys
import textwrap
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


def test_binary_batches_hold_their_positives_then_uniform_pairs(cora_link: Path):
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
        # Two negatives per positive, both ends drawn (PyG's binary sampling): their sources
        # are not the positives' sources.
        assert (pairs[0, b:] != np.tile(pairs[0, :b], 2)).mean() > 0.9
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
    # Triplet sampling keeps each positive's source: its negatives' ends are destinations.
    batch = next(iter(gl.LinkNeighborLoader(ds, [5], edge_label_index=train, batch_size=128,
                                            neg_sampling="triplet", neg_ratio=3, seed=0)))
    assert batch.dst_neg_index.shape == (128, 3)


def labels_of(loader) -> list:
    return next(iter(loader)).edge_label.tolist()


def test_given_labels_follow_pygs_link_loader(cora_link: Path):
    """PyG's LinkLoader (torch_geometric/loader/link_loader.py): under binary sampling, given
    labels are shifted by one only when their smallest value is 0 (so 0 is the negatives'),
    and negatives are labelled 0; without negative sampling the labels are the given ones."""
    ds = gl.Dataset.open(cora_link)
    train = torch.from_numpy(ds.link_split()["train_pos"].numpy())
    common = dict(edge_label_index=train, batch_size=64)
    # RandomLinkSplit(add_negative_train_samples=False) gives ones: they stay 1.
    ones = torch.ones(train.shape[1])
    assert labels_of(gl.LinkNeighborLoader(ds, [5], edge_label=ones, neg_sampling="binary",
                                           **common)) == [1.0] * 64 + [0.0] * 64
    # 0-based categories shift by one.
    classes = torch.arange(train.shape[1]) % 3
    assert labels_of(gl.LinkNeighborLoader(ds, [5], edge_label=classes, neg_sampling="binary",
                                           **common)) == (classes[:64] + 1).tolist() + [0] * 64
    # 1-based categories are kept.
    assert labels_of(gl.LinkNeighborLoader(ds, [5], edge_label=classes + 1,
                                           neg_sampling="binary", **common)) == (
        (classes[:64] + 1).tolist() + [0] * 64)
    # No negative sampling: the labels as given, 0 included.
    assert labels_of(gl.LinkNeighborLoader(ds, [5], edge_label=classes, **common)) == (
        classes[:64].tolist())
    # A fractional amount (PyG's neg_sampling_ratio=0.5): ceil(0.5 * P) negatives.
    for spelling in (dict(neg_sampling_ratio=0.5), dict(neg_sampling=dict(mode="binary",
                                                                            amount=0.5))):
        loader = gl.LinkNeighborLoader(ds, [5], edge_label_index=train, batch_size=63,
                                       **spelling)
        assert labels_of(loader) == [1.0] * 63 + [0.0] * 32
    # neg_sampling_ratio=0 is PyG's "no negatives".
    assert labels_of(gl.LinkNeighborLoader(ds, [5], neg_sampling_ratio=0.0, **common)) == (
        [1.0] * 64)


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


def test_both_ends_of_binary_negatives_are_uniform_over_the_nodes(cora_link: Path):
    ds = gl.Dataset.open(cora_link)
    loader = gl.LinkNeighborLoader(ds, [1], neg_sampling=dict(mode="binary", amount=4),
                                   batch_size=1000, seed=11)
    negatives = []
    for batch in loader:
        b = len(batch.input_id)
        negatives.append(global_pairs(batch)[:, b:])
    pairs = np.concatenate(negatives, axis=1)
    bins = 16
    # The share of node ids in each residue class, exactly.
    share = np.bincount(np.arange(ds.num_nodes) % bins, minlength=bins) / ds.num_nodes
    for end, name in ((pairs[0], "sources"), (pairs[1], "destinations")):
        observed = np.bincount(end % bins, minlength=bins)
        expected = share * len(end)
        chi2 = ((observed - expected) ** 2 / expected).sum()
        assert chi2 < 37.7, f"{name}: chi-square {chi2:.1f} over 15 degrees of freedom"


def test_bad_arguments_are_clear_errors(cora_link: Path):
    ds = gl.Dataset.open(cora_link)
    with pytest.raises(ValueError, match="shape"):
        gl.LinkNeighborLoader(ds, [5], edge_label_index=np.zeros((3, 4), np.int64))
    with pytest.raises(IndexError, match="not in 0"):
        gl.LinkNeighborLoader(ds, [5], edge_label_index=np.array([[0], [10**6]]))
    with pytest.raises(ValueError, match="mode"):
        gl.LinkNeighborLoader(ds, [5], neg_sampling="ternary")
    with pytest.raises(ValueError, match="whole number"):
        gl.LinkNeighborLoader(ds, [5], neg_sampling=dict(mode="triplet", amount=0.5))
    with pytest.raises(ValueError, match="positive"):
        gl.LinkNeighborLoader(ds, [5], neg_sampling=dict(mode="binary", amount=0))
    with pytest.raises(ValueError, match="labels for"):
        gl.LinkNeighborLoader(ds, [5], edge_label=torch.ones(3))
    with pytest.raises(TypeError, match="unexpected keyword"):
        gl.LinkNeighborLoader(ds, [5], num_negatives=3)
    with pytest.raises(ValueError, match="not both"):
        gl.LinkNeighborLoader(ds, [5], neg_sampling="binary", neg_ratio=2, neg_sampling_ratio=3)


def test_negatives_beyond_the_bound_or_memory_are_value_errors(cora_link: Path):
    ds = gl.Dataset.open(cora_link)
    with pytest.raises(ValueError, match="65536"):
        gl.LinkNeighborLoader(ds, [5], neg_sampling="binary", neg_ratio=10**9)
    # A batch's pairs within the bound can still outgrow memory: under a 4 GiB address space,
    # every supervision pair in one batch with 65536 negatives each (about 10 GiB of pairs).
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        import graphloom as gl
        ds = gl.Dataset.open({str(cora_link)!r})
        try:
            gl.LinkNeighborLoader(ds, [5], batch_size=2**40, neg_sampling="binary",
                                  neg_ratio=65536)
        except ValueError as e:
            print("refused:", e)
    """)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused: neg_ratio 65536 with "), result.stdout
    assert "supervision pairs a step (batch_size)" in result.stdout, result.stdout
    assert "lower neg_ratio or batch_size" in result.stdout, result.stdout


def test_predicting_classes_of_a_link_model_names_its_embeddings(cora_link: Path,
                                                                  graphloom_cli: Path,
                                                                  tmp_path: Path):
    model = tmp_path / "link.safetensors"
    subprocess.run([graphloom_cli, "train", "--dataset", cora_link, "--task", "link", "--epochs",
                    "1", "--quiet", "--save-model", model], check=True, capture_output=True)
    with pytest.raises(ValueError, match=r"^model is a link predictor \(trained with task link\): "
                                         r"it has no classes; take its node embeddings with "
                                         r"predict\(\.\.\., layer=k\)$"):
        gl.predict(model, cora_link)
    assert gl.predict(model, cora_link, layer=1).shape[0] == 2708


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


def test_pygs_link_recipe_learns_with_only_the_loader_changed(cora: Path):
    """PyG's link-prediction recipe on Cora: RandomLinkSplit without training negatives, then
    LinkNeighborLoader with the split's edge_label (ones) and neg_sampling_ratio=1.0, a
    GraphSAGE encoder and a dot decoder, evaluated on the validation split's labelled pairs.
    Labels of {0, 2} (every given label shifted) made the loss diverge and the AUC 0.5."""
    from torch_geometric.data import Data
    from torch_geometric.nn.models import GraphSAGE
    from torch_geometric.transforms import RandomLinkSplit

    torch.manual_seed(0)
    gl.init()
    ds = gl.Dataset.open(cora)
    x = torch.from_numpy(np.array(ds.features.get_global_tensor()))
    data = Data(x=x, edge_index=ds.edge_index().clone())
    train_data, val_data, _ = RandomLinkSplit(num_val=0.05, num_test=0.1, is_undirected=True,
                                              add_negative_train_samples=False)(data)
    loader = gl.LinkNeighborLoader(train_data, num_neighbors=[10, 10],
                                   edge_label_index=train_data.edge_label_index,
                                   edge_label=train_data.edge_label, neg_sampling_ratio=1.0,
                                   batch_size=256, shuffle=True)
    model = GraphSAGE(ds.feat_dim, hidden_channels=128, num_layers=2, out_channels=64)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    for _ in range(30):
        for batch in loader:
            assert set(batch.edge_label.tolist()) <= {0.0, 1.0}
            optimizer.zero_grad()
            h = model(batch.x, batch.edge_index)
            src, dst = batch.edge_label_index
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                (h[src] * h[dst]).sum(-1), batch.edge_label)
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        h = model(val_data.x, val_data.edge_index)
        src, dst = val_data.edge_label_index
        scores = (h[src] * h[dst]).sum(-1)
    label = val_data.edge_label.bool()
    auc = gl.metrics.auc(scores[label], scores[~label])
    # 30 epochs reach about 0.89 (PyG's example about 0.90); a model that learnt nothing, 0.5.
    assert auc > 0.86, auc
