//! [`PartGraph`]: what one worker knows of the partitioned graph.

use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use graphloom_comm::{Communicator, CommunicatorExt};
use graphloom_graph::parts::{Part, Shard};
use graphloom_nn::{balanced_chunks, split_rows};
use graphloom_tensor::memory::{category_scope, Charge};
use graphloom_tensor::{Category, Real};

/// A worker's view of the graph: its in-edges by source part, which of its rows each part
/// needs, and the node ids of every row it will receive (for the dropout masks, which are
/// keyed by node id).
#[derive(Debug)]
pub struct PartGraph {
    /// This worker's part.
    pub index: usize,
    /// Local rows.
    pub rows: usize,
    /// `shards[q]`: in-edges from part `q`. An edge's source is a position in the rows part
    /// `q` sends (the order of its messages). The own shard is indexed as a CSR: every local
    /// row is one of its destinations, in order, and its sources are local rows.
    pub shards: Vec<Shard>,
    /// `send[q]`: local rows part `q` needs, in the order it receives them.
    pub send: Vec<Vec<u32>>,
    /// `halo_ids[q]`: the node ids of the rows part `q` sends, in order.
    pub halo_ids: Vec<Arc<[i64]>>,
    /// The node id of each local row.
    pub ids: Arc<[i64]>,
    /// Weighted in-degree of each local row (the sum of its in-edges' weights; their count
    /// without weights): a part holds all in-edges of its rows.
    pub degree: Vec<f64>,
    /// Whether each local row has a self-loop among its in-edges.
    pub has_loop: Vec<bool>,
    /// The own shard's edges by source, made on first use (the backward passes).
    own_out: OnceLock<OwnOutEdges>,
    /// These arrays' bytes, charged to the worker's graph memory.
    _charge: Charge,
}

/// The edges of a worker's own shard grouped by source: for own row `u`, entries
/// `ptr[u]..ptr[u + 1]` of `dst` (the local destination row) and `edge` (the edge's index in
/// the shard), in the shard's order, self-loops included.
#[derive(Debug)]
pub(crate) struct OwnOutEdges {
    pub(crate) ptr: Vec<i64>,
    pub(crate) dst: Vec<u32>,
    pub(crate) edge: Vec<u32>,
    _charge: Charge,
}

impl PartGraph {
    /// Whether another part sends rows to this one: without, a forward pass's own part
    /// finishes every row itself, with no pass of its own after the exchange.
    pub(crate) fn receives_rows(&self) -> bool {
        (self.shards.iter().enumerate()).any(|(q, s)| q != self.index && !s.dst.is_empty())
    }

    /// The graph of this worker's loaded part, whose shards, send lists and degrees move here
    /// (the part keeps its features, labels and splits). Collective: the workers tell each
    /// other the node ids of the rows they send.
    pub fn new(comm: &dyn Communicator, part: &mut Part) -> crate::Result<PartGraph> {
        let rows = part.orig_ids.len();
        let sends = part
            .send
            .iter()
            .map(|rows| {
                let ids: Vec<i64> = rows.iter().map(|&r| part.orig_ids[r as usize]).collect();
                bytemuck::cast_slice(&ids).to_vec()
            })
            .collect();
        let halo_ids: Vec<Arc<[i64]>> = comm
            .all_to_all_v(sends)?
            .iter()
            .map(|bytes| bytemuck::pod_collect_to_vec::<u8, i64>(bytes).into())
            .collect();
        // Every worker learns whether every part passed its checks before the collectives
        // that follow.
        let (degree, checked) = match checked_degrees(part, &halo_ids) {
            Ok(degree) => (degree, Ok(())),
            Err(e) => (Vec::new(), Err(e)),
        };
        comm.agree(checked)?;
        let mut shards = std::mem::take(&mut part.shards);
        let send = std::mem::take(&mut part.send);
        // The own shard's sources become local rows: the kernels read own rows in place, and
        // a lookup through `send[index]` on every edge would cost the own aggregation about a
        // third of its time (it sits in the chain that computes each prefetch's address).
        let own = &mut shards[part.index];
        let own_send = &send[part.index];
        own.src.iter_mut().for_each(|s| *s = own_send[*s as usize]);
        every_row_a_destination(own, rows);
        // A self-loop is an edge of the own shard whose source is its destination.
        let mut has_loop = vec![false; rows];
        for (i, &dst) in own.dst.iter().enumerate() {
            let sources = &own.src[own.ptr[i] as usize..own.ptr[i + 1] as usize];
            if sources.contains(&dst) {
                has_loop[dst as usize] = true;
            }
        }
        let bytes = shards
            .iter()
            .map(|s| s.dst.len() * 4 + s.ptr.len() * 8 + s.src.len() * 4)
            .sum::<usize>()
            + send.iter().map(|s| s.len() * 4).sum::<usize>()
            + halo_ids.iter().map(|h| h.len() * 8).sum::<usize>()
            + rows * (8 + 8 + 1);
        let _g = category_scope(Category::Graph);
        Ok(PartGraph {
            index: part.index,
            rows,
            shards,
            send,
            halo_ids,
            ids: part.orig_ids.clone().into(),
            degree,
            has_loop,
            own_out: OnceLock::new(),
            _charge: Charge::new(bytes),
        })
    }

