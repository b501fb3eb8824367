//! Arrays already in memory (a PyG `Data`'s tensors, handed over by the Python package without
//! a copy) to a dataset directory: the CSR built in bounded passes over the edge index, the
//! features copied a chunk of rows at a time, the edges kept as given (duplicates and
//! self-loops included, as PyG's layers see them) and each edge's weight moved to its CSR
//! slot.

use std::path::{Path, PathBuf};

use graphloom_io::{MappedNpy, NpyWriter};

use super::edgelist::array_chunks;
use super::stream_csr::{write_csr, CsrOptions, EdgeStream, EdgeVisitor, Phase, Progress};
use graphloom_graph::format::dataset::{check_split_ids, count_classes, write_splits};
use graphloom_graph::format::output_dir::{write_dir_atomic, OutputKind};
use graphloom_graph::{Error, Meta, Result};

/// Rows of features converted per chunk.
const FEATURE_CHUNK: usize = 1 << 22;

/// A feature table in memory, `[num_nodes, dim]` in C order.
#[derive(Clone, Copy, Debug)]
pub enum FeatureRows<'a> {
    /// float32, stored as is.
    F32(&'a [f32]),
    /// float64, stored as float32.
    F64(&'a [f64]),
    /// bfloat16 bits, stored as bf16.
    Bf16(&'a [u16]),
}

/// A graph and its node data in memory.
pub struct ArraysInput<'a> {
    /// The dataset's name.
    pub name: &'a str,
    /// The number of nodes.
    pub num_nodes: usize,
    /// PyG's `edge_index`: `[2, E]` in C order, sources first, messages flowing source to
    /// destination.
    pub edge_index: &'a [i64],
    /// Node features and their width.
    pub features: Option<(FeatureRows<'a>, usize)>,
    /// A class per node, -1 for a node without a label [default: every node in class 0].
    pub labels: Option<&'a [i64]>,
    /// Train, validation and test node ids.
    pub splits: [&'a [i64]; 3],
    /// What each split is called in errors (`train_mask`, ...).
    pub split_names: [&'a str; 3],
    /// A weight per edge, in the order of `edge_index`.
    pub edge_weight: Option<&'a [f32]>,
}

/// Pairs `(source, destination)` of an `[2, E]` edge index in memory.
pub(crate) struct EdgeIndex<'a>(pub(crate) &'a [i64]);

/// The number of values of a feature table.
pub(crate) fn feature_len(rows: FeatureRows<'_>) -> usize {
    match rows {
        FeatureRows::F32(v) => v.len(),
        FeatureRows::F64(v) => v.len(),
        FeatureRows::Bf16(v) => v.len(),
    }
}

impl EdgeStream for EdgeIndex<'_> {
    fn len_hint(&self) -> Option<u64> {
        Some(self.0.len() as u64 / 2)
    }

    fn for_each_chunk(&self, visit: EdgeVisitor<'_>) -> Result<()> {
        array_chunks(self.0, false, visit)
    }
}

/// Writes `input` into the dataset directory `dir` (through a temporary directory renamed into
/// place), holding at most `buffer_bytes` of edges at a time besides per-node arrays (and, with
/// edge weights, four bytes and a bit per edge). Returns its `meta.json`.
pub fn write(
    input: &ArraysInput<'_>,
    dir: &Path,
    buffer_bytes: usize,
    progress: Progress<'_>,
) -> Result<Meta> {
    let n = input.num_nodes;
    let origin = Path::new("edge_index");
    if !input.edge_index.len().is_multiple_of(2) {
        return Err(Error::invalid(origin, "expected shape [2, E]"));
    }
    let num_edges = input.edge_index.len() / 2;
    if let Some(w) = input.edge_weight {
        if w.len() != num_edges {
            return Err(Error::invalid(
                "edge_weight",
                format!("{} weights for {num_edges} edges", w.len()),
            ));
        }
        graphloom_graph::format::dataset::check_edge_weights(Path::new("edge_weight"), w)?;
    }
    let labels: Vec<i64> = match input.labels {
        Some(l) if l.len() != n => {
            return Err(Error::invalid(
                "y",
                format!("{} labels for {n} nodes", l.len()),
            ))
        }
        Some(l) => l.to_vec(),
        None => vec![0; n],
    };
    let feat_dim = input.features.map_or(0, |(_, d)| d);
    if let Some((rows, dim)) = input.features {
        let len = feature_len(rows);
        if Some(len) != n.checked_mul(dim) {
            return Err(Error::invalid(
                "x",
                format!("{len} values for {n} nodes of {dim} features"),
            ));
        }
    }
    let splits: Vec<Vec<usize>> = input
        .splits
        .iter()
        .zip(input.split_names)
        .map(|(ids, name)| {
            ids.iter()
                .map(|&v| {
                    usize::try_from(v)
                        .ok()
                        .filter(|&v| v < n)
                        .ok_or_else(|| Error::invalid(name, format!("node {v} is not in 0..{n}")))
                })
                .collect()
        })
        .collect::<Result<_>>()?;
    let split_refs = [&splits[0][..], &splits[1][..], &splits[2][..]];
    check_split_ids(input.split_names.map(PathBuf::from), split_refs, &labels)?;
    let mut meta = Meta {
        name: input.name.to_string(),
        num_nodes: n,
        num_edges,
        feat_dim,
        feat_dtype: match input.features {
            Some((FeatureRows::Bf16(_), _)) => "bf16".into(),
            _ => "f32".into(),
        },
        num_classes: count_classes(&labels, Path::new("y"))?,
        directed: true,
    };
    let needed =
        12 * num_edges as u64 + 8 * (n as u64 + 1) + 8 * n as u64 * 2 + 4 * (n * feat_dim) as u64;
    graphloom_graph::disk::check_free_space(dir, needed, "the dataset")?;
    write_dir_atomic(dir, OutputKind::Dataset, &[], |tmp| {
        let options = CsrOptions {
            simple: false,
            buffer_bytes,
        };
        write_csr(
            tmp,
            n,
            &EdgeIndex(input.edge_index),
            origin,
            &options,
            progress,
        )?;
        meta.directed = !place_weights(tmp, input, progress)?;
        if let Some((rows, dim)) = input.features {
            write_features(&tmp.join("node_feat.npy"), rows, n, dim, progress)?;
        }
        graphloom_graph::npy::write(&tmp.join("node_label.npy"), &labels, &[n])?;
        write_splits(tmp, split_refs)?;
        progress(Phase::Labels, n as u64, n as u64);
        meta.write(tmp)
    })?;
    Ok(meta)
}

/// The CSR written in `dir` (ids of either width), mapped.
enum Columns {
    I32(MappedNpy<i32>),
    I64(MappedNpy<i64>),
}

impl Columns {
    fn open(path: &Path) -> Result<Columns> {
        Ok(match graphloom_graph::npy::read_header(path)?.dtype {
            graphloom_graph::npy::NpyDType::I32 => Columns::I32(MappedNpy::open(path)?),
            _ => Columns::I64(MappedNpy::open(path)?),
        })
    }

    fn get(&self, i: usize) -> i64 {
        match self {
            Columns::I32(c) => i64::from(c[i]),
            Columns::I64(c) => c[i],
        }
    }
}

/// Writes `edge_weight.npy` (each weight of `input` at its edge's CSR slot) when the input has
/// weights, and returns whether every edge has its reverse (an undirected graph).
fn place_weights(dir: &Path, input: &ArraysInput<'_>, progress: Progress<'_>) -> Result<bool> {
    let row_ptr = MappedNpy::<i64>::open(&dir.join("csr_row_ptr.npy"))?;
    let cols = Columns::open(&dir.join("csr_col_idx.npy"))?;
    let num_edges = row_ptr[input.num_nodes] as usize;
    // The first slot of row `d` holding source `s` (rows are sorted by source).
    let slot = |s: i64, d: usize| -> Option<usize> {
        let (mut lo, mut hi) = (row_ptr[d] as usize, row_ptr[d + 1] as usize);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if cols.get(mid) < s {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (lo < row_ptr[d + 1] as usize && cols.get(lo) == s).then_some(lo)
    };
    let undirected = (0..input.num_nodes).all(|d| {
        (row_ptr[d] as usize..row_ptr[d + 1] as usize)
            .all(|k| slot(d as i64, cols.get(k) as usize).is_some())
    });
    if let Some(weights) = input.edge_weight {
        let (src, dst) = input.edge_index.split_at(num_edges);
        let mut placed = vec![f32::NAN; num_edges];
        let mut taken = vec![0u64; num_edges.div_ceil(64)];
        for (k, (&s, &d)) in src.iter().zip(dst).enumerate() {
            // Duplicate edges take their row's equal slots in turn.
            let mut at = slot(s, d as usize).expect("every edge was placed in its row");
            while taken[at / 64] & (1 << (at % 64)) != 0 {
                at += 1;
            }
            taken[at / 64] |= 1 << (at % 64);
            placed[at] = weights[k];
            if k % (1 << 20) == 0 {
                progress(Phase::Edges, k as u64, num_edges as u64);
            }
        }
        graphloom_graph::npy::write(&dir.join("edge_weight.npy"), &placed, &[num_edges])?;
    }
    Ok(undirected)
}

/// Fails on the first non-finite value of `values`, the features from element `first` on of
/// rows `dim` wide.
fn check_finite(values: &[f32], first: usize, dim: usize) -> Result<()> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(Error::invalid(
            "x",
            format!(
                "non-finite feature at node {}, column {}",
                (first + i) / dim.max(1),
                (first + i) % dim.max(1)
            ),
        )),
        None => Ok(()),
    }
}

/// Writes `[n, dim]` feature rows as `.npy` a chunk at a time, refusing a non-finite value:
/// bf16 as its bits, the others as f32.
pub(crate) fn write_features(
    path: &Path,
    rows: FeatureRows<'_>,
    n: usize,
    dim: usize,
    progress: Progress<'_>,
) -> Result<()> {
    match rows {
        FeatureRows::Bf16(bits) => {
            let mut out = NpyWriter::<u16>::create(path, &[n, dim])?;
            for (c, chunk) in bits.chunks(FEATURE_CHUNK).enumerate() {
                let values: Vec<f32> = chunk
                    .iter()
                    .map(|&b| f32::from_bits(u32::from(b) << 16))
                    .collect();
                check_finite(&values, c * FEATURE_CHUNK, dim)?;
                out.write(chunk)?;
            }
            Ok(out.finish()?)
        }
        FeatureRows::F32(v) => write_f32(path, n, dim, progress, |r| v[r].to_vec()),
        FeatureRows::F64(v) => write_f32(path, n, dim, progress, |r| {
            v[r].iter().map(|&x| x as f32).collect()
        }),
    }
}

/// Writes `[n, dim]` f32 rows as `.npy`, each chunk of elements made by `chunk`.
fn write_f32(
    path: &Path,
    n: usize,
    dim: usize,
    progress: Progress<'_>,
    chunk: impl Fn(std::ops::Range<usize>) -> Vec<f32>,
) -> Result<()> {
    let mut out = NpyWriter::<f32>::create(path, &[n, dim])?;
    let (total, mut done) = (n * dim, 0);
    while done < total {
        let end = (done + FEATURE_CHUNK).min(total);
        let values = chunk(done..end);
        check_finite(&values, done, dim)?;
        out.write(&values)?;
        done = end;
        progress(Phase::Features, (done / dim.max(1)) as u64, n as u64);
    }
    Ok(out.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use graphloom_graph::Dataset;

    fn input<'a>(edge_index: &'a [i64], weights: Option<&'a [f32]>) -> ArraysInput<'a> {
        ArraysInput {
            name: "t",
            num_nodes: 3,
            edge_index,
            features: None,
            labels: Some(&[0, 1, 0]),
            splits: [&[0], &[1], &[2]],
            split_names: ["train_mask", "val_mask", "test_mask"],
            edge_weight: weights,
        }
    }

    #[test]
    fn edges_are_kept_as_given_with_their_weights_in_csr_order() {
        let dir = std::env::temp_dir().join(format!("graphloom-arrays-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // Sources then destinations: 2->0, 1->0, 2->0 again, 0->1, 0->0 (a self-loop).
        let edges = [2, 1, 2, 0, 0, 0, 0, 0, 1, 0];
        let weights = [1.0, 2.0, 3.0, 4.0, 5.0];
        let meta = write(&input(&edges, Some(&weights)), &dir, 1 << 20, &|_, _, _| {}).unwrap();
        assert_eq!((meta.num_edges, meta.directed), (5, true));
        let ds = Dataset::load(&dir).unwrap();
        assert_eq!(ds.graph.row_ptr, vec![0, 4, 5, 5]);
        assert_eq!(ds.graph.col_idx, vec![0, 1, 2, 2, 0]);
        // Duplicate edges take their weights in the order given.
        assert_eq!(ds.edge_weight.unwrap(), vec![5.0, 2.0, 1.0, 3.0, 4.0]);
        assert_eq!(
            (ds.train_idx, ds.valid_idx, ds.test_idx),
            (vec![0], vec![1], vec![2])
        );
        std::fs::remove_dir_all(&dir).unwrap();
        // Every edge with its reverse: undirected.
        let meta = write(&input(&[0, 1, 1, 0], None), &dir, 1 << 20, &|_, _, _| {}).unwrap();
        assert!(!meta.directed);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_arrays_are_refused_naming_the_array() {
        let dir = std::env::temp_dir().join(format!("graphloom-arrays-bad-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let err = write(&input(&[0, 7], None), &dir, 1 << 20, &|_, _, _| {}).unwrap_err();
        assert!(err.to_string().starts_with("edge_index: "), "{err}");
        let err = write(
            &input(&[0, 1], Some(&[1.0, 2.0])),
            &dir,
            1 << 20,
            &|_, _, _| {},
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("edge_weight: 2 weights for 1 edges"),
            "{err}"
        );
        let mut bad_split = input(&[0, 1], None);
        bad_split.splits = [&[0], &[0], &[]];
        let err = write(&bad_split, &dir, 1 << 20, &|_, _, _| {}).unwrap_err();
        assert!(err.to_string().contains("val_mask"), "{err}");
        assert!(!dir.exists(), "nothing is left of a refused write");
    }
}
