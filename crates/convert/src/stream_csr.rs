//! CSR arrays built from edges that can be read again pass after pass, in bounded memory: one
//! pass over every edge counts each destination's in-degree, then each further pass keeps the
//! edges of one range of destinations (as many as fit in a fixed buffer), places them in their
//! rows, sorts the rows and appends them to `csr_col_idx.npy`. Memory holds the offsets (8
//! bytes per node), a counter per node and the buffer, whatever the number of edges.

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use graphloom_io::NpyWriter;
use rayon::prelude::*;

use graphloom_graph::{Error, NodeId, Result};

/// A phase of writing a dataset in bounded memory, for a progress bar.
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
    /// The relations of a heterogeneous dataset, each written by the phases above (units:
    /// relations written): the line that says which relation the next ones are about.
    Relations,
}

impl Phase {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Degrees => "counting degrees",
            Phase::Edges => "placing edges",
            Phase::Labels => "labels and splits",
            Phase::Features => "features",
            Phase::Relations => "relations written",
        }
    }
}

/// A progress callback: `(phase, done, total)`.
pub type Progress<'a> = &'a (dyn Fn(Phase, u64, u64) + Sync);

/// What a pass over an [`EdgeStream`] calls with each chunk of `(source, destination)` edges.
pub(crate) type EdgeVisitor<'a> = &'a (dyn Fn(&[(i64, i64)]) -> Result<()> + Sync);

/// Edges `(source, destination)` that can be read again, pass after pass.
pub(crate) trait EdgeStream: Sync {
    /// The number of edges, when known before a pass (for progress).
    fn len_hint(&self) -> Option<u64>;

    /// Calls `visit` on consecutive chunks of edges that together hold every edge once,
    /// possibly from several threads at once; the first error ends the pass.
    fn for_each_chunk(&self, visit: EdgeVisitor<'_>) -> Result<()>;
}

/// Every edge of a stream, and each reversed too.
pub(crate) struct BothDirections<'a>(pub(crate) &'a dyn EdgeStream);

impl EdgeStream for BothDirections<'_> {
    fn len_hint(&self) -> Option<u64> {
        self.0.len_hint().map(|e| 2 * e)
    }

    fn for_each_chunk(&self, visit: EdgeVisitor<'_>) -> Result<()> {
        self.0.for_each_chunk(&|chunk| {
            visit(chunk)?;
            let reversed: Vec<(i64, i64)> = chunk.iter().map(|&(s, d)| (d, s)).collect();
            visit(&reversed)
        })
    }
}

/// The largest node id a converter accepts. Node ids are 32-bit ([`NodeId`], `u32`) in
/// memory and `i32` (below 2^31 nodes) or `i64` in `csr_col_idx.npy`; the node count, the
/// largest id plus one, must be a `NodeId` too.
pub(crate) const MAX_NODE_ID: i64 = NodeId::MAX as i64 - 1;

/// Bytes per node a streaming converter holds at its peak besides its edge buffer: the labels
/// (8) and the seeded split's shuffle (16 for the keyed order, 8 for the ids, 8 for the sorted
/// splits); building the CSR before it holds less (labels 8, counters 4, offsets 8, merged
/// offsets 8).
const BYTES_PER_NODE: u64 = 40;

/// Nodes without any edge that a graph whose node count comes from its largest id may have,
/// besides two per edge: a larger gap is most likely a damaged id, and would size every
/// per-node array of the conversion.
const MAX_UNSEEN_NODES: u64 = 1 << 20;

/// The largest node id of a stream plus one (0 without edges): the node count of a graph that
/// states none. Fails on a negative id, one above [`MAX_NODE_ID`], and one so large that most
/// of the nodes it implies would have no edge (see [`MAX_UNSEEN_NODES`]): the count must be
/// given then.
pub(crate) fn node_count(edges: &dyn EdgeStream, origin: &Path) -> Result<usize> {
    let max = std::sync::atomic::AtomicI64::new(-1);
    let seen = AtomicU64::new(0);
    edges.for_each_chunk(&|chunk| {
        for &(s, d) in chunk {
            if s < 0 || d < 0 {
                return Err(Error::invalid(
                    origin,
                    format!("edge {s} -> {d} has a negative node id"),
                ));
            }
            if s.max(d) > MAX_NODE_ID {
                return Err(Error::invalid(
                    origin,
                    format!(
                        "edge {s} -> {d} has a node id above {MAX_NODE_ID}, the largest: node \
                         ids are 32-bit"
                    ),
                ));
            }
            max.fetch_max(s.max(d), Ordering::Relaxed);
        }
        seen.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        Ok(())
    })?;
    let (largest, edges) = (max.into_inner(), seen.into_inner());
    if largest >= 0 && largest as u64 >= 2 * edges + MAX_UNSEEN_NODES {
        return Err(Error::invalid(
            origin,
            format!(
                "node id {largest} would make a graph of {largest}+1 nodes for {edges} edges: \
                 give the number of nodes if that is right"
            ),
        ));
    }
    Ok((largest + 1) as usize)
}

