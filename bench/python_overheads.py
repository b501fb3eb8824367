"""What Python costs on top of GraphLoom: a store gather into torch against the same gather in
Rust, and iterating the NeighborLoader against draining it in Rust, in one run (median of 3).

    python bench/python_overheads.py [--dataset data/bench-syn-100k] [--json]

Prints one JSON object per measurement with --json (keys: bench, python, rust, ratio, ...).
Prepare the dataset first:
    graphloom prepare synthetic --nodes 100000 --avg-degree 20 --feat-dim 128 --classes 47 \\
        --out data/bench-syn-100k
"""

import argparse
import json
import statistics
import time

import numpy as np
import torch

import graphloom as gl


def gather(rows: int, ids: int, row_bytes: int) -> dict:
    comm = gl.init()
    cols = row_bytes // 4
    table = gl.create_embedding(comm, "continuous", "host", "float32", (rows, cols))
    table.scatter(np.arange(rows), torch.randn(rows, cols))
    picks = torch.from_numpy(np.random.default_rng(0).integers(0, rows, ids))
    table.gather(picks)  # warm-up: the output buffers' first page faults
    table.time_gather(picks, 1)
    python, rust = [], []
    for _ in range(3):
        start = time.perf_counter()
        out = table.gather(picks)
        python.append(time.perf_counter() - start)
        del out
        rust.extend(table.time_gather(picks, 1))
    py_s, rs_s = statistics.median(python), statistics.median(rust)
    table.close()
    moved = ids * row_bytes
    return {"bench": "gather", "layout": "continuous", "location": "host", "ranks": 1,
            "row_bytes": row_bytes, "ids": ids, "python_gbps": moved / py_s / 1e9,
            "rust_gbps": moved / rs_s / 1e9, "ratio": rs_s / py_s}


def loader(path: str, fanouts: list, batch_size: int) -> dict:
    ds = gl.Dataset.open(path)
    features = ds.feature_table(location="host")
    loader = gl.NeighborLoader(ds, fanouts, batch_size=batch_size, shuffle=True, seed=0,
                               features=features)
    python, rust = [], []
    for _ in range(3):
        start = time.perf_counter()
        n = 0
        for batch in loader:
            n += 1
        python.append(n / (time.perf_counter() - start))
        timing = loader.time_rust_epoch()
        rust.append(timing["batches"] / timing["seconds"])
    py_b, rs_b = statistics.median(python), statistics.median(rust)
    return {"bench": "loader", "dataset": path, "fanouts": fanouts, "batch_size": batch_size,
            "batches": len(loader), "python_batches_per_s": py_b, "rust_batches_per_s": rs_b,
            "ratio": py_b / rs_b}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="data/bench-syn-100k")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [gather(args.rows, args.ids, 512)]
    for fanouts in ([15, 10], [25, 10]):
        results.append(loader(args.dataset, fanouts, 1024))
    for r in results:
        if args.json:
            print(json.dumps(r))
        elif r["bench"] == "gather":
            print(f"gather {r['row_bytes']} B rows: Python {r['python_gbps']:.2f} GB/s, "
                  f"Rust {r['rust_gbps']:.2f} GB/s, ratio {r['ratio']:.2f}")
        else:
            print(f"loader {r['fanouts']}: Python {r['python_batches_per_s']:.1f} batches/s, "
                  f"Rust {r['rust_batches_per_s']:.1f}, ratio {r['ratio']:.2f}")


if __name__ == "__main__":
    main()
