//! The OGB node-property raw layouts: `raw/edge.csv.gz` (one `src,dst` per line),
//! `raw/node-feat.csv.gz`, `raw/node-label.csv.gz`, `raw/num-node-list.csv.gz`, and
//! `split/<scheme>/{train,valid,test}.csv.gz` ([`convert`], in memory); or, for the largest
//! datasets (ogbn-papers100M), `raw/data.npz` and `raw/node-label.npz` ([`write_npz`],
//! streamed in bounded memory). The heterogeneous layout (ogbn-mag) is [`super::ogb_hetero`]'s.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;

use super::assemble::{assemble, name_from, Parts};
use super::edgelist::EdgeFile;
use super::features::{copy_features, stream_header};
use super::ogb_edges::{binary_targets, read_rows};
use super::stream_csr::{write_csr, BothDirections, CsrOptions, EdgeStream, Progress};
use graphloom_graph::format::dataset::{check_split_ids, count_classes, write_splits};
use graphloom_graph::format::output_dir::{write_dir_atomic, OutputKind};
use graphloom_graph::{Dataset, Error, Meta, Result, UNLABELLED};

/// Calls `row(line_number, values)` with the comma-separated numbers of each non-empty line
/// of the gzip text file `path`, read as a stream: memory holds one line, not the file.
pub(crate) fn for_each_row<T: std::str::FromStr>(
    path: &Path,
    mut row: impl FnMut(usize, &[T]) -> Result<()>,
) -> Result<()> {
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut reader = BufReader::with_capacity(1 << 20, GzDecoder::new(f));
    let (mut line, mut values) = (String::new(), Vec::new());
    let mut number = 0;
    loop {
        line.clear();
        let read = reader
            .read_line(&mut line)
            .map_err(|e| Error::format(path, format!("not a readable gzip text file: {e}")))?;
        if read == 0 {
            return Ok(());
        }
        number += 1;
        if line.trim().is_empty() {
            continue;
        }
        values.clear();
        for tok in line.trim().split(',') {
            values.push(tok.trim().parse::<T>().map_err(|_| {
                Error::format(
                    path,
                    format!("line {number}: '{}' is not a number", tok.trim()),
                )
            })?);
        }
        row(number, &values)?;
    }
}

/// The first value of every row.
pub(crate) fn first_values<T: std::str::FromStr + Copy>(path: &Path) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for_each_row::<T>(path, |_, r| {
        out.extend(r.first().copied());
        Ok(())
    })?;
    Ok(out)
}

/// Converts the OGB dataset in `dir` (the folder holding `raw/` and `split/`).
pub fn convert(dir: &Path, undirected: bool) -> Result<Dataset> {
    let raw = dir.join("raw");
    let edge_path = raw.join("edge.csv.gz");
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for_each_row::<i64>(&edge_path, |line, e| {
        let [s, d] = e[..] else {
            return Err(Error::format(
                &edge_path,
                format!("line {line}: expected src,dst"),
            ));
        };
        src.push(s);
        dst.push(d);
        Ok(())
    })?;
    // ogbn-proteins has no node features (each node then gets its in-edges' mean) but edge
    // features, a row per line of edge.csv.gz.
    let feat_path = raw.join("node-feat.csv.gz");
    let (features, feat_dim) = match feat_path.exists() {
        true => read_rows::<f32>(&feat_path)?,
        false => (Vec::new(), 0),
    };
    let rows = features.len() / feat_dim.max(1);
    let edge_feat_path = raw.join("edge-feat.csv.gz");
    let edge_features = match edge_feat_path.exists() {
        true => Some(read_rows::<f32>(&edge_feat_path)?),
        false => None,
    };
    let num_nodes_path = raw.join("num-node-list.csv.gz");
    let num_nodes = if num_nodes_path.exists() {
        *first_values::<usize>(&num_nodes_path)?
            .first()
            .ok_or_else(|| Error::format(&num_nodes_path, "empty"))?
    } else {
        rows
    };
    // One class per node, or (ogbn-proteins) several binary labels.
    let label_path = raw.join("node-label.csv.gz");
    let (label_values, label_width) = read_rows::<f64>(&label_path)?;
    let (labels, targets) = match label_width {
        0 | 1 => (Some(classes(label_values, &label_path)?), None),
        width => (
            None,
            Some(binary_targets(label_values, width, num_nodes, &label_path)?),
        ),
    };
    let (split, split_files) = read_split(dir)?;
    let name = name_from(dir, "ogb").replace('_', "-");
    let ds = assemble(
        Parts {
            name,
            num_nodes,
            src,
            dst,
            features,
            feat_dim,
            labels,
            targets,
            edge_features,
            split: Some(split),
            undirected,
            seed: 0,
        },
        dir,
    )?;
    check_split_ids(
        split_files,
        [&ds.train_idx, &ds.valid_idx, &ds.test_idx],
        &ds.labels,
    )?;
    Ok(ds)
}

