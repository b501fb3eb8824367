"""Trains PyG's GraphSAGE on Cora with GraphLoom's NeighborLoader and feature store, evaluates
it on the whole graph in PyG, and saves it for `graphloom predict`.

    graphloom prepare planetoid --raw testdata/planetoid --name cora --out data/cora
    python crates/python/examples/pyg_cora.py [--dataset data/cora] [--seeds 5] [--json]
"""

import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch_geometric.nn.models import GraphSAGE

import graphloom as gl
import graphloom.torch as glt


def train_one(ds: gl.Dataset, seed: int, epochs: int) -> tuple[float, torch.nn.Module]:
    torch.manual_seed(seed)  # decides the model's initial weights and the loader's batches
    loader = gl.NeighborLoader(ds, num_neighbors=[25, 10], input_nodes=ds.train_idx,
                               batch_size=32, shuffle=True)
    model = GraphSAGE(ds.feat_dim, hidden_channels=64, num_layers=2,
                      out_channels=ds.num_classes, dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = F.cross_entropy(out, batch.y[: batch.batch_size])
            loss.backward()
            optimizer.step()
    # Full-graph evaluation in PyG: every node's features, the whole edge index.
    model.eval()
    x = ds.features.gather(torch.arange(ds.num_nodes))
    with torch.no_grad():
        pred = model(x, ds.edge_index()).argmax(dim=-1)
    test = ds.test_idx
    return (pred[test] == ds.labels[test]).float().mean().item(), model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="data/cora")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--save-model", help="write the last model here for graphloom predict")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()

    ds = gl.Dataset.open(args.dataset)
    accuracies = []
    for seed in range(args.seeds):
        acc, model = train_one(ds, seed, args.epochs)
        accuracies.append(acc)
        if not args.json:
            print(f"seed {seed}: test accuracy {acc:.4f}")
    mean = statistics.mean(accuracies)
    if args.save_model:
        glt.save_for_graphloom(model, args.save_model)
    if args.json:
        print(json.dumps({"model": "pyg_graphsage", "loader": "graphloom", "seeds": args.seeds,
                          "test_acc": accuracies, "mean_test_acc": mean}))
    else:
        print(f"mean test accuracy over {args.seeds} seeds: {mean:.4f}")


if __name__ == "__main__":
    main()
