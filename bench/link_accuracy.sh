#!/usr/bin/env bash
# GraphLoom's link prediction from learnt embeddings on the graphs of bench/link_datasets.sh,
# with the settings of bench/link_pyg_reference.py (2-layer GraphSAGE, hidden and output 64,
# 64-wide learnt embeddings, dot decoder, Adam 0.01, no dropout or weight decay, 200 epochs,
# one negative per positive, the model of the best validation MRR), full batch and sampled
# (fanouts 10,10, batches of 512 positive edges), over training seeds 0, 1, 2: one JSON line
# per run (graph, mode, seed, test_auc, test_mrr).
# Usage: bench/link_accuracy.sh   (after bench/link_datasets.sh; GRAPHLOOM=path to a binary)
set -euo pipefail
bin=${GRAPHLOOM:-target/release/graphloom}
for graph in cora-nofeat-link sbm-nofeat-link; do
  for mode in full sampled; do
    extra=()
    [ "$mode" = sampled ] && extra=(--fanouts 10,10 --batch-size 512)
    for seed in 0 1 2; do
      $bin train --dataset "data/$graph" --task link --model sage --embedding-dim 64 \
        --hidden 64 --out-dim 64 --dropout 0 --lr 0.01 --embedding-lr 0.01 --epochs 200 \
        --eval-every 5 --seed "$seed" --metric mrr --quiet --json "${extra[@]}" |
        python3 -c "import json, sys; d = json.load(sys.stdin); print(json.dumps({'graph': '$graph', 'mode': '$mode', 'seed': $seed, 'test_auc': d['test_auc'], 'test_mrr': d['test_mrr'], 'best_epoch': d['best_epoch']}))"
    done
  done
done
