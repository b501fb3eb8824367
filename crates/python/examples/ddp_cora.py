"""Data-parallel GraphSAGE on Cora with torchrun, PyTorch's DistributedDataParallel and
GraphLoom's NeighborLoader: each process takes its slice of every global batch, and N
processes train the model one process trains on the same global batches.

    graphloom prepare planetoid --raw testdata/planetoid --name cora --out data/cora
    torchrun --standalone --nproc_per_node 2 crates/python/examples/ddp_cora.py --dataset data/cora

Why N processes equal one: the model runs layer by layer on the loader's ``blocks`` (DGL's
view of a batch), in which every seed's neighbourhood is drawn by node, whichever process
holds the seed; each process's loss is its seeds' summed loss over the global batch's size
(times the number of processes, which DDP's gradient average divides out). With dropout the
processes draw different masks, so pass ``--dropout 0`` to compare runs.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import SAGEConv

import graphloom as gl


class BlockSAGE(torch.nn.Module):
    """GraphSAGE over the loader's blocks: layer ``i`` maps block ``i``'s sources to its
    destinations (the first ``num_dst`` rows)."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int, dropout: float):
        super().__init__()
        widths = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(widths, widths[1:]))
        self.dropout = dropout

    def forward(self, x: torch.Tensor, blocks: list) -> torch.Tensor:
        for i, (conv, (edge_index, _, num_dst)) in enumerate(zip(self.convs, blocks)):
            x = conv((x, x[:num_dst]), edge_index)
            if i < len(self.convs) - 1:
                x = F.dropout(F.relu(x), p=self.dropout, training=self.training)
        return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="data/cora")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="seeds per global batch")
    parser.add_argument("--fanouts", type=int, nargs="+", default=[10, 5])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="rank 0 writes the trained parameters here (torch.save)")
    parser.add_argument("--json", action="store_true", help="rank 0 prints one JSON line")
    args = parser.parse_args()

    # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; run alone, this is one rank.
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo")
    comm = gl.init()  # this process's rank and the job's size, from torchrun
    torch.manual_seed(args.seed)  # the same initial model on every rank

    ds = gl.Dataset.open(args.dataset)
    model = DistributedDataParallel(
        BlockSAGE(ds.feat_dim, args.hidden, ds.num_classes, len(args.fanouts), args.dropout)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    # Each rank takes its slice of every global batch of batch_size training nodes.
    loader = gl.NeighborLoader(ds, args.fanouts, ds.train_idx, batch_size=args.batch_size,
                               shuffle=True, seed=args.seed)
    losses = []
    for _ in range(args.epochs):
        model.train()
        total = torch.zeros(2, dtype=torch.float64)  # summed loss, seeds
        for batch in loader:
            seeds = batch.batch_size
            global_seeds = torch.tensor([seeds])
            dist.all_reduce(global_seeds)
            optimizer.zero_grad()
            out = model(batch.x, batch.blocks)[:seeds]
            loss = F.cross_entropy(out, batch.y[:seeds], reduction="sum")
            (loss * comm.size / global_seeds.item()).backward()
            optimizer.step()
            total += torch.tensor([loss.item(), seeds], dtype=torch.float64)
        dist.all_reduce(total)
        losses.append((total[0] / total[1]).item())
        if comm.rank == 0 and not args.json:
            print(f"epoch {len(losses)}: loss {losses[-1]:.4f}")
    # Exact test accuracy: every neighbour (-1), each rank its slice of the test nodes.
    model.eval()
    test_loader = gl.NeighborLoader(ds, [-1] * len(args.fanouts), ds.test_idx, batch_size=1024)
    counts = torch.zeros(2, dtype=torch.int64)  # correct, seen
    with torch.no_grad():
        for batch in test_loader:
            seeds = batch.batch_size
            pred = model.module(batch.x, batch.blocks)[:seeds].argmax(dim=-1)
            counts += torch.tensor([int((pred == batch.y[:seeds]).sum()), seeds])
    dist.all_reduce(counts)
    accuracy = counts[0].item() / counts[1].item()
    if comm.rank == 0:
        if args.out:
            torch.save(model.module.state_dict(), args.out)
        if args.json:
            print(json.dumps({"ranks": comm.size, "losses": losses, "test_acc": accuracy}))
        else:
            print(f"test accuracy {accuracy:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
