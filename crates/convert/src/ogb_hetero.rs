//! OGB's heterogeneous node-property raw layout (ogbn-mag) written as a heterogeneous dataset
//! directory ([`graphloom_graph::HeteroDataset`]'s layout):
//!
//! - `raw/num-node-dict.csv.gz`: a header of node type names and one row of their counts;
//! - `raw/relations/<src>___<rel>___<dst>/edge.csv.gz`: one `src,dst` per line, ids local to
//!   their types;
//! - `raw/node-feat/<type>/node-feat.csv.gz`: a row of features per node (types without the
//!   file have none);
//! - `raw/node-label/<type>/node-label.csv.gz`: one class per node, of the one labelled type
//!   (the target);
//! - `split/<scheme>/<target>/{train,valid,test}.csv.gz`: node ids of the target type.
//!
//! With `add_reverse`, each relation is stored reversed as well (`rev_<rel>`, as PyG's
//! `ToUndirected` adds them), so that every type receives messages. The edges are read into
//! memory (8 bytes an edge: ogbn-mag's 21M take 170 MB), each relation and its reverse written
//! by the streaming CSR writer without a copy, atomically, then opened and checked.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;

use super::assemble::name_from;
use super::ogb::{classes, first_values, for_each_row};
use super::stream_csr::{write_csr_between, CsrOptions, EdgeStream, EdgeVisitor};
use graphloom_graph::format::dataset::count_classes;
use graphloom_graph::format::hetero::{relation_name, HeteroMeta, NodeType};
use graphloom_graph::format::meta::HETERO_FORMAT;
use graphloom_graph::format::output_dir::{write_dir_atomic, OutputKind};
use graphloom_graph::{npy, Error, HeteroDataset, Result};

/// Whether `dir` holds OGB's heterogeneous raw layout (`raw/num-node-dict.csv.gz`).
pub fn has_layout(dir: &Path) -> bool {
    dir.join("raw/num-node-dict.csv.gz").is_file()
}

/// One relation's edges, ids local to their types.
struct Edges {
    relation: [String; 3],
    src: Vec<u32>,
    dst: Vec<u32>,
}

/// A relation's edges as [`write_csr_between`] reads them: as published, or turned around
/// (its reverse), without a copy.
struct Stream<'a> {
    edges: &'a Edges,
    reversed: bool,
}

impl EdgeStream for Stream<'_> {
    fn len_hint(&self) -> Option<u64> {
        Some(self.edges.src.len() as u64)
    }

    fn for_each_chunk(&self, visit: EdgeVisitor<'_>) -> Result<()> {
        let (from, to) = match self.reversed {
            false => (&self.edges.src, &self.edges.dst),
            true => (&self.edges.dst, &self.edges.src),
        };
        for (s, d) in from.chunks(1 << 16).zip(to.chunks(1 << 16)) {
            let pairs: Vec<(i64, i64)> = s
                .iter()
                .zip(d)
                .map(|(&s, &d)| (i64::from(s), i64::from(d)))
                .collect();
            visit(&pairs)?;
        }
        Ok(())
    }
}

