//! A partitioned dataset on disk and one worker's part of it in memory.
//!
//! `graphloom partition` writes `partition.json` (sizes, id ranges, edge cut, halo volumes) and
//! one folder `part_{p}` per part, so each worker reads only its own:
//!
//! - `orig_ids.npy`: the original id of each local node (local id `i` is global id
//!   `offsets[p] + i`);
//! - `node_feat.npy`, `node_label.npy`, `train_idx.npy`, `valid_idx.npy`, `test_idx.npy`
//!   (local ids), `in_degree.npy` (each node's full in-degree: a part holds all its in-edges);
//! - for every part `q` with edges into this one, a compact shard of those edges:
//!   `shard_{q}_dst.npy` (local destinations that have such edges, increasing),
//!   `shard_{q}_ptr.npy` (offsets into the sources, one more than the destinations) and
//!   `shard_{q}_src.npy` (each edge's source, as a position in the rows `q` sends here) and,
//!   for a dataset with `edge_weight.npy`, `shard_{q}_weight.npy` (each edge's weight, f32);
//! - `send_{q}.npy`: the local ids of the rows part `q` needs from this part, in the order `q`
//!   receives them.

use std::path::{Path, PathBuf};

use graphloom_tensor::Tensor;

use super::dataset::{load_features_file, read_edge_weights, write_features, Dataset, UNLABELLED};
use super::output_dir::{write_dir_atomic, OutputKind};
use crate::npy;
use crate::partition::{Partition, PartitionReport};
use crate::{Error, NodeId, Result};

pub use super::meta::PartitionMeta;

/// The in-edges of one part that come from one source part.
#[derive(Clone, Debug, PartialEq)]
pub struct Shard {
    /// Local destinations with edges from the source part, increasing.
    pub dst: Vec<u32>,
    /// `dst.len() + 1` offsets into `src`.
    pub ptr: Vec<i64>,
    /// Each edge's source: a position in the rows the source part sends.
    pub src: Vec<u32>,
    /// Each edge's weight (empty for a graph without edge weights).
    pub weight: Vec<f32>,
}

impl Shard {
    /// A shard without edges.
    pub fn empty() -> Shard {
        Shard {
            dst: Vec::new(),
            ptr: vec![0],
            src: Vec::new(),
            weight: Vec::new(),
        }
    }

    /// The weight of edge `e` (1 without edge weights).
    pub fn weight_of(&self, e: usize) -> f64 {
        self.weight.get(e).map_or(1.0, |&w| w as f64)
    }
}

/// One worker's part.
#[derive(Debug)]
pub struct Part {
    /// The whole partition's meta data.
    pub meta: PartitionMeta,
    /// Which part this is.
    pub index: usize,
    /// Original id of each local node.
    pub orig_ids: Vec<i64>,
    /// `[local nodes, feat_dim]` features.
    pub features: Tensor,
    /// Labels of the local nodes.
    pub labels: Vec<i64>,
    /// Local training, validation and test nodes.
    pub train_idx: Vec<usize>,
    /// See `train_idx`.
    pub valid_idx: Vec<usize>,
    /// See `train_idx`.
    pub test_idx: Vec<usize>,
    /// Full in-degree of each local node.
    pub in_degree: Vec<i64>,
    /// `shards[q]`: the in-edges from part `q` (part `index` itself included).
    pub shards: Vec<Shard>,
    /// `send[q]`: local rows part `q` needs, in the order it receives them.
    pub send: Vec<Vec<u32>>,
}

fn part_dir(root: &Path, p: usize) -> PathBuf {
    root.join(format!("part_{p}"))
}

/// The numbers of a part's file that holds no ids (offsets, labels, degrees).
fn ints(path: &Path) -> Result<Vec<i64>> {
    Ok(npy::read_ints(path)?.data)
}

