//! A dataset split for link prediction, written in bounded memory: a copy of the dataset whose
//! message-passing graph lacks the held-out edges, with `link_split/` in the layout that
//! [`LinkSplit`](graphloom_graph::LinkSplit) reads.
//!
//! The candidate edges are the pairs of distinct nodes joined by an edge: on an undirected
//! graph each pair `u < v` once; on a directed one each edge `u -> v`, except that an edge and
//! its reverse make one candidate (held out, both leave the graph, or the held-out pair would
//! still be joined). Each candidate gets a key, a keyed hash of `(seed, u, v)` with the pair
//! breaking ties, and the candidates of the smallest keys are held out, test first, then
//! validation: so the split is a pure function of the seed and the graph, and its counts are
//! exact. The keys are never held: one pass over the mapped CSR counts them in buckets of their
//! top bits, a second collects the keys of the bucket holding each threshold, a third writes
//! the graph without the held-out edges and the positives. Negatives are keyed draws too,
//! redrawn while they are edges of the whole graph.

use std::io::{Read, Write};
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use graphloom_io::NpyWriter;
use graphloom_tensor::rng::RngKey;
use rayon::prelude::*;

use graphloom_graph::format::dataset::write_features;
use graphloom_graph::format::edge_features::{
    gather_edge_rows, read_edge_features, EDGE_FEATURES_FILE,
};
use graphloom_graph::format::output_dir::{check_output_dir, write_dir_atomic, OutputKind};
use graphloom_graph::link_split::{LinkSet, LINK_SPLIT_DIR};
use graphloom_graph::{Error, MappedDataset, Meta, NodeId, Result};

mod negatives;
mod shared;

use negatives::write_negatives;
use shared::{ordered_blocks, Edges, Pair, PairWriter};
pub use shared::{LinkPhase, LinkProgress, LinkSplitConfig};

/// What [`write`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkSplitSummary {
    /// The new dataset's `meta.json`.
    pub meta: Meta,
    /// Candidate edges (see the module docs).
    pub candidates: u64,
    /// Supervision edges (`train_pos.npy`).
    pub train: u64,
    /// Validation positives.
    pub valid: u64,
    /// Test positives.
    pub test: u64,
    /// CSR entries removed from the graph with the held-out edges.
    pub removed_edges: u64,
    /// Negative destinations per held-out positive (0: no `neg_dst` files).
    pub neg_dst: usize,
}

/// CSR entries per block of rows that one task handles (few in tests, so that their small
/// graphs span many blocks and windows of blocks).
const BLOCK_EDGES: i64 = if cfg!(test) { 64 } else { 1 << 18 };
/// Rows per block at most, so a block's per-row arrays stay small on sparse graphs.
const BLOCK_ROWS: usize = if cfg!(test) { 16 } else { 1 << 16 };
/// Bits of the key that pick its bucket in the first pass: 2^16 counters. A bucket holds a
/// share 2^-16 of the candidates, the keys the second pass collects.
const BUCKET_BITS: u32 = 16;
/// Purposes of the keyed draws.
const KEY_PURPOSE: u64 = 0x11_4c5e;
/// Files of a dataset copied unchanged (the graph's are written anew, the features linked).
const COPIED_FILES: [&str; 4] = [
    "node_label.npy",
    "train_idx.npy",
    "valid_idx.npy",
    "test_idx.npy",
];

/// A candidate's key: its hash, then the pair `(min, max)`, so keys of distinct pairs differ.
type Key = (u64, NodeId, NodeId);

/// Which set a candidate falls in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Train,
    Valid,
    Test,
}

/// The graph being split and how its candidates are keyed.
struct Splitter<'a> {
    edges: Edges<'a>,
    directed: bool,
    key: RngKey,
    blocks: Vec<Range<usize>>,
}

