//! The negatives of a link split: pairs joined by no edge of the whole graph, drawn by keyed
//! uniform draws redrawn while they are edges, one per held-out positive, and `K` negative
//! destinations per held-out positive.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use graphloom_io::{MappedNpy, NpyWriter};
use graphloom_tensor::rng::RngKey;

use graphloom_graph::link_split::{LinkSet, NEG_DST_FILES};
use graphloom_graph::{Error, NodeId, Result};

use super::shared::{
    ordered_blocks, Edges, LinkPhase, LinkProgress, LinkSplitConfig, Pair, PairWriter, MAX_DRAWS,
    NEGATIVE_BLOCK, NEG_DST_PURPOSE, NEG_PURPOSE,
};

/// A node drawn uniformly from `0..n` by 64 random bits (the high half of their product).
fn uniform_node(bits: u64, n: usize) -> NodeId {
    ((u128::from(bits) * n as u128) >> 64) as NodeId
}

/// The negatives of one set of held-out positives.
struct Negatives<'a> {
    edges: Edges<'a>,
    pairs: RngKey,
    destinations: RngKey,
    per_positive: usize,
    /// Named when the graph is too dense to draw from.
    origin: &'a Path,
}

impl Negatives<'_> {
    /// Negative pair `i`: two distinct nodes not joined by an edge.
    fn pair(&self, i: u64) -> Result<Pair> {
        let n = self.edges.graph.num_nodes();
        let row = self.pairs.row(i);
        for draw in 0..MAX_DRAWS {
            let u = uniform_node(row.bits(2 * draw), n);
            let w = uniform_node(row.bits(2 * draw + 1), n);
            if u != w && !self.edges.joined(u, w) {
                return Ok((u, w));
            }
        }
        Err(Error::invalid(
            self.origin,
            format!(
                "no pair of nodes without an edge between them came up in {MAX_DRAWS} random \
                 draws: the graph is too dense to draw negatives from"
            ),
        ))
    }

    /// The negative destinations of positive `i`, whose source is `u`: nodes other than `u`
    /// not joined to it.
    fn destinations(&self, i: u64, u: NodeId, out: &mut Vec<i64>) -> Result<()> {
        let n = self.edges.graph.num_nodes();
        for j in 0..self.per_positive as u64 {
            let row = self.destinations.row(i * self.per_positive as u64 + j);
            let found = (0..MAX_DRAWS)
                .map(|draw| uniform_node(row.bits(draw), n))
                .find(|&w| w != u && !self.edges.joined(u, w));
            match found {
                Some(w) => out.push(i64::from(w)),
                None => {
                    return Err(Error::invalid(
                        self.origin,
                        format!(
                            "node {u} is joined to so many nodes that no other came up in \
                             {MAX_DRAWS} random draws: too dense for --neg-dst"
                        ),
                    ))
                }
            }
        }
        Ok(())
    }
}

/// Draws the negatives of the held-out positives in `split_dir` (one pair each, and
/// `cfg.neg_dst` destinations each unless 0) against the whole graph.
pub(super) fn write_negatives(
    edges: Edges<'_>,
    cfg: &LinkSplitConfig,
    split_dir: &Path,
    origin: &Path,
    progress: LinkProgress<'_>,
) -> Result<()> {
    let open = |set: LinkSet| MappedNpy::<i64>::open(&split_dir.join(set.file_name()));
    let positives = [open(LinkSet::ValidPos)?, open(LinkSet::TestPos)?];
    let total: u64 = positives.iter().map(|p| p.len() as u64 / 2).sum();
    let done = AtomicU64::new(0);
    let negative_sets = [LinkSet::ValidNeg, LinkSet::TestNeg];
    for (s, held) in positives.iter().enumerate() {
        let count = held.len() / 2;
        let draws = Negatives {
            edges,
            pairs: RngKey::new(cfg.seed, s as u64, NEG_PURPOSE),
            destinations: RngKey::new(cfg.seed, s as u64, NEG_DST_PURPOSE),
            per_positive: cfg.neg_dst,
            origin,
        };
        let mut pairs = PairWriter::create(&split_dir.join(negative_sets[s].file_name()))?;
        let mut neg_dst = match cfg.neg_dst {
            0 => None,
            k => Some(NpyWriter::<i64>::create(
                &split_dir.join(NEG_DST_FILES[s]),
                &[count, k],
            )?),
        };
        let work = |b: usize| -> Result<(Vec<Pair>, Vec<i64>)> {
            let range = b * NEGATIVE_BLOCK..((b + 1) * NEGATIVE_BLOCK).min(count);
            let mut pairs = Vec::with_capacity(range.len());
            let mut destinations = Vec::with_capacity(range.len() * cfg.neg_dst);
            for i in range.clone() {
                pairs.push(draws.pair(i as u64)?);
                draws.destinations(i as u64, held[i] as NodeId, &mut destinations)?;
            }
            let so_far = done.fetch_add(range.len() as u64, Ordering::Relaxed) + range.len() as u64;
            progress(LinkPhase::Negatives, so_far, total);
            Ok((pairs, destinations))
        };
        ordered_blocks(count.div_ceil(NEGATIVE_BLOCK), work, |(p, d)| {
            pairs.push(&p)?;
            match &mut neg_dst {
                Some(out) => Ok(out.write(&d)?),
                None => Ok(()),
            }
        })?;
        pairs.finish()?;
        if let Some(out) = neg_dst {
            out.finish()?;
        }
    }
    Ok(())
}
