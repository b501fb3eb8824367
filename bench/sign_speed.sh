#!/usr/bin/env bash
# SIGN on rows of a propagated dataset against sampled GraphSAGE on the graph it came from,
# on the same machine and training nodes: seeds (training nodes) per second of each over
# BATCHES batches of 1024, 3 runs each taken alternately in one invocation (the medians
# compared), with each run's validation accuracy after its epoch (on 10,000 validation nodes,
# evaluated as each trains: SIGN on their rows, SAGE on sampled neighbourhoods).
#
# One JSON line per run: {"model", "dataset", "seconds", "seeds", "seeds_per_second",
# "val_acc", "peak_rss_bytes", "peak_anon_bytes"}, then {"ratio": SIGN's median seeds per
# second over SAGE's, "sign_seeds_per_second", "sage_seeds_per_second"}.
#
# Usage: bench/sign_speed.sh GRAPH PROPAGATED [BATCHES] [MEMORY_GIB]
#   GRAPH       the dataset directory (e.g. `graphloom bench scale`'s papers100M shape)
#   PROPAGATED  its propagation: graphloom prepare propagate --dataset GRAPH --hops 2 --out P
#   BATCHES     batches of 1024 seeds a run (default 200)
#   MEMORY_GIB  --memory-gib of every run (default 8)
# GRAPHLOOM (default target/release/graphloom) is the binary measured.
set -euo pipefail
graph=$1
propagated=$2
batches=${3:-200}
memory=${4:-8}
bin=${GRAPHLOOM:-target/release/graphloom}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() { # NAME DATASET ARGS...: one run, its JSON line
  local name=$1 dataset=$2
  shift 2
  "$bin" train --dataset "$dataset" --epochs 1 --batch-size 1024 --batches-per-epoch "$batches" \
    --eval-nodes 10000 --memory-gib "$memory" --quiet --summary-json "$tmp/$name.json" "$@" \
    >/dev/null
  python3 - "$tmp/$name.json" "${name%[0-9]}" "$batches" <<'PY'
import json, os, re, sys
s = json.load(open(sys.argv[1]))
# The training nodes, from train_idx.npy's header: an epoch of fewer batches takes them all.
header = open(os.path.join(s["dataset_path"], "train_idx.npy"), "rb").read(256).decode("latin1")
train = int(re.search(r"'shape': \((\d+),", header).group(1))
epoch, seeds = s["history"][0], min(s["batch_size"] * int(sys.argv[3]), train)
print(json.dumps({"model": sys.argv[2], "dataset": s["dataset"], "seconds": epoch["seconds"],
                  "seeds": seeds, "seeds_per_second": seeds / epoch["seconds"],
                  "val_acc": epoch.get("val_acc"), "peak_rss_bytes": s["peak_rss_bytes"],
                  "peak_anon_bytes": s["peak_anon_bytes"]}), flush=True)
PY
}
for i in 1 2 3; do
  run "sign$i" "$propagated" --model sign | tee -a "$tmp/runs.jsonl"
  run "sage$i" "$graph" --model sage --fanouts 15,10 --features-location mmap \
    | tee -a "$tmp/runs.jsonl"
done
python3 - "$tmp/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
rate = {m: statistics.median(r["seeds_per_second"] for r in runs if r["model"] == m)
        for m in ("sign", "sage")}
print(json.dumps({"ratio": rate["sign"] / rate["sage"], "sign_seeds_per_second": rate["sign"],
                  "sage_seeds_per_second": rate["sage"]}))
PY
