//! A dataset directory opened in place ([`MappedDataset`]): its arrays are mapped read-only, so
//! a graph larger than memory costs page cache, not process memory. [`GraphData`] is what
//! sampled training reads of a dataset, whether mapped or loaded.

use std::path::{Path, PathBuf};

use graphloom_io::MappedNpy;
use rayon::prelude::*;

use super::dataset::{
    check_feature_header, check_feature_values, check_once, check_splits, read_labels, read_split,
    Dataset, UNLABELLED,
};
use super::meta::{Meta, SPLIT_FILES};
use super::targets::NodeTargets;
use crate::sample::CsrSource;
use crate::{npy, Csr, Error, NodeId, Result};

/// A dataset directory with its CSR arrays and labels mapped and its splits in memory. The
/// checks [`Dataset::load`] makes on every load run here in one streaming pass per file, and
/// each file's pass is recorded with its size, its modification and change times and the
/// contents of `meta.json` in `.graphloom-checks.json`, so the next open of an unchanged file
/// under an unchanged `meta.json` skips it. Feature rows stay
/// in `node_feat.npy` for the store to map ([`MappedDataset::features_path`]); their values
/// are checked the same way.
///
/// Changing a dataset's files while it is open is not supported.
pub struct MappedDataset {
    /// Sizes and names.
    pub meta: Meta,
    dir: PathBuf,
    row_ptr: MappedNpy<i64>,
    col_idx: Column,
    labels: Labels,
    targets: Option<NodeTargets>,
    edge_weight: Option<MappedNpy<f32>>,
    edge_features: Option<graphloom_tensor::Tensor>,
    /// Training node ids.
    pub train_idx: Vec<usize>,
    /// Validation node ids.
    pub valid_idx: Vec<usize>,
    /// Test node ids.
    pub test_idx: Vec<usize>,
}

/// Source ids: the mapped file when it holds i32 (what `prepare` writes), else a narrowed copy.
pub(crate) enum Column {
    Mapped(MappedNpy<i32>),
    Owned(Vec<NodeId>),
}

impl Column {
    /// The ids of `csr_col_idx.npy` at `path` below `n` nodes: the file mapped when it holds
    /// i32, else read and narrowed. The caller checks a mapped file's ids before reading
    /// them as nodes.
    pub(crate) fn open(path: &Path, n: usize) -> Result<Column> {
        Ok(match npy::read_header(path)?.dtype {
            npy::NpyDType::I32 => Column::Mapped(MappedNpy::open(path)?),
            _ => Column::Owned(narrow_sources(&npy::read_ids(path)?.data, n, path)?),
        })
    }

    /// The source ids.
    pub(crate) fn ids(&self) -> &[NodeId] {
        match self {
            // SAFETY: i32 and u32 have one size and alignment, and the ids were checked to be
            // non-negative (`check_arrays`, `check_sources`) before any is read as a node.
            Column::Mapped(m) => unsafe {
                std::slice::from_raw_parts(m.as_ptr().cast::<NodeId>(), m.len())
            },
            Column::Owned(v) => v,
        }
    }

    /// The bytes it holds in memory (a mapped file holds page cache only).
    pub(crate) fn owned_bytes(&self) -> usize {
        match self {
            Column::Mapped(_) => 0,
            Column::Owned(v) => v.len() * std::mem::size_of::<NodeId>(),
        }
    }
}

/// Labels: the mapped file when it holds i64, else a widened copy.
enum Labels {
    Mapped(MappedNpy<i64>),
    Owned(Vec<i64>),
}

/// What sampled training and evaluation read of a dataset: the CSR by destination, labels and
/// splits, wherever they live.
#[derive(Clone, Copy)]
pub struct GraphData<'a> {
    /// Sizes and names.
    pub meta: &'a Meta,
    /// `num_nodes + 1` offsets into `col_idx`.
    pub row_ptr: &'a [i64],
    /// Source node of each edge.
    pub col_idx: &'a [NodeId],
    /// Class of every node (-1: none); with targets, their markers ([`NodeTargets::markers`]).
    pub labels: &'a [i64],
    /// The targets of multi-label classification or regression, when the dataset has them.
    pub targets: Option<&'a NodeTargets>,
    /// The `[num_edges, edge_dim]` features per edge, when the dataset has them.
    pub edge_features: Option<&'a graphloom_tensor::Tensor>,
    /// Training node ids.
    pub train_idx: &'a [usize],
    /// Validation node ids.
    pub valid_idx: &'a [usize],
    /// Test node ids.
    pub test_idx: &'a [usize],
}

