//! The GNN-benchmark `.npz` layout (Shchur et al.): adjacency as CSR (`adj_data`,
//! `adj_indices`, `adj_indptr`, `adj_shape`; row = source), attributes as CSR (`attr_*`) or
//! dense (`attr_matrix`), and `labels`.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use super::assemble::{assemble, name_from, Parts};
use super::features::{dense_size, offsets_ok};
use graphloom_graph::npy::{self, NpyArray};
use graphloom_graph::{Dataset, Error, Result};

/// Converts `path`; the graph is made undirected when `undirected`; a seeded 60/20/20 split.
pub fn convert(path: &Path, undirected: bool, seed: u64) -> Result<Dataset> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut zip = zip::ZipArchive::new(file)
        .map_err(|e| Error::format(path, format!("not an .npz archive: {e}")))?;
    let mut arrays: HashMap<String, NpyArray<f64>> = HashMap::new();
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| Error::format(path, e.to_string()))?;
        let name = entry.name().trim_end_matches(".npy").to_string();
        if !(name.starts_with("adj_") || name.starts_with("attr_") || name == "labels") {
            continue;
        }
        let mut bytes = Vec::new();
        entry
            .read_to_end(&mut bytes)
            .map_err(|e| Error::format(path, format!("{name}: {e}")))?;
        let array = decode(&name, &bytes, &path.join(&name))
            .map_err(|e| Error::format(path, format!("{name}: {e}")))?;
        arrays.insert(name, array);
    }
    let get = |k: &str| {
        arrays
            .get(k)
            .ok_or_else(|| Error::format(path, format!("missing array '{k}'")))
    };
    let indptr = &get("adj_indptr")?.data;
    let indices = &get("adj_indices")?.data;
    let n = indptr.len().saturating_sub(1);
    if !offsets_ok(indptr, n, indices.len()) {
        return Err(Error::format(
            path,
            format!(
                "adj_indptr is not {} offsets from 0 to the {} adj_indices",
                n + 1,
                indices.len()
            ),
        ));
    }
    let (mut src, mut dst) = (
        Vec::with_capacity(indices.len()),
        Vec::with_capacity(indices.len()),
    );
    for r in 0..n {
        for e in indptr[r] as usize..indptr[r + 1] as usize {
            src.push(r as i64);
            dst.push(indices[e] as i64);
        }
    }
    let (features, feat_dim) = if let Ok(m) = get("attr_matrix") {
        (
            m.data.iter().map(|&v| v as f32).collect(),
            m.shape.get(1).copied().unwrap_or(0),
        )
    } else {
        let (ap, ai, ad) = (
            &get("attr_indptr")?.data,
            &get("attr_indices")?.data,
            &get("attr_data")?.data,
        );
        let cols = match get("attr_shape").ok().and_then(|s| s.data.get(1).copied()) {
            Some(c) => c as usize,
            None => ai.iter().fold(0.0f64, |a, &b| a.max(b + 1.0)) as usize,
        };
        if ai.len() != ad.len() || !offsets_ok(ap, n, ai.len()) {
            return Err(Error::format(
                path,
                format!(
                    "attr_indptr is not {} offsets from 0 to the {} attr_indices, or \
                     attr_indices and attr_data disagree",
                    n + 1,
                    ai.len()
                ),
            ));
        }
        let size = dense_size(n, cols, ad.len()).map_err(|msg| Error::format(path, msg))?;
        let mut dense = vec![0f32; size];
        for r in 0..n {
            for e in ap[r] as usize..ap[r + 1] as usize {
                let c = ai[e] as usize;
                if !(ai[e] >= 0.0 && c < cols) {
                    return Err(Error::format(
                        path,
                        format!("attr_indices[{e}] = {} is outside 0..{cols}", ai[e]),
                    ));
                }
                dense[r * cols + c] += ad[e] as f32;
            }
        }
        (dense, cols)
    };
    let labels = get("labels")?.data.iter().map(|&v| v as i64).collect();
    let name = name_from(path, "npz");
    assemble(
        Parts {
            targets: None,
            edge_features: None,
            name,
            num_nodes: n,
            src,
            dst,
            features,
            feat_dim,
            labels: Some(labels),
            split: None,
            undirected,
            seed,
        },
        path,
    )
}

/// The member `name` of the archive: node ids (`adj_indices`) as ids, signed and never a bool
/// mask, the other arrays as numbers; each as f64.
fn decode(name: &str, bytes: &[u8], origin: &Path) -> Result<NpyArray<f64>> {
    if name != "adj_indices" {
        return Ok(npy::decode_f64(bytes, origin)?);
    }
    let ids = npy::decode_ids(bytes, origin)?;
    Ok(NpyArray {
        shape: ids.shape,
        data: ids.data.into_iter().map(|v| v as f64).collect(),
    })
}
