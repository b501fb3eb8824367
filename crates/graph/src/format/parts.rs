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
//!   `shard_{q}_src.npy` (each edge's source, as a position in the rows `q` sends here; ids
//!   and positions are int32) and,
//!   for a dataset with `edge_weight.npy`, `shard_{q}_weight.npy` (each edge's weight, f32);
//! - `send_{q}.npy`: the local ids of the rows part `q` needs from this part, in the order `q`
//!   receives them.

use std::path::{Path, PathBuf};

use graphloom_tensor::{DType, Tensor};

use super::dataset::{load_features_file, read_edge_weights, Dataset, UNLABELLED};
use super::mapped::{GraphData, MappedDataset};
use super::output_dir::{write_dir_atomic, OutputKind};
use super::targets::NodeTargets;
use crate::npy;
use crate::partition::{Layout, Partition, PartitionReport, SourceMarks};
use crate::{Error, NodeId, Result};

pub use super::meta::{PartitionMeta, PartitionMethod};

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
    /// Labels of the local nodes; with targets, their markers ([`NodeTargets::markers`]).
    pub labels: Vec<i64>,
    /// The local nodes' targets, when the dataset has them.
    pub targets: Option<NodeTargets>,
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

/// Feature rows as the bytes of their `.npy` file's data: in memory or mapped.
pub struct FeatureRows<'a> {
    /// `[num_nodes, width]` elements, row-major, little-endian.
    pub bytes: &'a [u8],
    /// How they are stored: f32, or bf16 as its u16 bits.
    pub dtype: npy::NpyDType,
    /// Elements per row.
    pub width: usize,
}

impl FeatureRows<'_> {
    fn row(&self, v: usize) -> &[u8] {
        let row = self.width * self.dtype.size();
        &self.bytes[v * row..(v + 1) * row]
    }
}

/// The features of a dataset, mapped for [`write_parts`] to copy rows from.
pub enum MappedFeatures {
    /// f32 features.
    F32(graphloom_io::MappedNpy<f32>),
    /// bf16 features (u16 bits).
    Bf16(graphloom_io::MappedNpy<u16>),
}

impl MappedFeatures {
    /// Maps the checked feature file of `ds`.
    pub fn open(ds: &MappedDataset) -> Result<MappedFeatures> {
        let path = ds.features_path();
        Ok(match npy::read_header(&path)?.dtype {
            npy::NpyDType::U16 => MappedFeatures::Bf16(graphloom_io::MappedNpy::open(&path)?),
            _ => MappedFeatures::F32(graphloom_io::MappedNpy::open(&path)?),
        })
    }

    /// The rows, `width` elements each.
    pub fn rows(&self, width: usize) -> FeatureRows<'_> {
        let (bytes, dtype) = match self {
            MappedFeatures::F32(m) => (m.as_bytes(), npy::NpyDType::F32),
            MappedFeatures::Bf16(m) => (m.as_bytes(), npy::NpyDType::U16),
        };
        FeatureRows {
            bytes,
            dtype,
            width,
        }
    }
}

/// What [`write_parts`] reads of a dataset, loaded or mapped.
pub struct PartInputs<'a> {
    /// The graph, labels and splits.
    pub data: GraphData<'a>,
    /// The weight of every edge, in CSR order, when the dataset has them.
    pub edge_weight: Option<&'a [f32]>,
    /// The feature rows.
    pub features: FeatureRows<'a>,
}

impl Dataset {
    /// What [`write_parts`] reads of this dataset.
    pub fn part_inputs(&self) -> Result<PartInputs<'_>> {
        let (_, width) = self.features.dims2();
        let dtype = match self.features.dtype() {
            DType::BF16 => npy::NpyDType::U16,
            DType::F32 => npy::NpyDType::F32,
            other => {
                return Err(Error::argument(
                    "partition",
                    format!("features of dtype {other:?}: parts hold f32 or bf16"),
                ))
            }
        };
        Ok(PartInputs {
            data: self.data(),
            edge_weight: self.edge_weight.as_deref(),
            features: FeatureRows {
                bytes: self.features.as_bytes(),
                dtype,
                width,
            },
        })
    }
}

impl Dataset {
    /// Writes this dataset split by `partition` as [`write_parts`] does, quietly and without
    /// a record of the method.
    pub fn write_parts(&self, partition: &Partition, out: &Path) -> Result<PartitionReport> {
        write_parts(&self.part_inputs()?, partition, None, out, &|_, _| {})
    }
}

