#!/usr/bin/env bash
# Mean Cora test accuracy over 10 seeds with the papers' settings, for GCN, GAT and GraphSAGE
# (full batch), GraphSAGE in sampled mini-batches (fanouts 25,10, batch size 32), and GATv2,
# GIN, SGC and APPNP with their defaults (bench/pyg_models_reference.py trains PyG's on the same split),
# and SIGN with its defaults on Cora propagated 4 hops by GCN's operator (data/cora-sign).
# Usage: bench/cora_accuracy.sh [SEEDS]   (run from the repository root)
# GRAPHLOOM=path/to/graphloom runs that binary instead of building this checkout's (to compare
# two builds on the same data).
set -euo pipefail
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
seeds=${1:-10}
if [ -n "${GRAPHLOOM:-}" ]; then
  bin=$GRAPHLOOM
else
  cargo build --release -q
  bin=${CARGO_TARGET_DIR:-target}/release/graphloom
fi
[ -f data/cora/meta.json ] || $bin prepare planetoid --raw "${PLANETOID_RAW:-testdata/planetoid}" --name cora --out data/cora
[ -f data/cora-sign/meta.json ] || $bin prepare propagate --dataset data/cora --hops 4 --operators gcn --out data/cora-sign
run() {
  local name=$1; shift
  local dataset=data/cora
  if [ "$1" = --dataset ]; then dataset=$2; shift 2; fi
  local sum=0 accs=()
  for s in $(seq 0 $((seeds - 1))); do
    $bin train --dataset "$dataset" --quiet --seed "$s" --summary-json "$summary" "$@" >/dev/null
    accs+=("$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["test_acc"])' "$summary")")
  done
  python3 - "$name" "${accs[@]}" <<'PY'
import statistics, sys
name, accs = sys.argv[1], [float(a) for a in sys.argv[2:]]
print(f"{name}: mean test accuracy {100*statistics.mean(accs):.2f}% (std {100*statistics.pstdev(accs):.2f}) over {len(accs)} seeds")
PY
}
run gcn  --model gcn  --layers 2 --hidden 16 --dropout 0.5 --lr 0.01 --weight-decay 5e-4 --epochs 200
run gat  --model gat  --layers 2 --hidden 8 --heads 8 --out-heads 1 --dropout 0.6 --attention-dropout 0.6 --lr 0.005 --weight-decay 5e-4 --epochs 1000 --patience 100
run sage --model sage --layers 2 --hidden 64 --dropout 0.5 --lr 0.01 --weight-decay 5e-4 --epochs 200
run gcn-bf16 --model gcn --layers 2 --hidden 16 --dropout 0.5 --lr 0.01 --weight-decay 5e-4 --epochs 200 --dtype bf16
run sage-minibatch --model sage --layers 2 --hidden 64 --dropout 0.5 --lr 0.01 --weight-decay 5e-4 --epochs 50 --fanouts 25,10 --batch-size 32
run gatv2 --model gatv2 --layers 2 --hidden 8 --heads 8 --out-heads 1 --dropout 0.6 --attention-dropout 0.6 --lr 0.005 --weight-decay 5e-4 --epochs 1000 --patience 100
run gin   --model gin   --layers 2 --hidden 64 --dropout 0.8 --lr 0.01 --weight-decay 5e-4 --epochs 200
run sgc   --model sgc   --layers 2 --dropout 0 --lr 0.2 --weight-decay 5e-5 --epochs 200
run appnp --model appnp --layers 2 --hidden 64 --dropout 0.5 --hops 10 --teleport 0.1 --lr 0.01 --weight-decay 5e-4 --epochs 200
run sign  --dataset data/cora-sign --model sign --layers 2 --hidden 64 --dropout 0.8 --lr 0.01 --weight-decay 5e-4 --epochs 200
