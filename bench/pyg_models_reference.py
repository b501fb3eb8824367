"""The PyG reference of GATv2, GIN, SGC and APPNP node classification on a GraphLoom dataset directory,
with GraphLoom's defaults for each (its `--help` table), so the two can be compared on the same
split: full batch, Adam with L2 weight decay, evaluation every epoch, and the test accuracy of
the epoch of the best validation accuracy (the first of equals), as `graphloom train` reports.

- gatv2: `dropout -> GATv2Conv(8 heads of 8, attention dropout 0.6, concatenated) -> ELU`,
  `dropout -> GATv2Conv(1 head)`; dropout 0.6, lr 0.005, weight decay 5e-4 (GAT's settings).
- gin: `dropout -> GINConv(Linear -> ReLU -> Linear, train_eps) -> ReLU` per hidden layer,
  `dropout -> GINConv` last; hidden 64, dropout 0.8, lr 0.01, weight decay 5e-4.
- sgc: one SGConv with K = --layers (2); no dropout, lr 0.2, weight decay 5e-5.
- appnp: `dropout -> Linear -> ReLU -> dropout -> Linear -> APPNP(K=10, alpha=0.1)`; hidden
  64, dropout 0.5, lr 0.01, weight decay 5e-4.

Prints one JSON line per seed and one with the mean and standard deviation.

Usage: pyg_models_reference.py DATASET --model gatv2|gin|sgc|appnp [--seeds 10 --epochs 200
       --patience P --layers 2 --threads N]
"""
import argparse
import json
import os
import statistics

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn import APPNP, GATv2Conv, GINConv, SGConv

DEFAULTS = {
    "gatv2": {"hidden": 8, "dropout": 0.6, "lr": 0.005, "weight_decay": 5e-4},
    "gin": {"hidden": 64, "dropout": 0.8, "lr": 0.01, "weight_decay": 5e-4},
    "sgc": {"hidden": 0, "dropout": 0.0, "lr": 0.2, "weight_decay": 5e-5},
    "appnp": {"hidden": 64, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4},
}


def load(d):
    """Features, labels, edge_index [2, E] (source, destination) from the CSR by destination,
    and the split, as tensors."""
    meta = json.load(open(os.path.join(d, "meta.json")))
    row_ptr = np.load(os.path.join(d, "csr_row_ptr.npy")).astype(np.int64)
    col = np.load(os.path.join(d, "csr_col_idx.npy")).astype(np.int64)
    n = len(row_ptr) - 1
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(row_ptr))
    edge_index = torch.from_numpy(np.stack([col, dst]))
    x = torch.from_numpy(np.load(os.path.join(d, "node_feat.npy")).astype(np.float32))
    y = torch.from_numpy(np.load(os.path.join(d, "node_label.npy")).astype(np.int64))
    split = {s: torch.from_numpy(np.load(os.path.join(d, f"{s}_idx.npy")).astype(np.int64))
             for s in ("train", "valid", "test")}
    return meta, x, y, edge_index, split


class Gin(torch.nn.Module):
    def __init__(self, fan_in, hidden, classes, layers, dropout):
        super().__init__()
        widths = [fan_in] + [hidden] * (layers - 1) + [classes]
        self.convs = torch.nn.ModuleList(
            GINConv(torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.ReLU(),
                                        torch.nn.Linear(b, b)), train_eps=True)
            for a, b in zip(widths, widths[1:]))
        self.dropout = dropout

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, self.dropout, self.training)
            x = conv(x, edge_index)
            if i + 1 < len(self.convs):
                x = F.relu(x)
        return x


class GatV2(torch.nn.Module):
    def __init__(self, fan_in, hidden, classes, dropout):
        super().__init__()
        self.conv1 = GATv2Conv(fan_in, hidden, heads=8, dropout=dropout)
        self.conv2 = GATv2Conv(hidden * 8, classes, heads=1, concat=False, dropout=dropout)
        self.dropout = dropout

    def forward(self, x, edge_index):
        x = F.elu(self.conv1(F.dropout(x, self.dropout, self.training), edge_index))
        return self.conv2(F.dropout(x, self.dropout, self.training), edge_index)


class Appnp(torch.nn.Module):
    def __init__(self, fan_in, hidden, classes, dropout):
        super().__init__()
        self.lin1 = torch.nn.Linear(fan_in, hidden)
        self.lin2 = torch.nn.Linear(hidden, classes)
        self.prop = APPNP(K=10, alpha=0.1)
        self.dropout = dropout

    def forward(self, x, edge_index):
        x = F.relu(self.lin1(F.dropout(x, self.dropout, self.training)))
        x = self.lin2(F.dropout(x, self.dropout, self.training))
        return self.prop(x, edge_index)


class Sgc(torch.nn.Module):
    def __init__(self, fan_in, classes, hops):
        super().__init__()
        self.conv = SGConv(fan_in, classes, K=hops, cached=True)

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


def run(args, data, seed):
    meta, x, y, edge_index, split = data
    torch.manual_seed(seed)
    d = DEFAULTS[args.model]
    classes = int(meta["num_classes"])
    if args.model == "gatv2":
        model = GatV2(x.shape[1], d["hidden"], classes, d["dropout"])
    elif args.model == "gin":
        model = Gin(x.shape[1], d["hidden"], classes, args.layers, d["dropout"])
    elif args.model == "sgc":
        model = Sgc(x.shape[1], classes, args.layers)
    else:
        model = Appnp(x.shape[1], d["hidden"], classes, d["dropout"])
    opt = torch.optim.Adam(model.parameters(), lr=d["lr"], weight_decay=d["weight_decay"])
    best_val, test_at_best, since_best = -1.0, 0.0, 0
    for _ in range(args.epochs):
        if args.patience is not None and since_best >= args.patience:
            break
        model.train()
        opt.zero_grad()
        out = model(x, edge_index)
        F.cross_entropy(out[split["train"]], y[split["train"]]).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            pred = model(x, edge_index).argmax(1)
        acc = {s: (pred[i] == y[i]).float().mean().item() for s, i in split.items()}
        if acc["valid"] > best_val:
            best_val, test_at_best, since_best = acc["valid"], acc["test"], 0
        else:
            since_best += 1
    return best_val, test_at_best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset")
    p.add_argument("--model", choices=sorted(DEFAULTS), required=True)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--patience", type=int, default=None,
                   help="stop after this many epochs without a better validation accuracy")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    data = load(args.dataset)
    tests = []
    for seed in range(args.seeds):
        val, test = run(args, data, seed)
        tests.append(test)
        print(json.dumps({"model": args.model, "seed": seed, "best_val_acc": val,
                          "test_acc": test}), flush=True)
    print(json.dumps({"model": args.model, "seeds": args.seeds,
                      "mean_test_acc": statistics.mean(tests),
                      "std_test_acc": statistics.pstdev(tests)}))


if __name__ == "__main__":
    main()
