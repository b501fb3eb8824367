//! [`write`]: a synthetic dataset streamed to its directory in bounded memory.
//!
//! The CSR is built without holding the edge list: one pass over every edge counts each
//! destination's in-degree, then each pass over every edge keeps the edges of one range of
//! destinations (as many as fit in a fixed buffer), places them in their rows, sorts the rows
//! and appends them to `csr_col_idx.npy`. An edge is a pure function of the seed and its index,
//! so each pass draws it again instead of reading it back from a temporary file.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use graphloom_io::NpyWriter;
use rayon::prelude::*;

use super::{meta, split_ids, unlabelled_outside_splits, Draws, FeatureDraws, SyntheticConfig};
use crate::dataset::write_dir_atomic;
use crate::{Error, Meta, NodeId, Result, UNLABELLED};

/// A phase of [`write`], for a progress bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Counting in-degrees (units: edges).
    Degrees,
    /// Placing edges into rows, one pass per range of destinations (units: edges placed).
    Edges,
    /// Labels and splits (units: nodes).
    Labels,
    /// Feature rows (units: rows).
    Features,
}

impl Phase {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Degrees => "counting degrees",
            Phase::Edges => "placing edges",
            Phase::Labels => "labels and splits",
            Phase::Features => "features",
        }
    }
}

/// Edges drawn per parallel task.
const EDGES_PER_TASK: u64 = 1 << 16;
/// Feature rows generated and written at a time.
const ROWS_PER_CHUNK: usize = 1 << 16;

/// Writes the dataset [`super::generate`] makes into the directory `dir` (through a temporary
/// directory renamed into place), holding at most `buffer_bytes` of edges at a time besides
/// the offsets (8 bytes per node) and a counter per node. Calls `progress(phase, done, total)`
/// as it goes. Returns the dataset's `meta.json`.
pub fn write(
    cfg: &SyntheticConfig,
    dir: &Path,
    buffer_bytes: usize,
    progress: &(dyn Fn(Phase, u64, u64) + Sync),
) -> Result<Meta> {
    let draws = Draws::new(cfg)?;
    let meta = meta(cfg, &draws);
    crate::disk::check_free_space(dir, disk_bytes(cfg, &draws), "the synthetic dataset")?;
    write_dir_atomic(dir, |tmp| {
        let row_ptr = degrees(&draws, progress);
        write_offsets(&tmp.join("csr_row_ptr.npy"), &row_ptr)?;
        let col_path = tmp.join("csr_col_idx.npy");
        let per_pass = (buffer_bytes / 4).max(1 << 10) as i64;
        if draws.n <= i32::MAX as usize {
            let mut out = NpyWriter::<i32>::create(&col_path, &[draws.num_edges() as usize])?;
            place_edges(&draws, &row_ptr, per_pass, progress, |row| {
                let ids: Vec<i32> = row.iter().map(|&v| v as i32).collect();
                out.write(&ids).map_err(Error::from)
            })?;
            out.finish()?;
        } else {
            let mut out = NpyWriter::<i64>::create(&col_path, &[draws.num_edges() as usize])?;
            place_edges(&draws, &row_ptr, per_pass, progress, |row| {
                let ids: Vec<i64> = row.iter().map(|&v| i64::from(v)).collect();
                out.write(&ids).map_err(Error::from)
            })?;
            out.finish()?;
        }
        drop(row_ptr);
        write_labels_and_splits(cfg, &draws, tmp, progress)?;
        write_features(cfg, &draws, tmp, progress)?;
        let text = serde_json::to_string_pretty(&meta).expect("meta serialises");
        let meta_path = tmp.join("meta.json");
        std::fs::write(&meta_path, text + "\n").map_err(|e| Error::io(&meta_path, e))
    })?;
    Ok(meta)
}

/// The size of the dataset's files.
fn disk_bytes(cfg: &SyntheticConfig, draws: &Draws) -> u64 {
    let n = draws.n as u64;
    let col = if draws.n <= i32::MAX as usize { 4 } else { 8 };
    let feature = if cfg.feat_dtype == graphloom_tensor::DType::BF16 {
        2
    } else {
        4
    };
    8 * (n + 1) + col * draws.num_edges() + 8 * n * 2 + feature * n * cfg.feat_dim as u64
}

/// The CSR offsets: one pass over every edge counting in-degrees.
fn degrees(draws: &Draws, progress: &(dyn Fn(Phase, u64, u64) + Sync)) -> Vec<i64> {
    let total = draws.num_edges();
    let counts: Vec<AtomicU32> = (0..draws.n).map(|_| AtomicU32::new(0)).collect();
    let done = std::sync::atomic::AtomicU64::new(0);
    (0..total.div_ceil(EDGES_PER_TASK))
        .into_par_iter()
        .for_each(|task| {
            let range = task * EDGES_PER_TASK..((task + 1) * EDGES_PER_TASK).min(total);
            let len = range.end - range.start;
            for i in range {
                let (_, v) = draws.edge(i);
                counts[v as usize].fetch_add(1, Ordering::Relaxed);
            }
            progress(
                Phase::Degrees,
                done.fetch_add(len, Ordering::Relaxed) + len,
                total,
            );
        });
    let mut row_ptr = Vec::with_capacity(draws.n + 1);
    row_ptr.push(0i64);
    let mut sum = 0i64;
    for c in counts {
        sum += i64::from(c.into_inner());
        row_ptr.push(sum);
    }
    row_ptr
}

fn write_offsets(path: &Path, row_ptr: &[i64]) -> Result<()> {
    let mut out = NpyWriter::<i64>::create(path, &[row_ptr.len()])?;
    out.write(row_ptr)?;
    Ok(out.finish()?)
}

