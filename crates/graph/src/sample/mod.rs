//! Multi-hop neighbour sampling without replacement, uniform or weighted, over a graph in
//! memory ([`Csr`]) or in the store ([`crate::StoreGraph`], any layout), into [`Block`]s.
//!
//! Every draw is a counter-based hash of (seed, epoch, hop, node id, position), so a batch is
//! the same whatever the number of threads or ranks, and whichever rank holds the node.
//!
//! ```
//! use graphloom_graph::sample::{CsrSource, Sampler, SamplerKind};
//! use graphloom_graph::Csr;
//!
//! // A star: nodes 1..=5 all point to node 0.
//! let g = Csr::from_edges(6, &[1, 2, 3, 4, 5], &[0, 0, 0, 0, 0]);
//! let mut sampler = Sampler::new(g.num_nodes());
//! let blocks = sampler.sample(&CsrSource::new(&g), &[0], &[3], SamplerKind::Uniform, 7, 0)?;
//! assert_eq!(blocks[0].num_edges(), 3);
//! assert_eq!(blocks[0].dst_nodes(), &[0]);
//! # Ok::<(), graphloom_graph::Error>(())
//! ```

mod block;
mod choose;
mod fanouts;
mod hetero;

use graphloom_tensor::prefetch::prefetch_at;
use graphloom_tensor::rng::RngKey;
use rayon::prelude::*;

pub use block::{Block, Relabeler};
pub use choose::{below, uniform_positions, weighted_positions};
pub use fanouts::Fanouts;
pub use hetero::{
    HeteroBlock, HeteroSampler, RelationBlock, RelationSource, HETERO_SAMPLE_PURPOSE,
};

use crate::{Csr, Error, NodeId, Result};

/// The most neighbours per node a hop reserves room for up front; more grow as drawn.
const CAPACITY_PER_NODE: usize = 64;

/// The purpose of the sampling draws in their [`RngKey`]: hop `h` uses `SAMPLE_PURPOSE + h`.
pub const SAMPLE_PURPOSE: u64 = 0x5A3F_0000;

/// How neighbours are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SamplerKind {
    /// Every k-subset of a node's in-neighbours equally likely.
    Uniform,
    /// Without replacement, in proportion to the edge weights (A-Res).
    Weighted,
}

/// The neighbours sampled for one frontier: `neighbors[offsets[i]..offsets[i + 1]]` (with their
/// edge ids) belong to frontier node `i`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HopSample {
    /// `frontier.len() + 1` offsets.
    pub offsets: Vec<i64>,
    /// Sampled in-neighbours.
    pub neighbors: Vec<NodeId>,
    /// Their edge ids (positions in the graph's `col_idx`).
    pub edge_ids: Vec<i64>,
}

impl HopSample {
    /// Concatenates per-chunk samples in order.
    fn concat(parts: Vec<HopSample>) -> HopSample {
        let mut out = HopSample {
            offsets: vec![0],
            ..Default::default()
        };
        for part in parts {
            let base = *out.offsets.last().expect("starts with 0");
            out.offsets
                .extend(part.offsets[1..].iter().map(|&o| o + base));
            out.neighbors.extend(part.neighbors);
            out.edge_ids.extend(part.edge_ids);
        }
        out
    }
}

/// A graph that can sample the in-neighbours of a frontier.
pub trait NeighborSource: Sync {
    /// The number of nodes.
    fn num_nodes(&self) -> usize;

    /// Samples up to `fanout` in-neighbours of each frontier node (all of them for `None`),
    /// drawing node `v`'s choices from `key.row(v)`. Collective for a graph in the store's
    /// Distributed layout.
    fn sample_hop(
        &self,
        frontier: &[NodeId],
        fanout: Option<usize>,
        kind: SamplerKind,
        key: RngKey,
    ) -> Result<HopSample>;
}

/// Fails when weighted sampling is asked of a graph without edge weights.
pub(crate) fn require_weights(kind: SamplerKind, has_weights: bool) -> Result<()> {
    if kind == SamplerKind::Weighted && !has_weights {
        return Err(Error::argument(
            "edge_weight",
            "weighted sampling needs edge weights",
        ));
    }
    Ok(())
}