impl Splitter<'_> {
    fn key(&self, s: NodeId, d: NodeId) -> Key {
        let (a, b) = (s.min(d), s.max(d));
        (self.key.bits(u64::from(a), u64::from(b)), a, b)
    }

    /// The sources of row `v` that may be supervision edges, sorted and without repeats: every
    /// source but `v` itself on a directed graph, those below `v` on an undirected one (the
    /// pair's other entry lies in the source's row).
    fn row_sources(&self, v: usize, out: &mut Vec<NodeId>) {
        let v = v as NodeId;
        out.clear();
        out.extend(
            self.edges
                .graph
                .in_neighbors(v)
                .iter()
                .copied()
                .filter(|&s| s < v || (self.directed && s > v)),
        );
        out.sort_unstable();
        out.dedup();
    }

    /// Whether the source `s` of row `v` (from [`Splitter::row_sources`]) is a candidate of its
    /// own: not when its reverse `v -> s` is an edge too and the pair's candidate is the entry
    /// in `s`'s row (`v < s`).
    fn is_candidate(&self, s: NodeId, v: NodeId) -> bool {
        !self.directed || s < v || !self.edges.has(v, s)
    }

    /// Calls `visit` with each block of rows in parallel, and `progress` with the entries done.
    fn for_each_block(
        &self,
        phase: LinkPhase,
        progress: LinkProgress<'_>,
        visit: impl Fn(Range<usize>, &mut Vec<NodeId>) + Sync,
    ) {
        let row_ptr = self.edges.graph.row_ptr;
        let total = self.edges.graph.num_edges() as u64;
        let done = AtomicU64::new(0);
        self.blocks
            .par_iter()
            .for_each_init(Vec::new, |buffer, rows| {
                let entries = (row_ptr[rows.end] - row_ptr[rows.start]) as u64;
                visit(rows.clone(), buffer);
                let so_far = done.fetch_add(entries, Ordering::Relaxed) + entries;
                progress(phase, so_far, total);
            });
    }
}

/// Ranges of rows of about [`BLOCK_EDGES`] entries each (at least one row, at most
/// [`BLOCK_ROWS`]).
fn row_blocks(row_ptr: &[i64]) -> Vec<Range<usize>> {
    let n = row_ptr.len() - 1;
    let mut blocks = Vec::new();
    let mut lo = 0;
    while lo < n {
        let limit = row_ptr[lo] + BLOCK_EDGES;
        let hi =
            (row_ptr.partition_point(|&p| p <= limit) - 1).clamp(lo + 1, (lo + BLOCK_ROWS).min(n));
        blocks.push(lo..hi);
        lo = hi;
    }
    blocks
}

/// The bucket of a key in the first pass.
fn bucket(key: Key) -> usize {
    (key.0 >> (64 - BUCKET_BITS)) as usize
}

/// Bounds of the held-out sets: a candidate whose key is below `test` is a test positive,
/// one below `valid` a validation positive, any other a supervision edge.
struct Thresholds {
    test: Key,
    valid: Key,
}

impl Thresholds {
    fn class(&self, key: Key) -> Class {
        if key < self.test {
            Class::Test
        } else if key < self.valid {
            Class::Valid
        } else {
            Class::Train
        }
    }
}

/// Held-out counts of `candidates` under `cfg`; `origin` (the dataset's column file) is named
/// when there are too few candidates to split.
fn held_out_counts(candidates: u64, cfg: &LinkSplitConfig, origin: &Path) -> Result<[u64; 2]> {
    if candidates == 0 {
        return Err(Error::invalid(
            origin,
            "holds no edge between two distinct nodes: a link split needs edges to hold out",
        ));
    }
    let count = |share: f64| (share * candidates as f64).round() as u64;
    let (valid, test) = (count(cfg.valid), count(cfg.test));
    let too_few = (cfg.valid > 0.0 && valid == 0)
        || (cfg.test > 0.0 && test == 0)
        || valid + test >= candidates;
    if too_few {
        return Err(Error::invalid(
            origin,
            format!(
                "holds {candidates} candidate edges, too few to hold out --valid {} ({valid} \
                 edges) and --test {} ({test}) and keep edges to train on: give larger shares \
                 or a larger graph",
                cfg.valid, cfg.test
            ),
        ));
    }
    Ok([valid, test])
}

