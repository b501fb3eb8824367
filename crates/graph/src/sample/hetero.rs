//! Neighbour sampling over a heterogeneous graph: one [`NeighborSource`] per relation, each from
//! the nodes of its source type to those of its destination type, sampled per relation and hop
//! (DGL's meaning of a fanout on a heterograph: up to `k` in-neighbours of every relation), into
//! [`HeteroBlock`]s whose nodes are relabelled per type.

use graphloom_tensor::rng::RngKey;

use super::{NeighborSource, Relabeler, SamplerKind};
use crate::{Error, NodeId, Result};

/// The purpose of heterogeneous sampling draws: hop `h` of relation `r` of `R` uses
/// `HETERO_SAMPLE_PURPOSE + h * R + r`, so relations draw independently of each other.
pub const HETERO_SAMPLE_PURPOSE: u64 = 0x4845_0000_0000;

/// A relation of a heterogeneous graph as the sampler reads it: its source and destination
/// types (indices into the types) and its in-neighbours by destination.
pub struct RelationSource<'a> {
    /// The source node type.
    pub src_type: usize,
    /// The destination node type.
    pub dst_type: usize,
    /// The in-neighbours (ids of the source type) of each destination (an id of the
    /// destination type).
    pub graph: &'a dyn NeighborSource,
}

/// One relation's sampled edges in a [`HeteroBlock`]: CSR by destination over the first
/// `num_dst[dst_type]` nodes of the destination type; sources are local ids among the block's
/// nodes of the source type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelationBlock {
    /// `num_dst[dst_type] + 1` offsets into `col_idx`.
    pub row_ptr: Vec<i64>,
    /// Local source index (into `src_nodes[src_type]`) of each edge.
    pub col_idx: Vec<u32>,
    /// Each edge's position in its relation's CSR (`csr_col_idx.npy`).
    pub edge_ids: Vec<i64>,
}

/// One layer's message-flow graph over node types: per type, its source nodes (destinations
/// first, in the order of the block after it), and per relation, the sampled edges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeteroBlock {
    /// Per type, how many of `src_nodes` are destinations.
    pub num_dst: Vec<usize>,
    /// Per type, the original ids (within the type) of the block's sources, destinations first.
    pub src_nodes: Vec<Vec<NodeId>>,
    /// Per relation, the sampled edges.
    pub relations: Vec<RelationBlock>,
}

impl HeteroBlock {
    /// The number of sampled edges over every relation.
    pub fn num_edges(&self) -> usize {
        self.relations.iter().map(|r| r.col_idx.len()).sum()
    }
}

/// Samples multi-hop [`HeteroBlock`]s, reusing one relabelling table per node type between
/// batches.
#[derive(Debug)]
pub struct HeteroSampler {
    relabel: Vec<Relabeler>,
}

impl HeteroSampler {
    /// A sampler for node types of `type_sizes` nodes.
    pub fn new(type_sizes: &[usize]) -> HeteroSampler {
        HeteroSampler {
            relabel: type_sizes.iter().map(|&n| Relabeler::new(n)).collect(),
        }
    }

    /// Samples around `seeds` (distinct ids of node type `seed_type`). `fanouts[h][r]` is the
    /// fanout of relation `r` at hop `h`, from the seeds outwards (`-1`: every neighbour, `0`:
    /// none of that relation).
    /// Returns the blocks from the input layer to the seeds: the last block's destinations
    /// are the seeds, and each block's destinations are the sources of the block after it.
    pub fn sample(
        &mut self,
        relations: &[RelationSource<'_>],
        seed_type: usize,
        seeds: &[NodeId],
        fanouts: &[Vec<i64>],
        seed: u64,
        epoch: u64,
    ) -> Result<Vec<HeteroBlock>> {
        let types = self.relabel.len();
        let check_type = |t: usize, what: &str| {
            if t >= types {
                return Err(Error::argument(
                    "relations",
                    format!("{what} type {t} is not below the {types} node types"),
                ));
            }
            Ok(())
        };
        check_type(seed_type, "the seeds'")?;
        for r in relations {
            check_type(r.src_type, "a source")?;
            check_type(r.dst_type, "a destination")?;
        }
        let n = self.relabel[seed_type].graph_size();
        if let Some(&bad) = seeds.iter().find(|&&s| s as usize >= n) {
            return Err(Error::argument(
                "seeds",
                format!("seed node {bad} is not below {n}"),
            ));
        }
        for hop in fanouts {
            if hop.len() != relations.len() {
                return Err(Error::argument(
                    "fanouts",
                    format!(
                        "{} fanouts for a hop over {} relations",
                        hop.len(),
                        relations.len()
                    ),
                ));
            }
            if let Some(&bad) = hop.iter().find(|&&f| f < -1) {
                return Err(Error::argument(
                    "fanouts",
                    format!(
                        "{bad} is not a fanout: use a count (0 draws none of a relation), or -1 \
                         for all neighbours"
                    ),
                ));
            }
        }
        let mut frontier: Vec<Vec<NodeId>> = vec![Vec::new(); types];
        frontier[seed_type] = seeds.to_vec();
        let mut blocks = Vec::with_capacity(fanouts.len());
        for (hop, hop_fanouts) in fanouts.iter().enumerate() {
            // Each type's destinations first, in the frontier's order.
            for (t, nodes) in frontier.iter().enumerate() {
                for &v in nodes {
                    self.relabel[t].insert(v);
                }
                if self.relabel[t].nodes().len() != nodes.len() {
                    self.relabel.iter_mut().for_each(|r| drop(r.finish()));
                    return Err(Error::argument("seeds", "seed nodes must be distinct"));
                }
            }
            let mut sampled = Vec::with_capacity(relations.len());
            for (r, (rel, &f)) in relations.iter().zip(hop_fanouts).enumerate() {
                if f == 0 {
                    let rows = frontier[rel.dst_type].len();
                    sampled.push(RelationBlock {
                        row_ptr: vec![0; rows + 1],
                        ..RelationBlock::default()
                    });
                    continue;
                }
                let fanout = (f >= 0).then_some(f as usize);
                let purpose = HETERO_SAMPLE_PURPOSE + (hop * relations.len() + r) as u64;
                let key = RngKey::new(seed, epoch, purpose);
                let sample = match rel.graph.sample_hop(
                    &frontier[rel.dst_type],
                    fanout,
                    SamplerKind::Uniform,
                    key,
                ) {
                    Ok(s) => s,
                    Err(e) => {
                        self.relabel.iter_mut().for_each(|r| drop(r.finish()));
                        return Err(e);
                    }
                };
                let col_idx = self.relabel[rel.src_type].insert_all(&sample.neighbors);
                sampled.push(RelationBlock {
                    row_ptr: sample.offsets,
                    col_idx,
                    edge_ids: sample.edge_ids,
                });
            }
            let num_dst = frontier.iter().map(Vec::len).collect();
            let src_nodes: Vec<Vec<NodeId>> =
                self.relabel.iter_mut().map(Relabeler::finish).collect();
            frontier.clone_from(&src_nodes);
            blocks.push(HeteroBlock {
                num_dst,
                src_nodes,
                relations: sampled,
            });
        }
        blocks.reverse();
        Ok(blocks)
    }
}