/// Progress of [`write_parts`]: parts written, parts in all.
pub type WriteProgress<'a> = &'a dyn Fn(u64, u64);

/// Splits a dataset by `partition` and writes the partitioned directory `out` (atomically);
/// `out` must be new, empty or a partitioned directory ([`crate::check_output_dir`]).
///
/// It streams: each part's files are written from the (possibly mapped) dataset one part at a
/// time, holding four bytes a node for the relabelling, four more for the positions of the
/// sources a part receives, and the send lists of one part; never the graph or the features.
/// `method` is recorded in `partition.json`.
pub fn write_parts(
    inputs: &PartInputs<'_>,
    partition: &Partition,
    method: Option<PartitionMethod>,
    out: &Path,
    progress: WriteProgress<'_>,
) -> Result<PartitionReport> {
    let data = &inputs.data;
    let parts = partition.parts;
    let layout = partition.layout();
    let mut report = PartitionReport::sizes(partition, &layout, data.train_idx);
    crate::disk::check_free_space(out, disk_bytes(inputs, partition), "the partition")?;
    write_dir_atomic(out, OutputKind::Partitioned, &[], |root| {
        for p in 0..parts {
            let dir = part_dir(root, p);
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        }
        let mut marks = SourceMarks::new(data.num_nodes());
        // position[u]: u's place in the rows its part sends to the part being written.
        let mut position = vec![0u32; data.num_nodes()];
        for p in 0..parts {
            progress(p as u64, parts as u64);
            let members = layout.members(p);
            report.add_part(p, marks.mark(data, partition, p, members));
            write_send_lists(root, partition, &layout, &marks, &mut position, p)?;
            let dir = part_dir(root, p);
            write_nodes(&dir, inputs, partition, &layout, p)?;
            write_shards(&dir, inputs, partition, &position, members)?;
        }
        progress(parts as u64, parts as u64);
        let meta = PartitionMeta {
            dataset: data.meta.clone(),
            parts,
            offsets: layout.offsets.clone(),
            nodes: report.nodes.clone(),
            train_nodes: report.train_nodes.clone(),
            edge_cut: report.edge_cut,
            halo: report.halo.clone(),
            num_train: data.train_idx.len(),
            edge_weights: inputs.edge_weight.is_some(),
            method,
        };
        let meta_path = PartitionMeta::path(root);
        let text = serde_json::to_string_pretty(&meta).expect("meta serialises");
        std::fs::write(&meta_path, text + "\n").map_err(|e| Error::io(&meta_path, e))
    })?;
    Ok(report)
}

/// The bytes the partitioned directory takes on disk: the node files, the sources (and weights)
/// of every edge, and for every pair of a destination and a part its in-edges come from, a
/// shard's destination and offset entries and (for a graph stored both ways, where these
/// pairs are also the rows parts send each other) a send list's entry. Counting those pairs
/// is one pass over the graph.
pub fn disk_bytes(inputs: &PartInputs<'_>, partition: &Partition) -> u64 {
    use rayon::prelude::*;
    let data = &inputs.data;
    let parts = partition.parts;
    let pairs: u64 = (0..data.num_nodes())
        .into_par_iter()
        .with_min_len(1 << 12)
        .map_init(
            || vec![u32::MAX; parts],
            |seen, v| {
                let mut distinct = 0u64;
                for &u in data.in_neighbors(v as NodeId) {
                    let q = partition.part[u as usize] as usize;
                    if seen[q] != v as u32 {
                        seen[q] = v as u32;
                        distinct += 1;
                    }
                }
                distinct
            },
        )
        .sum();
    let (n, edges) = (data.num_nodes() as u64, data.num_edges() as u64);
    let row = (inputs.features.width * inputs.features.dtype.size()) as u64;
    let splits = (data.train_idx.len() + data.valid_idx.len() + data.test_idx.len()) as u64;
    let weight = if inputs.edge_weight.is_some() { 4 } else { 0 };
    // Original ids, labels and in-degrees are int64; each file's header is at most 128 bytes.
    let headers = 128 * (8 + 4 * parts as u64) * parts as u64;
    n * (3 * 8 + row) + 8 * splits + edges * (4 + weight) + pairs * (4 + 8 + 4) + headers
}