/// The ids (of nodes, rows or positions) of a part's file.
fn ids(path: &Path) -> Result<Vec<i64>> {
    Ok(npy::read_ids(path)?.data)
}

/// Splits `ds` by `partition` and writes the partitioned directory `out` (atomically); `out`
/// must be new, empty or a partitioned directory ([`crate::check_output_dir`]).
pub fn write_parts(ds: &Dataset, partition: &Partition, out: &Path) -> Result<PartitionReport> {
    let report = partition.report(&ds.graph, &ds.train_idx);
    let (new_id, offsets) = partition.relabel();
    let parts = partition.parts;
    let n = ds.graph.num_nodes();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); parts];
    for v in 0..n {
        members[partition.part[v] as usize].push(v);
    }
    // send[q][p]: the rows of q that p needs, in increasing original id, and each row's
    // position in that list.
    let mut send: Vec<Vec<Vec<u32>>> = vec![vec![Vec::new(); parts]; parts];
    let mut position: Vec<std::collections::HashMap<(u32, u32), u32>> =
        vec![Default::default(); parts];
    for p in 0..parts {
        let mut sources: Vec<NodeId> = members[p]
            .iter()
            .flat_map(|&v| ds.graph.in_neighbors(v).iter().copied())
            .collect();
        sources.sort_unstable();
        sources.dedup();
        for u in sources {
            let q = partition.part[u as usize] as usize;
            let local = new_id[u as usize] - offsets[q] as u32;
            position[q].insert((p as u32, local), send[q][p].len() as u32);
            send[q][p].push(local);
        }
    }
    let in_train: std::collections::HashSet<usize> = ds.train_idx.iter().copied().collect();
    let meta = PartitionMeta {
        dataset: ds.meta.clone(),
        parts,
        offsets: offsets.clone(),
        nodes: report.nodes.clone(),
        train_nodes: report.train_nodes.clone(),
        edge_cut: report.edge_cut,
        halo: report.halo.clone(),
        num_train: in_train.len(),
        edge_weights: ds.edge_weight.is_some(),
    };
    write_dir_atomic(out, OutputKind::Partitioned, &[], |root| {
        let meta_path = PartitionMeta::path(root);
        let text = serde_json::to_string_pretty(&meta).expect("meta serialises");
        std::fs::write(&meta_path, text + "\n").map_err(|e| Error::io(&meta_path, e))?;
        for p in 0..parts {
            let dir = part_dir(root, p);
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            let nodes = &members[p];
            let orig: Vec<i64> = nodes.iter().map(|&v| v as i64).collect();
            npy::write(&dir.join("orig_ids.npy"), &orig, &[orig.len()])?;
            let rows: Vec<usize> = nodes.clone();
            write_features(
                &dir.join("node_feat.npy"),
                &gather_rows(&ds.features, &rows)?,
            )?;
            let labels: Vec<i64> = nodes.iter().map(|&v| ds.labels[v]).collect();
            npy::write(&dir.join("node_label.npy"), &labels, &[labels.len()])?;
            for (name, idx) in [
                ("train_idx", &ds.train_idx),
                ("valid_idx", &ds.valid_idx),
                ("test_idx", &ds.test_idx),
            ] {
                let local: Vec<i64> = idx
                    .iter()
                    .filter(|&&v| partition.part[v] as usize == p)
                    .map(|&v| (new_id[v] as usize - offsets[p]) as i64)
                    .collect();
                npy::write(&dir.join(format!("{name}.npy")), &local, &[local.len()])?;
            }
            let degree: Vec<i64> = nodes
                .iter()
                .map(|&v| ds.graph.in_degree(v) as i64)
                .collect();
            npy::write(&dir.join("in_degree.npy"), &degree, &[degree.len()])?;
            // One pass over the part's in-edges, each into the shard of its source part;
            // only the non-empty shards are written, so files grow with the cut, not parts^2.
            let mut shards: std::collections::BTreeMap<usize, Shard> = Default::default();
            for (local, &v) in nodes.iter().enumerate() {
                let first_edge = ds.graph.row_ptr[v] as usize;
                for (j, &u) in ds.graph.in_neighbors(v).iter().enumerate() {
                    let q = partition.part[u as usize] as usize;
                    let lu = new_id[u as usize] - offsets[q] as u32;
                    let shard = shards.entry(q).or_insert_with(Shard::empty);
                    if shard.dst.last() != Some(&(local as u32)) {
                        shard.dst.push(local as u32);
                        shard.ptr.push(shard.src.len() as i64);
                    }
                    shard.src.push(position[q][&(p as u32, lu)]);
                    if let Some(w) = &ds.edge_weight {
                        shard.weight.push(w[first_edge + j]);
                    }
                    *shard.ptr.last_mut().expect("starts with 0") = shard.src.len() as i64;
                }
            }
            for (q, shard) in shards {
                let dst: Vec<i64> = shard.dst.iter().map(|&d| i64::from(d)).collect();
                let src: Vec<i64> = shard.src.iter().map(|&s| i64::from(s)).collect();
                npy::write(&dir.join(format!("shard_{q}_dst.npy")), &dst, &[dst.len()])?;
                npy::write(
                    &dir.join(format!("shard_{q}_ptr.npy")),
                    &shard.ptr,
                    &[shard.ptr.len()],
                )?;
                npy::write(&dir.join(format!("shard_{q}_src.npy")), &src, &[src.len()])?;
                if ds.edge_weight.is_some() {
                    let w = &shard.weight;
                    npy::write(&dir.join(format!("shard_{q}_weight.npy")), w, &[w.len()])?;
                }
            }
            for q in 0..parts {
                if send[p][q].is_empty() {
                    continue;
                }
                let rows: Vec<i64> = send[p][q].iter().map(|&r| i64::from(r)).collect();
                npy::write(&dir.join(format!("send_{q}.npy")), &rows, &[rows.len()])?;
            }
        }
        Ok(())
    })?;
    Ok(report)
}