/// Frontier nodes per parallel task.
const NODES_PER_TASK: usize = 256;

/// How many frontier nodes ahead the sampler prefetches a node's offsets, and how many sampled
/// edges ahead it prefetches an edge's source: both are random reads over the whole graph.
const NODE_PREFETCH: usize = 16;
/// See [`NODE_PREFETCH`].
const EDGE_PREFETCH: usize = 64;

/// Chooses the positions of one node's sampled neighbours into `out`.
pub(crate) fn choose(
    degree: usize,
    weights: Option<&[f32]>,
    fanout: Option<usize>,
    kind: SamplerKind,
    draws: graphloom_tensor::rng::RowKey,
    scratch: &mut Vec<(f64, u32)>,
    out: &mut Vec<u32>,
) {
    let k = fanout.unwrap_or(degree);
    match (kind, weights) {
        (SamplerKind::Weighted, Some(w)) => weighted_positions(w, k, draws, scratch, out),
        _ => uniform_positions(degree, k, draws, out),
    }
}

/// A graph in memory, with optional edge weights (one per entry of `col_idx`).
#[derive(Clone, Copy, Debug)]
pub struct CsrSource<'a> {
    row_ptr: &'a [i64],
    col_idx: &'a [NodeId],
    weights: Option<&'a [f32]>,
}

impl<'a> CsrSource<'a> {
    /// An unweighted graph.
    pub fn new(graph: &'a Csr) -> CsrSource<'a> {
        CsrSource::from_arrays(&graph.row_ptr, &graph.col_idx)
    }

    /// An unweighted graph from its CSR arrays (a [`Csr`]'s, or mapped ones), whose
    /// invariants the caller has checked ([`Csr::check`]).
    pub fn from_arrays(row_ptr: &'a [i64], col_idx: &'a [NodeId]) -> CsrSource<'a> {
        CsrSource {
            row_ptr,
            col_idx,
            weights: None,
        }
    }

    /// A graph with one weight per edge; fails when the lengths differ or a weight is negative
    /// or not finite.
    pub fn weighted(graph: &'a Csr, weights: &'a [f32]) -> Result<CsrSource<'a>> {
        if weights.len() != graph.num_edges() {
            return Err(Error::argument(
                "edge_weight",
                format!("{} weights for {} edges", weights.len(), graph.num_edges()),
            ));
        }
        if let Some(e) = weights.iter().position(|w| !(w.is_finite() && *w >= 0.0)) {
            return Err(Error::argument(
                "edge_weight",
                format!(
                    "edge {e} has weight {}; weights must be finite and >= 0",
                    weights[e]
                ),
            ));
        }
        Ok(CsrSource {
            weights: Some(weights),
            ..CsrSource::new(graph)
        })
    }
}

impl NeighborSource for CsrSource<'_> {
    fn num_nodes(&self) -> usize {
        self.row_ptr.len() - 1
    }

    fn sample_hop(
        &self,
        frontier: &[NodeId],
        fanout: Option<usize>,
        kind: SamplerKind,
        key: RngKey,
    ) -> Result<HopSample> {
        require_weights(kind, self.weights.is_some())?;
        let (row_ptr, col_idx) = (self.row_ptr, self.col_idx);
        let parts = frontier
            .par_chunks(NODES_PER_TASK)
            .map(|chunk| {
                let mut part = HopSample {
                    offsets: Vec::with_capacity(chunk.len() + 1),
                    // A hint only: a fanout may be far above any degree.
                    edge_ids: Vec::with_capacity(
                        chunk.len() * fanout.unwrap_or(0).min(CAPACITY_PER_NODE),
                    ),
                    ..Default::default()
                };
                part.offsets.push(0);
                let mut positions = Vec::new();
                let mut scratch = Vec::new();
                // First the positions of every node's choice, then the neighbours at them: each
                // pass knows the addresses it will read a few items ahead and prefetches them.
                for (i, &v) in chunk.iter().enumerate() {
                    if let Some(&ahead) = chunk.get(i + NODE_PREFETCH) {
                        prefetch_at(row_ptr, ahead as usize);
                    }
                    let (start, end) = (
                        row_ptr[v as usize] as usize,
                        row_ptr[v as usize + 1] as usize,
                    );
                    positions.clear();
                    let weights = self.weights.map(|w| &w[start..end]);
                    choose(
                        end - start,
                        weights,
                        fanout,
                        kind,
                        key.row(u64::from(v)),
                        &mut scratch,
                        &mut positions,
                    );
                    part.edge_ids
                        .extend(positions.iter().map(|&p| (start + p as usize) as i64));
                    part.offsets.push(part.edge_ids.len() as i64);
                }
                part.neighbors = Vec::with_capacity(part.edge_ids.len());
                for (i, &e) in part.edge_ids.iter().enumerate() {
                    if let Some(&ahead) = part.edge_ids.get(i + EDGE_PREFETCH) {
                        prefetch_at(col_idx, ahead as usize);
                    }
                    part.neighbors.push(col_idx[e as usize]);
                }
                part
            })
            .collect();
        Ok(HopSample::concat(parts))
    }
}