/// Writes, for every part `q`, the rows it sends part `p` (the sources of `p`'s in-edges that
/// `q` holds, by increasing id) as `part_q/send_p.npy`, and records each source's place in its
/// list in `position`.
fn write_send_lists(
    root: &Path,
    partition: &Partition,
    layout: &Layout,
    marks: &SourceMarks,
    position: &mut [u32],
    p: usize,
) -> Result<()> {
    let mut send: Vec<Vec<u32>> = vec![Vec::new(); partition.parts];
    for (u, &q) in partition.part.iter().enumerate() {
        if marks.is_marked(u) {
            let list = &mut send[q as usize];
            position[u] = list.len() as u32;
            list.push(layout.local(u, q as usize));
        }
    }
    for (q, rows) in send.iter().enumerate() {
        if !rows.is_empty() {
            let path = part_dir(root, q).join(format!("send_{p}.npy"));
            write_ids(&path, rows)?;
        }
    }
    Ok(())
}

/// Writes part `p`'s node files: original ids, features, labels, splits and in-degrees.
fn write_nodes(
    dir: &Path,
    inputs: &PartInputs<'_>,
    partition: &Partition,
    layout: &Layout,
    p: usize,
) -> Result<()> {
    let data = &inputs.data;
    let members = layout.members(p);
    let orig: Vec<i64> = members.iter().map(|&v| i64::from(v)).collect();
    npy::write(&dir.join("orig_ids.npy"), &orig, &[orig.len()])?;
    let features = &inputs.features;
    let shape = [members.len(), features.width];
    let path = dir.join("node_feat.npy");
    let copy_rows = |bytes: &mut dyn FnMut(&[u8]) -> Result<()>| -> Result<()> {
        members
            .iter()
            .try_for_each(|&v| bytes(features.row(v as usize)))
    };
    if features.dtype == npy::NpyDType::U16 {
        let mut out = graphloom_io::NpyWriter::<u16>::create(&path, &shape)?;
        copy_rows(&mut |row| Ok(out.write_bytes(row)?))?;
        out.finish()?;
    } else {
        let mut out = graphloom_io::NpyWriter::<f32>::create(&path, &shape)?;
        copy_rows(&mut |row| Ok(out.write_bytes(row)?))?;
        out.finish()?;
    }
    match data.targets {
        Some(targets) => NodeTargets {
            values: targets.rows_of(members.iter().map(|&v| v as usize)),
            ..*targets
        }
        .write(&dir.join("node_label.npy"))?,
        None => {
            let labels: Vec<i64> = members.iter().map(|&v| data.labels[v as usize]).collect();
            npy::write(&dir.join("node_label.npy"), &labels, &[labels.len()])?;
        }
    }
    for (name, idx) in [
        ("train_idx", data.train_idx),
        ("valid_idx", data.valid_idx),
        ("test_idx", data.test_idx),
    ] {
        let local: Vec<i64> = idx
            .iter()
            .filter(|&&v| partition.part[v] as usize == p)
            .map(|&v| i64::from(layout.local(v, p)))
            .collect();
        npy::write(&dir.join(format!("{name}.npy")), &local, &[local.len()])?;
    }
    let degree: Vec<i64> = members
        .iter()
        .map(|&v| data.in_neighbors(v).len() as i64)
        .collect();
    Ok(npy::write(
        &dir.join("in_degree.npy"),
        &degree,
        &[degree.len()],
    )?)
}

/// The files of one shard being written: its destinations, offsets, sources and weights.
struct ShardWriter {
    dst: graphloom_io::NpyWriter<i32>,
    ptr: graphloom_io::NpyWriter<i64>,
    src: graphloom_io::NpyWriter<i32>,
    weight: Option<graphloom_io::NpyWriter<f32>>,
    last_dst: Option<u32>,
    edges: i64,
    /// Sources and weights not yet handed to their writers: one call per edge would cost
    /// more than the copy.
    src_buf: Vec<i32>,
    weight_buf: Vec<f32>,
}

/// Edges a [`ShardWriter`] gathers before writing them.
const SHARD_BUFFER: usize = 1 << 14;

/// The buffer of each file of a shard: a part writes a shard per part at once.
const SHARD_FILE_BUFFER: usize = 64 << 10;

/// The memory one shard being written holds: its files' buffers and its gathered edges.
pub const SHARD_WRITER_BYTES: u64 = (4 * SHARD_FILE_BUFFER + 8 * SHARD_BUFFER) as u64;

