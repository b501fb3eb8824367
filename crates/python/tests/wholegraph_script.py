"""A GNN node classifier written as pylibwholegraph.torch's examples write one: the graph's CSR
read from raw files into WholeMemory tensors and a ``GraphStructure``, features read into a
WholeMemory embedding, a trainable node embedding with WholeGraph's sparse Adam; each batch
sampled over two hops (``multilayer_sample_without_replacement``: sampling without
replacement, ``append_unique``), its input rows gathered, and two PyG SAGEConv layers run on
the sampled blocks. It runs on GraphLoom with two changes: the import line and ``"cuda"`` made
``"cpu"``.

    python wholegraph_script.py --root DIR --feat-dim F --classes C --out DIR
"""

import argparse
import json
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv

import graphloom.wholegraph as wgth  # was: import pylibwholegraph.torch as wgth

LOCATION = "cpu"  # was: "cuda"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--feat-dim", type=int, required=True)
    parser.add_argument("--classes", type=int, required=True)
    parser.add_argument("--embedding-dim", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--fanouts", type=int, nargs="+", default=[10, 5])
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    world_rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    global_comm, local_comm = wgth.init_torch_env_and_create_wm_comm(
        world_rank, world_size, local_rank, local_size
    )
    torch.manual_seed(0)

    cache_policy = wgth.create_builtin_cache_policy("none", "chunked", LOCATION, "readonly", 0.0)
    node_feat = wgth.create_embedding_from_filelist(
        global_comm,
        "chunked",
        LOCATION,
        os.path.join(args.root, "node_feat.bin"),
        torch.float,
        args.feat_dim,
        cache_policy=cache_policy,
    )
    node_count = node_feat.shape[0]
    node_emb = wgth.create_embedding(
        global_comm,
        "distributed",
        LOCATION,
        torch.float32,
        [node_count, args.embedding_dim],
        random_init=True,
    )
    wm_optimizer = wgth.create_wholememory_optimizer(node_emb, "adam", {"weight_decay": 0.0})
    emb_module = wgth.WholeMemoryEmbeddingModule(node_emb)

    # The graph: CSR by destination, the row pointers int64, the columns int32.
    row_ptr = wgth.create_wholememory_tensor_from_filelist(
        global_comm, "continuous", LOCATION, os.path.join(args.root, "csr_row_ptr.bin"),
        torch.int64)
    col_ind = wgth.create_wholememory_tensor_from_filelist(
        global_comm, "chunked", LOCATION, os.path.join(args.root, "csr_col_ind.bin"),
        torch.int32)
    graph = wgth.GraphStructure()
    graph.set_csr_graph(row_ptr, col_ind)

    labels = torch.from_numpy(np.load(os.path.join(args.root, "node_label.npy")))
    train_idx = torch.from_numpy(np.load(os.path.join(args.root, "train_idx.npy")))
    test_idx = torch.from_numpy(np.load(os.path.join(args.root, "test_idx.npy")))
    convs = torch.nn.ModuleList([
        SAGEConv(args.feat_dim + args.embedding_dim, 32),
        SAGEConv(32, args.classes),
    ])
    optimizer = torch.optim.Adam(convs.parameters(), lr=args.lr)

    def forward(ids):
        target_gids, edge_indice, _, _ = graph.multilayer_sample_without_replacement(
            ids, args.fanouts)
        inputs = target_gids[0]
        x = node_feat.gather(inputs, force_dtype=torch.float32)
        h = torch.cat([x, emb_module(inputs)], dim=1)
        for layer, conv in enumerate(convs):
            targets = len(target_gids[layer + 1])
            h = conv((h, h[:targets]), edge_indice[layer].long(), size=(len(h), targets))
            if layer + 1 < len(convs):
                h = F.dropout(F.relu(h), p=args.dropout, training=convs.training)
        return h

    losses = []
    for _ in range(args.epochs):
        emb_module.train()
        convs.train()
        order = train_idx[torch.randperm(len(train_idx))]
        for batch in order.split(args.batch_size):
            # Data parallel: each rank its slice of the global batch, the loss its share of
            # the batch's mean; dense gradients summed over the ranks, the embedding's at
            # each row's owner by the WholeMemory optimizer.
            mine = batch.tensor_split(world_size)[world_rank]
            optimizer.zero_grad()
            loss = F.cross_entropy(forward(mine), labels[mine], reduction="sum") / len(batch)
            loss.backward()
            total = loss.detach().clone()
            if world_size > 1:
                for p in convs.parameters():
                    torch.distributed.all_reduce(p.grad)
                torch.distributed.all_reduce(total)
            optimizer.step()
            wm_optimizer.step(args.lr)
            losses.append(total.item())

    emb_module.eval()
    convs.eval()
    with torch.no_grad():
        accuracy = (forward(test_idx).argmax(1) == labels[test_idx]).float().mean().item()

    local_tensor, local_offset = node_emb.get_embedding_tensor().get_local_tensor(host_view=True)
    table = wgth.create_wholememory_tensor(global_comm, "continuous", LOCATION, [node_count],
                                           torch.int64, [1])
    table.scatter(torch.arange(node_count), torch.arange(node_count))
    chunks, chunk_offsets = node_feat.get_embedding_tensor().get_all_chunked_tensor(host_view=True)
    whole_feat = torch.cat(chunks)
    chunks_right = bool(torch.equal(
        whole_feat, node_feat.gather(torch.arange(node_count), force_dtype=torch.float32)))
    whole, whole_offset = table.get_global_tensor(host_view=True)

    node_emb.save(os.path.join(args.out, "node_emb"))
    reloaded = wgth.create_embedding(global_comm, "distributed", LOCATION, torch.float32,
                                     [node_count, args.embedding_dim])
    wgth.create_wholememory_optimizer(reloaded, "adam", {})
    reloaded.load(os.path.join(args.out, "node_emb"))
    ids = torch.arange(node_count)
    same = torch.equal(reloaded.gather(ids), node_emb.gather(ids))

    if global_comm.get_rank() == 0:
        report = {
            "ranks": global_comm.get_size(),
            "test_accuracy": accuracy,
            "losses": [losses[0], losses[-1]],
            "local": [list(local_tensor.shape), local_offset],
            "chunks": [[list(c.shape) for c in chunks], chunk_offsets, chunks_right],
            "global": [list(whole.shape), whole_offset, bool(torch.equal(whole, ids))],
            "reloaded": same,
        }
        print(json.dumps(report))
    wgth.finalize()


if __name__ == "__main__":
    main()
