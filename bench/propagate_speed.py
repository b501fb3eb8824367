"""`graphloom prepare propagate` against PyG's `SIGN` transform on the same dataset directory:
the same hops of `D^-1/2 A D^-1/2` (`--operators sym`), computed in memory by PyG (torch_sparse
or torch's sparse matmul, all threads) and out of core by GraphLoom (mapped graph and features,
blocks of rows within `--memory-gib`, the result flushed to disk). Each is timed 3 times in one
run (the median reported); GraphLoom's result is checked against PyG's (max abs difference).

One JSON line per measurement: {"tool", "dataset", "hops", "seconds", "peak_rss_bytes"} and a
last line {"ratio": PyG seconds / GraphLoom seconds, "max_abs_diff"}.

Usage: propagate_speed.py DATASET [--hops 2] [--graphloom PATH] [--memory-gib 1]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile
import time

import numpy as np
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data


def load(d):
    """The dataset as PyG's Data: features, and edge_index [2, E] (source, destination) from
    the CSR by destination."""
    meta = json.load(open(os.path.join(d, "meta.json")))
    row_ptr = np.load(os.path.join(d, "csr_row_ptr.npy"))
    col = np.load(os.path.join(d, "csr_col_idx.npy")).astype(np.int64)
    dst = np.repeat(np.arange(meta["num_nodes"]), np.diff(row_ptr))
    x = np.load(os.path.join(d, "node_feat.npy"))
    if meta["feat_dtype"] == "bf16":
        x = (x.astype(np.uint32) << 16).view(np.float32)
    edge_index = torch.from_numpy(np.stack([col, dst]))
    return Data(x=torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)),
                edge_index=edge_index, num_nodes=meta["num_nodes"])


def pyg_once(data, hops):
    start = time.perf_counter()
    out = T.SIGN(hops)(data.clone())
    return time.perf_counter() - start, out


def graphloom_once(exe, dataset, out, hops, memory_gib):
    """Seconds and peak RSS (anonymous and mapped pages together, as the run reports it) of
    one run."""
    start = time.perf_counter()
    done = subprocess.run([exe, "prepare", "propagate", "--dataset", dataset, "--hops",
                           str(hops), "--operators", "sym", "--memory-gib", str(memory_gib),
                           "--out", out, "--json"], check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    return seconds, json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_bytes"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dataset")
    p.add_argument("--hops", type=int, default=2)
    p.add_argument("--graphloom", default="target/release/graphloom")
    p.add_argument("--memory-gib", type=float, default=1.0)
    a = p.parse_args()
    name = json.load(open(os.path.join(a.dataset, "meta.json")))["name"]
    data = load(a.dataset)
    pyg, gl = [], []
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(a.dataset))) as tmp:
        out = os.path.join(tmp, "propagated")
        for _ in range(3):
            seconds, result = pyg_once(data, a.hops)
            pyg.append(seconds)
            # The process's peak, the loaded dataset's included.
            print(json.dumps({"tool": "pyg", "dataset": name, "hops": a.hops, "seconds": seconds,
                              "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}),
                  flush=True)
            seconds, rss = graphloom_once(a.graphloom, a.dataset, out, a.hops, a.memory_gib)
            gl.append(seconds)
            print(json.dumps({"tool": "graphloom", "dataset": name, "hops": a.hops,
                              "seconds": seconds, "peak_rss_bytes": rss}), flush=True)
        ours = np.load(os.path.join(out, "node_feat.npy"), mmap_mode="r")
        f = data.x.shape[1]
        diff = max(float(np.abs(np.asarray(ours[:, k * f:(k + 1) * f]) - result[f"x{k}"].numpy()).max())
                   for k in range(1, a.hops + 1))
    print(json.dumps({"ratio": statistics.median(pyg) / statistics.median(gl),
                      "pyg_seconds": statistics.median(pyg), "graphloom_seconds": statistics.median(gl),
                      "max_abs_diff": diff}))


if __name__ == "__main__":
    main()