impl ShardWriter {
    /// Starts the shard of source part `q` in `dir`, sized for at most `rows` destinations
    /// and `edges` edges (its files are cut to what was written when it ends).
    fn create(dir: &Path, q: usize, rows: usize, edges: usize, weighted: bool) -> Result<Self> {
        fn open<T: npy::NpyElement>(
            dir: &Path,
            q: usize,
            what: &str,
            len: usize,
        ) -> Result<graphloom_io::NpyWriter<T>> {
            let path = dir.join(format!("shard_{q}_{what}.npy"));
            Ok(graphloom_io::NpyWriter::with_buffer(
                &path,
                &[len],
                SHARD_FILE_BUFFER,
            )?)
        }
        let mut ptr = open(dir, q, "ptr", rows + 1)?;
        ptr.write(&[0])?;
        Ok(ShardWriter {
            dst: open(dir, q, "dst", rows)?,
            ptr,
            src: open(dir, q, "src", edges)?,
            weight: if weighted {
                Some(open(dir, q, "weight", edges)?)
            } else {
                None
            },
            last_dst: None,
            edges: 0,
            src_buf: Vec::with_capacity(SHARD_BUFFER),
            weight_buf: Vec::new(),
        })
    }

    fn push(&mut self, dst: u32, src: u32, weight: Option<f32>) -> Result<()> {
        if self.last_dst != Some(dst) {
            if self.last_dst.is_some() {
                self.ptr.write(&[self.edges])?;
            }
            self.dst.write(&[dst as i32])?;
            self.last_dst = Some(dst);
        }
        self.src_buf.push(src as i32);
        self.weight_buf.extend(weight);
        self.edges += 1;
        if self.src_buf.len() >= SHARD_BUFFER {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.src.write(&self.src_buf)?;
        self.src_buf.clear();
        if let Some(out) = &mut self.weight {
            out.write(&self.weight_buf)?;
        }
        self.weight_buf.clear();
        Ok(())
    }

    fn finish(mut self) -> Result<()> {
        self.flush()?;
        self.ptr.write(&[self.edges])?;
        self.dst.finish_shorter()?;
        self.ptr.finish_shorter()?;
        self.src.finish_shorter()?;
        if let Some(w) = self.weight {
            w.finish_shorter()?;
        }
        Ok(())
    }
}

/// Writes the in-edges of a part's `members` into one shard per source part, in one pass;
/// only the shards with edges are written, so files grow with the cut, not parts^2.
fn write_shards(
    dir: &Path,
    inputs: &PartInputs<'_>,
    partition: &Partition,
    position: &[u32],
    members: &[NodeId],
) -> Result<()> {
    let data = &inputs.data;
    let edges: usize = members.iter().map(|&v| data.in_neighbors(v).len()).sum();
    let mut shards: Vec<Option<ShardWriter>> = (0..partition.parts).map(|_| None).collect();
    for (local, &v) in members.iter().enumerate() {
        let first_edge = data.row_ptr[v as usize] as usize;
        for (j, &u) in data.in_neighbors(v).iter().enumerate() {
            let q = partition.part[u as usize] as usize;
            let shard = match &mut shards[q] {
                Some(shard) => shard,
                empty => empty.insert(ShardWriter::create(
                    dir,
                    q,
                    members.len(),
                    edges,
                    inputs.edge_weight.is_some(),
                )?),
            };
            let weight = inputs.edge_weight.map(|w| w[first_edge + j]);
            shard.push(local as u32, position[u as usize], weight)?;
        }
    }
    shards
        .into_iter()
        .flatten()
        .try_for_each(ShardWriter::finish)
}

/// Writes ids below 2^31 as int32.
fn write_ids(path: &Path, ids: &[u32]) -> Result<()> {
    let mut out = graphloom_io::NpyWriter::<i32>::create(path, &[ids.len()])?;
    for chunk in ids.chunks(1 << 16) {
        let narrowed: Vec<i32> = chunk.iter().map(|&i| i as i32).collect();
        out.write(&narrowed)?;
    }
    Ok(out.finish()?)
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
        let label_path = dir.join("node_label.npy");
        let (labels, targets) =
            if NodeTargets::held_by(&npy::read_header(&label_path)?, meta.dataset.num_classes) {
                let targets = NodeTargets::read(&label_path, n, meta.dataset.num_classes)?;
                (targets.markers(), Some(targets))
            } else {
                (per_node("node_label.npy", UNLABELLED, classes)?, None)
            };
        Ok(Part {
            index,
            labels,
            targets,
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