/// Converts the OGB heterogeneous dataset in `dir` (the folder holding `raw/` and `split/`)
/// into the heterogeneous dataset directory `out`, with each relation reversed too when
/// `add_reverse`; returns the written directory, opened and checked.
pub fn write(dir: &Path, add_reverse: bool, out: &Path) -> Result<HeteroDataset> {
    let raw = dir.join("raw");
    let counts = read_counts(&raw.join("num-node-dict.csv.gz"))?;
    let published = read_relations(&raw.join("relations"), &counts)?;
    // Each relation as published, then (with `add_reverse`) each turned around.
    let mut relations: Vec<([String; 3], Stream<'_>)> = published
        .iter()
        .map(|e| {
            (
                e.relation.clone(),
                Stream {
                    edges: e,
                    reversed: false,
                },
            )
        })
        .collect();
    if add_reverse {
        relations.extend(published.iter().map(|e| {
            let r = &e.relation;
            let reverse = [r[2].clone(), format!("rev_{}", r[1]), r[0].clone()];
            (
                reverse,
                Stream {
                    edges: e,
                    reversed: true,
                },
            )
        }));
    }
    let (target, label_path) = labelled_type(&raw.join("node-label"), &counts)?;
    let labels = classes(first_values::<f64>(&label_path)?, &label_path)?;
    let n_target = counts[&target];
    if labels.len() != n_target {
        return Err(Error::invalid(
            &label_path,
            format!(
                "has {} labels for the {n_target} nodes of {target:?}",
                labels.len()
            ),
        ));
    }
    let num_classes = count_classes(&labels, &label_path)?;
    let splits = read_splits(&dir.join("split"), &target, n_target)?;
    let mut node_types = BTreeMap::new();
    let mut features = BTreeMap::new();
    for (name, &n) in &counts {
        let path = raw.join("node-feat").join(name).join("node-feat.csv.gz");
        let feat_dim = if path.is_file() {
            let (rows, dim) = read_features(&path, n)?;
            features.insert(name.clone(), (rows, dim));
            dim
        } else {
            0
        };
        node_types.insert(
            name.clone(),
            NodeType {
                num_nodes: n,
                feat_dim,
                feat_dtype: "f32".into(),
            },
        );
    }
    let meta = HeteroMeta {
        name: name_from(dir, "ogb").replace('_', "-"),
        format: HETERO_FORMAT.into(),
        node_types,
        edge_types: relations.iter().map(|(r, _)| r.clone()).collect(),
        target_node_type: target.clone(),
        num_classes,
        directed: true,
    };
    let options = CsrOptions {
        simple: false,
        buffer_bytes: crate::default_buffer_bytes(),
    };
    write_dir_atomic(out, OutputKind::Dataset, &[dir], |tmp| {
        for (relation, edges) in &relations {
            let folder = tmp.join("edges").join(relation_name(relation));
            std::fs::create_dir_all(&folder).map_err(|err| Error::io(&folder, err))?;
            let (sources, destinations) = (counts[&relation[0]], counts[&relation[2]]);
            write_csr_between(
                &folder,
                sources,
                destinations,
                edges,
                dir,
                &options,
                &|_, _, _| {},
            )?;
        }
        for name in counts.keys() {
            let folder = tmp.join("nodes").join(name);
            std::fs::create_dir_all(&folder).map_err(|err| Error::io(&folder, err))?;
            if let Some((rows, dim)) = features.get(name) {
                npy::write(&folder.join("node_feat.npy"), rows, &[counts[name], *dim])?;
            }
        }
        let folder = tmp.join("nodes").join(&target);
        npy::write(&folder.join("node_label.npy"), &labels, &[labels.len()])?;
        for (name, ids) in ["train_idx.npy", "valid_idx.npy", "test_idx.npy"]
            .iter()
            .zip(&splits)
        {
            npy::write(&folder.join(name), ids, &[ids.len()])?;
        }
        meta.write(tmp)
    })?;
    HeteroDataset::open(out)
}

/// The node types and their counts: a header of names and one row of counts.
fn read_counts(path: &Path) -> Result<BTreeMap<String, usize>> {
    let mut text = String::new();
    GzDecoder::new(std::fs::File::open(path).map_err(|e| Error::io(path, e))?)
        .read_to_string(&mut text)
        .map_err(|e| Error::format(path, format!("not a readable gzip text file: {e}")))?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return Err(Error::format(
            path,
            "expected a header of node types and a row of their counts",
        ));
    };
    let names: Vec<&str> = names.split(',').map(str::trim).collect();
    let values: Vec<&str> = values.split(',').map(str::trim).collect();
    if names.len() != values.len() || names.iter().any(|n| n.is_empty()) {
        return Err(Error::format(
            path,
            format!("{} node types for {} counts", names.len(), values.len()),
        ));
    }
    let mut counts = BTreeMap::new();
    for (name, value) in names.into_iter().zip(values) {
        let n: usize = value
            .parse()
            .map_err(|_| Error::format(path, format!("count of {name:?} is '{value}'")))?;
        if n >= i32::MAX as usize || counts.insert(name.to_string(), n).is_some() {
            return Err(Error::invalid(
                path,
                format!(
                    "node type {name:?} is listed twice or has {n} nodes (ids of a type are \
                     held in 32 bits)"
                ),
            ));
        }
    }
    Ok(counts)
}

