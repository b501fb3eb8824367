//! [`write_mag`]: a heterogeneous graph of ogbn-mag's shape at any scale, streamed to a
//! heterogeneous dataset directory in bounded memory, with a planted signal that the relations
//! carry (the design of `../shared/baselines/make_hetero.py`, drawn here as pure functions of
//! the seed and an index so that it streams).
//!
//! Node types paper, author, institution and field_of_study; relations author-writes-paper,
//! author-affiliated_with-institution, paper-cites-paper and paper-has_topic-field_of_study,
//! each stored with its reverse (`rev_<rel>`). Node `v` of every type has home class
//! `v % classes`. An edge anchors at a uniform node of the type whose class drives it (the
//! paper, else the source) and takes a node of that class at its other end with probability
//! `homophily`, else a uniform one. Papers have features (Gaussian noise with a weak bump at
//! their class) and labels (their class); a paper is in the training split with probability
//! 0.85, validation 0.08, test 0.07 (ogbn-mag's time split's shares).

use std::path::Path;

use graphloom_graph::format::hetero::{relation_name, HeteroMeta, NodeType};
use graphloom_graph::format::meta::HETERO_FORMAT;
use graphloom_graph::format::output_dir::{write_dir_atomic, OutputKind};
use graphloom_graph::{Error, Result};
use graphloom_io::NpyWriter;
use graphloom_tensor::rng::RngKey;
use rayon::prelude::*;

use crate::stream_csr::{write_csr_between, CsrOptions, EdgeStream, EdgeVisitor, Phase, Progress};

/// ogbn-mag's node types and their counts at scale 1.
const MAG_NODES: [(&str, u64); 4] = [
    ("paper", 736_389),
    ("author", 1_134_649),
    ("institution", 8_740),
    ("field_of_study", 59_965),
];

/// ogbn-mag's relations `(src, rel, dst)` and their edges at scale 1.
const MAG_RELATIONS: [(&str, &str, &str, u64); 4] = [
    ("author", "writes", "paper", 7_145_660),
    ("author", "affiliated_with", "institution", 1_043_998),
    ("paper", "cites", "paper", 5_416_271),
    ("paper", "has_topic", "field_of_study", 7_505_078),
];

/// The largest scale: MAG240M's 244 million nodes are about scale 80 of ogbn-mag's shape.
pub const MAX_SCALE: f64 = 100.0;

/// Edges drawn per parallel task, and feature rows written at a time.
const CHUNK: u64 = 1 << 16;

/// What [`write_mag`] draws.
#[derive(Clone, Debug)]
pub struct MagConfig {
    /// ogbn-mag's size times this (at least `classes` nodes a type).
    pub scale: f64,
    /// Classes of the papers (ogbn-mag: 349).
    pub classes: usize,
    /// The papers' feature width.
    pub feat_dim: usize,
    /// The chance an edge takes a node of its anchor's class.
    pub homophily: f64,
    /// The bump of a paper's features at its class, in units of the noise.
    pub signal: f64,
    /// Seed of every draw.
    pub seed: u64,
    /// The papers' feature dtype on disk: f32, or bf16 (half the bytes; each value rounded to
    /// the nearest bf16).
    pub feat_dtype: graphloom_tensor::DType,
}

impl Default for MagConfig {
    /// make_hetero.py's defaults: scale 0.1, 349 classes, 128 features, homophily 0.25.
    fn default() -> MagConfig {
        MagConfig {
            scale: 0.1,
            classes: 349,
            feat_dim: 128,
            homophily: 0.25,
            signal: 0.3,
            seed: 0,
            feat_dtype: graphloom_tensor::DType::F32,
        }
    }
}

