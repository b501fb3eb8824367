//! Precomputed propagation (`graphloom prepare propagate`): a dataset whose features are
//! `[X | A_1 X | ... | A_1^K X | A_2 X | ...]`, each operator's hops computed once over the
//! mapped graph and the mapped features, so SGC- and SIGN-style models train on rows without a
//! graph. The operators:
//!
//! - `sym`: `D^-1/2 A D^-1/2`, `D` the in-degrees (PyG's `SIGN` transform; a node without
//!   in-edges gets zeros);
//! - `gcn`: `D~^-1/2 (A + I) D~^-1/2`, `D~ = D + I` (GCN's and SGC's; as GraphLoom's GCN, a
//!   node's loop is added only where it has none);
//! - `ppr`: personalised PageRank by power iteration, `h_k = (1 - alpha) S h_{k-1} + alpha X`
//!   with `S` the `gcn` operator (APPNP's propagation, `alpha` the teleport).
//!
//! Memory is bounded: the output feature file is made at its full size and mapped, each hop is
//! computed by blocks of destination rows (reading the previous hop's columns of their
//! sources from the same file), and each block is flushed to disk before the next starts. The
//! work lives in a folder beside the output (`.NAME.propagate`) with a record of the blocks
//! done, so a run killed at any moment continues where it stopped when started again with the
//! same settings (a kill between the last block and the rename starts it over); the finished
//! dataset is renamed into place. A weighted graph (`edge_weight.npy`) is refused.

use std::path::{Path, PathBuf};

use graphloom_graph::format::output_dir::{check_output_dir, OutputKind};
use graphloom_graph::{Error, MappedDataset, Meta, Result};
use graphloom_io::npy::{self, NpyDType};
use graphloom_tensor::bf16;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{Phase, Progress};

/// The file that records a propagated dataset's hops and operators.
pub const PROPAGATION_FILE: &str = "propagation.json";
/// The most hops per operator.
pub const MAX_HOPS: usize = 64;
/// The record of the work done, in the work folder.
const STATE_FILE: &str = "progress.json";

/// A propagation operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operator {
    /// `D^-1/2 A D^-1/2` (PyG's `SIGN`).
    Sym,
    /// `D~^-1/2 (A + I) D~^-1/2` (GCN's, SGC's).
    Gcn,
    /// Personalised PageRank by power iteration over the `gcn` operator.
    Ppr,
}

impl Operator {
    /// Every operator, as front ends list them.
    pub const ALL: &'static [Operator] = &[Operator::Sym, Operator::Gcn, Operator::Ppr];

    /// The operator's name.
    pub fn name(self) -> &'static str {
        match self {
            Operator::Sym => "sym",
            Operator::Gcn => "gcn",
            Operator::Ppr => "ppr",
        }
    }
}

/// What `prepare propagate` computes, as recorded in a propagated dataset's
/// [`PROPAGATION_FILE`] (and in the work folder, to resume only the same work).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Propagation {
    /// Hops per operator (K).
    pub hops: usize,
    /// The operators, in the order of their column blocks.
    pub operators: Vec<Operator>,
    /// `ppr`'s teleport probability.
    pub teleport: f64,
    /// The output's feature dtype: `f32` or `bf16`.
    pub dtype: String,
    /// The source dataset's `meta.json`.
    pub source: Meta,
}

impl Propagation {
    /// The column blocks of the output, each `source.feat_dim` wide: the features, then each
    /// operator's hops 1..=K.
    pub fn blocks(&self) -> usize {
        1 + self.hops * self.operators.len()
    }

    /// The column block of hop `k` (0: the features) of operator `o` (an index).
    fn block(&self, o: usize, k: usize) -> usize {
        if k == 0 {
            0
        } else {
            1 + o * self.hops + (k - 1)
        }
    }

    /// Reads the record of the propagated dataset `dir`, or `None` for a dataset that is not
    /// one.
    pub fn read(dir: &Path) -> Result<Option<Propagation>> {
        let path = dir.join(PROPAGATION_FILE);
        if !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Error::invalid(&path, e.to_string()))
    }
}

/// How far a propagation got: steps (one per operator and hop, the features' copy first) and
/// rows of the step in progress.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct State {
    work: Propagation,
    /// The source dataset's directory.
    source_dir: PathBuf,
    /// Steps finished.
    steps_done: usize,
    /// Rows of the next step finished.
    rows_done: usize,
}

