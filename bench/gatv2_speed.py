"""Full-batch GATv2 epochs: GraphLoom's fused kernel against DGL's GATv2Conv (and GraphLoom's
GAT beside them), on the same dataset directory, in one run, alternating, median of --runs.

Both train 2 layers, 4 heads of 64 (--hidden 64) concatenated then one averaged output head,
ELU, dropout 0.6 (attention dropout too), Adam at 0.005, on every training node; an epoch is
one forward, backward and optimizer step, timed after one warm-up epoch. Prints one JSON line
per run and model, and the medians: seconds per epoch, peak RSS, and DGL's over GraphLoom's.

Usage: python bench/gatv2_speed.py DATASET [--graphloom target/release/graphloom --epochs 3
       --runs 3 --threads 2]   (DGL's Python: the one running this script)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def dgl_epochs(dataset, epochs, threads):
    """Seconds per epoch of DGL's GATv2 and this process's peak RSS, in a child process so
    that each run's peak is its own."""
    code = f"""
import json, os, resource, time
import numpy as np, torch, torch.nn.functional as F, dgl
from dgl.nn import GATv2Conv
torch.set_num_threads({threads})
torch.manual_seed(0)
d = {dataset!r}
meta = json.load(open(os.path.join(d, "meta.json")))
row_ptr = np.load(os.path.join(d, "csr_row_ptr.npy")).astype(np.int64)
col = np.load(os.path.join(d, "csr_col_idx.npy")).astype(np.int64)
n = len(row_ptr) - 1
dst = np.repeat(np.arange(n), np.diff(row_ptr))
g = dgl.graph((torch.from_numpy(col), torch.from_numpy(dst)), num_nodes=n)
g = dgl.add_self_loop(dgl.remove_self_loop(g))
x = torch.from_numpy(np.load(os.path.join(d, "node_feat.npy")).astype(np.float32))
y = torch.from_numpy(np.load(os.path.join(d, "node_label.npy")).astype(np.int64))
train = torch.from_numpy(np.load(os.path.join(d, "train_idx.npy")).astype(np.int64))
classes = int(meta["num_classes"])
c1 = GATv2Conv(x.shape[1], 64, 4, feat_drop=0.0, attn_drop=0.6)
c2 = GATv2Conv(256, classes, 1, feat_drop=0.0, attn_drop=0.6)
params = list(c1.parameters()) + list(c2.parameters())
opt = torch.optim.Adam(params, lr=0.005)
times = []
for ep in range({epochs} + 1):
    t = time.perf_counter()
    opt.zero_grad()
    h = F.dropout(x, 0.6, True)
    h = F.elu(c1(g, h).flatten(1))
    h = c2(g, F.dropout(h, 0.6, True)).mean(1)
    F.cross_entropy(h[train], y[train]).backward()
    opt.step()
    if ep:
        times.append(time.perf_counter() - t)
print(json.dumps({{"epoch_seconds": sum(times) / len(times),
                   "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def graphloom_epochs(binary, dataset, model, epochs, threads):
    """Seconds per epoch and peak RSS of `graphloom train` (its summary)."""
    out = subprocess.run(
        [binary, "train", "--dataset", dataset, "--model", model, "--hidden", "64", "--heads",
         "4", "--out-heads", "1", "--dropout", "0.6", "--lr", "0.005", "--epochs",
         str(epochs), "--eval-every", str(epochs), "--threads", str(threads), "--quiet",
         "--json"],
        check=True, capture_output=True, text=True)
    s = json.loads(out.stdout.strip().splitlines()[-1])
    return {"epoch_seconds": s["mean_epoch_seconds"], "peak_rss_bytes": s["peak_rss_bytes"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset")
    p.add_argument("--graphloom", default="target/release/graphloom")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    runs = {"graphloom gatv2": [], "dgl gatv2": [], "graphloom gat": []}
    for run in range(args.runs):
        for name in runs:
            if name.startswith("dgl"):
                r = dgl_epochs(os.path.abspath(args.dataset), args.epochs, args.threads)
            else:
                r = graphloom_epochs(args.graphloom, args.dataset, name.split()[1], args.epochs,
                                     args.threads)
            runs[name].append(r)
            print(json.dumps({"run": run, "system": name, **r}), flush=True)
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("epoch_seconds", "peak_rss_bytes")}
           for k, v in runs.items()}
    ratios = [d["epoch_seconds"] / g["epoch_seconds"]
              for d, g in zip(runs["dgl gatv2"], runs["graphloom gatv2"])]
    print(json.dumps({"median": med, "speed_vs_dgl": statistics.median(ratios),
                      "speed_vs_dgl_runs": ratios,
                      "memory_vs_dgl": med["graphloom gatv2"]["peak_rss_bytes"]
                      / med["dgl gatv2"]["peak_rss_bytes"]}))


if __name__ == "__main__":
    main()