impl MagConfig {
    /// Fails unless the settings draw a graph: a scale in (0, [`MAX_SCALE`]], at least two
    /// classes, a homophily in [0, 1], a finite signal.
    pub fn check(&self) -> Result<()> {
        let invalid = |msg: String| Err(Error::invalid("synthetic --hetero mag", msg));
        if !(self.scale > 0.0 && self.scale <= MAX_SCALE) {
            return invalid(format!(
                "--scale must be in (0, {MAX_SCALE}], not {}",
                self.scale
            ));
        }
        if self.classes < 2 || self.classes > i32::MAX as usize / 2 {
            return invalid(format!(
                "--classes must be at least 2, not {}",
                self.classes
            ));
        }
        if !(0.0..=1.0).contains(&self.homophily) {
            return invalid(format!(
                "--homophily must be in [0, 1], not {}",
                self.homophily
            ));
        }
        if !self.signal.is_finite() || self.feat_dim > 1 << 20 {
            return invalid(format!(
                "--signal must be finite and --feat-dim at most 1048576, not {} and {}",
                self.signal, self.feat_dim
            ));
        }
        Ok(())
    }

    /// Nodes of type `t` (its count at scale 1 times the scale, at least a node a class).
    fn nodes(&self, t: &str) -> usize {
        let count = MAG_NODES
            .iter()
            .find(|(name, _)| *name == t)
            .map_or(0, |c| c.1);
        ((count as f64 * self.scale).round() as usize).max(self.classes)
    }
}

/// One relation's edges as draws: edge `i` is a pure function of the seed, the relation and
/// `i`; the reverse relation yields each edge turned around.
struct RelationDraws {
    key: RngKey,
    edges: u64,
    n_src: usize,
    n_dst: usize,
    /// The paper end (the destination of writes, cites) drives the class; else the source.
    anchor_at_dst: bool,
    /// Same-type relations drop self-loops, as make_hetero.py does.
    same_type: bool,
    classes: usize,
    homophily: f64,
    reversed: bool,
}

impl RelationDraws {
    /// A node of the type of `n` nodes with class `class`, drawn by `(i, column)`.
    fn pick(&self, n: usize, class: usize, i: u64, column: u64) -> usize {
        let members = (n - class).div_ceil(self.classes) as u64;
        class + self.classes * (self.key.bits(i, column) % members) as usize
    }

    /// Edge `i` as `(src, dst)`, or `None` for a dropped self-loop.
    fn edge(&self, i: u64) -> Option<(i64, i64)> {
        let same = self.key.uniform(i, 0) < self.homophily;
        let (s, d) = if self.anchor_at_dst {
            let d = (self.key.bits(i, 1) % self.n_dst as u64) as usize;
            let s = match same {
                true => self.pick(self.n_src, d % self.classes, i, 2),
                false => (self.key.bits(i, 2) % self.n_src as u64) as usize,
            };
            (s, d)
        } else {
            let s = (self.key.bits(i, 1) % self.n_src as u64) as usize;
            let d = match same {
                true => self.pick(self.n_dst, s % self.classes, i, 2),
                false => (self.key.bits(i, 2) % self.n_dst as u64) as usize,
            };
            (s, d)
        };
        if self.same_type && s == d {
            return None;
        }
        let (s, d) = (s as i64, d as i64);
        Some(if self.reversed { (d, s) } else { (s, d) })
    }
}

impl EdgeStream for RelationDraws {
    fn len_hint(&self) -> Option<u64> {
        Some(self.edges)
    }

    fn for_each_chunk(&self, visit: EdgeVisitor<'_>) -> Result<()> {
        (0..self.edges.div_ceil(CHUNK))
            .into_par_iter()
            .try_for_each(|task| {
                let range = task * CHUNK..((task + 1) * CHUNK).min(self.edges);
                let chunk: Vec<(i64, i64)> = range.filter_map(|i| self.edge(i)).collect();
                visit(&chunk)
            })
    }
}