/// What `prepare propagate` is asked for.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Hops per operator (K).
    pub hops: usize,
    /// The operators, in the order of their column blocks.
    pub operators: Vec<Operator>,
    /// `ppr`'s teleport probability.
    pub teleport: f64,
    /// Write bf16 features (else f32).
    pub bf16: bool,
    /// The most bytes of output a block of destination rows holds.
    pub block_bytes: usize,
}

/// Writes the propagated dataset of the dataset `src` into `out`: `settings`' hops of each of
/// its operators, by blocks of destination rows. Continues an earlier run of the same work
/// that was stopped. Calls `progress(Features, done, total)` with rows over every step.
/// Returns the new dataset's `meta.json`.
pub fn propagate(
    src: &Path,
    out: &Path,
    settings: &Settings,
    progress: Progress<'_>,
) -> Result<Meta> {
    propagate_steps(src, out, settings, progress, None)
}

/// [`propagate`], stopping with an error after `stop_after` blocks when given (to check that
/// a stopped run continues).
pub(crate) fn propagate_steps(
    src: &Path,
    out: &Path,
    settings: &Settings,
    progress: Progress<'_>,
    stop_after: Option<usize>,
) -> Result<Meta> {
    let Settings {
        hops,
        ref operators,
        teleport,
        bf16: bf16_output,
        block_bytes,
    } = *settings;
    let invalid = |msg: &str| Err(Error::invalid(out, msg.to_string()));
    if hops == 0 || hops > MAX_HOPS || operators.is_empty() {
        return invalid("propagation takes 1 to 64 hops and at least one operator");
    }
    if !(teleport > 0.0 && teleport < 1.0) {
        return invalid("the teleport probability is between 0 and 1, both left out");
    }
    check_output_dir(out, OutputKind::Dataset, &[src])?;
    let ds = MappedDataset::open(src)?;
    let meta = ds.meta.clone();
    if meta.feat_dim == 0 {
        return Err(Error::invalid(
            src,
            "has no features to propagate (feat_dim is 0)".to_string(),
        ));
    }
    if ds.edge_weight().is_some() {
        return Err(Error::invalid(
            src,
            "has edge_weight.npy: the operators propagate over unweighted edges, so a weighted \
             graph is refused rather than propagated as if unweighted"
                .to_string(),
        ));
    }
    let work = Propagation {
        hops,
        operators: operators.to_vec(),
        teleport,
        dtype: if bf16_output { "bf16" } else { "f32" }.into(),
        source: meta.clone(),
    };
    let dir = work_dir(out);
    let source_dir = src.canonicalize().map_err(|e| Error::io(src, e))?;
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let lock = graphloom_io::lock_dir(&dir, "the propagation's work folder")?;
    let mut state = match read_state(&dir) {
        Some(s) if s.work == work && s.source_dir == source_dir && sized(&dir, &work) => s,
        _ => start(&dir, &work, &source_dir)?,
    };
    let (n, f) = (meta.num_nodes, meta.feat_dim);
    // `start` checked that the output, and so its width, fits on the disk.
    let width = f * work.blocks();
    let elem = if bf16_output { 2 } else { 4 };
    let rows_per_block = (block_bytes / (width * elem).max(1)).clamp(1, 1 << 20);
    let features = Features::open(&ds.features_path(), &meta)?;
    let feat_path = dir.join("node_feat.npy");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&feat_path)
        .map_err(|e| Error::io(&feat_path, e))?;
    // SAFETY: the work folder is this process's (its lock is held); nothing else changes the
    // file while it is mapped.
    let mut map =
        unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(|e| Error::io(&feat_path, e))?;
    let offset = npy::read_header(&feat_path)?.data_offset;
    let data = ds.data();
    let graph = Graph::new(data.row_ptr, data.col_idx);
    let steps = 1 + hops * operators.len();
    let total = (steps * n) as u64;
    let mut blocks_run = 0;
    while state.steps_done < steps {
        let step = state.steps_done;
        let (o, k) = match step {
            0 => (0, 0),
            s => ((s - 1) / hops, (s - 1) % hops + 1),
        };
        while state.rows_done < n {
            if stop_after == Some(blocks_run) {
                return Err(Error::invalid(out, "stopped as asked".to_string()));
            }
            let rows = state.rows_done..(state.rows_done + rows_per_block).min(n);
            let body = &mut map[offset..];
            let out_block = work.block(o, k);
            if k == 0 {
                copy_features(body, &features, rows.clone(), (f, width), bf16_output);
            } else {
                let from = work.block(o, k - 1);
                hop(
                    body,
                    &graph,
                    &features,
                    rows.clone(),
                    (from, out_block),
                    (f, width),
                    operators[o],
                    teleport,
                    bf16_output,
                );
            }
            let (start, end) = (
                offset + rows.start * width * elem,
                offset + rows.end * width * elem,
            );
            map.flush_range(start, end - start)
                .map_err(|e| Error::io(&feat_path, e))?;
            state.rows_done = rows.end;
            write_state(&dir, &state)?;
            blocks_run += 1;
            progress(Phase::Features, (step * n + rows.end) as u64, total);
        }
        state.steps_done += 1;
        state.rows_done = 0;
        write_state(&dir, &state)?;
    }
    drop(map);
    drop(lock);
    let _ = std::fs::remove_file(dir.join(graphloom_io::LOCK_FILE));
    finish(src, &dir, out, &work, width)
}