/// The largest class a label may name: classes are counted in 32 bits.
const MAX_CLASS: f64 = i32::MAX as f64 - 1.0;

/// The classes of OGB's label values read from `path`: whole numbers from 0, NaN (or -1) for a
/// node without a label (-1); anything else (a fraction, an infinity, another negative number)
/// is refused.
pub(crate) fn classes(values: Vec<f64>, path: &Path) -> Result<Vec<i64>> {
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            // Unlabelled nodes are NaN in OGB's files (papers100M labels 1.4% of its nodes).
            v if v.is_nan() || v == UNLABELLED as f64 => Ok(UNLABELLED),
            v if v.fract() == 0.0 && (0.0..=MAX_CLASS).contains(&v) => Ok(v as i64),
            v => Err(Error::invalid(
                path,
                format!(
                    "label of node {i} is {v}: labels are whole classes 0..={MAX_CLASS}, or NaN \
                     (or -1) for a node without one"
                ),
            )),
        })
        .collect()
}

/// The split ids of the OGB dataset in `dir` (its first `split/<scheme>` folder), and the files
/// they come from.
fn read_split(dir: &Path) -> Result<([Vec<usize>; 3], [PathBuf; 3])> {
    let split_root = dir.join("split");
    let scheme: PathBuf = std::fs::read_dir(&split_root)
        .map_err(|e| Error::io(&split_root, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.is_dir())
        .ok_or_else(|| Error::format(&split_root, "no split scheme folder"))?;
    let files = ["train", "valid", "test"].map(|name| scheme.join(format!("{name}.csv.gz")));
    let ids = |s: usize| first_values::<usize>(&files[s]);
    Ok(([ids(0)?, ids(1)?, ids(2)?], files))
}

/// Whether `dir` holds the `.npz` raw layout of the largest OGB datasets (ogbn-papers100M):
/// `raw/data.npz` (`edge_index` `[2, E]`, `node_feat` `[N, F]`) and `raw/node-label.npz`
/// (`node_label`, NaN for a node without a label).
pub fn has_npz_layout(dir: &Path) -> bool {
    dir.join("raw/data.npz").exists()
}

/// Opens member `name` (`name.npy` in the archive) of the `.npz` at `path` and hands its
/// stream to `read`.
fn with_member<T>(
    path: &Path,
    name: &str,
    read: impl FnOnce(&mut dyn std::io::Read) -> Result<T>,
) -> Result<T> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut zip = zip::ZipArchive::new(file)
        .map_err(|e| Error::format(path, format!("not an .npz archive: {e}")))?;
    let mut entry = zip
        .by_name(&format!("{name}.npy"))
        .map_err(|_| Error::format(path, format!("missing array '{name}'")))?;
    read(&mut entry)
}