/// Fails, before anything is allocated, when `n` nodes are more than node ids can number or
/// than the memory this process may use holds while converting (with an edge buffer of
/// `buffer_bytes`). `origin` is named in errors.
pub(crate) fn check_node_count(n: usize, buffer_bytes: usize, origin: &Path) -> Result<()> {
    if n as u64 > MAX_NODE_ID as u64 + 1 {
        return Err(Error::invalid(
            origin,
            format!(
                "{n} nodes exceed the {} that 32-bit node ids number",
                MAX_NODE_ID + 1
            ),
        ));
    }
    use graphloom_tensor::memory::{usable_memory_bytes, MemoryMeasure};
    let needed = n as u64 * BYTES_PER_NODE + buffer_bytes as u64;
    match usable_memory_bytes(MemoryMeasure::Available) {
        Some(usable) if needed > usable => Err(Error::invalid(
            origin,
            format!(
                "{n} nodes need about {} of memory to convert, and this process may use {}: \
                 node ids must run from 0 to the number of nodes less one (relabel sparse ids)",
                graphloom_io::format_bytes(needed),
                graphloom_io::format_bytes(usable)
            ),
        )),
        _ => Ok(()),
    }
}

/// How [`write_csr`] builds the rows.
pub(crate) struct CsrOptions {
    /// Drop self-loops and merge duplicate edges (the simple graph METIS and PyG expect).
    pub(crate) simple: bool,
    /// Bytes of edges placed per pass.
    pub(crate) buffer_bytes: usize,
}

/// Writes `csr_row_ptr.npy` and `csr_col_idx.npy` (i32 ids below 2^31 nodes, else i64) of the
/// graph of `n` nodes whose edges `edges` streams into `dir`; `origin` is named in errors.
/// Returns the number of edges written.
pub(crate) fn write_csr(
    dir: &Path,
    n: usize,
    edges: &dyn EdgeStream,
    origin: &Path,
    options: &CsrOptions,
    progress: Progress<'_>,
) -> Result<u64> {
    write_csr_between(dir, n, n, edges, origin, options, progress)
}

/// [`write_csr`] of a relation between two node types: `n` destinations (the rows) whose
/// sources are ids of a type of `sources` nodes (the ids' dtype follows `sources`).
pub(crate) fn write_csr_between(
    dir: &Path,
    sources: usize,
    n: usize,
    edges: &dyn EdgeStream,
    origin: &Path,
    options: &CsrOptions,
    progress: Progress<'_>,
) -> Result<u64> {
    check_node_count(n.max(sources), options.buffer_bytes, origin)?;
    let placed_offsets = degrees(n, sources, edges, origin, progress)?;
    let per_pass = (options.buffer_bytes / 4).max(1 << 10) as i64;
    let col_path = dir.join("csr_col_idx.npy");
    let (written, merged) = if sources <= i32::MAX as usize {
        write_columns::<i32>(
            &col_path,
            n,
            edges,
            &placed_offsets,
            per_pass,
            options.simple,
            progress,
            |v| v as i32,
        )?
    } else {
        write_columns::<i64>(
            &col_path,
            n,
            edges,
            &placed_offsets,
            per_pass,
            options.simple,
            progress,
            i64::from,
        )?
    };
    let mut out = NpyWriter::<i64>::create(&dir.join("csr_row_ptr.npy"), &[n + 1])?;
    out.write(merged.as_deref().unwrap_or(&placed_offsets))?;
    out.finish()?;
    Ok(written)
}

/// Writes `csr_col_idx.npy` with ids of type `T` from the rows [`place_edges`] hands on;
/// returns the ids written and, for a simple graph (rows shortened by merging), the offsets
/// of the rows as written.
#[allow(clippy::too_many_arguments)]
fn write_columns<T: graphloom_io::npy::NpyElement>(
    path: &Path,
    n: usize,
    edges: &dyn EdgeStream,
    row_ptr: &[i64],
    per_pass: i64,
    simple: bool,
    progress: Progress<'_>,
    id: fn(NodeId) -> T,
) -> Result<(u64, Option<Vec<i64>>)> {
    let mut out = NpyWriter::<T>::create(path, &[row_ptr[n] as usize])?;
    // Merging duplicates shortens rows: their final offsets are known only as they are
    // written (without merging, they are the offsets counted).
    let mut merged = simple.then(|| {
        let mut v = Vec::with_capacity(n + 1);
        v.push(0i64);
        v
    });
    let (mut written, mut ids) = (0u64, Vec::new());
    place_edges(n, edges, row_ptr, per_pass, simple, progress, |row| {
        ids.clear();
        ids.extend(row.iter().map(|&v| id(v)));
        written += ids.len() as u64;
        if let Some(offsets) = &mut merged {
            offsets.push(written as i64);
        }
        out.write(&ids).map_err(Error::from)
    })?;
    // Merging duplicates shortens the file the unmerged count announced.
    out.finish_shorter()?;
    Ok((written, merged))
}

