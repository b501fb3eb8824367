"""PyG's GINConv or GINEConv model on a GraphLoom dataset directory, as `graphloom train
--model gin|gine --batch-norm` builds it: two layers, each `MLP(Linear -> BatchNorm -> ReLU ->
Linear)` with a learnt eps (GINE's edge features through a Linear to the layer's input width),
BatchNorm and ReLU between the layers, dropout 0.8 (the input's too), Adam at lr 0.01 with
weight decay 5e-4, 200 epochs, the test accuracy at the best validation accuracy.

Usage: python bench/pyg_gine_reference.py DATASET --model gin|gine [--seeds N]"""

import argparse
import statistics

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn import GINConv, GINEConv


def load(path):
    row_ptr = np.load(f"{path}/csr_row_ptr.npy")
    sources = np.load(f"{path}/csr_col_idx.npy").astype(np.int64)
    destinations = np.repeat(np.arange(len(row_ptr) - 1), np.diff(row_ptr))
    edge_index = torch.from_numpy(np.stack([sources, destinations]))
    x = torch.from_numpy(np.load(f"{path}/node_feat.npy")).float()
    edge_attr = torch.from_numpy(np.load(f"{path}/edge_feat.npy")).float()
    y = torch.from_numpy(np.load(f"{path}/node_label.npy"))
    splits = [torch.from_numpy(np.load(f"{path}/{s}_idx.npy")) for s in ("train", "valid", "test")]
    return x, edge_index, edge_attr, y, splits


def mlp(fan_in, width):
    return torch.nn.Sequential(torch.nn.Linear(fan_in, width), torch.nn.BatchNorm1d(width),
                               torch.nn.ReLU(), torch.nn.Linear(width, width))


class Model(torch.nn.Module):
    def __init__(self, kind, fan_in, hidden, classes, edge_dim):
        super().__init__()
        conv = (lambda a, b: GINEConv(mlp(a, b), train_eps=True, edge_dim=edge_dim)) \
            if kind == "gine" else (lambda a, b: GINConv(mlp(a, b), train_eps=True))
        self.kind = kind
        self.convs = torch.nn.ModuleList([conv(fan_in, hidden), conv(hidden, classes)])
        self.norm = torch.nn.BatchNorm1d(hidden)

    def forward(self, x, edge_index, edge_attr):
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, 0.8, self.training)
            x = conv(x, edge_index, edge_attr) if self.kind == "gine" else conv(x, edge_index)
            if i == 0:
                x = self.norm(x).relu()
        return x


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dataset")
    parser.add_argument("--model", choices=["gin", "gine"], required=True)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    x, edge_index, edge_attr, y, (train, valid, test) = load(args.dataset)
    classes = int(y.max()) + 1
    accs = []
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        model = Model(args.model, x.shape[1], 64, classes, edge_attr.shape[1])
        opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
        best = (-1.0, 0.0)
        for _ in range(200):
            model.train()
            opt.zero_grad()
            F.cross_entropy(model(x, edge_index, edge_attr)[train], y[train]).backward()
            opt.step()
            model.eval()
            with torch.no_grad():
                pred = model(x, edge_index, edge_attr).argmax(1)
            val = (pred[valid] == y[valid]).float().mean().item()
            if val > best[0]:
                best = (val, (pred[test] == y[test]).float().mean().item())
        accs.append(best[1])
    print(f"pyg-{args.model}: mean test accuracy {100 * statistics.mean(accs):.2f}% "
          f"(std {100 * statistics.pstdev(accs):.2f}) over {len(accs)} seeds")


if __name__ == "__main__":
    main()
