//! The headers of the directories GraphLoom writes, and the names of their entries: a dataset
//! directory's `meta.json` ([`Meta`]) and a partitioned directory's `partition.json`
//! ([`PartitionMeta`]). The lowest file of the format: every reader and writer of a directory
//! starts here, and it uses none of them.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The folder of a dataset directory that holds its link-prediction split.
pub const LINK_SPLIT_DIR: &str = "link_split";

/// The folder of a dataset directory where the METIS clusters of subgraph batches are kept.
pub const CLUSTERS_DIR: &str = "clusters";

/// The split files, in the order train, validation, test.
pub const SPLIT_FILES: [&str; 3] = ["train_idx.npy", "valid_idx.npy", "test_idx.npy"];

/// The largest class a label may name: a model has an output column per class, counted in 32
/// bits.
pub const MAX_CLASS: i64 = i32::MAX as i64 - 1;

/// The value of `format` in the `meta.json` of a heterogeneous dataset
/// ([`super::hetero::HeteroMeta`]).
pub const HETERO_FORMAT: &str = "hetero";

/// Whether the dataset directory `dir` holds a heterogeneous dataset (its `meta.json` says
/// `"format": "hetero"`); false when it cannot be read.
pub fn is_hetero(dir: &Path) -> bool {
    std::fs::read_to_string(file(dir, "meta.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|v| v.get("format").and_then(|f| f.as_str()) == Some(HETERO_FORMAT))
}

fn file(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// The contents of `meta.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Dataset name.
    pub name: String,
    /// Number of nodes.
    pub num_nodes: usize,
    /// Number of (directed) edges in the CSR arrays.
    pub num_edges: usize,
    /// Feature width.
    pub feat_dim: usize,
    /// Feature dtype on disk: `f32` or `bf16` (may be left out when `feat_dim` is 0).
    #[serde(default = "default_feat_dtype")]
    pub feat_dtype: String,
    /// Number of classes; labels are in `0..num_classes`.
    pub num_classes: usize,
    /// Whether the edges are directed (false: every edge is present in both directions).
    pub directed: bool,
}

impl Meta {
    /// Reads and checks `meta.json` of the dataset directory `dir`.
    pub fn read(dir: &Path) -> Result<Meta> {
        let meta_path = file(dir, "meta.json");
        if !meta_path.exists() {
            let reason = if PartitionMeta::is_partitioned(dir) {
                "is a partitioned dataset: give the folder it was partitioned from"
            } else if let Some(hint) = super::layouts::conversion_hint(dir) {
                return Err(Error::path(
                    dir,
                    format!("is not a dataset directory (it has no meta.json); {hint}"),
                ));
            } else if dir.is_dir() {
                "is not a dataset directory (it has no meta.json): make one with graphloom prepare"
            } else if dir.exists() {
                "is a file, not a dataset directory: give the folder holding meta.json"
            } else {
                "does not exist: make a dataset directory with graphloom prepare"
            };
            return Err(Error::path(dir, reason));
        }
        let text = std::fs::read_to_string(&meta_path).map_err(|e| Error::io(&meta_path, e))?;
        if is_hetero(dir) {
            return Err(Error::path(
                dir,
                "is a heterogeneous dataset (\"format\": \"hetero\": node and edge types): \
                 graphloom train trains it (--model rgcn or rsage) and graphloom info shows it; \
                 this command takes one node type and one edge type",
            ));
        }
        let meta: Meta =
            serde_json::from_str(&text).map_err(|e| Error::format(&meta_path, e.to_string()))?;
        meta.check(&meta_path)?;
        Ok(meta)
    }

    /// Refuses counts a 64-bit machine cannot address: a damaged `meta.json` (read from
    /// `path`, named in the error).
    pub fn check(&self, path: &Path) -> Result<()> {
        if self.num_classes as u64 > MAX_CLASS as u64 + 1 {
            return Err(Error::invalid(
                path,
                format!(
                    "num_classes = {} is above the {} classes a model can have",
                    self.num_classes,
                    MAX_CLASS + 1
                ),
            ));
        }
        if self.num_nodes >= isize::MAX as usize / 8 || self.num_edges >= isize::MAX as usize / 8 {
            return Err(Error::invalid(
                path,
                format!(
                    "num_nodes = {} and num_edges = {} cannot be held in memory",
                    self.num_nodes, self.num_edges
                ),
            ));
        }
        Ok(())
    }
}

impl Meta {
    /// Writes `meta.json` into the dataset directory `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = file(dir, "meta.json");
        let text = serde_json::to_string_pretty(self).expect("meta serialises");
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))
    }
}

