//! The raw Planetoid files (`ind.NAME.{x,tx,allx,y,ty,ally,graph,test.index}`) to a dataset,
//! with the public split and the feature normalisation of PyG's `Planetoid` dataset and its
//! `NormalizeFeatures` transform.

use std::path::{Path, PathBuf};

use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::Tensor;

use super::pickle;
use graphloom_graph::{Csr, Dataset, Error, Meta, NodeId, Result};

/// The unpickled file `ind.{name}.{part}` and its size in bytes.
fn read_pickle(dir: &Path, name: &str, part: &str) -> Result<(pickle::Value, usize)> {
    let path = dir.join(format!("ind.{name}.{part}"));
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    let value = pickle::load(&bytes).map_err(|msg| Error::format(&path, msg))?;
    Ok((value, bytes.len()))
}

/// The matrix of `ind.{name}.{part}`, every value finite.
fn read_matrix(dir: &Path, name: &str, part: &str) -> Result<pickle::Array> {
    let path = dir.join(format!("ind.{name}.{part}"));
    let (v, _) = read_pickle(dir, name, part)?;
    let a = pickle::to_dense(&v).map_err(|msg| Error::format(&path, msg))?;
    if a.shape.len() != 2 {
        return Err(Error::format(
            &path,
            format!("expected a matrix, found shape {:?}", a.shape),
        ));
    }
    if let Some(i) = a.data.iter().position(|v| !v.is_finite()) {
        let cols = a.shape[1].max(1);
        return Err(Error::invalid(
            &path,
            format!("non-finite value at row {}, column {}", i / cols, i % cols),
        ));
    }
    Ok(a)
}

/// Fails naming `ind.{name}.{part}` unless `found` rows or columns are the `expected` ones.
fn expect_dim(
    dir: &Path,
    name: &str,
    part: &str,
    what: &str,
    found: usize,
    expected: usize,
) -> Result<()> {
    if found != expected {
        return Err(Error::format(
            dir.join(format!("ind.{name}.{part}")),
            format!("{found} {what}, expected {expected}"),
        ));
    }
    Ok(())
}

/// The validation nodes of the public split: the 500 after the training nodes.
const VALID: usize = 500;

/// The index of the first largest entry of each row of a one-hot matrix (0 for a zero row, as
/// `argmax` does).
fn argmax_rows(m: &pickle::Array) -> Vec<i64> {
    let cols = m.shape[1];
    m.data
        .chunks(cols.max(1))
        .map(|row| {
            let mut best = 0;
            for (j, &v) in row.iter().enumerate() {
                if v > row[best] {
                    best = j;
                }
            }
            best as i64
        })
        .collect()
}

/// The folder under `dir` holding the raw files of the Planetoid dataset `name` (in any case:
/// `Cora` finds `ind.cora.x`), and the name as the files spell it. `dir` may be that folder,
/// a PyG dataset folder (`Cora/`, holding `raw/`) or the `root` of PyG's `Planetoid(root,
/// name)` (holding `Cora/raw/`).
pub fn locate(dir: &Path, name: &str) -> Result<(PathBuf, String)> {
    let sets = graphloom_graph::format::layouts::planetoid_sets(dir);
    let wanted = name.to_lowercase();
    if let Some(found) = sets.iter().find(|(_, n)| n.to_lowercase() == wanted) {
        return Ok(found.clone());
    }
    if !dir.is_dir() {
        return Err(Error::invalid(
            dir,
            "is not a folder: give the folder of the raw Planetoid files (ind.NAME.x, ...)",
        ));
    }
    let mut others: Vec<&str> = sets.iter().map(|(_, n)| n.as_str()).collect();
    others.dedup();
    let msg = if others.is_empty() {
        format!(
            "no ind.{wanted}.x here, in raw/ or in */raw/ (PyG's Planetoid(root) layout): give \
             the folder of the raw Planetoid files"
        )
    } else {
        format!(
            "no raw files of {name} here, in raw/ or in */raw/; found those of {} (--name {})",
            others.join(", "),
            others[0]
        )
    };
    Err(Error::invalid(dir, msg))
}