impl<'a> GraphData<'a> {
    /// The number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.row_ptr.len() - 1
    }

    /// The number of edges.
    pub fn num_edges(&self) -> usize {
        self.col_idx.len()
    }

    /// The graph as a sampler's source (unweighted).
    pub fn source(&self) -> CsrSource<'a> {
        CsrSource::from_arrays(self.row_ptr, self.col_idx)
    }

    /// The in-neighbours of `v` (the sources of its in-edges).
    pub fn in_neighbors(&self, v: NodeId) -> &'a [NodeId] {
        let v = v as usize;
        &self.col_idx[self.row_ptr[v] as usize..self.row_ptr[v + 1] as usize]
    }

    /// Whether the graph has the edge `u -> v` (`u` among `v`'s in-neighbours; rows need not
    /// be sorted, so the row is scanned).
    pub fn has_edge(&self, u: NodeId, v: NodeId) -> bool {
        self.in_neighbors(v).contains(&u)
    }

    /// Up to `k` nodes of the highest in-degree (ties to the lower id), in no set order: one
    /// pass over the offsets for a histogram of degrees, one to collect, in memory of the
    /// result and the histogram only.
    pub fn highest_in_degree(&self, k: usize) -> Vec<NodeId> {
        let n = self.num_nodes();
        let k = k.min(n);
        if k == 0 {
            return Vec::new();
        }
        let degree = |v: usize| (self.row_ptr[v + 1] - self.row_ptr[v]) as u64;
        // Degrees above the histogram's range share its last bucket and are all taken first.
        const BUCKETS: u64 = 1 << 20;
        let mut histogram = vec![0usize; BUCKETS as usize];
        for v in 0..n {
            histogram[degree(v).min(BUCKETS - 1) as usize] += 1;
        }
        // The lowest degree taken whole, and how many of the next lower one come after it.
        let (mut threshold, mut taken) = (BUCKETS, 0usize);
        while threshold > 0 && taken + histogram[threshold as usize - 1] <= k {
            threshold -= 1;
            taken += histogram[threshold as usize];
        }
        let mut partial = k - taken;
        let mut out = Vec::with_capacity(k);
        for v in 0..n {
            let d = degree(v).min(BUCKETS - 1);
            if d >= threshold {
                out.push(v as NodeId);
            } else if threshold > 0 && d == threshold - 1 && partial > 0 {
                out.push(v as NodeId);
                partial -= 1;
            }
        }
        out
    }

    /// A copy of the graph in memory.
    pub fn to_csr(&self) -> Csr {
        Csr {
            row_ptr: self.row_ptr.to_vec(),
            col_idx: self.col_idx.to_vec(),
        }
    }
}

impl Dataset {
    /// What sampled training reads of this dataset.
    pub fn data(&self) -> GraphData<'_> {
        GraphData {
            meta: &self.meta,
            row_ptr: &self.graph.row_ptr,
            col_idx: &self.graph.col_idx,
            labels: &self.labels,
            targets: self.targets.as_ref(),
            edge_features: self.edge_features.as_ref(),
            train_idx: &self.train_idx,
            valid_idx: &self.valid_idx,
            test_idx: &self.test_idx,
        }
    }
}