/// Rows `rows` of a 2-D tensor, in order.
fn gather_rows(t: &Tensor, rows: &[usize]) -> Result<Tensor> {
    let (_, width) = t.dims2();
    let row_bytes = width * t.dtype().size_in_bytes();
    let bytes = t.as_bytes();
    let mut out = Tensor::zeros(&[rows.len(), width], t.dtype());
    let dst = out.as_mut_bytes();
    for (i, &r) in rows.iter().enumerate() {
        dst[i * row_bytes..(i + 1) * row_bytes]
            .copy_from_slice(&bytes[r * row_bytes..(r + 1) * row_bytes]);
    }
    Ok(out)
}

impl Part {
    /// Loads part `index` of the partitioned directory `root`, and nothing of the other parts.
    pub fn load(root: &Path, index: usize) -> Result<Part> {
        let meta_path = PartitionMeta::path(root);
        let meta = PartitionMeta::load(root)?;
        if index >= meta.parts {
            return Err(Error::invalid(
                &meta_path,
                format!(
                    "part {index} asked of a partition into {} parts",
                    meta.parts
                ),
            ));
        }
        let dir = part_dir(root, index);
        let orig_ids = ids(&dir.join("orig_ids.npy"))?;
        let n = orig_ids.len();
        if n != meta.nodes[index] {
            return Err(Error::invalid(
                &dir,
                format!("{n} nodes, partition.json says {}", meta.nodes[index]),
            ));
        }
        let features = load_features_file(&dir.join("node_feat.npy"), n, &meta.dataset)?;
        let local = |name: &str| -> Result<Vec<usize>> {
            let path = dir.join(name);
            let v = ids(&path)?;
            if let Some(bad) = v.iter().find(|&&i| i < 0 || i as usize >= n) {
                return Err(Error::invalid(
                    &path,
                    format!("local id {bad} is not below {n}"),
                ));
            }
            Ok(v.into_iter().map(|i| i as usize).collect())
        };
        // Ids of a shard or send list index rows of a part: each is checked against its bound
        // so a damaged file is an error naming it, never a panic later.
        let ids_below = |path: &Path, bound: usize, what: &str| -> Result<Vec<u32>> {
            if !path.exists() {
                return Ok(Vec::new());
            }
            let v = ids(path)?;
            if let Some(bad) = v.iter().find(|&&i| i < 0 || i as usize >= bound) {
                return Err(Error::invalid(
                    path,
                    format!("{what} {bad} is not below {bound}"),
                ));
            }
            Ok(v.into_iter().map(|i| i as u32).collect())
        };
        let mut send = Vec::with_capacity(meta.parts);
        for q in 0..meta.parts {
            send.push(ids_below(
                &dir.join(format!("send_{q}.npy")),
                n,
                "local row",
            )?);
        }
        let mut shards = Vec::with_capacity(meta.parts);
        for q in 0..meta.parts {
            let dst_path = dir.join(format!("shard_{q}_dst.npy"));
            if !dst_path.exists() {
                shards.push(Shard::empty());
                continue;
            }
            let dst = ids_below(&dst_path, n, "local row")?;
            if let Some(i) = (1..dst.len()).find(|&i| dst[i] <= dst[i - 1]) {
                return Err(Error::invalid(
                    &dst_path,
                    format!("destinations must increase, entry {i} does not"),
                ));
            }
            // Sources are positions in the rows part q sends to this part, a count only the
            // exchange learns: `PartGraph` checks them against it.
            let src_path = dir.join(format!("shard_{q}_src.npy"));
            let src = ids_below(&src_path, u32::MAX as usize, "position")?;
            let ptr_path = dir.join(format!("shard_{q}_ptr.npy"));
            let ptr = ints(&ptr_path)?;
            let monotone = ptr.windows(2).all(|w| w[0] <= w[1]);
            if ptr.len() != dst.len() + 1
                || ptr.first() != Some(&0)
                || ptr.last() != Some(&(src.len() as i64))
                || !monotone
            {
                return Err(Error::invalid(
                    &ptr_path,
                    format!(
                        "is not {} non-decreasing offsets from 0 to {}",
                        dst.len() + 1,
                        src.len()
                    ),
                ));
            }
            let weight_path = dir.join(format!("shard_{q}_weight.npy"));
            // A weighted partition must weigh every edge: a lost weight file is an error,
            // not edges of weight 1.
            let weight = if meta.edge_weights {
                read_edge_weights(&weight_path, src.len())?
            } else {
                Vec::new()
            };
            shards.push(Shard {
                dst,
                ptr,
                src,
                weight,
            });
        }
        // One label (a class, or -1 for none) and one in-degree per local node.
        let per_node = |name: &str, lowest: i64, bound: i64| -> Result<Vec<i64>> {
            let path = dir.join(name);
            let v = ints(&path)?;
            if v.len() != n {
                return Err(Error::invalid(
                    &path,
                    format!("has {} entries for {n} nodes", v.len()),
                ));
            }
            if let Some(i) = v.iter().position(|&x| x < lowest || x >= bound) {
                return Err(Error::invalid(
                    &path,
                    format!("entry {i} is {}, outside {lowest}..{bound}", v[i]),
                ));
            }
            Ok(v)
        };
        let classes = i64::try_from(meta.dataset.num_classes).unwrap_or(i64::MAX);
        Ok(Part {
            index,
            labels: per_node("node_label.npy", UNLABELLED, classes)?,
            train_idx: local("train_idx.npy")?,
            valid_idx: local("valid_idx.npy")?,
            test_idx: local("test_idx.npy")?,
            in_degree: per_node("in_degree.npy", 0, i64::MAX)?,
            orig_ids,
            features,
            shards,
            send,
            meta,
        })
    }
}
