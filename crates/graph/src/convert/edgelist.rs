//! Edge lists: a text file of `src dst` lines (spaces, tabs or commas; `#` comments) or a
//! `.npy` integer array of shape `[E, 2]` or `[2, E]`, with optional `.npy` features and labels.

use std::path::Path;

use super::assemble::{assemble, name_from, Parts};
use crate::{npy, Dataset, Error, Result};

/// Reads the edges of `path` as `(src, dst)` lists.
pub fn read_edges(path: &Path) -> Result<(Vec<i64>, Vec<i64>)> {
    if path.extension().is_some_and(|e| e == "npy") {
        let a = npy::read_ints(path)?;
        return match a.shape[..] {
            [e, 2] => Ok(a.data.chunks_exact(2).map(|p| (p[0], p[1])).take(e).unzip()),
            [2, e] => Ok((a.data[..e].to_vec(), a.data[e..].to_vec())),
            _ => Err(Error::format(
                path,
                format!(
                    "edge array of shape {:?}; expected [E, 2] or [2, E]",
                    a.shape
                ),
            )),
        };
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let mut src = Vec::new();
    let mut dst = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut it = line
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty());
        let mut id = || -> Result<i64> {
            let tok = it.next().ok_or_else(|| {
                Error::format(path, format!("line {}: expected two node ids", i + 1))
            })?;
            tok.parse().map_err(|_| {
                Error::format(path, format!("line {}: '{tok}' is not a node id", i + 1))
            })
        };
        src.push(id()?);
        dst.push(id()?);
    }
    Ok((src, dst))
}

/// Builds a dataset from an edge list and optional `[N, F]` f32 features and `[N]` labels
/// (`.npy`). The number of nodes is `num_nodes`, else the features' rows, else the largest
/// id plus one. A seeded 60/20/20 split.
pub fn convert(
    edges: &Path,
    features: Option<&Path>,
    labels: Option<&Path>,
    num_nodes: Option<usize>,
    undirected: bool,
    seed: u64,
) -> Result<Dataset> {
    let (src, dst) = read_edges(edges)?;
    let (features, feat_dim, feat_rows) = match features {
        Some(p) => {
            let bytes = std::fs::read(p).map_err(|e| Error::io(p, e))?;
            let a = npy::decode_f64(&bytes, p)?;
            let [rows, cols] = a.shape[..] else {
                return Err(Error::format(
                    p,
                    format!("features of shape {:?}; expected [N, F]", a.shape),
                ));
            };
            (
                a.data.into_iter().map(|v| v as f32).collect(),
                cols,
                Some(rows),
            )
        }
        None => (Vec::new(), 0, None),
    };
    let labels = labels
        .map(|p| npy::read_ints(p).map(|a| a.data))
        .transpose()?;
    let max_id = src
        .iter()
        .chain(&dst)
        .copied()
        .max()
        .map_or(0, |m| m.max(0) as usize + 1);
    let n = num_nodes.or(feat_rows).unwrap_or(max_id);
    let name = name_from(edges, "edgelist");
    assemble(
        Parts {
            name,
            num_nodes: n,
            src,
            dst,
            features,
            feat_dim,
            labels,
            split: None,
            undirected,
            seed,
        },
        edges,
    )
}
