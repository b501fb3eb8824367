#!/usr/bin/env bash
# Cora test accuracy of GCN (2 layers, hidden 16, dropout 0.5, lr 0.01, weight decay 5e-4,
# 200 epochs) trained full batch, in Cluster-GCN batches (16 clusters, 4 per batch), in
# GraphSAINT random-walk batches (500 roots, walks of 2, coverage 50) and in sampled
# neighbourhoods (fanouts 10,10, batch size 32): mean, median and std over seeds 0..SEEDS-1.
# Usage: bench/subgraph_accuracy.sh [SEEDS]   (run from the repository root)
# GRAPHLOOM=path/to/graphloom runs that binary instead of building this checkout's;
# DATASET=dir trains on another dataset directory (default data/cora, prepared when missing),
# EPOCHS=n for n epochs instead of 200.
set -euo pipefail
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
seeds=${1:-5}
if [ -n "${GRAPHLOOM:-}" ]; then
  bin=$GRAPHLOOM
else
  cargo build --release -q
  bin=${CARGO_TARGET_DIR:-target}/release/graphloom
fi
data=${DATASET:-data/cora}
[ -f "$data/meta.json" ] || $bin prepare planetoid --raw "${PLANETOID_RAW:-testdata/planetoid}" --name cora --out "$data"
gcn=(--model gcn --layers 2 --hidden 16 --dropout 0.5 --lr 0.01 --weight-decay 5e-4 --epochs "${EPOCHS:-200}")
run() {
  local name=$1; shift
  local accs=() secs=()
  for s in $(seq 0 $((seeds - 1))); do
    $bin train --dataset "$data" --quiet --seed "$s" --summary-json "$summary" "${gcn[@]}" "$@" >/dev/null
    accs+=("$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["test_acc"], d["mean_epoch_seconds"])' "$summary")")
  done
  python3 - "$name" "${accs[@]}" <<'PY'
import statistics, sys
name, runs = sys.argv[1], [r.split() for r in sys.argv[2:]]
accs = [float(a) for a, _ in runs]
secs = [float(s) for _, s in runs]
print(f"{name}: test accuracy mean {100*statistics.mean(accs):.2f}% median "
      f"{100*statistics.median(accs):.2f}% (std {100*statistics.pstdev(accs):.2f}) over "
      f"{len(accs)} seeds; {1000*statistics.median(secs):.1f} ms/epoch (median); per seed "
      + " ".join(f"{100*a:.1f}" for a in accs))
PY
}
run full-batch
run cluster-gcn --batching cluster --clusters 16 --clusters-per-batch 4
run graphsaint-rw --batching saint-rw --saint-budget 500 --walk-length 2 --saint-coverage 50
run neighbour-sampling --fanouts 10,10 --batch-size 32
