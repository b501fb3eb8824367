//! How subgraph batches are drawn, by training and by the Python loaders alike: Cluster-GCN's
//! groups of METIS clusters and GraphSAINT's samples, each batch of an epoch named by a
//! [`BatchDraw`] and its nodes drawn from it.

use std::sync::Arc;

use super::clusters::Clusters;
use super::saint::{Saint, SaintNorm};
use crate::{Error, GraphData, NodeId, Result};

/// How the nodes of subgraph batches are drawn.
#[derive(Clone, Debug)]
pub enum SubgraphBatching {
    /// Cluster-GCN: an epoch takes every cluster once, in an order drawn from (seed, epoch),
    /// `per_batch` clusters per batch (PyG's `ClusterLoader` with `shuffle=True`).
    Cluster {
        /// The clusters.
        clusters: Arc<Clusters>,
        /// Clusters per batch.
        per_batch: usize,
    },
    /// GraphSAINT: `steps` samples per epoch, each keyed by (seed, epoch, step).
    Saint {
        /// The sampler.
        saint: Arc<Saint>,
        /// The normalisation (`None`: a plain mean loss and unweighted aggregation, as PyG
        /// trains with `sample_coverage=0`).
        norm: Option<Arc<SaintNorm>>,
        /// Samples per epoch.
        steps: usize,
    },
}

impl SubgraphBatching {
    /// The most nodes a batch can hold, at most `num_nodes`: the largest `per_batch` clusters
    /// together, or a sample's draws (a bound that sizes a step's memory).
    pub fn max_batch_nodes(&self, num_nodes: usize) -> usize {
        let most = match self {
            SubgraphBatching::Cluster {
                clusters,
                per_batch,
            } => {
                let mut sizes: Vec<usize> = (0..clusters.count())
                    .map(|c| clusters.members(c).len())
                    .collect();
                sizes.sort_unstable_by(|a, b| b.cmp(a));
                sizes.iter().take(*per_batch).sum()
            }
            SubgraphBatching::Saint { saint, .. } => saint.sampler().nodes_drawn(),
        };
        most.min(num_nodes)
    }

    /// The batching, in words (for the snapshot check and reports).
    pub fn describe(&self) -> String {
        match self {
            SubgraphBatching::Cluster {
                clusters,
                per_batch,
            } => format!(
                "Cluster-GCN batches of {per_batch} of {} clusters",
                clusters.count()
            ),
            SubgraphBatching::Saint { saint, norm, steps } => format!(
                "{}, {steps} per epoch, {}",
                saint.sampler().describe(),
                match norm {
                    Some(n) => format!("normalised from {} samples", n.samples()),
                    None => "not normalised".into(),
                }
            ),
        }
    }

    /// The batches of epoch `epoch`: for each, what draws its nodes.
    pub fn epoch(&self, seed: u64, epoch: u64) -> Vec<BatchDraw> {
        match self {
            SubgraphBatching::Cluster {
                clusters,
                per_batch,
            } => clusters
                .epoch_groups(*per_batch, seed, epoch)
                .into_iter()
                .map(BatchDraw::Clusters)
                .collect(),
            SubgraphBatching::Saint { steps, .. } => {
                (0..*steps as u64).map(BatchDraw::Sample).collect()
            }
        }
    }

    /// The batches of an epoch in a fixed order: the clusters in their order, `per_batch` at
    /// a time (PyG's `ClusterLoader` with `shuffle=False`); GraphSAINT's samples as
    /// [`SubgraphBatching::epoch`] draws them (each sample is keyed by its index).
    pub fn epoch_in_order(&self, seed: u64, epoch: u64) -> Vec<BatchDraw> {
        match self {
            SubgraphBatching::Cluster {
                clusters,
                per_batch,
            } => (0..clusters.count())
                .collect::<Vec<_>>()
                .chunks(*per_batch)
                .map(|g| BatchDraw::Clusters(g.to_vec()))
                .collect(),
            SubgraphBatching::Saint { .. } => self.epoch(seed, epoch),
        }
    }

    /// Batches per epoch.
    pub fn batches_per_epoch(&self) -> usize {
        match self {
            SubgraphBatching::Cluster {
                clusters,
                per_batch,
            } => clusters.count().div_ceil(*per_batch),
            SubgraphBatching::Saint { steps, .. } => *steps,
        }
    }

    /// The nodes of the batch `draw` of `epoch`, in increasing order; an error for a draw of
    /// the other batching (clusters of a GraphSAINT run, a sample index of a Cluster-GCN one).
    pub fn nodes(
        &self,
        data: GraphData<'_>,
        draw: &BatchDraw,
        seed: u64,
        epoch: u64,
    ) -> Result<Vec<NodeId>> {
        match (self, draw) {
            (SubgraphBatching::Cluster { clusters, .. }, BatchDraw::Clusters(group)) => {
                Ok(clusters.batch_nodes(group))
            }
            (SubgraphBatching::Saint { saint, .. }, BatchDraw::Sample(index)) => {
                Ok(saint.sample(data, seed, epoch, *index))
            }
            (batching, draw) => Err(Error::Argument {
                name: "draw",
                msg: format!("{draw:?} is not a draw of {}", batching.describe()),
            }),
        }
    }

    /// The normalisation, when the batching has one.
    pub fn norm(&self) -> Option<&SaintNorm> {
        match self {
            SubgraphBatching::Saint { norm, .. } => norm.as_deref(),
            SubgraphBatching::Cluster { .. } => None,
        }
    }
}

/// What draws one batch's nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchDraw {
    /// These clusters.
    Clusters(Vec<usize>),
    /// The sample of this index.
    Sample(u64),
}