fn file(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

impl MappedDataset {
    /// Opens the dataset directory `dir`: maps its arrays after checking each file's length
    /// against its header (a truncated file is an error naming it), then checks the contents
    /// of each file not checked before in this version.
    pub fn open(dir: &Path) -> Result<MappedDataset> {
        let meta = Meta::read(dir)?;
        let n = meta.num_nodes;
        let row_ptr_path = file(dir, "csr_row_ptr.npy");
        let row_ptr = MappedNpy::<i64>::open(&row_ptr_path)?;
        if row_ptr.len() != n + 1 {
            return Err(Error::invalid(
                &row_ptr_path,
                format!(
                    "has {} entries, meta.json says num_nodes = {n} (expected {})",
                    row_ptr.len(),
                    n + 1
                ),
            ));
        }
        let col_path = file(dir, "csr_col_idx.npy");
        let col_idx = Column::open(&col_path, n)?;
        let label_path = file(dir, "node_label.npy");
        let label_header = npy::read_header(&label_path)?;
        let (labels, targets) = match label_header.dtype {
            _ if NodeTargets::held_by(&label_header, meta.num_classes) => {
                let (markers, targets) = read_labels(dir, &meta)?;
                (Labels::Owned(markers), targets)
            }
            npy::NpyDType::I64 => (Labels::Mapped(MappedNpy::open(&label_path)?), None),
            _ => (Labels::Owned(npy::read_ints(&label_path)?.data), None),
        };
        let weight_path = file(dir, "edge_weight.npy");
        let edge_weight = if weight_path.exists() {
            Some(MappedNpy::<f32>::open(&weight_path)?)
        } else {
            None
        };
        let has_features = meta.feat_dim > 0 || file(dir, "node_feat.npy").exists();
        let feature_header = if has_features {
            Some(check_feature_header(dir, &meta)?)
        } else {
            None
        };
        let splits = [0, 1, 2].map(|s| read_split(dir, SPLIT_FILES[s], n));
        let [train_idx, valid_idx, test_idx] = splits;
        let ds = MappedDataset {
            dir: dir.to_path_buf(),
            row_ptr,
            col_idx,
            labels,
            targets,
            edge_weight,
            edge_features: None,
            train_idx: train_idx?,
            valid_idx: valid_idx?,
            test_idx: test_idx?,
            meta,
        };
        ds.check_arrays()?;
        if let Some(header) = feature_header {
            check_once(dir, "node_feat.npy", "finite", || {
                check_feature_values(
                    &file(dir, "node_feat.npy"),
                    &header,
                    &ds.meta.feat_dtype,
                    ds.meta.feat_dim,
                )
            })?;
        }
        Ok(ds)
    }

    /// The checks of every array, each skipped when it passed on this version of its file.
    fn check_arrays(&self) -> Result<()> {
        let dir = &self.dir;
        let data = self.data();
        let n = self.meta.num_nodes;
        let row_ptr_path = file(dir, "csr_row_ptr.npy");
        check_once(dir, "csr_row_ptr.npy", "offsets", || {
            check_offsets(data.row_ptr, data.num_edges())
                .map_err(|msg| Error::invalid(&row_ptr_path, msg))
        })?;
        if data.col_idx.len() != self.meta.num_edges {
            return Err(Error::invalid(
                file(dir, "csr_col_idx.npy"),
                format!(
                    "has {} entries, meta.json says num_edges = {}",
                    data.col_idx.len(),
                    self.meta.num_edges
                ),
            ));
        }
        if let Column::Mapped(cols) = &self.col_idx {
            check_once(dir, "csr_col_idx.npy", "sources", || {
                let bad = cols
                    .par_chunks(1 << 20)
                    .enumerate()
                    .find_map_first(|(c, chunk)| {
                        let k = chunk.iter().position(|&v| v < 0 || v as usize >= n)?;
                        Some(((c << 20) + k, chunk[k]))
                    });
                match bad {
                    Some((e, v)) => Err(Error::invalid(
                        file(dir, "csr_col_idx.npy"),
                        format!("entry {e} is {v}, not a node id (num_nodes = {n})"),
                    )),
                    None => Ok(()),
                }
            })?;
        }
        let label_path = file(dir, "node_label.npy");
        if data.labels.len() != n {
            return Err(Error::invalid(
                &label_path,
                format!("has {} labels for {n} nodes", data.labels.len()),
            ));
        }
        let classes = self.meta.num_classes as i64;
        check_once(dir, "node_label.npy", "classes", || {
            match data
                .labels
                .par_iter()
                .position_first(|&l| l < UNLABELLED || l >= classes)
            {
                Some(i) => Err(Error::invalid(
                    &label_path,
                    format!(
                        "label of node {i} is {}, outside 0..{classes} (num_classes; -1 marks \
                         a node without a label)",
                        data.labels[i]
                    ),
                )),
                None => Ok(()),
            }
        })?;
        if let Some(weights) = &self.edge_weight {
            let path = file(dir, "edge_weight.npy");
            if weights.len() != self.meta.num_edges {
                return Err(Error::invalid(
                    &path,
                    format!(
                        "has {} weights for {} edges",
                        weights.len(),
                        self.meta.num_edges
                    ),
                ));
            }
            check_once(dir, "edge_weight.npy", "weights", || {
                match weights
                    .par_iter()
                    .position_first(|w| !(w.is_finite() && *w >= 0.0))
                {
                    Some(e) => Err(Error::invalid(
                        &path,
                        format!(
                            "edge {e} has weight {}; weights must be finite and >= 0",
                            weights[e]
                        ),
                    )),
                    None => Ok(()),
                }
            })?;
        }
        check_splits(
            dir,
            [&self.train_idx, &self.valid_idx, &self.test_idx],
            data.labels,
        )?;
        Ok(())
    }

    /// What sampled training reads of this dataset.
    pub fn data(&self) -> GraphData<'_> {
        let col_idx = self.col_idx.ids();
        GraphData {
            meta: &self.meta,
            row_ptr: &self.row_ptr,
            col_idx,
            labels: match &self.labels {
                Labels::Mapped(m) => m,
                Labels::Owned(v) => v,
            },
            targets: self.targets.as_ref(),
            edge_features: self.edge_features.as_ref(),
            train_idx: &self.train_idx,
            valid_idx: &self.valid_idx,
            test_idx: &self.test_idx,
        }
    }

    /// Reads the dataset's `edge_feat.npy` into memory (checked as [`Dataset::load`] checks
    /// every file), for [`GraphData::edge_features`]; none when the directory has no such file.
    pub fn load_edge_features(&mut self) -> Result<()> {
        self.edge_features =
            super::edge_features::read_edge_features(&self.dir, self.meta.num_edges)?;
        Ok(())
    }

    /// The per-edge weights, when the dataset has them.
    pub fn edge_weight(&self) -> Option<&[f32]> {
        self.edge_weight.as_deref()
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The feature file, for the store to map.
    pub fn features_path(&self) -> PathBuf {
        file(&self.dir, "node_feat.npy")
    }

    /// Advises the kernel that the CSR arrays are read at random (sampling touches a few
    /// entries per node), so a fault reads a page, not a read-ahead window.
    pub fn advise_random(&self) {
        self.row_ptr.advise_random();
        if let Column::Mapped(m) = &self.col_idx {
            m.advise_random();
        }
    }
}

/// Checks CSR offsets: start at 0, never decrease, end at `num_edges`.
pub(crate) fn check_offsets(row_ptr: &[i64], num_edges: usize) -> Result<(), String> {
    if row_ptr.first() != Some(&0) {
        return Err("csr_row_ptr does not start at 0".into());
    }
    let decrease = (0..row_ptr.len() - 1)
        .into_par_iter()
        .with_min_len(1 << 16)
        .find_first(|&i| row_ptr[i + 1] < row_ptr[i]);
    if let Some(i) = decrease {
        return Err(format!("csr_row_ptr decreases at row {i}"));
    }
    let last = *row_ptr.last().expect("checked non-empty");
    if last != num_edges as i64 {
        return Err(format!(
            "csr_row_ptr ends at {last}, but there are {num_edges} edges"
        ));
    }
    Ok(())
}

/// Source ids of another integer dtype, checked and narrowed to node ids.
fn narrow_sources(cols: &[i64], n: usize, path: &Path) -> Result<Vec<NodeId>> {
    if let Some(e) = cols.iter().position(|&c| c < 0 || c as usize >= n) {
        return Err(Error::invalid(
            path,
            format!("entry {e} is {}, not a node id (num_nodes = {n})", cols[e]),
        ));
    }
    Ok(cols.iter().map(|&c| c as NodeId).collect())
}
