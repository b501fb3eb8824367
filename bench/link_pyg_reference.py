"""The PyG reference of link prediction on a GraphLoom dataset with a link split (link_split/,
as `graphloom prepare link-split` writes it): full-batch 2-layer GraphSAGE (PyG's SAGEConv, mean
aggregation, ReLU between) over the dataset's graph, on learnt node embeddings when feat_dim is 0
(else node_feat.npy), with a dot-product decoder. Each epoch is one Adam step on binary cross-
entropy over every train_pos edge and one negative per positive, drawn anew each epoch: a pair
of uniform nodes (--neg-sampling both, PyG's binary negative sampling and the default) or the
positive's source with a uniform destination (dst, DGL's uniform sampler). Each epoch is
evaluated as OGB's evaluators define the metrics, and the epoch of the best validation --metric
(default auc; the first of equals) gives the test figures. Prints one JSON line.

Usage: link_pyg_reference.py DATASET [--epochs 200 --embedding-dim 64 --hidden 64 --lr 0.01
       --neg-sampling both|dst --metric auc|mrr|hits_at_20|hits_at_50|hits_at_100 --seed 0
       --threads N]
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F


def load_graph(d):
    """The dataset's meta.json, its edge_index [2, E] (source, destination) from the CSR by
    destination, and its features (None when feat_dim is 0)."""
    meta = json.load(open(os.path.join(d, "meta.json")))
    row_ptr = np.load(os.path.join(d, "csr_row_ptr.npy")).astype(np.int64)
    col = np.load(os.path.join(d, "csr_col_idx.npy")).astype(np.int64)
    n = len(row_ptr) - 1
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(row_ptr))
    edge_index = torch.from_numpy(np.stack([col, dst]))
    x = None
    if int(meta.get("feat_dim", 0)) > 0:
        feat = np.load(os.path.join(d, "node_feat.npy"))
        if meta.get("feat_dtype", "f32") == "bf16":
            x = torch.from_numpy(feat.view(np.int16)).view(torch.bfloat16).float()
        else:
            x = torch.from_numpy(feat.astype(np.float32))
    return meta, n, edge_index, x


def load_split(d):
    """The link split's arrays as int64 tensors, by file stem; the neg_dst files when present."""
    root = os.path.join(d, "link_split")
    out = {}
    for name in ("train_pos", "valid_pos", "test_pos", "valid_neg", "test_neg",
                 "valid_neg_dst", "test_neg_dst"):
        path = os.path.join(root, name + ".npy")
        if os.path.exists(path):
            out[name] = torch.from_numpy(np.load(path).astype(np.int64))
    missing = {"train_pos", "valid_pos", "test_pos", "valid_neg", "test_neg"} - out.keys()
    if missing:
        raise SystemExit(f"{root}: no {', '.join(sorted(missing))} (make a split with "
                         f"graphloom prepare link-split)")
    return out


def auc(pos, neg):
    """ROC AUC of positive against negative scores: the Mann-Whitney statistic with ties given
    their average rank (as sklearn's roc_auc_score)."""
    scores = torch.cat([pos, neg]).double()
    order = torch.argsort(scores, stable=True)
    sorted_scores = scores[order]
    ranks = torch.empty_like(scores)
    # Average rank (1-based) of each run of equal scores.
    _, counts = torch.unique_consecutive(sorted_scores, return_counts=True)
    ends = torch.cumsum(counts, 0).double()
    starts = ends - counts.double() + 1
    ranks[order] = torch.repeat_interleave((starts + ends) / 2, counts)
    p, q = len(pos), len(neg)
    return float((ranks[:p].sum() - p * (p + 1) / 2) / (p * q))


def hits_at_k(pos, neg, k):
    """OGB's Hits@K: the share of positives scoring strictly above the K-th highest negative
    (1.0 when there are fewer than K negatives)."""
    if len(neg) < k:
        return 1.0
    kth = torch.topk(neg, k)[0][-1]
    return float((pos > kth).double().mean())


def mrr(pos, neg_dst):
    """OGB's MRR: each positive ranked among its own negatives, rank = mean of the optimistic
    and pessimistic ranks, plus one."""
    optimistic = (neg_dst > pos.view(-1, 1)).sum(1)
    pessimistic = (neg_dst >= pos.view(-1, 1)).sum(1)
    rank = 0.5 * (optimistic + pessimistic).double() + 1
    return float((1.0 / rank).mean())