    /// The own shard's edges by source ([`OwnOutEdges`]), made on the first call and charged
    /// to the graph's memory.
    pub(crate) fn own_out_edges(&self) -> &OwnOutEdges {
        self.own_out.get_or_init(|| {
            let shard = &self.shards[self.index];
            // (source row, destination row, edge) of every edge, in the shard's order (the own
            // shard's destinations are its rows).
            let edges = || {
                (0..self.rows).flat_map(move |v| {
                    (shard.ptr[v] as usize..shard.ptr[v + 1] as usize)
                        .map(move |e| (shard.src[e] as usize, v as u32, e))
                })
            };
            let mut ptr = vec![0i64; self.rows + 1];
            for (u, _, _) in edges() {
                ptr[u + 1] += 1;
            }
            for u in 0..self.rows {
                ptr[u + 1] += ptr[u];
            }
            let total = ptr[self.rows] as usize;
            let (mut dst, mut edge) = (vec![0u32; total], vec![0u32; total]);
            let mut next = ptr.clone();
            for (u, v, e) in edges() {
                let at = next[u] as usize;
                // In range: PartGraph::new checked the part's own edge count.
                (dst[at], edge[at]) = (v, e as u32);
                next[u] += 1;
            }
            let _g = category_scope(Category::Graph);
            let bytes = ptr.len() * 8 + total * (4 + 4);
            OwnOutEdges {
                ptr,
                dst,
                edge,
                _charge: Charge::new(bytes),
            }
        })
    }

    /// Rows received from part `q`.
    pub fn halo_rows(&self, q: usize) -> usize {
        self.halo_ids[q].len()
    }
}

/// The weighted in-degree of every row of a part (a part holds all in-edges of its rows),
/// after checking its shards against what the exchange learnt: sources index the rows their
/// part sends, the in-edges of every row add up to its `in_degree.npy` entry, and the edges
/// within the part can be numbered in 32 bits (see [`OwnOutEdges`]). A damaged
/// file is an error here, not an out-of-bounds read in a kernel.
fn checked_degrees(part: &Part, halo_ids: &[Arc<[i64]>]) -> crate::Result<Vec<f64>> {
    let rows = part.orig_ids.len();
    let own_edges = part.shards[part.index].src.len();
    if u32::try_from(own_edges).is_err() {
        return Err(graphloom_graph::Error::invalid(
            format!("part_{0}/shard_{0}_src.npy", part.index),
            format!(
                "{own_edges} edges within the part, more than the {} a worker indexes: \
                 partition into more parts",
                u32::MAX
            ),
        )
        .into());
    }
    for (q, shard) in part.shards.iter().enumerate() {
        if let Some(&bad) = shard.src.iter().find(|&&s| s as usize >= halo_ids[q].len()) {
            return Err(graphloom_graph::Error::invalid(
                format!("part_{}/shard_{q}_src.npy", part.index),
                format!(
                    "position {bad} is not below {}, the rows part {q} sends",
                    halo_ids[q].len()
                ),
            )
            .into());
        }
    }
    let mut count = vec![0i64; rows];
    let mut degree = vec![0f64; rows];
    for shard in &part.shards {
        for (i, &dst) in shard.dst.iter().enumerate() {
            for e in shard.ptr[i] as usize..shard.ptr[i + 1] as usize {
                count[dst as usize] += 1;
                degree[dst as usize] += shard.weight_of(e);
            }
        }
    }
    if let Some(v) = (0..rows).find(|&v| part.in_degree.get(v) != Some(&count[v])) {
        return Err(graphloom_graph::Error::invalid(
            format!("part_{}/in_degree.npy", part.index),
            format!(
                "row {v} has {} in-edges in the shards, in_degree.npy says {:?}",
                count[v],
                part.in_degree.get(v)
            ),
        )
        .into());
    }
    Ok(degree)
}

