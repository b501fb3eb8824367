#!/usr/bin/env bash
# GraphLoom's link prediction from learnt embeddings against the PyG reference
# (bench/link_pyg_reference.py), on the graphs of bench/link_datasets.sh, over training seeds
# 0, 1, 2. GraphLoom runs with its defaults and the widths of the reference: 2-layer GraphSAGE,
# hidden and output 64, 64-wide learnt embeddings (`--model sage --layers 2 --hidden 64
# --embedding-dim 64`), full batch for 200 epochs and sampled (fanouts 10,10, batches of 1024
# positive edges) for 20; the reference trains full batch for 200 epochs and selects, as
# GraphLoom does by default, the epoch of the best validation AUC. One JSON line per run:
# graph, system, mode, seed, test_auc, test_hits_at_50, test_mrr, best_epoch.
# Usage: bench/link_accuracy.sh [GRAPH...]   (after bench/link_datasets.sh; default: every
#        graph it makes; GRAPHLOOM=path to a binary; PYG_PYTHON=a Python with torch_geometric,
#        without which the reference is skipped with a message)
set -euo pipefail
bin=${GRAPHLOOM:-target/release/graphloom}
pyg=${PYG_PYTHON:-python3}
graphs=("$@")
[ ${#graphs[@]} -gt 0 ] || graphs=(cora-nofeat-link sbm-nofeat-link email-nofeat-link coauthor-nofeat-link)
has_pyg=1
if ! "$pyg" -c 'import torch_geometric' 2>/dev/null; then
  echo "no torch_geometric in $pyg (set PYG_PYTHON): the PyG reference is skipped" >&2
  has_pyg=0
fi
# The test figures of a summary JSON (GraphLoom's or the reference's) as one line.
line() {
  python3 -c "import json, sys; d = json.loads(sys.stdin.read().strip().splitlines()[-1]); \
print(json.dumps({'graph': '$1', 'system': '$2', 'mode': '$3', 'seed': $4, \
**{k: d[k] for k in ('test_auc', 'test_hits_at_50', 'test_mrr', 'best_epoch')}}))"
}
for graph in "${graphs[@]}"; do
  for seed in 0 1 2; do
    if [ "$has_pyg" -eq 1 ]; then
      "$pyg" bench/link_pyg_reference.py "data/$graph" --seed "$seed" --threads 1 2>/dev/null |
        line "$graph" pyg full "$seed"
    fi
    for mode in full sampled; do
      extra=(--epochs 200)
      [ "$mode" = sampled ] && extra=(--fanouts 10,10 --batch-size 1024 --epochs 20)
      "$bin" train --dataset "data/$graph" --task link --model sage --layers 2 --hidden 64 \
        --embedding-dim 64 --seed "$seed" --quiet --json "${extra[@]}" |
        line "$graph" graphloom "$mode" "$seed"
    done
  done
done
