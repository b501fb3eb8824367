#!/usr/bin/env bash
# Test accuracy of the relational models on ogbn-mag's shape written by
# ../shared/baselines/make_hetero.py, against DGL's ogbn-mag R-GCN (dgl_hetero.py) on the same
# directory and against homogeneous GraphSAGE trained on the papers and their citations alone.
#
#   bench/hetero_accuracy.sh [DATA_SEED] [SCALE]     (defaults: 0 and 0.1)
#
# Every run: 2 layers, hidden 64, fanouts 25,20 (per relation for the relational models),
# batches of 1024 papers, 3 epochs. Prints one line per system; writes the directories under
# data/. Needs numpy in $PYTHON (default: the DGL venv, else python3); DGL is left out when its
# venv is missing. GRAPHLOOM picks the binary (default: target/release/graphloom).
set -euo pipefail
cd "$(dirname "$0")/.."
seed=${1:-0}
scale=${2:-0.1}
graphloom=${GRAPHLOOM:-target/release/graphloom}
shared=${GRAPHLOOM_SHARED:-../shared}
dgl_python=${DGL_PYTHON:-.venv-dgl/bin/python}
python=${PYTHON:-$([ -x "$dgl_python" ] && echo "$dgl_python" || echo python3)}
data=data/hetero-acc-$scale-$seed
papers=$data-papers

if [ ! -f "$data/meta.json" ]; then
  "$python" "$shared/baselines/make_hetero.py" "$data" --scale "$scale" --seed "$seed" >&2
fi
if [ ! -f "$papers/meta.json" ]; then
  # The papers and their citations (both directions) as a homogeneous dataset directory.
  "$python" - "$data" "$papers" <<'EOF'
import json, os, sys
import numpy as np
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
meta = json.load(open(f"{src}/meta.json"))
n = meta["node_types"]["paper"]["num_nodes"]
dst, col = [], []
for rel in ["paper__cites__paper", "paper__rev_cites__paper"]:
    rp = np.load(f"{src}/edges/{rel}/csr_row_ptr.npy")
    dst.append(np.repeat(np.arange(n), np.diff(rp)))
    col.append(np.load(f"{src}/edges/{rel}/csr_col_idx.npy").astype(np.int64))
dst, col = np.concatenate(dst), np.concatenate(col)
order = np.lexsort((col, dst))
dst, col = dst[order], col[order]
row_ptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]).astype(np.int64)
np.save(f"{out}/csr_row_ptr.npy", row_ptr)
np.save(f"{out}/csr_col_idx.npy", col)
for f in ["node_feat", "node_label", "train_idx", "valid_idx", "test_idx"]:
    np.save(f"{out}/{f}.npy", np.load(f"{src}/nodes/paper/{f}.npy"))
json.dump({"name": os.path.basename(out), "num_nodes": int(n), "num_edges": int(len(col)),
           "feat_dim": int(meta["node_types"]["paper"]["feat_dim"]),
           "num_classes": int(meta["num_classes"]), "directed": False},
          open(f"{out}/meta.json", "w"))
EOF
fi

common=(--fanouts 25,20 --batch-size 1024 --epochs 3 --hidden 64 --json)
test_acc() { "$python" -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["test_acc"])'; }
for model in rgcn rsage; do
  echo "graphloom $model: $("$graphloom" train --dataset "$data" --model "$model" "${common[@]}" 2>/dev/null | test_acc)"
done
echo "graphloom sage on papers and citations: $("$graphloom" train --dataset "$papers" --model sage "${common[@]}" 2>/dev/null | test_acc)"
if [ -x "$dgl_python" ]; then
  echo "dgl rgcn: $("$dgl_python" "$shared/baselines/dgl_hetero.py" "$data" --epochs 3 --batches 1 --warmup 0 2>/dev/null | test_acc)"
else
  echo "dgl rgcn: left out (no $dgl_python)"
fi
