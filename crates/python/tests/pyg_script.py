"""GraphSAGE trained and evaluated as PyG's own examples do it (``examples/reddit.py``): a
NeighborLoader over the training nodes, and layer-wise inference over every node with a second
loader on a copy of the data whose features are deleted. It runs on GraphLoom's loader with
one line changed, the import, and needs neither pyg-lib nor torch-sparse.

    python pyg_script.py DATA.pt
"""

import copy
import json
import sys

import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv

from graphloom import NeighborLoader  # was: from torch_geometric.loader import NeighborLoader

torch.manual_seed(12345)
data = torch.load(sys.argv[1], weights_only=False)

kwargs = {"num_workers": 2, "persistent_workers": True}
train_loader = NeighborLoader(data, input_nodes=data.train_mask, num_neighbors=[25, 10],
                              shuffle=True, batch_size=32, **kwargs)

subgraph_loader = NeighborLoader(copy.copy(data), input_nodes=None, num_neighbors=[-1],
                                 batch_size=1024, **kwargs)
# No need to maintain these features during evaluation:
del subgraph_loader.data.x, subgraph_loader.data.y
# Add global node index information.
subgraph_loader.data.num_nodes = data.num_nodes
subgraph_loader.data.n_id = torch.arange(data.num_nodes)


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.convs = torch.nn.ModuleList()
        self.convs.append(SAGEConv(in_channels, hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu_()
                x = F.dropout(x, p=0.5, training=self.training)
        return x

    @torch.no_grad()
    def inference(self, x_all, subgraph_loader):
        for i, conv in enumerate(self.convs):
            xs = []
            for batch in subgraph_loader:
                x = x_all[batch.n_id]
                x = conv(x, batch.edge_index)
                if i < len(self.convs) - 1:
                    x = x.relu_()
                xs.append(x[:batch.batch_size])
            x_all = torch.cat(xs, dim=0)
        return x_all


model = SAGE(data.num_features, 64, int(data.y.max()) + 1)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)


def train():
    model.train()
    total_loss = total_correct = total_examples = 0
    for batch in train_loader:
        optimizer.zero_grad()
        y = batch.y[:batch.batch_size]
        y_hat = model(batch.x, batch.edge_index)[:batch.batch_size]
        loss = F.cross_entropy(y_hat, y)
        loss.backward()
        optimizer.step()
        total_loss += float(loss) * batch.batch_size
        total_correct += int((y_hat.argmax(dim=-1) == y).sum())
        total_examples += batch.batch_size
    return total_loss / total_examples, total_correct / total_examples


@torch.no_grad()
def test():
    model.eval()
    y_hat = model.inference(data.x, subgraph_loader).argmax(dim=-1)
    y = data.y
    accs = []
    for mask in [data.train_mask, data.val_mask, data.test_mask]:
        accs.append(int((y_hat[mask] == y[mask]).sum()) / int(mask.sum()))
    return accs


for epoch in range(1, 21):
    loss, acc = train()
train_acc, val_acc, test_acc = test()
print(json.dumps({"loss": loss, "train_acc": train_acc, "val_acc": val_acc,
                  "test_acc": test_acc}))
