#!/usr/bin/env bash
# GINE against GIN on the edge-signal synthetic shape (node features and graph carry almost
# nothing of the class, each edge carries its destination's class), both with the normalisation
# inside their MLPs (--batch-norm), full batch and sampled; and PyG's GINEConv and GINConv on
# the same dataset and split (bench/pyg_gine_reference.py) when a PyG environment is given.
# Usage: bench/edge_features.sh [SEEDS]   (run from the repository root)
# PYG_PYTHON=path/to/python (with torch and torch_geometric) adds PyG's figures.
set -euo pipefail
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
seeds=${1:-3}
if [ -n "${GRAPHLOOM:-}" ]; then
  bin=$GRAPHLOOM
else
  cargo build --release -q
  bin=${CARGO_TARGET_DIR:-target}/release/graphloom
fi
data=data/edge-signal
[ -f $data/meta.json ] || $bin prepare synthetic --nodes 20000 --classes 4 --homophily 0 \
  --signal 0.3 --feat-dim 16 --edge-features 8 --seed 1 --out $data
run() {
  local name=$1; shift
  local accs=()
  for s in $(seq 0 $((seeds - 1))); do
    $bin train --dataset $data --quiet --seed "$s" --summary-json "$summary" "$@" >/dev/null
    accs+=("$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["test_acc"])' "$summary")")
  done
  python3 - "$name" "${accs[@]}" <<'PY'
import statistics, sys
name, accs = sys.argv[1], [float(a) for a in sys.argv[2:]]
print(f"{name}: mean test accuracy {100*statistics.mean(accs):.2f}% (std {100*statistics.pstdev(accs):.2f}) over {len(accs)} seeds")
PY
}
run gin          --model gin  --batch-norm --epochs 200
run gine         --model gine --batch-norm --epochs 200
run gin-sampled  --model gin  --batch-norm --epochs 20 --fanouts 10,10 --batch-size 512
run gine-sampled --model gine --batch-norm --epochs 20 --fanouts 10,10 --batch-size 512
run gine-no-norm --model gine --epochs 200
if [ -n "${PYG_PYTHON:-}" ]; then
  for model in gin gine; do
    "$PYG_PYTHON" bench/pyg_gine_reference.py $data --model $model --seeds "$seeds"
  done
fi
