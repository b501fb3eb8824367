//! Building a [`Dataset`] from edge lists and optional features, labels and split, the shared
//! last step of the edge-list, OGB and `.npz` converters.

use std::path::Path;

use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::Tensor;

use graphloom_graph::format::dataset::count_classes;
use graphloom_graph::{
    random_split, Csr, Dataset, Error, Meta, NodeId, NodeTargets, Result, UNLABELLED,
};

use super::ogb_edges::{csr_with_edge_rows, mean_in_edge_rows};

/// The parts a converter has read.
pub(crate) struct Parts {
    pub(crate) name: String,
    pub(crate) num_nodes: usize,
    pub(crate) src: Vec<i64>,
    pub(crate) dst: Vec<i64>,
    /// Row-major `[num_nodes, feat_dim]`, or empty with `feat_dim` 0.
    pub(crate) features: Vec<f32>,
    pub(crate) feat_dim: usize,
    /// One class per node, or `None` (every node in class 0, unless `targets` are given).
    pub(crate) labels: Option<Vec<i64>>,
    /// Several targets per node instead of a class (their markers become the labels).
    pub(crate) targets: Option<NodeTargets>,
    /// A row of `width` features per input edge, `(rows, width)`, which follow their edges
    /// into the CSR; without node features, each node gets the mean of its in-edges' rows.
    pub(crate) edge_features: Option<(Vec<f32>, usize)>,
    /// Train, validation and test ids, or `None` for a seeded 60/20/20 split.
    pub(crate) split: Option<[Vec<usize>; 3]>,
    /// Store every edge in both directions too, dropping self-loops and duplicates (with edge
    /// features: adding each edge's reverse with its row, as OGB's `add_inverse_edge`, and
    /// keeping duplicates, each with its own row).
    pub(crate) undirected: bool,
    pub(crate) seed: u64,
}

/// The dataset name a converter derives from its input: the file or folder name without
/// extension, or `fallback`.
pub(crate) fn name_from(path: &Path, fallback: &str) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| fallback.into())
}

/// Checks the parts (every id in range, features finite) and builds the dataset. `origin` is
/// the file or folder the parts came from, named in errors.
pub(crate) fn assemble(p: Parts, origin: &Path) -> Result<Dataset> {
    let n = p.num_nodes;
    if n > NodeId::MAX as usize {
        return Err(Error::invalid(
            origin,
            format!("{n} nodes exceed the 32-bit node id range"),
        ));
    }
    for (e, (&s, &d)) in p.src.iter().zip(&p.dst).enumerate() {
        if s < 0 || d < 0 || s as usize >= n || d as usize >= n {
            return Err(Error::invalid(
                origin,
                format!("edge {e} ({s} -> {d}) has a node id outside 0..{n}"),
            ));
        }
    }
    if Some(p.features.len()) != n.checked_mul(p.feat_dim) {
        return Err(Error::invalid(
            origin,
            format!(
                "{} feature values for {n} nodes of width {}",
                p.features.len(),
                p.feat_dim
            ),
        ));
    }
    if let Some(i) = p.features.iter().position(|v| !v.is_finite()) {
        return Err(Error::invalid(
            origin,
            format!(
                "non-finite feature at node {}, column {}",
                i / p.feat_dim,
                i % p.feat_dim
            ),
        ));
    }
    let labels = match (&p.targets, p.labels) {
        (Some(targets), _) => targets.markers(),
        (None, labels) => labels.unwrap_or_else(|| vec![0; n]),
    };
    if labels.len() != n {
        return Err(Error::invalid(
            origin,
            format!("{} labels for {n} nodes", labels.len()),
        ));
    }
    let num_classes = match &p.targets {
        Some(targets) => targets.width,
        None => count_classes(&labels, origin)?,
    };
    let [train_idx, valid_idx, test_idx] = match p.split {
        Some(s) => {
            if let Some(&bad) = s.iter().flatten().find(|&&i| i >= n) {
                return Err(Error::invalid(
                    origin,
                    format!("split node id {bad} out of range 0..{n}"),
                ));
            }
            s
        }
        None => {
            let (a, b, c) = random_split(n, 0.6, 0.2, 0.2, p.seed);
            [a, b, c]
        }
    };
    if let Some(&v) = [&train_idx, &valid_idx, &test_idx]
        .iter()
        .flat_map(|s| s.iter())
        .find(|&&v| labels[v] == UNLABELLED)
    {
        return Err(Error::invalid(
            origin,
            format!("node {v} is in a split but has no label"),
        ));
    }
    let (graph, edge_features) = match &p.edge_features {
        Some((rows, width)) => {
            if rows.len() != p.src.len() * width {
                return Err(Error::invalid(
                    origin,
                    format!(
                        "{} edge feature rows for {} edges (a row per edge, in their order)",
                        rows.len() / width.max(&1),
                        p.src.len()
                    ),
                ));
            }
            if let Some(i) = rows.iter().position(|v| !v.is_finite()) {
                return Err(Error::invalid(
                    origin,
                    format!(
                        "non-finite feature at edge {}, column {}",
                        i / width,
                        i % width
                    ),
                ));
            }
            let (g, t) = csr_with_edge_rows(n, &p.src, &p.dst, p.undirected, rows, *width);
            (g, Some(t))
        }
        None => {
            let _g = category_scope(Category::Graph);
            let src: Vec<NodeId> = p.src.iter().map(|&v| v as NodeId).collect();
            let dst: Vec<NodeId> = p.dst.iter().map(|&v| v as NodeId).collect();
            let g = Csr::from_edges(n, &src, &dst);
            let g = if p.undirected {
                g.to_undirected_simple()
            } else {
                g
            };
            (g, None)
        }
    };
    let (node_features, feat_dim) = match (&edge_features, p.feat_dim) {
        (Some(rows), 0) => {
            let width = rows.shape()[1];
            (
                mean_in_edge_rows(&graph, rows.as_slice::<f32>()?, width),
                width,
            )
        }
        _ => (p.features, p.feat_dim),
    };
    let features = {
        let _g = category_scope(Category::Features);
        Tensor::from_vec(node_features, &[n, feat_dim])?
    };
    Ok(Dataset {
        meta: Meta {
            name: p.name,
            num_nodes: n,
            num_edges: graph.num_edges(),
            feat_dim,
            feat_dtype: "f32".into(),
            num_classes,
            directed: !p.undirected,
        },
        graph,
        features,
        labels,
        targets: p.targets,
        train_idx,
        valid_idx,
        test_idx,
        edge_weight: None,
        edge_features,
    })
}