/// The work folder of the output `out`, beside it.
fn work_dir(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    parent.join(format!(".{name}.propagate"))
}

fn read_state(dir: &Path) -> Option<State> {
    let text = std::fs::read_to_string(dir.join(STATE_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

fn write_state(dir: &Path, state: &State) -> Result<()> {
    let path = dir.join(STATE_FILE);
    let text = serde_json::to_string(state).expect("a state serialises");
    graphloom_io::write_atomic(&path, |w| std::io::Write::write_all(w, text.as_bytes()))?;
    Ok(())
}

/// Whether the work folder's feature file is the one `work` writes: its header's dtype and
/// shape, and the length they give (a run of other settings, stopped while starting, leaves
/// another).
fn sized(dir: &Path, work: &Propagation) -> bool {
    let path = dir.join("node_feat.npy");
    let (Ok(header), Ok(file)) = (npy::read_header(&path), std::fs::metadata(&path)) else {
        return false;
    };
    let dtype = if work.dtype == "bf16" {
        NpyDType::U16
    } else {
        NpyDType::F32
    };
    let shape = [work.source.num_nodes, work.source.feat_dim * work.blocks()];
    header.dtype == dtype
        && header.shape == shape
        && file.len() == (header.data_offset + header.numel() * dtype.size()) as u64
}

/// A fresh start of `work` in the (locked) work folder: whatever an earlier run left there
/// removed (its record first, so that no kill leaves a record over another's file), the output
/// feature file made at its full size, nothing done.
fn start(dir: &Path, work: &Propagation, source_dir: &Path) -> Result<State> {
    let _ = std::fs::remove_file(dir.join(STATE_FILE));
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path
            .file_name()
            .is_some_and(|n| n == graphloom_io::LOCK_FILE)
        {
            continue;
        }
        let removed = match path.is_dir() {
            true => std::fs::remove_dir_all(&path),
            false => std::fs::remove_file(&path),
        };
        removed.map_err(|e| Error::io(&path, e))?;
    }
    let meta = &work.source;
    let dtype = if work.dtype == "bf16" {
        NpyDType::U16
    } else {
        NpyDType::F32
    };
    let bytes = (meta.num_nodes as u128)
        * (meta.feat_dim as u128)
        * (work.blocks() as u128)
        * dtype.size() as u128;
    let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
    graphloom_graph::disk::check_free_space(dir, bytes, "the propagated features")?;
    let shape = [meta.num_nodes, meta.feat_dim * work.blocks()];
    let header = npy::header_bytes(dtype, &shape, 0);
    let path = dir.join("node_feat.npy");
    let mut file = std::fs::File::create(&path).map_err(|e| Error::io(&path, e))?;
    std::io::Write::write_all(&mut file, &header).map_err(|e| Error::io(&path, e))?;
    file.set_len(header.len() as u64 + bytes)
        .map_err(|e| Error::io(&path, e))?;
    let state = State {
        work: work.clone(),
        source_dir: source_dir.to_path_buf(),
        steps_done: 0,
        rows_done: 0,
    };
    write_state(dir, &state)?;
    Ok(state)
}

/// Puts the source's graph, labels and splits beside the features, writes `meta.json` and the
/// propagation's record, and renames the work folder into place.
fn finish(src: &Path, dir: &Path, out: &Path, work: &Propagation, width: usize) -> Result<Meta> {
    for name in [
        "csr_row_ptr.npy",
        "csr_col_idx.npy",
        "node_label.npy",
        "train_idx.npy",
        "valid_idx.npy",
        "test_idx.npy",
        "edge_weight.npy",
    ] {
        let (from, to) = (src.join(name), dir.join(name));
        if !from.exists() {
            continue;
        }
        let _ = std::fs::remove_file(&to);
        // A link shares the source's file; across file systems, a copy.
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to).map_err(|e| Error::io(&to, e))?;
        }
    }
    let meta = Meta {
        name: format!("{}-propagated", work.source.name),
        feat_dim: width,
        feat_dtype: work.dtype.clone(),
        ..work.source.clone()
    };
    meta.write(dir)?;
    let record = dir.join(PROPAGATION_FILE);
    let text = serde_json::to_string_pretty(work).expect("a record serialises");
    graphloom_io::write_atomic(&record, |w| std::io::Write::write_all(w, text.as_bytes()))?;
    let _ = std::fs::remove_file(dir.join(STATE_FILE));
    graphloom_graph::format::swap::replace_dir(dir, out)?;
    let _ = std::fs::remove_dir_all(dir);
    Ok(meta)
}

