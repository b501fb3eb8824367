#!/usr/bin/env bash
# Mini-batch GraphSAGE on a 1M-node graph with 128 f32 features (512 MB), features in host
# memory against features mapped from node_feat.npy: peak anonymous memory (sampled from
# /proc/self/status) and the losses of each run, one JSON object per run.
#
#   bash bench/mmap_vs_host.sh [dataset-dir]     (GRAPHLOOM=path/to/graphloom to choose the binary)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${GRAPHLOOM:-target/release/graphloom}
[ -x "$bin" ] || cargo build --release
dir=${1:-data/bench-mmap-1m}
if [ ! -f "$dir/meta.json" ]; then
  "$bin" prepare synthetic --nodes 1000000 --avg-degree 10 --feat-dim 128 --classes 16 --out "$dir"
fi
for location in host mmap; do
  "$bin" train --dataset "$dir" --model sage --hidden 128 --fanouts 10,5 --epochs 2 \
    --batches-per-epoch 100 --eval-nodes 2000 --features-location "$location" --json |
    python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
print(json.dumps({"system": "graphloom", "features_location": sys.argv[1],
                  "peak_anon_bytes": s["peak_anon_bytes"], "peak_file_bytes": s["peak_file_bytes"],
                  "losses": [h["loss"] for h in s["history"]]}))' "$location"
done
