//! [`write`]: a synthetic dataset streamed to its directory in bounded memory.
//!
//! The CSR is built by [`write_csr`] without holding the edge list. An edge is a pure function
//! of the seed and its index, so each of its passes draws the edges again instead of reading
//! them back from a temporary file.

use std::path::Path;

use graphloom_io::NpyWriter;
use rayon::prelude::*;

use super::draws::{
    as_bf16_bits, as_f32, meta, split_ids, unlabelled_outside_splits, Draws, FeatureDraws,
    SyntheticConfig,
};
use crate::stream_csr::{write_csr, CsrOptions, EdgeStream, EdgeVisitor, Phase, Progress};
use graphloom_graph::format::dataset::write_splits;
use graphloom_graph::format::output_dir::{write_dir_atomic, OutputKind};
use graphloom_graph::Dataset;

use super::edge_features::{plant_edge_features, PlantedEdgeFeatures};
use super::targets::{plant, PlantedTargets};
use graphloom_graph::{Meta, Result, UNLABELLED};

/// Edges drawn per parallel task.
const EDGES_PER_TASK: u64 = 1 << 16;
/// Feature rows generated and written at a time, at most.
const ROWS_PER_CHUNK: usize = 1 << 16;
/// Bytes of feature rows generated and written at a time, but for a single wider row.
const CHUNK_BYTES: usize = 64 << 20;

/// Writes the dataset [`generate`](super::generate) makes into the directory `dir` (through a temporary
/// directory renamed into place), holding at most `buffer_bytes` of edges at a time besides
/// the offsets (8 bytes per node) and a counter per node. Calls `progress(phase, done, total)`
/// as it goes. Returns the dataset's `meta.json`.
pub fn write(
    cfg: &SyntheticConfig,
    dir: &Path,
    buffer_bytes: usize,
    progress: Progress<'_>,
) -> Result<Meta> {
    write_with_targets(cfg, None, None, dir, buffer_bytes, progress)
}

/// [`write()`], with the classes replaced by `planted` targets when given ([`plant`]) and
/// with `edge_features` planted ([`plant_edge_features`]): the dataset is read back into
/// memory for them before the directory is renamed into place.
pub fn write_with_targets(
    cfg: &SyntheticConfig,
    planted: Option<&PlantedTargets>,
    edge_features: Option<&PlantedEdgeFeatures>,
    dir: &Path,
    buffer_bytes: usize,
    progress: Progress<'_>,
) -> Result<Meta> {
    let draws = Draws::new(cfg)?;
    let mut meta = meta(cfg, &draws);
    let edge_bytes =
        edge_features.map_or(0, |f| draws.num_edges().saturating_mul(4 * f.dim as u64));
    let bytes = disk_bytes(cfg, &draws).saturating_add(edge_bytes);
    graphloom_graph::disk::check_free_space(dir, bytes, "the synthetic dataset")?;
    write_dir_atomic(dir, OutputKind::Dataset, &[], |tmp| {
        let options = CsrOptions {
            simple: false,
            buffer_bytes,
        };
        write_csr(tmp, draws.n, &draws, dir, &options, progress)?;
        write_labels_and_splits(cfg, &draws, tmp, progress)?;
        write_features(cfg, &draws, tmp, progress)?;
        meta.write(tmp)?;
        if let Some(planted) = edge_features {
            let ds = Dataset::load(tmp)?;
            let features = plant_edge_features(&ds, planted, cfg.seed);
            graphloom_graph::format::dataset::write_features(
                &tmp.join(graphloom_graph::format::edge_features::EDGE_FEATURES_FILE),
                &features,
            )?;
        }
        if let Some(planted) = planted {
            let mut ds = Dataset::load(tmp)?;
            plant(&mut ds, planted, cfg.seed);
            if let Some(targets) = &ds.targets {
                targets.write(&tmp.join("node_label.npy"))?;
            }
            ds.meta.write(tmp)?;
            meta = ds.meta;
        }
        Ok(())
    })?;
    Ok(meta)
}