/// Fills `out` (empty, with room for a row of `width` per row of `ptr`) with one row per row
/// `v`: `f(v, ptr[v]..ptr[v + 1], row)` with `row` zeroed, in parallel over chunks of about
/// equal edge counts. A row is zeroed just before `f` adds into it, while it is in the cache,
/// so the buffer is written once rather than zeroed in a pass of its own first.
pub(crate) fn fill_every_row<A: Real>(
    ptr: &[i64],
    width: usize,
    out: &mut Vec<A>,
    f: impl Fn(usize, Range<usize>, &mut [A]) + Sync,
) {
    fill_every_row_with(ptr, width, out, || (), |_, v, edges, row| f(v, edges, row));
}

/// [`fill_every_row`] with a scratch `S` per parallel task, made by `init` and handed to
/// every call of `f` of that task: `f(scratch, v, edges, row)`.
pub(crate) fn fill_every_row_with<A: Real, S>(
    ptr: &[i64],
    width: usize,
    out: &mut Vec<A>,
    init: impl Fn() -> S + Sync + Send,
    f: impl Fn(&mut S, usize, Range<usize>, &mut [A]) + Sync,
) {
    use rayon::prelude::*;
    let rows = ptr.len() - 1;
    assert!(out.is_empty() && out.capacity() >= rows * width);
    if width == 0 {
        return;
    }
    let bounds = balanced_chunks(ptr, rayon::current_num_threads() * 4);
    let spare = &mut out.spare_capacity_mut()[..rows * width];
    split_rows(spare, width, &bounds)
        .into_par_iter()
        .for_each_init(init, |scratch, (first, piece)| {
            for (r, row) in piece.chunks_mut(width).enumerate() {
                let v = first + r;
                row.iter_mut().for_each(|x| {
                    x.write(A::ZERO);
                });
                // SAFETY: every element of the row was written just above.
                let row = unsafe { &mut *(row as *mut [MaybeUninit<A>] as *mut [A]) };
                f(scratch, v, ptr[v] as usize..ptr[v + 1] as usize, row);
            }
        });
    // SAFETY: the row ranges cover rows 0..rows, and every element of each was written (zeroed
    // above, then added into by `f`).
    unsafe { out.set_len(rows * width) };
}

/// Makes every row `0..rows` a destination of `shard`, in order, a row without edges from its
/// part with an empty range: the own shard then indexes its edges by row, as a CSR does.
fn every_row_a_destination(shard: &mut Shard, rows: usize) {
    if shard.dst.len() == rows {
        return;
    }
    let mut ptr = vec![0i64; rows + 1];
    for (i, &v) in shard.dst.iter().enumerate() {
        ptr[v as usize + 1] = shard.ptr[i + 1] - shard.ptr[i];
    }
    for v in 0..rows {
        ptr[v + 1] += ptr[v];
    }
    shard.ptr = ptr;
    shard.dst = (0..rows as u32).collect();
}

/// Runs `f(i, row)` for every destination `i` of `shard` (an index into `shard.dst`) with the
/// row of `out` (rows of `width`) that belongs to it, in parallel over chunks of about equal
/// edge counts. Destinations are distinct and increasing, so the chunks' rows never overlap.
pub(crate) fn for_each_destination<A: Send>(
    shard: &Shard,
    out: &mut [A],
    width: usize,
    f: impl Fn(usize, &mut [A]) + Sync,
) {
    use rayon::prelude::*;
    let n = shard.dst.len();
    if n == 0 || width == 0 {
        return;
    }
    // Chunks of destinations by edge count, then the rows of `out` each chunk writes: from
    // its first destination's row to the next chunk's (the first chunk from row 0).
    let chunks = balanced_chunks(&shard.ptr, rayon::current_num_threads() * 4);
    let rows = out.len() / width;
    let row_bounds: Vec<usize> = chunks
        .iter()
        .map(|&c| match c {
            0 => 0,
            c if c == n => rows,
            c => shard.dst[c] as usize,
        })
        .collect();
    split_rows(out, width, &row_bounds)
        .into_par_iter()
        .zip(chunks.par_windows(2))
        .for_each(|((first, piece), range)| {
            for i in range[0]..range[1] {
                let r = shard.dst[i] as usize - first;
                f(i, &mut piece[r * width..(r + 1) * width]);
            }
        });
}
