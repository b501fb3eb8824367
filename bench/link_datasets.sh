#!/usr/bin/env bash
# Graphs without features, split for link prediction, for the check of learnt-embedding
# training against the PyG reference (bench/link_pyg_reference.py):
#   data/cora-nofeat-link  Cora's graph (2,708 nodes, 5,278 edges) with its features dropped
#   data/sbm-nofeat-link   a homophilous stochastic block model (10,000 nodes, 8 classes, 90% of
#                          the 50,000 edges within a class) without features
# each split with `prepare link-split --valid 0.05 --test 0.1` (100 negative destinations per
# held-out edge). A dataset without features is a dataset directory without node_feat.npy
# whose meta.json says feat_dim 0.
# Usage: bench/link_datasets.sh [SEED]   (run from the repository root; SEED of the splits;
#        GRAPHLOOM=path/to/graphloom to use a binary already built)
set -euo pipefail
seed=${1:-0}
if [ -z "${GRAPHLOOM:-}" ]; then
  cargo build --release -q
fi
bin=${GRAPHLOOM:-target/release/graphloom}
mkdir -p data

# Copies the dataset directory $1 to $2 without its features.
drop_features() {
  rm -rf "$2" && mkdir -p "$2"
  for f in csr_row_ptr csr_col_idx node_label train_idx valid_idx test_idx; do
    cp "$1/$f.npy" "$2/"
  done
  python3 - "$1/meta.json" "$2/meta.json" <<'PY'
import json, sys
meta = json.load(open(sys.argv[1]))
meta["feat_dim"] = 0
meta.pop("feat_dtype", None)
meta["name"] += "-nofeat"
json.dump(meta, open(sys.argv[2], "w"), indent=2)
PY
}

[ -f data/cora/meta.json ] || $bin prepare planetoid --raw testdata/planetoid --name cora --out data/cora
drop_features data/cora data/cora-nofeat
$bin prepare synthetic --nodes 10000 --avg-degree 10 --classes 8 --homophily 0.9 --feat-dim 1 \
  --seed 0 --out data/sbm-feat1
drop_features data/sbm-feat1 data/sbm-nofeat
for g in cora-nofeat sbm-nofeat; do
  $bin prepare link-split --dataset "data/$g" --valid 0.05 --test 0.1 --seed "$seed" \
    --out "data/$g-link" --json
done