/// Passes 1 and 2: the number of candidates and the keys at ranks `test` and `test + valid`
/// of their order, given the shares of `cfg`.
fn thresholds(
    splitter: &Splitter<'_>,
    cfg: &LinkSplitConfig,
    origin: &Path,
    progress: LinkProgress<'_>,
) -> Result<(u64, [u64; 2], Thresholds)> {
    let histogram: Vec<AtomicU64> = (0..1 << BUCKET_BITS).map(|_| AtomicU64::new(0)).collect();
    // An undirected graph holds each edge both ways: as many entries below the diagonal as
    // above it.
    let (below, above) = (AtomicU64::new(0), AtomicU64::new(0));
    splitter.for_each_block(LinkPhase::Keys, progress, |rows, sources| {
        let (mut lo, mut hi) = (0u64, 0u64);
        for v in rows {
            if !splitter.directed {
                for &s in splitter.edges.graph.in_neighbors(v as NodeId) {
                    lo += u64::from((s as usize) < v);
                    hi += u64::from((s as usize) > v);
                }
            }
            splitter.row_sources(v, sources);
            for &s in sources.iter() {
                if splitter.is_candidate(s, v as NodeId) {
                    histogram[bucket(splitter.key(s, v as NodeId))].fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        below.fetch_add(lo, Ordering::Relaxed);
        above.fetch_add(hi, Ordering::Relaxed);
    });
    let (below, above) = (below.into_inner(), above.into_inner());
    if below != above {
        return Err(Error::invalid(
            origin,
            format!(
                "holds {below} edges u -> v with u < v and {above} with u > v, but meta.json says \
                 the graph is undirected (every edge both ways): set \"directed\": true"
            ),
        ));
    }
    let histogram: Vec<u64> = histogram.into_iter().map(|c| c.into_inner()).collect();
    let candidates: u64 = histogram.iter().sum();
    let [valid, test] = held_out_counts(candidates, cfg, origin)?;
    // The bucket of each rank, and the rank within it.
    let locate = |rank: u64| {
        let mut before = 0;
        for (b, &count) in histogram.iter().enumerate() {
            if rank < before + count {
                return (b, (rank - before) as usize);
            }
            before += count;
        }
        unreachable!("ranks are below the number of candidates")
    };
    let wanted = [locate(test), locate(test + valid)];
    let collected: Vec<std::sync::Mutex<Vec<Key>>> =
        wanted.iter().map(|_| Default::default()).collect();
    splitter.for_each_block(LinkPhase::Thresholds, progress, |rows, sources| {
        let mut found: [Vec<Key>; 2] = Default::default();
        for v in rows {
            splitter.row_sources(v, sources);
            for &s in sources.iter() {
                let key = splitter.key(s, v as NodeId);
                for (w, &(b, _)) in wanted.iter().enumerate() {
                    if bucket(key) == b && splitter.is_candidate(s, v as NodeId) {
                        found[w].push(key);
                    }
                }
            }
        }
        for (w, keys) in found.into_iter().enumerate() {
            if !keys.is_empty() {
                let mut all = collected[w].lock().unwrap_or_else(|e| e.into_inner());
                all.extend(keys);
            }
        }
    });
    let [test_key, valid_key] = [0, 1].map(|w| {
        let mut keys = std::mem::take(&mut *collected[w].lock().unwrap_or_else(|e| e.into_inner()));
        keys.sort_unstable();
        keys.get(wanted[w].1).copied()
    });
    match (test_key, valid_key) {
        (Some(test_key), Some(valid_key)) => Ok((
            candidates,
            [valid, test],
            Thresholds {
                test: test_key,
                valid: valid_key,
            },
        )),
        _ => Err(Error::invalid(origin, "changed while it was being split")),
    }
}

/// The node ids of `csr_col_idx.npy`, written as `prepare` writes them: i32 below 2^31 nodes.
enum ColumnWriter {
    I32(NpyWriter<i32>),
    I64(NpyWriter<i64>),
}

impl ColumnWriter {
    fn write(&mut self, ids: &[NodeId]) -> Result<()> {
        match self {
            ColumnWriter::I32(w) => {
                let ids: Vec<i32> = ids.iter().map(|&v| v as i32).collect();
                w.write(&ids)?
            }
            ColumnWriter::I64(w) => {
                let ids: Vec<i64> = ids.iter().map(|&v| i64::from(v)).collect();
                w.write(&ids)?
            }
        }
        Ok(())
    }

    fn finish_shorter(self) -> Result<()> {
        match self {
            ColumnWriter::I32(w) => w.finish_shorter()?,
            ColumnWriter::I64(w) => w.finish_shorter()?,
        }
        Ok(())
    }
}

/// What pass 3 makes of one block of rows.
#[derive(Default)]
struct BlockOut {
    lengths: Vec<i64>,
    cols: Vec<NodeId>,
    weights: Vec<f32>,
    /// The kept edges' positions in the source graph, when their feature rows follow them.
    kept: Vec<i64>,
    train: Vec<Pair>,
    /// Validation, then test positives.
    held: [Vec<Pair>; 2],
}

/// Pass 3: writes the graph without the held-out edges (with their weights) into `dir`, and
/// the positives into `dir/link_split/`. Returns the entries written, the pairs of each set
/// and, with `keep_ids`, the positions in the source graph of the edges kept (for their
/// feature rows).
fn write_graph(
    splitter: &Splitter<'_>,
    thresholds: &Thresholds,
    weights: Option<&[f32]>,
    keep_ids: bool,
    dir: &Path,
    progress: LinkProgress<'_>,
) -> Result<(u64, [u64; 3], Vec<i64>)> {
    let graph = splitter.edges.graph;
    let (n, total) = (graph.num_nodes(), graph.num_edges());
    let split_dir = dir.join(LINK_SPLIT_DIR);
    let mut row_ptr = NpyWriter::<i64>::create(&dir.join("csr_row_ptr.npy"), &[n + 1])?;
    row_ptr.write(&[0])?;
    let col_path = dir.join("csr_col_idx.npy");
    let mut cols = if n <= i32::MAX as usize {
        ColumnWriter::I32(NpyWriter::create(&col_path, &[total])?)
    } else {
        ColumnWriter::I64(NpyWriter::create(&col_path, &[total])?)
    };
    let mut weight_out = match weights {
        Some(_) => Some(NpyWriter::<f32>::create(
            &dir.join("edge_weight.npy"),
            &[total],
        )?),
        None => None,
    };
    let pairs = |set: LinkSet| PairWriter::create(&split_dir.join(set.file_name()));
    let mut train = pairs(LinkSet::TrainPos)?;
    let mut held = [pairs(LinkSet::ValidPos)?, pairs(LinkSet::TestPos)?];
    let (mut offset, done) = (0i64, AtomicU64::new(0));
    let work = |b: usize| -> Result<BlockOut> {
        let rows = splitter.blocks[b].clone();
        let mut out = BlockOut::default();
        let mut sources = Vec::new();
        for v in rows.clone() {
            let node = v as NodeId;
            let first = graph.row_ptr[v] as usize;
            let before = out.cols.len();
            for (k, &s) in graph.in_neighbors(node).iter().enumerate() {
                if s == node || thresholds.class(splitter.key(s, node)) == Class::Train {
                    out.cols.push(s);
                    if let Some(w) = weights {
                        out.weights.push(w[first + k]);
                    }
                    if keep_ids {
                        out.kept.push((first + k) as i64);
                    }
                }
            }
            out.lengths.push((out.cols.len() - before) as i64);
            splitter.row_sources(v, &mut sources);
            for &s in &sources {
                match thresholds.class(splitter.key(s, node)) {
                    Class::Train => out.train.push((s, node)),
                    held if splitter.is_candidate(s, node) => {
                        out.held[usize::from(held == Class::Test)].push((s, node))
                    }
                    _ => {}
                }
            }
        }
        let entries = (graph.row_ptr[rows.end] - graph.row_ptr[rows.start]) as u64;
        let so_far = done.fetch_add(entries, Ordering::Relaxed) + entries;
        progress(LinkPhase::Graph, so_far, total as u64);
        Ok(out)
    };
    let (mut written, mut kept) = (0u64, Vec::new());
    ordered_blocks(splitter.blocks.len(), work, |out| {
        let offsets: Vec<i64> = out
            .lengths
            .iter()
            .map(|&len| {
                offset += len;
                offset
            })
            .collect();
        row_ptr.write(&offsets)?;
        cols.write(&out.cols)?;
        written += out.cols.len() as u64;
        if let Some(w) = &mut weight_out {
            w.write(&out.weights)?;
        }
        kept.extend_from_slice(&out.kept);
        train.push(&out.train)?;
        for (writer, pairs) in held.iter_mut().zip(&out.held) {
            writer.push(pairs)?;
        }
        Ok(())
    })?;
    row_ptr.finish()?;
    cols.finish_shorter()?;
    if let Some(w) = weight_out {
        w.finish_shorter()?;
    }
    let [valid, test] = held;
    Ok((
        written,
        [train.finish()?, valid.finish()?, test.finish()?],
        kept,
    ))
}

/// Copies `from` to `to` a chunk at a time, calling `progress` with the bytes copied.
fn copy_in_chunks(from: &Path, to: &Path, progress: &dyn Fn(u64, u64)) -> Result<()> {
    let mut input = std::fs::File::open(from).map_err(|e| Error::io(from, e))?;
    let total = input.metadata().map_err(|e| Error::io(from, e))?.len();
    let mut output = std::fs::File::create(to).map_err(|e| Error::io(to, e))?;
    let mut chunk = vec![0u8; 1 << 23];
    let mut done = 0u64;
    loop {
        let got = input.read(&mut chunk).map_err(|e| Error::io(from, e))?;
        if got == 0 {
            break;
        }
        output
            .write_all(&chunk[..got])
            .map_err(|e| Error::io(to, e))?;
        done += got as u64;
        progress(done, total);
    }
    output.sync_all().map_err(|e| Error::io(to, e))
}

/// The bytes the split of `ds` writes, at most: the graph, the files copied, the features
/// unless they can be hard-linked, and the split (the positives twice, while their rows are
/// joined, and the held-out ones' negatives).
fn bytes_needed(ds: &MappedDataset, out: &Path, held: u64, cfg: &LinkSplitConfig) -> u64 {
    let size = |name: &str| std::fs::metadata(ds.dir().join(name)).map_or(0, |m| m.len());
    let entries = ds.meta.num_edges as u64;
    let mut bytes = 8 * (ds.meta.num_nodes as u64 + 1) + 8 * entries + 4 * entries;
    bytes += COPIED_FILES.iter().map(|name| size(name)).sum::<u64>();
    if !graphloom_graph::disk::same_file_system(&ds.features_path(), out) {
        bytes += size("node_feat.npy");
    }
    bytes + 32 * entries + held * (32 + 8 * cfg.neg_dst as u64)
}

/// Writes `out`: a copy of the dataset directory `dataset` whose graph lacks the held-out
/// edges of a link split under `cfg`, with that split in `out/link_split/` (see the module
/// docs and [`LinkSplit`](graphloom_graph::LinkSplit)). Reads the dataset mapped, in bounded memory;
/// checks the output folder and the free disk space before the long passes, and writes
/// through a temporary folder renamed into place.
pub fn write(
    dataset: &Path,
    cfg: &LinkSplitConfig,
    out: &Path,
    progress: LinkProgress<'_>,
) -> Result<LinkSplitSummary> {
    cfg.check()?;
    check_output_dir(out, OutputKind::Dataset, &[dataset])?;
    let ds = MappedDataset::open(dataset)?;
    let graph = ds.data();
    let origin = dataset.join("csr_col_idx.npy");
    let blocks = row_blocks(graph.row_ptr);
    let sorted = blocks.par_iter().all(|rows| {
        rows.clone()
            .all(|v| graph.in_neighbors(v as NodeId).is_sorted())
    });
    let splitter = Splitter {
        edges: Edges { graph, sorted },
        directed: ds.meta.directed,
        key: RngKey::new(cfg.seed, 0, KEY_PURPOSE),
        blocks,
    };
    let (candidates, [valid, test], thresholds) = thresholds(&splitter, cfg, &origin, progress)?;
    if cfg.neg_dst >= graph.num_nodes() {
        return Err(Error::argument(
            "--neg-dst",
            format!(
                "{} negative destinations per held-out edge, but the graph has {} nodes: give \
                 fewer than the nodes",
                cfg.neg_dst,
                graph.num_nodes()
            ),
        ));
    }
    let needed = bytes_needed(&ds, out, valid + test, cfg);
    graphloom_graph::disk::check_free_space(out, needed, "the link split")?;
    let mut summary = LinkSplitSummary {
        meta: ds.meta.clone(),
        candidates,
        train: 0,
        valid,
        test,
        removed_edges: 0,
        neg_dst: cfg.neg_dst,
    };
    write_dir_atomic(out, OutputKind::Dataset, &[dataset], |tmp| {
        let split_dir = tmp.join(LINK_SPLIT_DIR);
        std::fs::create_dir_all(&split_dir).map_err(|e| Error::io(&split_dir, e))?;
        // Edge features follow their edges: the kept ones' rows, in the new graph's order.
        let edge_features = read_edge_features(dataset, graph.num_edges())?;
        let (entries, [train, held_valid, held_test], kept) = write_graph(
            &splitter,
            &thresholds,
            ds.edge_weight(),
            edge_features.is_some(),
            tmp,
            progress,
        )?;
        if let Some(all) = &edge_features {
            let rows = gather_edge_rows(all, &kept, all.dtype())?;
            write_features(&tmp.join(EDGE_FEATURES_FILE), &rows)?;
        }
        if [held_valid, held_test] != [valid, test] {
            return Err(Error::invalid(dataset, "changed while it was being split"));
        }
        summary.train = train;
        summary.removed_edges = graph.num_edges() as u64 - entries;
        summary.meta.num_edges = entries as usize;
        for name in COPIED_FILES {
            let to = tmp.join(name);
            std::fs::copy(dataset.join(name), &to).map_err(|e| Error::io(&to, e))?;
        }
        let features = ds.features_path();
        if features.exists() {
            let to = tmp.join("node_feat.npy");
            // A link shares the file's pages; files are replaced, never changed in place, so
            // a later write to either dataset leaves the other as it was.
            if std::fs::hard_link(&features, &to).is_err() {
                copy_in_chunks(&features, &to, &|done, total| {
                    progress(LinkPhase::Features, done, total)
                })?;
            }
        }
        write_negatives(splitter.edges, cfg, &split_dir, &origin, progress)?;
        summary.meta.write(tmp)
    })?;
    Ok(summary)
}

#[cfg(test)]
mod tests;
