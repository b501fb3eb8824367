//! What the writer of a link split and its negatives share: the configuration and progress
//! phases, the keyed-draw constants of negatives, edge lookups, the pair writer and the
//! ordered block loop. Lower than both, so neither file uses the other back.

use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use graphloom_io::NpyWriter;
use rayon::prelude::*;

use graphloom_graph::{Error, GraphData, NodeId, Result};

/// How to split a dataset's edges.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkSplitConfig {
    /// Share of the candidate edges held out for validation, in `(0, 1)`.
    pub valid: f64,
    /// Share held out for test, in `(0, 1)`; with `valid`, less than 1.
    pub test: f64,
    /// Seed of the split and of the negatives.
    pub seed: u64,
    /// Negative destinations per held-out positive (`neg_dst` files); 0 writes none.
    pub neg_dst: usize,
}

impl Default for LinkSplitConfig {
    fn default() -> LinkSplitConfig {
        LinkSplitConfig {
            valid: 0.05,
            test: 0.1,
            seed: 0,
            neg_dst: 100,
        }
    }
}

impl LinkSplitConfig {
    /// Refuses shares outside `(0, 1)` (model selection and the test metrics need held-out
    /// edges) and shares that hold out every edge.
    pub(super) fn check(&self) -> Result<()> {
        for (name, share) in [("--valid", self.valid), ("--test", self.test)] {
            if !(share > 0.0 && share < 1.0) {
                return Err(Error::argument(
                    name,
                    format!(
                        "{share} is not a share of the edges to hold out: give a value in (0, 1)"
                    ),
                ));
            }
        }
        if self.valid + self.test >= 1.0 {
            return Err(Error::argument(
                "--valid",
                format!(
                    "{} with --test {} holds out every edge: the two must sum to less than 1",
                    self.valid, self.test
                ),
            ));
        }
        Ok(())
    }
}

/// A phase of [`write`](super::write), for a progress bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkPhase {
    /// Counting the candidates' keys (units: CSR entries).
    Keys,
    /// Finding the keys that bound the held-out sets (units: CSR entries).
    Thresholds,
    /// Writing the graph without the held-out edges, and the positives (units: CSR entries).
    Graph,
    /// Copying the features, unless they could be hard-linked (units: bytes).
    Features,
    /// Drawing the negatives (units: held-out positives).
    Negatives,
}

impl LinkPhase {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            LinkPhase::Keys => "hashing candidate edges",
            LinkPhase::Thresholds => "finding the held-out edges",
            LinkPhase::Graph => "writing the graph",
            LinkPhase::Features => "copying features",
            LinkPhase::Negatives => "drawing negatives",
        }
    }
}

/// A progress callback: `(phase, done, total)`.
pub type LinkProgress<'a> = &'a (dyn Fn(LinkPhase, u64, u64) + Sync);

/// Held-out positives per block of negatives.
pub(super) const NEGATIVE_BLOCK: usize = if cfg!(test) { 8 } else { 1 << 14 };
/// Draws of a negative before the graph is declared too dense to have one.
pub(super) const MAX_DRAWS: u64 = 1000;
/// Purposes of the keyed draws of negative pairs and destinations.
pub(super) const NEG_PURPOSE: u64 = 0x11_4e50;
pub(super) const NEG_DST_PURPOSE: u64 = 0x11_4e44;

/// A pair of nodes `(source, destination)`.
pub(super) type Pair = (NodeId, NodeId);

/// Edge lookups in the whole (original) graph: a binary search when every row is sorted (as
/// `prepare` writes them), else a scan of the row.
#[derive(Clone, Copy)]
pub(super) struct Edges<'a> {
    pub(super) graph: GraphData<'a>,
    pub(super) sorted: bool,
}

impl Edges<'_> {
    pub(super) fn has(&self, u: NodeId, v: NodeId) -> bool {
        if self.sorted {
            self.graph.in_neighbors(v).binary_search(&u).is_ok()
        } else {
            self.graph.has_edge(u, v)
        }
    }

    /// Whether `u` and `v` are joined by an edge in either direction.
    pub(super) fn joined(&self, u: NodeId, v: NodeId) -> bool {
        self.has(u, v) || self.has(v, u)
    }
}

/// Pairs written as an int64 `[2, E]` `.npy` whose `E` is known only at the end: sources and
/// destinations go to two temporary files, joined into the array by [`PairWriter::finish`].
pub(super) struct PairWriter {
    path: PathBuf,
    rows: [(PathBuf, BufWriter<std::fs::File>); 2],
    count: u64,
}

impl PairWriter {
    pub(super) fn create(path: &Path) -> Result<PairWriter> {
        let part = |row: &str| -> Result<(PathBuf, BufWriter<std::fs::File>)> {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let tmp = path.with_file_name(format!(".{name}.{row}"));
            let file = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
            Ok((tmp, BufWriter::with_capacity(1 << 20, file)))
        };
        Ok(PairWriter {
            path: path.to_path_buf(),
            rows: [part("src")?, part("dst")?],
            count: 0,
        })
    }

    pub(super) fn push(&mut self, pairs: &[Pair]) -> Result<()> {
        for (row, (tmp, out)) in self.rows.iter_mut().enumerate() {
            let bytes: Vec<u8> = pairs
                .iter()
                .flat_map(|&(s, d)| i64::from(if row == 0 { s } else { d }).to_le_bytes())
                .collect();
            out.write_all(&bytes).map_err(|e| Error::io(&*tmp, e))?;
        }
        self.count += pairs.len() as u64;
        Ok(())
    }

    /// Writes the array and removes the temporary files; returns the number of pairs.
    pub(super) fn finish(self) -> Result<u64> {
        let mut array = NpyWriter::<i64>::create(&self.path, &[2, self.count as usize])?;
        let mut bytes = vec![0u8; 1 << 23];
        for (tmp, out) in self.rows {
            out.into_inner()
                .map_err(|e| Error::io(&tmp, e.into_error()))?;
            let mut file = std::fs::File::open(&tmp).map_err(|e| Error::io(&tmp, e))?;
            let mut left = self.count as usize * 8;
            while left > 0 {
                let chunk = &mut bytes[..left.min(1 << 23)];
                file.read_exact(chunk).map_err(|e| Error::io(&tmp, e))?;
                let ids: Vec<i64> = chunk
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .collect();
                array.write(&ids)?;
                left -= chunk.len();
            }
            std::fs::remove_file(&tmp).map_err(|e| Error::io(&tmp, e))?;
        }
        array.finish()?;
        Ok(self.count)
    }
}

/// Runs `work` on blocks `0..count` in parallel, a window of blocks at a time, and hands the
/// results to `write` in block order: output in order, in memory of a window.
pub(super) fn ordered_blocks<T: Send>(
    count: usize,
    work: impl Fn(usize) -> Result<T> + Sync,
    mut write: impl FnMut(T) -> Result<()>,
) -> Result<()> {
    let window = 2 * rayon::current_num_threads();
    for start in (0..count).step_by(window) {
        let results: Vec<Result<T>> = (start..(start + window).min(count))
            .into_par_iter()
            .map(&work)
            .collect();
        for result in results {
            write(result?)?;
        }
    }
    Ok(())
}
