"""Trains PyG's GraphSAGE as a link predictor on Cora with GraphLoom's LinkNeighborLoader,
then scores the held-out pairs on the whole graph with OGB's metrics.

    graphloom prepare planetoid --raw testdata/planetoid --name cora --out data/cora
    graphloom prepare link-split --dataset data/cora --valid 0.05 --test 0.1 --out data/cora-link
    python crates/python/examples/pyg_link.py [--dataset data/cora-link] [--seeds 3] [--json]
"""

import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch_geometric.nn.models import GraphSAGE

import graphloom as gl


def scores(h: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """Dot-product scores of the pairs' two ends."""
    return (h[pairs[0]] * h[pairs[1]]).sum(dim=-1)


def train_one(ds: gl.Dataset, seed: int, epochs: int) -> dict:
    torch.manual_seed(seed)  # decides the model's initial weights, the batches and negatives
    split = ds.link_split()
    loader = gl.LinkNeighborLoader(ds, num_neighbors=[15, 10],
                                   edge_label_index=split["train_pos"], neg_sampling="binary",
                                   batch_size=256, shuffle=True)
    model = GraphSAGE(ds.feat_dim, hidden_channels=128, num_layers=2, out_channels=64)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            h = model(batch.x, batch.edge_index)
            loss = F.binary_cross_entropy_with_logits(scores(h, batch.edge_label_index),
                                                      batch.edge_label)
            loss.backward()
            optimizer.step()
    # Whole-graph evaluation: every node's embedding from the training graph.
    model.eval()
    x = ds.features.gather(torch.arange(ds.num_nodes))
    with torch.no_grad():
        h = model(x, ds.edge_index())
    result = {}
    for part in ("valid", "test"):
        pos, neg = scores(h, split[f"{part}_pos"]), scores(h, split[f"{part}_neg"])
        result[f"{part}_auc"] = gl.metrics.auc(pos, neg)
        neg_dst = split.get(f"{part}_neg_dst")
        if neg_dst is not None:
            src = split[f"{part}_pos"][0]
            ranked = (h[src].unsqueeze(1) * h[neg_dst]).sum(dim=-1)
            result[f"{part}_mrr"] = gl.metrics.mrr(pos, ranked)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="data/cora-link")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()

    ds = gl.Dataset.open(args.dataset)
    results = []
    for seed in range(args.seeds):
        result = train_one(ds, seed, args.epochs)
        results.append(result)
        if not args.json:
            print(f"seed {seed}: " + ", ".join(f"{k} {v:.4f}" for k, v in result.items()))
    mean = {k: statistics.mean(r[k] for r in results) for k in results[0]}
    if args.json:
        print(json.dumps({"model": "pyg_graphsage_link", "loader": "graphloom",
                          "seeds": args.seeds, "runs": results, "mean": mean}))
    else:
        print("mean over seeds: " + ", ".join(f"{k} {v:.4f}" for k, v in mean.items()))


if __name__ == "__main__":
    main()