/// A pointer to a buffer whose slots the tasks of one pass write, each slot once.
#[derive(Clone, Copy)]
struct Slots(*mut NodeId);
// SAFETY: tasks write disjoint slots (each claimed by a counter increment), and the buffer
// outlives the pass.
unsafe impl Send for Slots {}
unsafe impl Sync for Slots {}

impl Slots {
    /// The pointer. A method (rather than the field) makes closures capture the whole
    /// `Slots`, which may cross threads, instead of the bare pointer, which may not.
    fn get(self) -> *mut NodeId {
        self.0
    }
}

/// Places every edge in its row, one range of destinations (at most `per_pass` edges, or one
/// row) per pass over all edges; hands each range's rows, sorted, to `emit` in order.
fn place_edges(
    draws: &Draws,
    row_ptr: &[i64],
    per_pass: i64,
    progress: &(dyn Fn(Phase, u64, u64) + Sync),
    mut emit: impl FnMut(&[NodeId]) -> Result<()>,
) -> Result<()> {
    let total = draws.num_edges();
    let n = draws.n;
    let mut lo = 0usize;
    while lo < n {
        // The widest range of rows from `lo` within the buffer (at least one row).
        let limit = row_ptr[lo] + per_pass;
        let hi = (row_ptr.partition_point(|&p| p <= limit) - 1).clamp(lo + 1, n);
        let base = row_ptr[lo];
        let mut buffer: Vec<NodeId> = vec![0; (row_ptr[hi] - base) as usize];
        let cursors: Vec<AtomicU32> = (lo..hi).map(|_| AtomicU32::new(0)).collect();
        let slots = Slots(buffer.as_mut_ptr());
        // Progress within a pass: its share of the edges placed, as far as it has drawn.
        let drawn = std::sync::atomic::AtomicU64::new(0);
        let placing = (row_ptr[hi] - base) as u64;
        (0..total.div_ceil(EDGES_PER_TASK))
            .into_par_iter()
            .for_each(|task| {
                let range = task * EDGES_PER_TASK..((task + 1) * EDGES_PER_TASK).min(total);
                let len = range.end - range.start;
                let so_far = drawn.fetch_add(len, Ordering::Relaxed) + len;
                if task % 256 == 0 {
                    let share = (placing as f64 * so_far as f64 / total as f64) as u64;
                    progress(Phase::Edges, base as u64 + share, total);
                }
                for i in range {
                    let (u, v) = draws.edge(i);
                    let v = v as usize;
                    if (lo..hi).contains(&v) {
                        let k = cursors[v - lo].fetch_add(1, Ordering::Relaxed) as i64;
                        let slot = (row_ptr[v] - base + k) as usize;
                        // SAFETY: slot lies in row v's part of the buffer (k < in-degree of v,
                        // counted by the same draws), and the counter gives it to one task.
                        unsafe { slots.get().add(slot).write(u) };
                    }
                }
            });
        drop(cursors);
        let rows: Vec<&mut [NodeId]> = {
            let mut rest: &mut [NodeId] = &mut buffer;
            let mut rows = Vec::with_capacity(hi - lo);
            for v in lo..hi {
                let (row, tail) = rest.split_at_mut((row_ptr[v + 1] - row_ptr[v]) as usize);
                rows.push(row);
                rest = tail;
            }
            rows
        };
        rows.into_par_iter().for_each(|r| r.sort_unstable());
        emit(&buffer)?;
        progress(Phase::Edges, row_ptr[hi] as u64, total);
        lo = hi;
    }
    Ok(())
}

fn write_labels_and_splits(
    cfg: &SyntheticConfig,
    draws: &Draws,
    dir: &Path,
    progress: &(dyn Fn(Phase, u64, u64) + Sync),
) -> Result<()> {
    let n = draws.n;
    let splits = split_ids(cfg, n);
    for (name, ids) in ["train_idx.npy", "valid_idx.npy", "test_idx.npy"]
        .iter()
        .zip(&splits)
    {
        let ids: Vec<i64> = ids.iter().map(|&v| v as i64).collect();
        crate::npy::write(&dir.join(name), &ids, &[ids.len()])?;
    }
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
    progress: &(dyn Fn(Phase, u64, u64) + Sync),
) -> Result<()> {
    let (n, d) = (draws.n, cfg.feat_dim);
    let values = FeatureDraws::new(cfg, draws);
    let path = dir.join("node_feat.npy");
    let bf16 = cfg.feat_dtype == graphloom_tensor::DType::BF16;
    let (mut out16, mut out32) = if bf16 {
        (Some(NpyWriter::<u16>::create(&path, &[n, d])?), None)
    } else {
        (None, Some(NpyWriter::<f32>::create(&path, &[n, d])?))
    };
    let (mut bits, mut floats) = (Vec::new(), Vec::new());
    for start in (0..n).step_by(ROWS_PER_CHUNK) {
        let end = (start + ROWS_PER_CHUNK).min(n);
        if let Some(out) = &mut out16 {
            bits.resize((end - start) * d, 0u16);
            values.fill_bf16(draws, start..end, &mut bits);
            out.write(&bits)?;
        }
        if let Some(out) = &mut out32 {
            floats.resize((end - start) * d, 0f32);
            values.fill_f32(draws, start..end, &mut floats);
            out.write(&floats)?;
        }
        progress(Phase::Features, end as u64, n as u64);
    }
    if let Some(out) = out16 {
        out.finish()?;
    }
    if let Some(out) = out32 {
        out.finish()?;
    }
    Ok(())
}