/// Every relation folder under `root` (`<src>___<rel>___<dst>/edge.csv.gz`), sorted by name,
/// each id checked against its type's count.
fn read_relations(root: &Path, counts: &BTreeMap<String, usize>) -> Result<Vec<Edges>> {
    let mut folders: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(|e| Error::io(root, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    let mut relations = Vec::new();
    for folder in folders {
        let name = folder.file_name().unwrap_or_default().to_string_lossy();
        let parts: Vec<&str> = name.split("___").collect();
        let [src, rel, dst] = parts[..] else {
            return Err(Error::format(
                &folder,
                "is not named <src>___<relation>___<dst>",
            ));
        };
        for end in [src, dst] {
            if !counts.contains_key(end) {
                return Err(Error::invalid(
                    &folder,
                    format!("names node type {end:?}, not in num-node-dict.csv.gz"),
                ));
            }
        }
        let (n_src, n_dst) = (counts[src], counts[dst]);
        let path = folder.join("edge.csv.gz");
        let mut edges = Edges {
            relation: [src.into(), rel.into(), dst.into()],
            src: Vec::new(),
            dst: Vec::new(),
        };
        for_each_row::<i64>(&path, |line, e| {
            let [s, d] = e[..] else {
                return Err(Error::format(
                    &path,
                    format!("line {line}: expected src,dst"),
                ));
            };
            if s < 0 || s as u64 >= n_src as u64 || d < 0 || d as u64 >= n_dst as u64 {
                return Err(Error::invalid(
                    &path,
                    format!(
                        "line {line}: edge {s},{d} is outside {src:?} ({n_src} nodes) to \
                         {dst:?} ({n_dst} nodes)"
                    ),
                ));
            }
            edges.src.push(s as u32);
            edges.dst.push(d as u32);
            Ok(())
        })?;
        relations.push(edges);
    }
    Ok(relations)
}

/// The one node type with labels, and its label file.
fn labelled_type(root: &Path, counts: &BTreeMap<String, usize>) -> Result<(String, PathBuf)> {
    let labelled: Vec<&String> = counts
        .keys()
        .filter(|t| root.join(t).join("node-label.csv.gz").is_file())
        .collect();
    match labelled[..] {
        [t] => Ok((t.clone(), root.join(t).join("node-label.csv.gz"))),
        _ => Err(Error::path(
            root,
            format!(
                "holds labels of {} node types; one labelled type (the target) is expected",
                labelled.len()
            ),
        )),
    }
}

/// The target type's split ids (the first scheme under `split/`), each below `n`.
fn read_splits(split: &Path, target: &str, n: usize) -> Result<[Vec<i64>; 3]> {
    let scheme: PathBuf = std::fs::read_dir(split)
        .map_err(|e| Error::io(split, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.is_dir())
        .ok_or_else(|| Error::format(split, "no split scheme folder"))?;
    let read = |name: &str| -> Result<Vec<i64>> {
        let path = scheme.join(target).join(format!("{name}.csv.gz"));
        let ids = first_values::<i64>(&path)?;
        match ids.iter().position(|&v| v < 0 || v as u64 >= n as u64) {
            Some(i) => Err(Error::invalid(
                &path,
                format!(
                    "line {}: {} is not a node of {target:?} ({n} nodes)",
                    i + 1,
                    ids[i]
                ),
            )),
            None => Ok(ids),
        }
    };
    Ok([read("train")?, read("valid")?, read("test")?])
}

/// A type's feature rows (one per node, all of one width), and the width.
fn read_features(path: &Path, n: usize) -> Result<(Vec<f32>, usize)> {
    let (mut rows, mut dim, mut count) = (Vec::new(), None, 0usize);
    for_each_row::<f32>(path, |line, r| {
        let width = *dim.get_or_insert(r.len());
        if r.len() != width {
            return Err(Error::format(
                path,
                format!("line {line} has {} values, the first has {width}", r.len()),
            ));
        }
        rows.extend_from_slice(r);
        count += 1;
        Ok(())
    })?;
    if count != n {
        return Err(Error::invalid(
            path,
            format!("has {count} rows for {n} nodes"),
        ));
    }
    Ok((rows, dim.unwrap_or(0)))
}