/// Converts the `.npz` raw layout of `dir` (see [`has_npz_layout`]) into the dataset directory
/// `out` in bounded memory: `edge_index` is copied out of the archive once (to a temporary
/// `.npy` in the output's temporary directory) and the CSR built by passes over it, features
/// are copied a chunk of rows at a time. Nodes without a label are -1 (they must not be in a
/// split). With `undirected`, every edge is stored both ways, self-loops and duplicates
/// dropped.
pub fn write_npz(
    dir: &Path,
    undirected: bool,
    out: &Path,
    buffer_bytes: usize,
    progress: Progress<'_>,
) -> Result<Meta> {
    let data = dir.join("raw/data.npz");
    let label_path = dir.join("raw/node-label.npz");
    let labels: Vec<i64> = with_member(&label_path, "node_label", |r| {
        let mut bytes = Vec::new();
        r.read_to_end(&mut bytes)
            .map_err(|e| Error::io(&label_path, e))?;
        classes(
            graphloom_graph::npy::decode_f64(&bytes, &label_path)?.data,
            &label_path,
        )
    })?;
    let n = labels.len();
    let num_classes = count_classes(&labels, &label_path)?;
    let (split, split_files) = read_split(dir)?;
    for (ids, path) in split.iter().zip(&split_files) {
        if let Some(&v) = ids.iter().find(|&&v| v >= n) {
            return Err(Error::invalid(
                path,
                format!("split node {v} is not a node of the {n}"),
            ));
        }
    }
    check_split_ids(split_files, [&split[0], &split[1], &split[2]], &labels)?;
    let feat_dim = with_member(&data, "node_feat", |r| {
        let (header, _) = stream_header(r, &data)?;
        match header.shape[..] {
            [rows, cols] if rows == n => Ok(cols),
            _ => Err(Error::format(
                &data,
                format!(
                    "node_feat of shape {:?} for {n} labelled-or-not nodes",
                    header.shape
                ),
            )),
        }
    })?;
    let mut meta = Meta {
        name: name_from(dir, "ogb").replace('_', "-"),
        num_nodes: n,
        num_edges: 0,
        feat_dim,
        feat_dtype: "f32".into(),
        num_classes,
        directed: !undirected,
    };
    let archive_bytes = std::fs::metadata(&data)
        .map_err(|e| Error::io(&data, e))?
        .len();
    graphloom_graph::disk::check_free_space(
        out,
        archive_bytes + 4 * (n * feat_dim) as u64 + 24 * n as u64,
        "the converted dataset",
    )?;
    write_dir_atomic(out, OutputKind::Dataset, &[dir], |tmp| {
        let edge_copy = tmp.join(".edge_index.npy");
        with_member(&data, "edge_index", |r| {
            let mut f = std::fs::File::create(&edge_copy).map_err(|e| Error::io(&edge_copy, e))?;
            std::io::copy(r, &mut f).map_err(|e| match e.kind() {
                // The archive's bytes, not the copy, are damaged.
                std::io::ErrorKind::InvalidData => {
                    Error::format(&data, format!("array 'edge_index': {e}"))
                }
                _ => Error::io(&edge_copy, e),
            })?;
            Ok(())
        })?;
        let edges = EdgeFile::open(&edge_copy).map_err(|e| of_member(e, &data, "edge_index"))?;
        let both;
        let stream: &dyn EdgeStream = if undirected {
            both = BothDirections(&edges);
            &both
        } else {
            &edges
        };
        let options = CsrOptions {
            simple: undirected,
            buffer_bytes,
        };
        meta.num_edges = write_csr(tmp, n, stream, &data, &options, progress)? as usize;
        drop(edges);
        std::fs::remove_file(&edge_copy).map_err(|e| Error::io(&edge_copy, e))?;
        with_member(&data, "node_feat", |r| {
            copy_features(r, n, feat_dim, &data, &tmp.join("node_feat.npy"), progress)
        })?;
        graphloom_graph::npy::write(&tmp.join("node_label.npy"), &labels, &[n])?;
        write_splits(tmp, [&split[0], &split[1], &split[2]])?;
        meta.write(tmp)
    })?;
    Ok(meta)
}

/// An error about the copy of member `name` taken out of the archive `path` into a temporary
/// file, told of the archive: the copy is this run's, the member is what the user can fix.
fn of_member(e: Error, path: &Path, name: &str) -> Error {
    match e {
        Error::File(graphloom_io::Error::Format { msg, .. }) | Error::Invalid { msg, .. } => {
            Error::format(path, format!("array '{name}': {msg}"))
        }
        other => other,
    }
}
