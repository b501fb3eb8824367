//! Edge lists: a text file of `src dst` lines (spaces, tabs or commas; `#` comments) or a
//! `.npy` integer array of shape `[E, 2]` or `[2, E]`, with optional `.npy` features and labels,
//! written to a dataset directory in bounded memory: the CSR is built by passes over the edge
//! file (mapped for `.npy`, read again for text), and the features are copied in chunks.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use graphloom_io::MappedNpy;
use rayon::prelude::*;

use super::features::copy_features;
use super::split::SplitSource;
use super::stream_csr::{
    check_node_count, node_count, write_csr, BothDirections, CsrOptions, EdgeStream, EdgeVisitor,
    Phase, Progress,
};
use graphloom_graph::format::dataset::{count_classes, write_splits};
use graphloom_graph::format::output_dir::{write_dir_atomic, OutputKind};
use graphloom_graph::{npy, random_split, Error, Meta, Result};

/// Edges per chunk handed to the CSR builder.
const CHUNK: usize = 1 << 16;

/// The edges of a `.npy` array, mapped.
enum NpyEdges {
    I64(MappedNpy<i64>),
    I32(MappedNpy<i32>),
}

/// An edge file, read again at every pass.
pub(crate) struct EdgeFile {
    path: PathBuf,
    /// `Some` for a `.npy` array: the mapped ids and whether pairs are rows (`[E, 2]`).
    npy: Option<(NpyEdges, bool)>,
}

impl EdgeFile {
    pub(crate) fn open(path: &Path) -> Result<EdgeFile> {
        let npy = if path.extension().is_some_and(|e| e == "npy") {
            let header = npy::read_header(path)?;
            let rows = match header.shape[..] {
                [_, 2] => true,
                [2, _] => false,
                _ => {
                    return Err(Error::format(
                        path,
                        format!(
                            "edge array of shape {:?}; expected [E, 2] or [2, E]",
                            header.shape
                        ),
                    ))
                }
            };
            let ids = match header.dtype {
                npy::NpyDType::I64 => NpyEdges::I64(MappedNpy::open(path)?),
                npy::NpyDType::I32 => NpyEdges::I32(MappedNpy::open(path)?),
                other => {
                    return Err(Error::format(
                        path,
                        format!("edge ids of dtype {other:?}; expected int64 or int32"),
                    ))
                }
            };
            Some((ids, rows))
        } else {
            None
        };
        Ok(EdgeFile {
            path: path.to_path_buf(),
            npy,
        })
    }

    /// The text file's edges, one chunk at a time.
    fn text_chunks(&self, visit: EdgeVisitor<'_>) -> Result<()> {
        let path = &self.path;
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let reader = std::io::BufReader::with_capacity(1 << 20, file);
        let mut chunk = Vec::with_capacity(CHUNK);
        for (i, line) in reader.lines().enumerate() {
            let line = line.map_err(|e| Error::io(path, e))?;
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
            chunk.push((id()?, id()?));
            if chunk.len() == CHUNK {
                visit(&chunk)?;
                chunk.clear();
            }
        }
        visit(&chunk)
    }
}

/// Pairs `k` of an `[E, 2]` (`rows`) or `[2, E]` array, in chunks, in parallel.
pub(crate) fn array_chunks<T: Copy + Into<i64> + Sync>(
    ids: &[T],
    rows: bool,
    visit: EdgeVisitor<'_>,
) -> Result<()> {
    let edges = ids.len() / 2;
    (0..edges.div_ceil(CHUNK))
        .into_par_iter()
        .try_for_each(|c| {
            let range = c * CHUNK..((c + 1) * CHUNK).min(edges);
            let chunk: Vec<(i64, i64)> = range
                .map(|k| {
                    if rows {
                        (ids[2 * k].into(), ids[2 * k + 1].into())
                    } else {
                        (ids[k].into(), ids[edges + k].into())
                    }
                })
                .collect();
            visit(&chunk)
        })
}

impl EdgeStream for EdgeFile {
    fn len_hint(&self) -> Option<u64> {
        self.npy.as_ref().map(|(ids, _)| match ids {
            NpyEdges::I64(m) => m.len() as u64 / 2,
            NpyEdges::I32(m) => m.len() as u64 / 2,
        })
    }

    fn for_each_chunk(&self, visit: EdgeVisitor<'_>) -> Result<()> {
        match &self.npy {
            Some((NpyEdges::I64(m), rows)) => array_chunks(m, *rows, visit),
            Some((NpyEdges::I32(m), rows)) => array_chunks(m, *rows, visit),
            None => self.text_chunks(visit),
        }
    }
}