/// The source's feature rows, mapped.
enum Features {
    F32(graphloom_io::MappedNpy<f32>),
    Bf16(graphloom_io::MappedNpy<u16>),
}

impl Features {
    fn open(path: &Path, meta: &Meta) -> Result<Features> {
        let features = match meta.feat_dtype.as_str() {
            "bf16" => Features::Bf16(graphloom_io::MappedNpy::open(path)?),
            _ => Features::F32(graphloom_io::MappedNpy::open(path)?),
        };
        Ok(features)
    }

    /// Row `v` (`out.len()` wide) as f32, into `out`.
    #[inline]
    fn row_into(&self, v: usize, out: &mut [f32]) {
        let f = out.len();
        match self {
            Features::F32(m) => out.copy_from_slice(&m[v * f..(v + 1) * f]),
            Features::Bf16(m) => {
                for (o, &b) in out.iter_mut().zip(&m[v * f..(v + 1) * f]) {
                    *o = bf16::from_bits(b).to_f32();
                }
            }
        }
    }
}

/// The graph by destination, with each node's in-degree's inverse square roots for `sym`
/// (0 for a node without in-edges) and `gcn` (with its self loop: one added where the node has
/// none, as GraphLoom's GCN adds them), and which nodes need the added loop.
struct Graph<'a> {
    row_ptr: &'a [i64],
    col_idx: &'a [u32],
    sym: Vec<f32>,
    gcn: Vec<f32>,
    add_loop: Vec<bool>,
}

impl<'a> Graph<'a> {
    fn new(row_ptr: &'a [i64], col_idx: &'a [u32]) -> Graph<'a> {
        let n = row_ptr.len() - 1;
        let degree = |v: usize| (row_ptr[v + 1] - row_ptr[v]) as f32;
        let sym = (0..n)
            .into_par_iter()
            .map(|v| match degree(v) {
                0.0 => 0.0,
                d => 1.0 / d.sqrt(),
            })
            .collect();
        let add_loop: Vec<bool> = (0..n)
            .into_par_iter()
            .map(|v| {
                let sources = &col_idx[row_ptr[v] as usize..row_ptr[v + 1] as usize];
                !sources.contains(&(v as u32))
            })
            .collect();
        let gcn = (0..n)
            .into_par_iter()
            .map(|v| 1.0 / (degree(v) + f32::from(u8::from(add_loop[v]))).sqrt())
            .collect();
        Graph {
            row_ptr,
            col_idx,
            sym,
            gcn,
            add_loop,
        }
    }

    fn sources(&self, v: usize) -> &[u32] {
        &self.col_idx[self.row_ptr[v] as usize..self.row_ptr[v + 1] as usize]
    }
}

