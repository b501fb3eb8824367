//! `edge_feat.npy`: a feature row per edge, `[num_edges, edge_dim]`, f32 or bf16 (stored as
//! uint16, as `node_feat.npy`), row `e` for the edge at position `e` of `csr_col_idx.npy` (the
//! CSR order by destination). GINE reads it; every other model ignores it.
//!
//! The rows follow the edges wherever they go by edge id: a sampled block's
//! [`crate::sample::Block::edge_ids`] and an induced subgraph's
//! [`crate::subgraph::InducedSubgraph::edge_ids`] are positions in `csr_col_idx.npy`, so a
//! batch gathers its edges' rows with [`gather_edge_rows`].

use std::path::Path;

use graphloom_tensor::{DType, Tensor};

use super::dataset::load_rows;
use crate::{npy, Error, Result};

/// The file's name in a dataset directory.
pub const EDGE_FEATURES_FILE: &str = "edge_feat.npy";

/// The edge features of the dataset directory `dir` of `num_edges` edges, when it has
/// `edge_feat.npy`: checked for shape (one row per edge), dtype (f32, or bf16 as uint16) and
/// non-finite values, each an error naming the file.
pub fn read_edge_features(dir: &Path, num_edges: usize) -> Result<Option<Tensor>> {
    let path = dir.join(EDGE_FEATURES_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let header = npy::read_header(&path)?;
    let [rows, cols] = header.shape[..] else {
        return Err(Error::invalid(
            &path,
            format!(
                "shape {:?}: edge features are 2-D, [num_edges, edge_dim]",
                header.shape
            ),
        ));
    };
    if rows != num_edges {
        return Err(Error::invalid(
            &path,
            format!(
                "has {rows} rows for {num_edges} edges: one row per edge, in the order of \
                 csr_col_idx.npy"
            ),
        ));
    }
    let dtype = match header.dtype {
        npy::NpyDType::U16 => "bf16",
        npy::NpyDType::F32 => "f32",
        other => {
            return Err(Error::invalid(
                &path,
                format!("holds {other:?}; edge features are f32, or bf16 stored as uint16"),
            ))
        }
    };
    Ok(Some(load_rows(&path, rows, cols, dtype, "edge")?))
}

/// The rows of `features` (`[num_edges, d]`) of the edges `edge_ids`, in order, as `dtype`; an
/// id that is not an edge's is an error.
pub fn gather_edge_rows(features: &Tensor, edge_ids: &[i64], dtype: DType) -> Result<Tensor> {
    let (edges, cols) = features.dims2();
    if let Some(&bad) = edge_ids.iter().find(|&&e| e < 0 || e as usize >= edges) {
        return Err(Error::argument(
            "edge ids",
            format!("edge {bad} is not one of the {edges} edges with features"),
        ));
    }
    let row_bytes = cols * features.dtype().size_in_bytes();
    let mut rows = Tensor::zeros(&[edge_ids.len(), cols], features.dtype());
    let (from, to) = (features.as_bytes(), rows.as_mut_bytes());
    for (out, &e) in to.chunks_exact_mut(row_bytes.max(1)).zip(edge_ids) {
        let at = e as usize * row_bytes;
        out.copy_from_slice(&from[at..at + row_bytes]);
    }
    Ok(rows.cast(dtype)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, values: &[f32], shape: &[usize]) {
        npy::write(&dir.join(EDGE_FEATURES_FILE), values, shape).unwrap();
    }

    #[test]
    fn reads_rows_and_refuses_a_wrong_length_shape_or_value() {
        let dir = std::env::temp_dir().join(format!("graphloom-edge-feat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(read_edge_features(&dir, 3).unwrap().is_none());
        write(&dir, &[1., 2., 3., 4., 5., 6.], &[3, 2]);
        let t = read_edge_features(&dir, 3).unwrap().unwrap();
        assert_eq!(t.shape(), &[3, 2]);
        let rows = gather_edge_rows(&t, &[2, 0], DType::F64).unwrap();
        assert_eq!(rows.as_slice::<f64>().unwrap(), &[5., 6., 1., 2.]);
        assert!(gather_edge_rows(&t, &[3], DType::F32).is_err());
        let err = read_edge_features(&dir, 4).unwrap_err().to_string();
        assert!(err.contains("3 rows for 4 edges"), "{err}");
        write(&dir, &[1., 2., 3.], &[3]);
        let err = read_edge_features(&dir, 3).unwrap_err().to_string();
        assert!(err.contains("2-D"), "{err}");
        write(&dir, &[1., f32::NAN, 3., 4.], &[2, 2]);
        let err = read_edge_features(&dir, 2).unwrap_err().to_string();
        assert!(err.contains("edge 0, column 1"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