/// Where an edge list's dataset comes from and how to build it.
pub struct EdgeListInput<'a> {
    /// The edge file.
    pub edges: &'a Path,
    /// `[N, F]` features (`.npy`, any float dtype; written as f32).
    pub features: Option<&'a Path>,
    /// `[N]` integer labels (`.npy`) [default: every node in class 0].
    pub labels: Option<&'a Path>,
    /// The number of nodes [default: the features' rows, else the largest id plus one].
    pub num_nodes: Option<usize>,
    /// Store every edge in both directions, dropping self-loops and duplicates.
    pub undirected: bool,
    /// Seed of the 60/20/20 split.
    pub seed: u64,
    /// The user's split instead of the seeded one (nodes in none are left out of every
    /// split, and may then have the label -1).
    pub split: Option<SplitSource<'a>>,
}

impl EdgeListInput<'_> {
    /// The files read.
    fn paths(&self) -> Vec<&Path> {
        let mut paths: Vec<&Path> = [Some(self.edges), self.features, self.labels]
            .into_iter()
            .flatten()
            .collect();
        paths.extend(self.split.iter().flat_map(|s| s.paths()));
        paths
    }
}

/// Writes the dataset of `input` into `dir` (through a temporary directory renamed into
/// place), holding at most `buffer_bytes` of edges at a time besides the offsets (8 bytes per
/// node) and a counter per node; checks every id, the features' values and the free disk space
/// first. Returns its `meta.json`.
pub fn write(
    input: &EdgeListInput<'_>,
    dir: &Path,
    buffer_bytes: usize,
    progress: Progress<'_>,
) -> Result<Meta> {
    let file = EdgeFile::open(input.edges)?;
    let both;
    let edges: &dyn EdgeStream = if input.undirected {
        both = BothDirections(&file);
        &both
    } else {
        &file
    };
    let features = match input.features {
        Some(p) => {
            let header = npy::read_header(p)?;
            let [rows, cols] = header.shape[..] else {
                return Err(Error::format(
                    p,
                    format!("features of shape {:?}; expected [N, F]", header.shape),
                ));
            };
            Some((p, rows, cols))
        }
        None => None,
    };
    let n = match (input.num_nodes, features) {
        (Some(n), _) => n,
        (None, Some((_, rows, _))) => rows,
        (None, None) => node_count(&file, input.edges)?,
    };
    check_node_count(n, buffer_bytes, input.edges)?;
    let labels = match input.labels {
        Some(p) => {
            let l = npy::read_ints(p)?.data;
            if l.len() != n {
                return Err(Error::invalid(
                    p,
                    format!("{} labels for {n} nodes", l.len()),
                ));
            }
            // Without the user's split every node is in one, so every node needs a label.
            if let Some(i) = l.iter().position(|&c| c < 0 && input.split.is_none()) {
                return Err(Error::invalid(p, format!("label of node {i} is {}", l[i])));
            }
            l
        }
        None => vec![0; n],
    };
    let feat_dim = features.map_or(0, |f| f.2);
    if let Some((p, rows, _)) = features {
        if rows != n {
            return Err(Error::invalid(
                p,
                format!("{rows} feature rows for {n} nodes"),
            ));
        }
    }
    let edge_bytes = edges.len_hint().unwrap_or(0) * 4;
    let needed = edge_bytes + 8 * (n as u64 + 1) + 8 * n as u64 * 2 + 4 * (n * feat_dim) as u64;
    graphloom_graph::disk::check_free_space(dir, needed, "the dataset")?;
    let mut meta = Meta {
        name: super::assemble::name_from(input.edges, "edgelist"),
        num_nodes: n,
        num_edges: 0,
        feat_dim,
        feat_dtype: "f32".into(),
        num_classes: count_classes(&labels, input.labels.unwrap_or(input.edges))?,
        directed: !input.undirected,
    };
    write_dir_atomic(dir, OutputKind::Dataset, &input.paths(), |tmp| {
        let options = CsrOptions {
            simple: input.undirected,
            buffer_bytes,
        };
        meta.num_edges = write_csr(tmp, n, edges, input.edges, &options, progress)? as usize;
        if let Some((p, _, _)) = features {
            let file = std::fs::File::open(p).map_err(|e| Error::io(p, e))?;
            let mut stream = std::io::BufReader::with_capacity(1 << 20, file);
            copy_features(
                &mut stream,
                n,
                feat_dim,
                p,
                &tmp.join("node_feat.npy"),
                progress,
            )?;
        }
        npy::write(&tmp.join("node_label.npy"), &labels, &[n])?;
        let [train, valid, test] = match &input.split {
            Some(split) => split.read(&labels)?,
            None => {
                let (train, valid, test) = random_split(n, 0.6, 0.2, 0.2, input.seed);
                [train, valid, test]
            }
        };
        write_splits(tmp, [&train, &valid, &test])?;
        progress(Phase::Labels, n as u64, n as u64);
        meta.write(tmp)
    })?;
    Ok(meta)
}
