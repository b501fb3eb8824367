//! [`DatasetSummary`]: a dataset directory's shape, split sizes and degree distribution, read
//! from `meta.json`, the arrays' headers and one streaming pass over `csr_row_ptr.npy`, in
//! bounded memory whatever the graph's size (`graphloom info`).

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use super::meta::{Meta, PartitionMeta, SPLIT_FILES};
use crate::{npy, Error, Result};

/// In-degree statistics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DegreeStats {
    /// Edges over nodes.
    pub mean: f64,
    /// The median in-degree.
    pub median: u64,
    /// The 99th percentile.
    pub p99: u64,
    /// The largest.
    pub max: u64,
    /// Nodes without in-edges.
    pub isolated: u64,
    /// The share of the edges whose destination is among the 1% of nodes (at least one) of
    /// the highest in-degrees: how much a cache of the hottest rows can catch.
    pub top_percent_share: f64,
}

/// What a dataset directory holds, without loading it.
#[derive(Clone, Debug, PartialEq)]
pub struct DatasetSummary {
    /// `meta.json`.
    pub meta: Meta,
    /// Nodes in the train, validation and test splits.
    pub splits: [usize; 3],
    /// Whether `edge_weight.npy` is present.
    pub edge_weights: bool,
    /// The shape of `edge_feat.npy`, when present.
    pub edge_features: Option<Vec<usize>>,
    /// In-degrees (`None` for a graph without nodes).
    pub degrees: Option<DegreeStats>,
    /// Bytes of the CSR arrays, the features and the labels on disk.
    pub bytes: [u64; 3],
    /// The shape of `node_feat.npy` as its header gives it (`[num_nodes, 0]` without one),
    /// which a damaged or hand-edited `meta.json` may contradict.
    pub feature_shape: Vec<usize>,
    /// The feature dtype `node_feat.npy` holds: `f32`, `bf16` (stored as uint16), or numpy's
    /// name of another.
    pub feature_dtype: String,
}

impl DatasetSummary {
    /// Whether `node_feat.npy` holds what `meta.json` says: `[num_nodes, feat_dim]` of
    /// `feat_dtype`.
    pub fn features_match_meta(&self) -> bool {
        self.feature_shape == [self.meta.num_nodes, self.meta.feat_dim]
            && self.feature_dtype == self.meta.feat_dtype
    }
}

impl DatasetSummary {
    /// Reads the summary of the dataset directory `dir`. The headers are checked against
    /// `meta.json` and the offsets for order and range; values are not read otherwise.
    pub fn read(dir: &Path) -> Result<DatasetSummary> {
        let meta = Meta::read(dir)?;
        let header = |name: &str| npy::read_header(&dir.join(name));
        let splits = split_sizes(dir)?;
        let col = header("csr_col_idx.npy")?;
        if col.numel() != meta.num_edges {
            return Err(Error::invalid(
                dir.join("csr_col_idx.npy"),
                format!(
                    "has {} entries, meta.json says num_edges = {}",
                    col.numel(),
                    meta.num_edges
                ),
            ));
        }
        let labels = header("node_label.npy")?;
        let (feature_bytes, feature_shape, feature_dtype) =
            if meta.feat_dim == 0 && !dir.join("node_feat.npy").exists() {
                (0, vec![meta.num_nodes, 0], meta.feat_dtype.clone())
            } else {
                let f = header("node_feat.npy")?;
                let dtype = match f.dtype {
                    npy::NpyDType::F32 => "f32".to_string(),
                    npy::NpyDType::U16 => "bf16".to_string(),
                    other => format!("{other:?}").to_lowercase(),
                };
                ((f.numel() * f.dtype.size()) as u64, f.shape, dtype)
            };
        let degrees = degree_stats(&dir.join("csr_row_ptr.npy"), &meta)?;
        let row_ptr_bytes = (meta.num_nodes as u64 + 1) * 8;
        Ok(DatasetSummary {
            splits,
            edge_weights: dir.join("edge_weight.npy").exists(),
            edge_features: {
                let path = dir.join(super::edge_features::EDGE_FEATURES_FILE);
                match path.exists() {
                    true => Some(npy::read_header(&path)?.shape),
                    false => None,
                }
            },
            degrees,
            bytes: [
                row_ptr_bytes + (col.numel() * col.dtype.size()) as u64,
                feature_bytes,
                (labels.numel() * labels.dtype.size()) as u64,
            ],
            feature_shape,
            feature_dtype,
            meta,
        })
    }
}