/// Writes the graph `cfg` draws into the heterogeneous dataset directory `dir` (through a
/// temporary directory renamed into place), holding at most `buffer_bytes` of edges at a
/// time besides each relation's offsets; calls `progress(phase, done, total)` as it goes.
pub fn write_mag(
    cfg: &MagConfig,
    dir: &Path,
    buffer_bytes: usize,
    progress: Progress<'_>,
) -> Result<HeteroMeta> {
    cfg.check()?;
    let papers = cfg.nodes("paper");
    let mut node_types = std::collections::BTreeMap::new();
    for (t, _) in MAG_NODES {
        let feat_dim = if t == "paper" { cfg.feat_dim } else { 0 };
        node_types.insert(
            t.to_string(),
            NodeType {
                num_nodes: cfg.nodes(t),
                feat_dim,
                feat_dtype: cfg.feat_dtype.name().into(),
            },
        );
    }
    let mut relations = Vec::new();
    let mut edge_types = Vec::new();
    for (r, (src, rel, dst, count)) in MAG_RELATIONS.iter().enumerate() {
        for reversed in [false, true] {
            let (n_src, n_dst) = (cfg.nodes(src), cfg.nodes(dst));
            let draws = RelationDraws {
                key: RngKey::new(cfg.seed, r as u64, 0x4845_5445),
                edges: ((*count as f64 * cfg.scale).round() as u64).max(1),
                n_src,
                n_dst,
                anchor_at_dst: *dst == "paper",
                same_type: src == dst,
                classes: cfg.classes,
                homophily: cfg.homophily,
                reversed,
            };
            let relation: [String; 3] = match reversed {
                false => [src.to_string(), rel.to_string(), dst.to_string()],
                true => [dst.to_string(), format!("rev_{rel}"), src.to_string()],
            };
            edge_types.push(relation.clone());
            relations.push((relation, draws));
        }
    }
    let needed = disk_bytes(cfg, &relations);
    graphloom_graph::disk::check_free_space(dir, needed, "the synthetic dataset")?;
    let meta = HeteroMeta {
        name: format!("mag-shaped-{}", cfg.scale),
        format: HETERO_FORMAT.into(),
        node_types,
        edge_types,
        target_node_type: "paper".into(),
        num_classes: cfg.classes,
        directed: true,
    };
    write_dir_atomic(dir, OutputKind::Dataset, &[], |tmp| {
        let options = CsrOptions {
            simple: false,
            buffer_bytes,
        };
        let total = relations.len() as u64;
        for (r, (relation, draws)) in relations.iter().enumerate() {
            progress(Phase::Relations, r as u64, total);
            let folder = tmp.join("edges").join(relation_name(relation));
            std::fs::create_dir_all(&folder).map_err(|e| Error::io(&folder, e))?;
            let (sources, destinations) = match draws.reversed {
                false => (draws.n_src, draws.n_dst),
                true => (draws.n_dst, draws.n_src),
            };
            write_csr_between(
                &folder,
                sources,
                destinations,
                draws,
                dir,
                &options,
                progress,
            )?;
        }
        progress(Phase::Relations, total, total);
        for (t, _) in MAG_NODES {
            let folder = tmp.join("nodes").join(t);
            std::fs::create_dir_all(&folder).map_err(|e| Error::io(&folder, e))?;
        }
        let folder = tmp.join("nodes/paper");
        write_papers(cfg, papers, &folder, progress)?;
        meta.write(tmp)
    })?;
    Ok(meta)
}