/// Reads `ind.{name}.*` from `raw_dir` and builds the dataset with the public split: the nodes
/// of `x` for training (20 per class), the next 500 for validation, the 1000 of `test.index`
/// for testing. Test rows are placed by the file order of `test.index`; test ids that have no
/// features (CiteSeer) become zero rows that belong to no split. The graph is made symmetric,
/// with self-loops and duplicate edges removed. Features are shifted by their minimum and
/// divided by their row sum, clamped at 1.
pub fn convert(raw_dir: &Path, name: &str) -> Result<Dataset> {
    let x = read_matrix(raw_dir, name, "x")?;
    let tx = read_matrix(raw_dir, name, "tx")?;
    let allx = read_matrix(raw_dir, name, "allx")?;
    let y = read_matrix(raw_dir, name, "y")?;
    let ty = read_matrix(raw_dir, name, "ty")?;
    let ally = read_matrix(raw_dir, name, "ally")?;
    let index_path = raw_dir.join(format!("ind.{name}.test.index"));
    let text = std::fs::read_to_string(&index_path).map_err(|e| Error::io(&index_path, e))?;
    let test_index: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            l.trim().parse::<usize>().map_err(|_| {
                Error::format(
                    &index_path,
                    format!("line {}: '{}' is not a node id", i + 1, l.trim()),
                )
            })
        })
        .collect::<Result<_>>()?;
    let feat_dim = allx.shape[1];
    if tx.shape[1] != feat_dim || x.shape[1] != feat_dim {
        return Err(Error::format(
            raw_dir.join(format!("ind.{name}.tx")),
            "x, tx and allx have different widths",
        ));
    }
    if test_index.len() != tx.shape[0] {
        return Err(Error::format(
            &index_path,
            format!(
                "{} test ids for {} rows of tx",
                test_index.len(),
                tx.shape[0]
            ),
        ));
    }
    let num_allx = allx.shape[0];
    let (num_train, num_classes) = (y.shape[0], ally.shape[1]);
    expect_dim(raw_dir, name, "y", "rows", num_train, x.shape[0])?;
    expect_dim(raw_dir, name, "ally", "rows", ally.shape[0], num_allx)?;
    expect_dim(raw_dir, name, "ty", "rows", ty.shape[0], tx.shape[0])?;
    expect_dim(raw_dir, name, "y", "classes", y.shape[1], num_classes)?;
    expect_dim(raw_dir, name, "ty", "classes", ty.shape[1], num_classes)?;
    // The training rows, then the 500 validation rows, are the first of allx.
    if num_classes == 0 || num_train + VALID > num_allx {
        return Err(Error::format(
            raw_dir.join(format!("ind.{name}.allx")),
            format!(
                "{num_allx} rows of allx for {num_train} training and {VALID} validation rows, \
                 or no class"
            ),
        ));
    }
    let mut sorted = test_index.clone();
    sorted.sort_unstable();
    let (lo, hi) = (
        *sorted
            .first()
            .ok_or_else(|| Error::format(&index_path, "no test ids"))?,
        *sorted.last().unwrap(),
    );
    if lo < num_allx {
        return Err(Error::format(
            &index_path,
            format!("test id {lo} overlaps the {num_allx} rows of allx"),
        ));
    }
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::format(
            &index_path,
            format!("test id {} is listed twice", w[0]),
        ));
    }
    // Test ids follow allx's rows with a few gaps (CiteSeer's nodes without features): ids
    // far beyond them are damage, and would size the tables.
    if hi - num_allx >= 2 * sorted.len() {
        return Err(Error::format(
            &index_path,
            format!(
                "test id {hi} is far past the {num_allx} rows of allx for {} test ids",
                sorted.len()
            ),
        ));
    }
    let num_nodes = hi + 1;
    // Rows num_allx..=hi: tx rows in sorted-id order (tx row i belongs to sorted[i]); ids
    // between them that are not test ids stay zero rows.
    let mut feats = vec![0f64; num_nodes * feat_dim];
    feats[..num_allx * feat_dim].copy_from_slice(&allx.data);
    let ally_labels = argmax_rows(&ally);
    let ty_labels = argmax_rows(&ty);
    let mut labels = vec![0i64; num_nodes];
    labels[..num_allx].copy_from_slice(&ally_labels);
    // PyG: x[test_index] = x[sorted_test_index], with tx stacked in file order at the sorted ids.
    let mut stacked_x = vec![0f64; num_nodes * feat_dim];
    let mut stacked_y = vec![0i64; num_nodes];
    for (i, &id) in sorted.iter().enumerate() {
        stacked_x[id * feat_dim..(id + 1) * feat_dim]
            .copy_from_slice(&tx.data[i * feat_dim..(i + 1) * feat_dim]);
        stacked_y[id] = ty_labels[i];
    }
    for (&dst, &src) in test_index.iter().zip(&sorted) {
        feats[dst * feat_dim..(dst + 1) * feat_dim]
            .copy_from_slice(&stacked_x[src * feat_dim..(src + 1) * feat_dim]);
        labels[dst] = stacked_y[src];
    }
    normalize_features(&mut feats, feat_dim);
    if feats.iter().any(|v| !v.is_finite()) {
        return Err(Error::invalid(
            raw_dir.join(format!("ind.{name}.allx")),
            "the features overflow when normalised",
        ));
    }
    let graph = read_graph(raw_dir, name, num_nodes)?;
    let features = {
        let _g = category_scope(Category::Features);
        Tensor::from_vec(
            feats.into_iter().map(|v| v as f32).collect::<Vec<f32>>(),
            &[num_nodes, feat_dim],
        )?
    };
    Ok(Dataset {
        meta: Meta {
            name: name.to_string(),
            num_nodes,
            num_edges: graph.num_edges(),
            feat_dim,
            feat_dtype: "f32".into(),
            num_classes,
            directed: false,
        },
        graph,
        features,
        labels,
        targets: None,
        train_idx: (0..num_train).collect(),
        valid_idx: (num_train..num_train + VALID).collect(),
        test_idx: test_index,
        edge_weight: None,
        edge_features: None,
    })
}