/// The output's elements, written through a raw pointer: the rows of a block are written by
/// several threads, each its own rows' columns of the current hop, while all read the
/// previous hop's columns, which no thread writes.
#[derive(Clone, Copy)]
struct Body {
    ptr: *mut u8,
    bf16: bool,
}

// SAFETY: see `Body`: concurrent accesses are to disjoint elements, or reads only.
unsafe impl Send for Body {}
unsafe impl Sync for Body {}

impl Body {
    /// Adds `c` times the `acc.len()` elements from `i` to `acc`: a slice's sum, which vectorises,
    /// for f32.
    ///
    /// # Safety
    /// The elements are inside the mapped body, and no thread writes them meanwhile.
    #[inline]
    unsafe fn add_scaled(self, i: usize, c: f32, acc: &mut [f32]) {
        if self.bf16 {
            let bits =
                unsafe { std::slice::from_raw_parts(self.ptr.cast::<u16>().add(i), acc.len()) };
            for (a, &b) in acc.iter_mut().zip(bits) {
                *a += c * bf16::from_bits(b).to_f32();
            }
        } else {
            // The body starts on a 64-byte boundary (`header_bytes` pads to it): f32 aligned.
            let row =
                unsafe { std::slice::from_raw_parts(self.ptr.cast::<f32>().add(i), acc.len()) };
            for (a, &x) in acc.iter_mut().zip(row) {
                *a += c * x;
            }
        }
    }

    /// Writes `values` from element `i` on.
    ///
    /// # Safety
    /// The elements are inside the mapped body, and only this thread touches them meanwhile.
    #[inline]
    unsafe fn store(self, i: usize, values: &[f32]) {
        let len = values.len();
        if self.bf16 {
            let bits =
                unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<u16>().add(i), len) };
            for (b, &v) in bits.iter_mut().zip(values) {
                *b = bf16::from_f32(v).to_bits();
            }
        } else {
            let row = unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<f32>().add(i), len) };
            row.copy_from_slice(values);
        }
    }
}

/// Copies the features of `rows` (`f` a row) into the output's first column block (`width`
/// a row).
fn copy_features(
    body: &mut [u8],
    x: &Features,
    rows: std::ops::Range<usize>,
    (f, width): (usize, usize),
    bf16: bool,
) {
    let out = Body {
        ptr: body.as_mut_ptr(),
        bf16,
    };
    rows.into_par_iter().for_each_init(
        || vec![0f32; f],
        |row, v| {
            x.row_into(v, row);
            // SAFETY: row `v`'s first block, written by this thread only.
            unsafe { out.store(v * width, row) };
        },
    );
}

/// One hop of `op` for the destination rows `rows`: column block `blocks.1` from block
/// `blocks.0` of their sources (`f` columns a block, `width` a row).
#[allow(clippy::too_many_arguments)]
fn hop(
    body: &mut [u8],
    g: &Graph<'_>,
    x: &Features,
    rows: std::ops::Range<usize>,
    blocks: (usize, usize),
    (f, width): (usize, usize),
    op: Operator,
    teleport: f64,
    bf16: bool,
) {
    let out = Body {
        ptr: body.as_mut_ptr(),
        bf16,
    };
    let (from, to) = (blocks.0 * f, blocks.1 * f);
    rows.into_par_iter().for_each_init(
        || (vec![0f32; f], vec![0f32; f]),
        |(acc, own), v| {
            acc.fill(0.0);
            let norm = match op {
                Operator::Sym => &g.sym,
                Operator::Gcn | Operator::Ppr => &g.gcn,
            };
            let mut add = |u: usize, c: f32| {
                // SAFETY: the previous block's columns, which no thread writes.
                unsafe { out.add_scaled(u * width + from, c, acc) };
            };
            for &u in g.sources(v) {
                add(u as usize, norm[u as usize] * norm[v]);
            }
            if op != Operator::Sym && g.add_loop[v] {
                add(v, norm[v] * norm[v]);
            }
            if op == Operator::Ppr {
                x.row_into(v, own);
                for (a, &z) in acc.iter_mut().zip(own.iter()) {
                    *a = ((1.0 - teleport) * f64::from(*a) + teleport * f64::from(z)) as f32;
                }
            }
            // SAFETY: row `v`'s block `to`, written by this thread only.
            unsafe { out.store(v * width + to, acc) };
        },
    );
}

#[cfg(test)]
mod tests;