/// The size of the dataset's files: each relation's offsets and sources, the papers'
/// features, labels and splits (saturated: a size past a `u64` is refused all the same).
fn disk_bytes(cfg: &MagConfig, relations: &[([String; 3], RelationDraws)]) -> u64 {
    let papers = cfg.nodes("paper") as u128;
    let csr: u128 = relations
        .iter()
        .map(|(r, d)| 8 * (cfg.nodes(&r[2]) as u128 + 1) + 4 * d.edges as u128)
        .sum();
    let feature = cfg.feat_dtype.size_in_bytes() as u128;
    let bytes = csr + papers * (feature * cfg.feat_dim as u128 + 16);
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// The papers' labels (their class), splits and feature rows, streamed.
fn write_papers(cfg: &MagConfig, n: usize, dir: &Path, progress: Progress<'_>) -> Result<()> {
    let split_key = RngKey::new(cfg.seed, 0, 0x5350_4c54);
    let split_of = |v: usize| match split_key.uniform(v as u64, 0) {
        u if u < 0.85 => 0,
        u if u < 0.93 => 1,
        _ => 2,
    };
    let mut sizes = [0usize; 3];
    for v in 0..n {
        sizes[split_of(v)] += 1;
    }
    let names = ["train_idx.npy", "valid_idx.npy", "test_idx.npy"];
    let mut splits = Vec::new();
    for (name, size) in names.iter().zip(sizes) {
        splits.push(NpyWriter::<i64>::create(&dir.join(name), &[size])?);
    }
    let mut labels = NpyWriter::<i64>::create(&dir.join("node_label.npy"), &[n])?;
    let d = cfg.feat_dim;
    let mut features = PaperFeatures::create(&dir.join("node_feat.npy"), n, d, cfg.feat_dtype)?;
    let noise = RngKey::new(cfg.seed, 0, 0x4645_4154);
    let bump = (cfg.signal * (d as f64).sqrt() / 4.0) as f32;
    let rows = (CHUNK as usize).min((64 << 20) / (4 * d).max(1)).max(1);
    for start in (0..n).step_by(rows) {
        let end = (start + rows).min(n);
        let class: Vec<i64> = (start..end).map(|v| (v % cfg.classes) as i64).collect();
        labels.write(&class)?;
        let mut member: [Vec<i64>; 3] = Default::default();
        for v in start..end {
            member[split_of(v)].push(v as i64);
        }
        for (writer, ids) in splits.iter_mut().zip(&member) {
            writer.write(ids)?;
        }
        let mut chunk = vec![0f32; (end - start) * d];
        chunk
            .par_chunks_mut(d.max(1))
            .enumerate()
            .for_each(|(r, row)| {
                let v = (start + r) as u64;
                for (j, x) in row.iter_mut().enumerate() {
                    *x = noise.normal(v, j as u64) as f32;
                }
                if d > 0 {
                    row[(start + r) % cfg.classes % d] += bump;
                }
            });
        features.write(&chunk)?;
        progress(Phase::Features, end as u64, n as u64);
    }
    labels.finish()?;
    features.finish()?;
    for writer in splits {
        writer.finish()?;
    }
    Ok(())
}

/// The papers' feature file, written a chunk of f32 rows at a time in the dataset's dtype.
enum PaperFeatures {
    F32(NpyWriter<f32>),
    Bf16(NpyWriter<u16>),
}

impl PaperFeatures {
    fn create(path: &Path, n: usize, d: usize, dtype: graphloom_tensor::DType) -> Result<Self> {
        Ok(match dtype {
            graphloom_tensor::DType::BF16 => {
                PaperFeatures::Bf16(NpyWriter::<u16>::create(path, &[n, d])?)
            }
            graphloom_tensor::DType::F32 => {
                PaperFeatures::F32(NpyWriter::<f32>::create(path, &[n, d])?)
            }
            other => {
                return Err(Error::invalid(
                    path,
                    format!("features are f32 or bf16, not {other}"),
                ))
            }
        })
    }

    fn write(&mut self, rows: &[f32]) -> Result<()> {
        match self {
            PaperFeatures::F32(w) => Ok(w.write(rows)?),
            PaperFeatures::Bf16(w) => {
                let bits: Vec<u16> = rows
                    .iter()
                    .map(|&v| graphloom_tensor::bf16::from_f32(v).to_bits())
                    .collect();
                Ok(w.write(&bits)?)
            }
        }
    }

    fn finish(self) -> Result<()> {
        match self {
            PaperFeatures::F32(w) => Ok(w.finish()?),
            PaperFeatures::Bf16(w) => Ok(w.finish()?),
        }
    }
}
