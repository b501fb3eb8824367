#!/usr/bin/env bash
# Graphs without features, split for link prediction, for the check of learnt-embedding
# training against the PyG reference (bench/link_pyg_reference.py):
#   data/cora-nofeat-link   Cora's graph (2,708 nodes, 5,278 edges) with its features dropped
#   data/sbm-nofeat-link    a homophilous stochastic block model (10,000 nodes, 8 classes, 90% of
#                           the 50,000 edges within a class) without features
#   data/email-nofeat-link  shaped like an e-mail network (36,692 nodes, about 183,000 edges,
#                           heavy-tailed degrees, nodes numbered by first appearance so the hubs
#                           have the low ids): `--edge-model powerlaw-ordered`, average degree 10,
#                           32 classes, half the edges within one
#   data/coauthor-nofeat-link  shaped like a co-authorship graph (18,772 nodes, about 198,000
#                           edges, clustered): powerlaw-ordered, average degree 21, 64 classes,
#                           80% of the edges within one
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
$bin prepare synthetic --edge-model powerlaw-ordered --nodes 36692 --avg-degree 10 --classes 32 \
  --homophily 0.5 --feat-dim 1 --seed 0 --out data/email-feat1
drop_features data/email-feat1 data/email-nofeat
$bin prepare synthetic --edge-model powerlaw-ordered --nodes 18772 --avg-degree 21 --classes 64 \
  --homophily 0.8 --feat-dim 1 --seed 0 --out data/coauthor-feat1
drop_features data/coauthor-feat1 data/coauthor-nofeat
for g in cora-nofeat sbm-nofeat email-nofeat coauthor-nofeat; do
  $bin prepare link-split --dataset "data/$g" --valid 0.05 --test 0.1 --seed "$seed" \
    --out "data/$g-link" --json
done
