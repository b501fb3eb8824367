//! The parts of OGB's node-property layout that ogbn-proteins adds to ogbn-arxiv's: edge
//! features (`raw/edge-feat.csv.gz`, a row per line of `raw/edge.csv.gz`), several binary
//! labels per node (`raw/node-label.csv.gz` rows of T values: multi-label targets) and no node
//! features (each node then gets the mean of its in-edges' features, as OGB's and PyG's
//! ogbn-proteins examples make them).

use std::path::Path;

use graphloom_graph::{Csr, Error, NodeId, NodeTargets, Result, TargetKind};
use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::Tensor;

use super::ogb::for_each_row;

/// Rows of numbers of one width from the gzip text file `path`: `(values, width)`.
pub(crate) fn read_rows<T: std::str::FromStr + Copy>(path: &Path) -> Result<(Vec<T>, usize)> {
    let (mut values, mut width) = (Vec::new(), None);
    for_each_row::<T>(path, |line, r| {
        let w = *width.get_or_insert(r.len());
        if r.len() != w {
            return Err(Error::format(
                path,
                format!("line {line} has {} values, the first has {w}", r.len()),
            ));
        }
        values.extend_from_slice(r);
        Ok(())
    })?;
    Ok((values, width.unwrap_or(0)))
}

/// T binary labels per node from rows of T values (0 or 1; NaN or -1 for a missing one) read
/// from `path`.
pub(crate) fn binary_targets(
    values: Vec<f64>,
    width: usize,
    num_nodes: usize,
    path: &Path,
) -> Result<NodeTargets> {
    if values.len() != num_nodes * width {
        return Err(Error::invalid(
            path,
            format!("{} rows for {num_nodes} nodes", values.len() / width.max(1)),
        ));
    }
    let values = values
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            v if v.is_nan() || v == -1.0 => Ok(f32::NAN),
            v if v == 0.0 || v == 1.0 => Ok(v as f32),
            v => Err(Error::invalid(
                path,
                format!(
                    "label {} of node {} is {v}: several labels per node are binary, 0 or 1 \
                     (NaN or -1 for a missing one)",
                    i % width,
                    i / width
                ),
            )),
        })
        .collect::<Result<Vec<f32>>>()?;
    Ok(NodeTargets {
        width,
        values,
        kind: TargetKind::Binary,
    })
}

/// The graph of the edges `src -> dst` (with each reversed too when `undirected`: OGB's
/// `add_inverse_edge`, the reverse carrying the same features; self-loops once) as CSR by
/// destination, sources in order within a row, and the `[num_edges, width]` rows of
/// `features` (a row per input edge) in its edge order. Duplicates are kept: each carries its
/// own row.
pub(crate) fn csr_with_edge_rows(
    num_nodes: usize,
    src: &[i64],
    dst: &[i64],
    undirected: bool,
    features: &[f32],
    width: usize,
) -> (Csr, Tensor) {
    // (destination, source, input edge) of every stored edge, sorted stably.
    let mut edges: Vec<(NodeId, NodeId, usize)> = Vec::with_capacity(src.len() * 2);
    for (e, (&s, &d)) in src.iter().zip(dst).enumerate() {
        edges.push((d as NodeId, s as NodeId, e));
        if undirected && s != d {
            edges.push((s as NodeId, d as NodeId, e));
        }
    }
    edges.sort_by_key(|&(d, s, _)| (d, s));
    let mut row_ptr = vec![0i64; num_nodes + 1];
    for &(d, _, _) in &edges {
        row_ptr[d as usize + 1] += 1;
    }
    for v in 0..num_nodes {
        row_ptr[v + 1] += row_ptr[v];
    }
    let graph = {
        let _g = category_scope(Category::Graph);
        Csr {
            row_ptr,
            col_idx: edges.iter().map(|&(_, s, _)| s).collect(),
        }
    };
    let rows: Vec<f32> = edges
        .iter()
        .flat_map(|&(_, _, e)| &features[e * width..(e + 1) * width])
        .copied()
        .collect();
    let rows = Tensor::from_vec(rows, &[edges.len(), width]).expect("the shape holds the rows");
    (graph, rows)
}

/// Each node's mean in-edge feature row (zeros for a node without in-edges), `[n, width]`.
pub(crate) fn mean_in_edge_rows(graph: &Csr, edge_rows: &[f32], width: usize) -> Vec<f32> {
    let n = graph.num_nodes();
    let mut out = vec![0f32; n * width];
    for v in 0..n {
        let (lo, hi) = (graph.row_ptr[v] as usize, graph.row_ptr[v + 1] as usize);
        if hi == lo {
            continue;
        }
        let row = &mut out[v * width..(v + 1) * width];
        for e in lo..hi {
            for (o, &x) in row.iter_mut().zip(&edge_rows[e * width..(e + 1) * width]) {
                *o += x;
            }
        }
        let count = (hi - lo) as f32;
        row.iter_mut().for_each(|o| *o /= count);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_rows_follow_their_edges_into_the_csr_and_reverses() {
        // Edges 0: 2 -> 0, 1: 0 -> 1, 2: 1 -> 1 (a self-loop), rows [e, 10 e].
        let features = [0.0, 0.0, 1.0, 10.0, 2.0, 20.0];
        let (g, rows) = csr_with_edge_rows(3, &[2, 0, 1], &[0, 1, 1], true, &features, 2);
        // Row 0 (in-edges of 0): 1 -> 0 (edge 1 reversed), 2 -> 0 (edge 0).
        // Row 1: 0 -> 1 (edge 1), 1 -> 1 (edge 2). Row 2: 0 -> 2 (edge 0 reversed).
        assert_eq!(g.row_ptr, vec![0, 2, 4, 5]);
        assert_eq!(g.col_idx, vec![1, 2, 0, 1, 0]);
        assert_eq!(
            rows.as_slice::<f32>().unwrap(),
            &[1.0, 10.0, 0.0, 0.0, 1.0, 10.0, 2.0, 20.0, 0.0, 0.0]
        );
        let means = mean_in_edge_rows(&g, rows.as_slice::<f32>().unwrap(), 2);
        assert_eq!(means, vec![0.5, 5.0, 1.5, 15.0, 0.0, 0.0]);
    }

    #[test]
    fn binary_targets_take_0_1_and_missing_and_refuse_the_rest() {
        let path = Path::new("node-label.csv.gz");
        let t = binary_targets(vec![0.0, 1.0, f64::NAN, -1.0], 2, 2, path).unwrap();
        assert_eq!(t.width, 2);
        assert_eq!(&t.values[..2], &[0.0, 1.0]);
        assert!(t.values[2].is_nan() && t.values[3].is_nan());
        let err = binary_targets(vec![0.0, 2.0], 2, 1, path).unwrap_err();
        assert!(err.to_string().contains("label 1 of node 0 is 2"), "{err}");
    }
}