/// The number of nodes in the train, validation and test splits of a dataset directory, or of
/// a partitioned one (summed over its parts), from the split files' headers.
pub fn split_sizes(dir: &Path) -> Result<[usize; 3]> {
    let folders: Vec<std::path::PathBuf> = if PartitionMeta::is_partitioned(dir) {
        let parts = PartitionMeta::load(dir)?.parts;
        (0..parts).map(|p| dir.join(format!("part_{p}"))).collect()
    } else {
        vec![dir.to_path_buf()]
    };
    let mut sizes = [0; 3];
    for folder in folders {
        for (size, name) in sizes.iter_mut().zip(SPLIT_FILES) {
            *size += npy::read_header(&folder.join(name))?.numel();
        }
    }
    Ok(sizes)
}

/// The in-degree statistics of `csr_row_ptr.npy`, read in chunks; keeps a count per distinct
/// degree, so memory grows with the number of distinct degrees, not of nodes.
fn degree_stats(path: &Path, meta: &Meta) -> Result<Option<DegreeStats>> {
    let header = npy::read_header(path)?;
    let n = meta.num_nodes;
    if header.dtype != npy::NpyDType::I64 || header.numel() != n + 1 {
        return Err(Error::invalid(
            path,
            format!(
                "holds {} {:?} values, meta.json's num_nodes needs {} int64 offsets",
                header.numel(),
                header.dtype,
                n + 1
            ),
        ));
    }
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    f.seek(SeekFrom::Start(header.data_offset as u64))
        .map_err(|e| Error::io(path, e))?;
    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
    let mut previous: Option<i64> = None;
    let mut buf = vec![0u8; 8 << 20];
    let mut left = n + 1;
    let mut position = 0usize;
    while left > 0 {
        let take = left.min(buf.len() / 8);
        f.read_exact(&mut buf[..take * 8])
            .map_err(|e| Error::io(path, e))?;
        for b in buf[..take * 8].chunks_exact(8) {
            let offset = i64::from_le_bytes(b.try_into().expect("8 bytes"));
            match previous {
                None if offset != 0 => {
                    return Err(Error::invalid(path, format!("starts at {offset}, not 0")))
                }
                Some(p) if offset < p => {
                    return Err(Error::invalid(
                        path,
                        format!("offset {position} is {offset}, below the one before ({p})"),
                    ))
                }
                Some(p) => *counts.entry((offset - p) as u64).or_default() += 1,
                None => {}
            }
            previous = Some(offset);
            position += 1;
        }
        left -= take;
    }
    // At least one offset was read (there are num_nodes + 1 of them).
    let last = previous.unwrap_or_default();
    if last != meta.num_edges as i64 {
        return Err(Error::invalid(
            path,
            format!(
                "ends at {last}, meta.json says num_edges = {}",
                meta.num_edges
            ),
        ));
    }
    if n == 0 {
        return Ok(None);
    }
    // The degree of rank k in sorted order.
    let at = |k: usize| -> u64 {
        let mut seen = 0u64;
        for (&d, &c) in &counts {
            seen += c;
            if seen > k as u64 {
                return d;
            }
        }
        *counts.keys().next_back().expect("n > 0")
    };
    // The in-edges of the top 1% of nodes, from the highest degree down.
    let mut top_left = n.div_ceil(100) as u64;
    let mut top_edges = 0u64;
    for (&d, &c) in counts.iter().rev() {
        let take = c.min(top_left);
        top_edges += d * take;
        top_left -= take;
        if top_left == 0 {
            break;
        }
    }
    Ok(Some(DegreeStats {
        top_percent_share: top_edges as f64 / meta.num_edges.max(1) as f64,
        mean: meta.num_edges as f64 / n as f64,
        median: at(n / 2),
        p99: at((n * 99 / 100).min(n - 1)),
        max: *counts.keys().next_back().expect("n > 0"),
        isolated: counts.get(&0).copied().unwrap_or(0),
    }))
}
