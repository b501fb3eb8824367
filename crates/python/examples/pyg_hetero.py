"""Trains PyG's `to_hetero(GraphSAGE)` on an ogbn-mag-shaped graph with GraphLoom's
NeighborLoader in PyG's hetero spelling, the featureless types (authors, institutions,
fields) given learnt inputs in GraphLoom tables with their sparse optimizer; evaluates it on
the whole graph in PyG after each epoch and reports the test accuracy of the epoch of best
validation accuracy. The recipe is OGB's neighbour-sampled one (2 layers, hidden 64,
fanouts 25,20 per relation, batch 1024, 3 epochs), the command line's R-SAGE's.

    graphloom prepare synthetic --hetero mag --scale 0.1 --out data/mag-0.1
    python crates/python/examples/pyg_hetero.py --dataset data/mag-0.1 [--epochs 3] [--json]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv, to_hetero

import graphloom as gl
import graphloom.torch as glt


class SAGE(torch.nn.Module):
    """Two SAGEConv layers (mean aggregation), made heterogeneous by `to_hetero`: one per
    relation, summed per destination type (R-SAGE); ReLU then dropout between them, as the
    command line's. Dropout is a module: `to_hetero` traces `forward` once, which would bake
    `F.dropout`'s `training=` in as a constant."""

    def __init__(self, hidden: int, out: int, dropout: float) -> None:
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden)
        self.conv2 = SAGEConv((-1, -1), out)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = self.dropout(self.conv1(x, edge_index).relu())
        return self.conv2(x, edge_index)


def inputs(batch, modules: dict) -> dict:
    """The batch's feature rows, and the learnt rows of its featureless types' nodes."""
    x = dict(batch.x_dict)
    for t, module in modules.items():
        x[t] = module(batch[t].n_id)
    return x


def train(ds: gl.HeteroDataset, args: argparse.Namespace) -> dict:
    """Trains the model and returns the accuracies of the epoch of best validation accuracy
    (as the command line reports a run)."""
    torch.manual_seed(args.seed)  # decides the initial weights and the loader's batches
    target = ds.target_node_type
    loader = gl.NeighborLoader(ds, num_neighbors=args.fanouts, batch_size=args.batch_size,
                               input_nodes=(target, ds.train_idx), shuffle=True)
    tables = ds.embedding_tables(args.embedding_dim, seed=args.seed, init_scale=3 ** 0.5)
    modules = {t: glt.EmbeddingModule(table) for t, table in tables.items()}
    model = to_hetero(SAGE(args.hidden, ds.num_classes, args.dropout),
                      (ds.node_types, ds.edge_types), aggr="sum")
    with torch.no_grad():  # PyG's lazy layers take their widths from a first batch
        first = next(iter(loader))
        model(inputs(first, modules), first.edge_index_dict)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    sparse = glt.SparseOptimizer(modules.values(), lr=args.embedding_lr)
    whole = ds.to_pyg()
    best = {"valid": -1.0}
    for epoch in range(args.epochs):
        model.train()
        start, total, seen = time.perf_counter(), 0.0, 0
        for batch in loader:
            optimizer.zero_grad()
            sparse.zero_grad()
            size = batch[target].batch_size
            out = model(inputs(batch, modules), batch.edge_index_dict)[target][:size]
            loss = F.cross_entropy(out, batch[target].y[:size])
            loss.backward()
            optimizer.step()
            sparse.step()
            total, seen = total + loss.item() * size, seen + size
        seconds = time.perf_counter() - start
        acc = evaluate(ds, whole, model, tables)
        if acc["valid"] > best["valid"]:
            best = acc
        if not args.json:
            print(f"epoch {epoch}: loss {total / seen:.4f}, valid {acc['valid']:.4f}, test "
                  f"{acc['test']:.4f} ({seconds:.1f} s)")
    return best


def evaluate(ds: gl.HeteroDataset, data, model: torch.nn.Module, tables: dict) -> dict:
    """Accuracy of each split, the model run in PyG over the whole graph ``data``."""
    x = dict(data.x_dict)
    for t, table in tables.items():
        x[t] = table.gather(torch.arange(ds.num_nodes[t]))
    model.eval()
    with torch.no_grad():
        pred = model(x, data.edge_index_dict)[ds.target_node_type].argmax(dim=-1)
    labels = torch.as_tensor(ds.labels)
    return {split: (pred[idx] == labels[idx]).float().mean().item()
            for split, idx in (("train", ds.train_idx), ("valid", ds.valid_idx),
                               ("test", ds.test_idx))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="data/mag-0.1")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--fanouts", type=int, nargs="+", default=[25, 20])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.5)
    # The command line's R-SAGE defaults: its dense weights at 0.003, the learnt rows at 0.03.
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--embedding-lr", type=float, default=0.03)
    parser.add_argument("--embedding-dim", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()

    ds = gl.Dataset.open(args.dataset)
    if not isinstance(ds, gl.HeteroDataset):
        parser.error(f"{args.dataset} is not a heterogeneous dataset")
    start = time.perf_counter()
    acc = train(ds, args)
    seconds = time.perf_counter() - start
    if args.json:
        print(json.dumps({"dataset": ds.name, "epochs": args.epochs, "seconds": seconds,
                          **{f"{k}_acc": v for k, v in acc.items()}}))
    else:
        print(f"test accuracy {acc['test']:.4f} at the best validation accuracy "
              f"{acc['valid']:.4f}; {seconds:.1f} s")


if __name__ == "__main__":
    main()