/// The offsets of every edge by destination (one of `n`; sources below `sources`): one pass
/// counting in-degrees, checking ids.
fn degrees(
    n: usize,
    sources: usize,
    edges: &dyn EdgeStream,
    origin: &Path,
    progress: Progress<'_>,
) -> Result<Vec<i64>> {
    let counts: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
    let seen = AtomicU64::new(0);
    edges.for_each_chunk(&|chunk| {
        for &(s, d) in chunk {
            if s < 0 || d < 0 || s as usize >= sources || d as usize >= n {
                let bounds = match sources == n {
                    true => format!("0..{n}"),
                    false => format!("0..{sources} (sources) or 0..{n} (destinations)"),
                };
                return Err(Error::invalid(
                    origin,
                    format!("edge {s} -> {d} has a node id outside {bounds}"),
                ));
            }
            if counts[d as usize].fetch_add(1, Ordering::Relaxed) == u32::MAX {
                return Err(Error::invalid(
                    origin,
                    format!("node {d} has more than {} in-edges", u32::MAX),
                ));
            }
        }
        let done = seen.fetch_add(chunk.len() as u64, Ordering::Relaxed) + chunk.len() as u64;
        progress(Phase::Degrees, done, edges.len_hint().unwrap_or(done));
        Ok(())
    })?;
    let mut row_ptr = Vec::with_capacity(n + 1);
    row_ptr.push(0i64);
    let mut sum = 0i64;
    for c in counts {
        sum += i64::from(c.into_inner());
        row_ptr.push(sum);
    }
    Ok(row_ptr)
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
/// row) per pass over all edges; hands each row, sorted (and made simple when `simple`), to
/// `emit` in order.
fn place_edges(
    n: usize,
    edges: &dyn EdgeStream,
    row_ptr: &[i64],
    per_pass: i64,
    simple: bool,
    progress: Progress<'_>,
    mut emit: impl FnMut(&[NodeId]) -> Result<()>,
) -> Result<()> {
    let total = row_ptr[n] as u64;
    // A simple graph's rows, without loops and duplicates, one at a time.
    let mut kept: Vec<NodeId> = Vec::new();
    let mut lo = 0usize;
    while lo < n {
        // The widest range of rows from `lo` within the buffer (at least one row).
        let limit = row_ptr[lo] + per_pass;
        let hi = (row_ptr.partition_point(|&p| p <= limit) - 1).clamp(lo + 1, n);
        let base = row_ptr[lo];
        let mut buffer: Vec<NodeId> = vec![0; (row_ptr[hi] - base) as usize];
        let cursors: Vec<AtomicU32> = (lo..hi).map(|_| AtomicU32::new(0)).collect();
        let slots = Slots(buffer.as_mut_ptr());
        let drawn = AtomicU64::new(0);
        let placing = (row_ptr[hi] - base) as u64;
        edges.for_each_chunk(&|chunk| {
            for &(u, v) in chunk {
                let v = v as usize;
                if (lo..hi).contains(&v) {
                    let k = cursors[v - lo].fetch_add(1, Ordering::Relaxed) as i64;
                    if k >= row_ptr[v + 1] - row_ptr[v] {
                        return Err(Error::argument(
                            "edges",
                            "the edges changed between two passes over them",
                        ));
                    }
                    let slot = (row_ptr[v] - base + k) as usize;
                    // SAFETY: slot lies in row v's part of the buffer (k is below v's
                    // in-degree, checked above), and the counter gives it to one task.
                    unsafe { slots.get().add(slot).write(u as NodeId) };
                }
            }
            let so_far = drawn.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            let share = (placing as f64 * so_far as f64 / total.max(1) as f64) as u64;
            progress(Phase::Edges, base as u64 + share.min(placing), total);
            Ok(())
        })?;
        drop(cursors);
        // Rows are sorted and handed on a block of rows at a time, so the slices of a pass's
        // rows never all exist at once.
        const ROWS_PER_BLOCK: usize = 1 << 16;
        let mut rest: &mut [NodeId] = &mut buffer;
        for block in (lo..hi).step_by(ROWS_PER_BLOCK) {
            let block_end = (block + ROWS_PER_BLOCK).min(hi);
            let mut rows: Vec<&mut [NodeId]> = Vec::with_capacity(block_end - block);
            for v in block..block_end {
                let (row, tail) =
                    std::mem::take(&mut rest).split_at_mut((row_ptr[v + 1] - row_ptr[v]) as usize);
                rows.push(row);
                rest = tail;
            }
            rows.par_iter_mut().for_each(|r| r.sort_unstable());
            for (k, row) in rows.into_iter().enumerate() {
                if simple {
                    let v = (block + k) as NodeId;
                    kept.clear();
                    kept.extend(row.iter().copied().filter(|&u| u != v));
                    kept.dedup();
                    emit(&kept)?;
                } else {
                    emit(row)?;
                }
            }
        }
        progress(Phase::Edges, row_ptr[hi] as u64, total);
        lo = hi;
    }
    Ok(())
}