/// Samples multi-hop blocks, reusing its relabelling table between batches.
#[derive(Debug)]
pub struct Sampler {
    relabel: Relabeler,
}

impl Sampler {
    /// A sampler for graphs of `num_nodes` nodes.
    pub fn new(num_nodes: usize) -> Sampler {
        Sampler {
            relabel: Relabeler::new(num_nodes),
        }
    }

    /// Samples around `seeds` (distinct node ids) with `fanouts` written from the seeds
    /// outwards (`-1`: all neighbours), and returns the blocks from the input layer to the
    /// seeds: the last block's destinations are the seeds, and each block's sources are the
    /// destinations of the block before it.
    pub fn sample(
        &mut self,
        source: &dyn NeighborSource,
        seeds: &[NodeId],
        fanouts: &[i64],
        kind: SamplerKind,
        seed: u64,
        epoch: u64,
    ) -> Result<Vec<Block>> {
        let n = source.num_nodes();
        if let Some(&bad) = seeds.iter().find(|&&s| s as usize >= n) {
            return Err(Error::argument(
                "seeds",
                format!("seed node {bad} is not below {n}"),
            ));
        }
        Fanouts::check_counts(fanouts)?;
        if fanouts.iter().all(|&f| f == 0) {
            return rows_only(seeds, fanouts.len());
        }
        let mut blocks: Vec<Block> = Vec::with_capacity(fanouts.len());
        for (hop, &f) in fanouts.iter().enumerate() {
            // The seeds, then each block's sources (the destinations of the next block out).
            let frontier = blocks.last().map_or(seeds, |b| &b.src_nodes[..]);
            let fanout = (f >= 0).then_some(f as usize);
            let key = RngKey::new(seed, epoch, SAMPLE_PURPOSE + hop as u64);
            let hop_sample = source.sample_hop(frontier, fanout, kind, key)?;
            for &v in frontier {
                self.relabel.insert(v);
            }
            if self.relabel.nodes().len() != frontier.len() {
                self.relabel.finish();
                return Err(Error::argument("seeds", "seed nodes must be distinct"));
            }
            let num_dst = frontier.len();
            let col_idx = self.relabel.insert_all(&hop_sample.neighbors);
            blocks.push(Block {
                num_dst,
                src_nodes: self.relabel.finish(),
                row_ptr: hop_sample.offsets,
                col_idx,
                edge_ids: hop_sample.edge_ids,
            });
        }
        blocks.reverse();
        Ok(blocks)
    }
}

/// The blocks of fanouts that draw no neighbour ([`Fanouts::rows`]): each the seeds alone,
/// made without the relabel table, whose first touch faults in a page per seed of a large
/// graph (on the papers100M shape's 111M nodes: 1.7 s of a 2.2 s epoch of 200 SIGN row
/// batches, 0.003 s without it).
fn rows_only(seeds: &[NodeId], hops: usize) -> Result<Vec<Block>> {
    let mut sorted = seeds.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::argument("seeds", "seed nodes must be distinct"));
    }
    let block = Block {
        num_dst: seeds.len(),
        src_nodes: seeds.to_vec(),
        row_ptr: vec![0; seeds.len() + 1],
        col_idx: Vec::new(),
        edge_ids: Vec::new(),
    };
    Ok(vec![block; hops])
}