fn default_feat_dtype() -> String {
    "f32".into()
}

/// `partition.json`: what every worker reads first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartitionMeta {
    /// The dataset's meta data (sizes, feature dtype, classes).
    pub dataset: Meta,
    /// The number of parts.
    pub parts: usize,
    /// Part `p` holds new ids `offsets[p]..offsets[p + 1]`.
    pub offsets: Vec<usize>,
    /// Nodes per part.
    pub nodes: Vec<usize>,
    /// Training nodes per part.
    pub train_nodes: Vec<usize>,
    /// Edges between parts.
    pub edge_cut: usize,
    /// Distinct remote source rows each part receives per full exchange.
    pub halo: Vec<usize>,
    /// Training nodes in the whole graph (the loss's normaliser).
    pub num_train: usize,
    /// Whether the edges carry weights: every shard then has its `shard_{q}_weight.npy`.
    #[serde(default)]
    pub edge_weights: bool,
    /// How the parts were made (absent in partitions written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<PartitionMethod>,
}

/// How a partition was made, as `partition.json` records it: what decides the parts, so the
/// same command writes the same directory (its time and memory are in its report only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartitionMethod {
    /// `"metis"` or `"stream"`.
    pub name: String,
    /// The seed it was given.
    pub seed: u64,
    /// The streaming partitioner's balance: the most load a part may hold over the mean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance: Option<f64>,
    /// What the streaming partitioner's load counts: `"nodes"` or `"edges"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance_on: Option<String>,
    /// The streaming partitioner's passes: their kind and the nodes each moved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passes: Vec<(String, usize)>,
}

/// The file that marks a partitioned directory and describes its parts.
const PARTITION_FILE: &str = "partition.json";

impl PartitionMeta {
    /// The path of `root`'s partition description.
    pub fn path(root: &Path) -> std::path::PathBuf {
        root.join(PARTITION_FILE)
    }

    /// Whether `root` is a partitioned directory (from `graphloom partition`).
    pub fn is_partitioned(root: &Path) -> bool {
        PartitionMeta::path(root).exists()
    }

    /// Reads `partition.json` of the partitioned directory `root`.
    pub fn load(root: &Path) -> Result<PartitionMeta> {
        let meta_path = PartitionMeta::path(root);
        let text = std::fs::read_to_string(&meta_path).map_err(|e| Error::io(&meta_path, e))?;
        let meta: PartitionMeta =
            serde_json::from_str(&text).map_err(|e| Error::format(&meta_path, e.to_string()))?;
        meta.check(&meta_path)?;
        Ok(meta)
    }

    /// Checks that the sizes agree: one entry per part in each list, the parts' id ranges
    /// cover the dataset's nodes in order, the training nodes add up. A count a file cannot
    /// hold is refused here, before anything is sized by it.
    fn check(&self, path: &Path) -> Result<()> {
        self.dataset.check(path)?;
        let parts = self.parts;
        let bad = |msg: String| Err(Error::invalid(path, msg));
        if parts == 0 {
            return bad("a partition into 0 parts".into());
        }
        for (name, len) in [
            ("nodes", self.nodes.len()),
            ("train_nodes", self.train_nodes.len()),
            ("halo", self.halo.len()),
        ] {
            if len != parts {
                return bad(format!("'{name}' has {len} entries for {parts} parts"));
            }
        }
        if self.offsets.len() != parts + 1 || self.offsets[0] != 0 {
            return bad(format!(
                "'offsets' must be {} offsets from 0, not {:?}",
                parts + 1,
                self.offsets
            ));
        }
        for p in 0..parts {
            if self.offsets[p + 1].checked_sub(self.offsets[p]) != Some(self.nodes[p]) {
                return bad(format!(
                    "part {p} holds ids {}..{} but {} nodes",
                    self.offsets[p],
                    self.offsets[p + 1],
                    self.nodes[p]
                ));
            }
        }
        if self.offsets[parts] != self.dataset.num_nodes {
            return bad(format!(
                "the parts hold {} nodes, the dataset {}",
                self.offsets[parts], self.dataset.num_nodes
            ));
        }
        let train = self
            .train_nodes
            .iter()
            .try_fold(0usize, |a, &t| a.checked_add(t));
        if train != Some(self.num_train) {
            return bad(format!(
                "'train_nodes' add up to {train:?}, 'num_train' is {}",
                self.num_train
            ));
        }
        Ok(())
    }
}