/// The size of the dataset's files (saturated: sizes that pass a `u64` are refused all the
/// same).
fn disk_bytes(cfg: &SyntheticConfig, draws: &Draws) -> u64 {
    let n = draws.n as u128;
    let col = if draws.n <= i32::MAX as usize { 4 } else { 8 };
    let feature = cfg.feat_dtype.size_in_bytes() as u128;
    let bytes = 8 * (n + 1)
        + col * draws.num_edges() as u128
        + 8 * n * 2
        + feature * n * cfg.feat_dim as u128;
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

impl EdgeStream for Draws {
    fn len_hint(&self) -> Option<u64> {
        Some(self.num_edges())
    }

    fn for_each_chunk(&self, visit: EdgeVisitor<'_>) -> Result<()> {
        let total = self.num_edges();
        (0..total.div_ceil(EDGES_PER_TASK))
            .into_par_iter()
            .try_for_each(|task| {
                let range = task * EDGES_PER_TASK..((task + 1) * EDGES_PER_TASK).min(total);
                let chunk: Vec<(i64, i64)> = range
                    .map(|i| {
                        let (u, v) = self.edge(i);
                        (i64::from(u), i64::from(v))
                    })
                    .collect();
                visit(&chunk)
            })
    }
}

fn write_labels_and_splits(
    cfg: &SyntheticConfig,
    draws: &Draws,
    dir: &Path,
    progress: Progress<'_>,
) -> Result<()> {
    let n = draws.n;
    let splits = split_ids(cfg, n);
    write_splits(dir, [&splits[0], &splits[1], &splits[2]])?;
    // Split members in one sorted list, walked beside the nodes.
    let mut labelled: Vec<usize> = splits.concat();
    labelled.sort_unstable();
    let only_splits = unlabelled_outside_splits(cfg);
    let mut out = NpyWriter::<i64>::create(&dir.join("node_label.npy"), &[n])?;
    let mut next = 0;
    for start in (0..n).step_by(ROWS_PER_CHUNK) {
        let end = (start + ROWS_PER_CHUNK).min(n);
        let labels: Vec<i64> = (start..end)
            .map(|v| {
                let member = labelled.get(next) == Some(&v);
                if member {
                    next += 1;
                }
                if only_splits && !member {
                    UNLABELLED
                } else {
                    draws.class(v)
                }
            })
            .collect();
        out.write(&labels)?;
        progress(Phase::Labels, end as u64, n as u64);
    }
    Ok(out.finish()?)
}

fn write_features(
    cfg: &SyntheticConfig,
    draws: &Draws,
    dir: &Path,
    progress: Progress<'_>,
) -> Result<()> {
    let path = dir.join("node_feat.npy");
    if cfg.feat_dtype == graphloom_tensor::DType::BF16 {
        write_rows(cfg, draws, &path, progress, as_bf16_bits)
    } else {
        write_rows(cfg, draws, &path, progress, as_f32)
    }
}

/// Writes every node's feature row into `path`, a chunk of rows at a time, stored as `store`
/// makes each value.
fn write_rows<E: graphloom_io::npy::NpyElement + Send>(
    cfg: &SyntheticConfig,
    draws: &Draws,
    path: &Path,
    progress: Progress<'_>,
    store: fn(f64) -> E,
) -> Result<()> {
    let (n, d) = (draws.n, cfg.feat_dim);
    let values = FeatureDraws::new(cfg, draws);
    let mut out = NpyWriter::<E>::create(path, &[n, d])?;
    // Wide rows come fewer at a time, so a chunk stays within CHUNK_BYTES.
    let rows = (CHUNK_BYTES / (d * std::mem::size_of::<E>()).max(1)).clamp(1, ROWS_PER_CHUNK);
    let mut chunk = Vec::new();
    for start in (0..n).step_by(rows) {
        let end = (start + rows).min(n);
        chunk.resize((end - start) * d, E::default());
        values.fill(draws, start..end, &mut chunk, store);
        out.write(&chunk)?;
        progress(Phase::Features, end as u64, n as u64);
    }
    Ok(out.finish()?)
}