/// PyG's `NormalizeFeatures`: subtract the global minimum, divide each row by its sum clamped
/// below at 1.
fn normalize_features(x: &mut [f64], cols: usize) {
    let min = x.iter().copied().fold(f64::INFINITY, f64::min);
    let min = if min.is_finite() { min } else { 0.0 };
    for row in x.chunks_mut(cols.max(1)) {
        let mut sum = 0.0;
        for v in row.iter_mut() {
            *v -= min;
            sum += *v;
        }
        let d = sum.max(1.0);
        row.iter_mut().for_each(|v| *v /= d);
    }
}

fn read_graph(dir: &Path, name: &str, num_nodes: usize) -> Result<Csr> {
    let path = dir.join(format!("ind.{name}.graph"));
    let (v, bytes) = read_pickle(dir, name, "graph")?;
    let pairs = pickle::to_adjacency(&v, bytes).map_err(|msg| Error::format(&path, msg))?;
    let mut src = Vec::with_capacity(pairs.len());
    let mut dst = Vec::with_capacity(pairs.len());
    for (a, b) in pairs {
        for id in [a, b] {
            if id < 0 || id as usize >= num_nodes {
                return Err(Error::invalid(
                    &path,
                    format!("node id {id} out of range 0..{num_nodes}"),
                ));
            }
        }
        src.push(a as NodeId);
        dst.push(b as NodeId);
    }
    let _g = category_scope(Category::Graph);
    Ok(Csr::from_edges(num_nodes, &src, &dst).to_undirected_simple())
}
