#!/usr/bin/env bash
# SAR on Cora: 4 workers (METIS parts) against one worker on the whole graph, same seed, for
# GCN, GraphSAGE and GAT: the largest relative loss difference over the first 20 epochs and
# the final test accuracy after 200 epochs (with the papers' settings).
# Usage: bench/sar_cora.sh [WORKERS]   (run from the repository root)
set -euo pipefail
workers=${1:-4}
cargo build --release -q
bin=target/release/graphloom
[ -f data/cora/meta.json ] || $bin prepare planetoid --raw testdata/planetoid --name cora --out data/cora
parts=data/cora-parts$workers
[ -f $parts/partition.json ] || $bin partition --dataset data/cora --parts "$workers" --out $parts >/dev/null
compare() {
  local name=$1; shift
  $bin train --dataset data/cora --quiet --epochs 200 --summary-json /tmp/sar-cora-1.json "$@" >/dev/null
  $bin train --dataset $parts --workers "$workers" --quiet --epochs 200 --summary-json /tmp/sar-cora-n.json "$@" >/dev/null
  python3 - "$name" "$workers" <<'PY'
import json, sys
name, workers = sys.argv[1], sys.argv[2]
one, many = (json.load(open(f"/tmp/sar-cora-{k}.json")) for k in ("1", "n"))
l1 = [h["loss"] for h in one["history"]][:20]
ln = [h["loss"] for h in many["history"]][:20]
worst = max(abs(a - b) / abs(b) for a, b in zip(ln, l1))
print(f"{name}: max relative loss difference over 20 epochs {worst:.2e}; "
      f"final test accuracy 1 worker {100*one['test_acc']:.1f}%, {workers} workers {100*many['test_acc']:.1f}% "
      f"(best epochs {one['best_epoch']} and {many['best_epoch']})")
PY
}
compare gcn  --model gcn  --hidden 16 --dropout 0.5 --lr 0.01 --weight-decay 5e-4
compare sage --model sage --hidden 64 --dropout 0.5 --lr 0.01 --weight-decay 5e-4
compare gat  --model gat  --hidden 8 --heads 8 --out-heads 1 --dropout 0.6 --attention-dropout 0.6 --lr 0.005 --weight-decay 5e-4