class Model(torch.nn.Module):
    """Learnt embeddings (or the features) through two SAGEConv layers."""

    def __init__(self, n, x, embedding_dim, hidden):
        from torch_geometric.nn import SAGEConv
        super().__init__()
        self.x = x
        self.embedding = torch.nn.Embedding(n, embedding_dim) if x is None else None
        in_dim = embedding_dim if x is None else x.shape[1]
        self.conv1 = SAGEConv(in_dim, hidden, aggr="mean")
        self.conv2 = SAGEConv(hidden, hidden, aggr="mean")

    def forward(self, edge_index):
        h = self.embedding.weight if self.x is None else self.x
        h = F.relu(self.conv1(h, edge_index))
        return self.conv2(h, edge_index)


def score(h, src, dst):
    """The dot decoder."""
    return (h[src] * h[dst]).sum(-1)


def evaluate(h, split, which):
    """AUC, Hits@20/50/100 and (with neg_dst) MRR of the `which` ("valid" or "test") set."""
    pos_pairs, neg_pairs = split[which + "_pos"], split[which + "_neg"]
    pos = score(h, pos_pairs[0], pos_pairs[1])
    neg = score(h, neg_pairs[0], neg_pairs[1])
    out = {"auc": auc(pos, neg)}
    for k in (20, 50, 100):
        out[f"hits_at_{k}"] = hits_at_k(pos, neg, k)
    neg_dst = split.get(which + "_neg_dst")
    if neg_dst is not None:
        e, k = neg_dst.shape
        neg_scores = score(h, pos_pairs[0].repeat_interleave(k), neg_dst.reshape(-1)).view(e, k)
        out["mrr"] = mrr(pos, neg_scores)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--embedding-dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--neg-sampling", choices=("both", "dst"), default="both",
                    help="which ends of a negative are drawn (both: PyG's binary sampling)")
    ap.add_argument("--metric", default="auc",
                    choices=("auc", "mrr", "hits_at_20", "hits_at_50", "hits_at_100"),
                    help="the validation metric that selects the epoch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    start = time.time()
    meta, n, edge_index, x = load_graph(args.dataset)
    split = load_split(args.dataset)
    model = Model(n, x, args.embedding_dim, args.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    negatives = torch.Generator().manual_seed(args.seed)
    train_pos = split["train_pos"]
    labels = torch.cat([torch.ones(train_pos.shape[1]), torch.zeros(train_pos.shape[1])])
    metric = args.metric
    if metric == "mrr" and "valid_neg_dst" not in split:
        raise SystemExit("--metric mrr needs valid_neg_dst.npy in the split")
    best = None
    for epoch in range(1, args.epochs + 1):
        model.train()
        opt.zero_grad()
        h = model(edge_index)
        neg_dst = torch.randint(0, n, (train_pos.shape[1],), generator=negatives)
        neg_src = (torch.randint(0, n, (train_pos.shape[1],), generator=negatives)
                   if args.neg_sampling == "both" else train_pos[0])
        logits = torch.cat([score(h, train_pos[0], train_pos[1]),
                            score(h, neg_src, neg_dst)])
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            h = model(edge_index)
            valid = evaluate(h, split, "valid")
            if best is None or valid[metric] > best[1][metric]:
                best = (epoch, valid, evaluate(h, split, "test"), float(loss))
    epoch, valid, test, loss = best
    report = {
        "system": "pyg",
        "dataset": os.path.basename(os.path.normpath(args.dataset)),
        "num_nodes": n,
        "num_edges": int(edge_index.shape[1]),
        "features": "learnt" if x is None else "given",
        "selected_by": "valid_" + metric,
        "best_epoch": epoch,
        "loss": loss,
    }
    report.update({f"best_val_{k}": v for k, v in valid.items()})
    report.update({f"test_{k}": v for k, v in test.items()})
    report.update({"seed": args.seed, "epochs": args.epochs, "embedding_dim": args.embedding_dim,
                   "hidden": args.hidden, "lr": args.lr, "neg_sampling": args.neg_sampling,
                   "seconds": time.time() - start})
    print(json.dumps(report))


if __name__ == "__main__":
    main()
