//! Subgraph mini-batches in a plan: the settings of Cluster-GCN and GraphSAINT (flattened
//! into [`crate::TrainSettings`]), their checks, and the batching they make over a dataset
//! (the clusters found or computed, the normalisation estimated) for the mini-batch workload.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use graphloom_graph::subgraph::batching::SubgraphBatching;
use graphloom_graph::subgraph::clusters::{
    check_count, metis_clusters, partition_clusters, ClusterOrigin,
};
use graphloom_graph::subgraph::saint::{check_steps, Saint, SaintNorm, SaintSampler};
use graphloom_graph::GraphData;

use crate::settings::Choice;
use crate::{PlanError, Result, TrainSettings};

/// How subgraph batches are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batching {
    /// Cluster-GCN: the subgraph induced by a few METIS clusters.
    Cluster,
    /// GraphSAINT's node sampler.
    SaintNode,
    /// GraphSAINT's edge sampler.
    SaintEdge,
    /// GraphSAINT's random-walk sampler.
    SaintRw,
}

impl Choice for Batching {
    const ALL: &'static [Self] = &[
        Batching::Cluster,
        Batching::SaintNode,
        Batching::SaintEdge,
        Batching::SaintRw,
    ];
    fn name(self) -> &'static str {
        match self {
            Batching::Cluster => "cluster",
            Batching::SaintNode => "saint-node",
            Batching::SaintEdge => "saint-edge",
            Batching::SaintRw => "saint-rw",
        }
    }
}

/// How messages name subgraph batching.
const SUBGRAPHS: &str = "subgraph batches (`batching`)";

/// The random walks' default length (GraphSAINT's and PyG's example's).
const WALK_LENGTH: usize = 2;

/// The settings of subgraph mini-batches.
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct SubgraphSettings {
    /// Train on whole induced subgraphs instead of sampled neighbourhoods: cluster
    /// (Cluster-GCN: --clusters METIS clusters, --clusters-per-batch of them per batch) or
    /// GraphSAINT's node, edge or random-walk samples (--saint-budget); evaluation is the
    /// exact full-graph inference of mini-batch training.
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::choice_parser::<Batching>()))]
    pub batching: Option<Batching>,
    /// Cluster-GCN: METIS clusters of the graph, computed once and kept in the dataset's
    /// clusters/ folder for the next runs (PyG's num_parts).
    #[cfg_attr(feature = "cli", arg(long))]
    pub clusters: Option<usize>,
    /// Cluster-GCN: clusters per batch, the edges between them included (PyG's batch_size)
    /// [default: 1].
    #[cfg_attr(feature = "cli", arg(long))]
    pub clusters_per_batch: Option<usize>,
    /// Cluster-GCN: use the parts of this `graphloom partition` output of the dataset as the
    /// clusters instead of --clusters.
    #[cfg_attr(feature = "cli", arg(long))]
    pub cluster_from: Option<PathBuf>,
    /// GraphSAINT: node draws (saint-node), edge draws (saint-edge) or walk roots (saint-rw)
    /// per batch (PyG's batch_size), at most the graph's nodes (saint-node, saint-rw) or
    /// edges (saint-edge), and as many as a batch's nodes fit in memory.
    #[cfg_attr(feature = "cli", arg(long))]
    pub saint_budget: Option<usize>,
    /// GraphSAINT random walks: steps per walk, at most the graph's nodes [default: 2].
    #[cfg_attr(feature = "cli", arg(long))]
    pub walk_length: Option<usize>,
    /// GraphSAINT: estimate the loss and aggregation normalisation from samples drawn ahead
    /// until they hold this many times the graph's nodes (PyG's sample_coverage) [default:
    /// no normalisation].
    #[cfg_attr(feature = "cli", arg(long))]
    pub saint_coverage: Option<usize>,
}

/// Refuses subgraph settings given without `batching` or with a batching that does not use
/// them, zero counts, and `batching` with the settings of sampled blocks.
pub(crate) fn check(s: &TrainSettings) -> Result<()> {
    let g = &s.subgraph;
    let cluster_settings = [
        (g.clusters.is_some(), "clusters"),
        (g.clusters_per_batch.is_some(), "clusters_per_batch"),
        (g.cluster_from.is_some(), "cluster_from"),
    ];
    let saint_settings = [
        (g.saint_budget.is_some(), "saint_budget"),
        (g.walk_length.is_some(), "walk_length"),
        (g.saint_coverage.is_some(), "saint_coverage"),
    ];
    let context = match g.batching {
        Some(_) => SUBGRAPHS,
        None => "training without subgraph batches",
    };
    let refuse = |given: &[(bool, &'static str)], hint: &'static str| -> Result<()> {
        match given.iter().find(|(g, _)| *g) {
            Some(&(_, setting)) => Err(PlanError::NotApplicable {
                setting,
                context,
                hint,
            }),
            None => Ok(()),
        }
    };
    let cluster_hint = "it is a setting of Cluster-GCN (`batching` cluster)";
    let saint_hint =
        "it is a setting of GraphSAINT (`batching` saint-node, saint-edge or saint-rw)";
    let Some(batching) = g.batching else {
        refuse(&cluster_settings, cluster_hint)?;
        return refuse(&saint_settings, saint_hint);
    };
    if batching == Batching::Cluster {
        refuse(&saint_settings, saint_hint)?;
        match (g.clusters, &g.cluster_from) {
            (None, None) => {
                return Err(PlanError::invalid(
                    "batching",
                    "cluster needs `clusters` (METIS clusters to cut) or `cluster_from` (a \
                     partitioned directory)",
                ))
            }
            (Some(_), Some(_)) => {
                return Err(PlanError::invalid(
                    "cluster_from",
                    "gives the clusters: leave out `clusters`",
                ))
            }
            _ => {}
        }
    } else {
        refuse(&cluster_settings, cluster_hint)?;
        if g.saint_budget.is_none() {
            return Err(PlanError::invalid(
                "batching",
                "GraphSAINT needs `saint_budget`, the draws or roots per batch",
            ));
        }
        if batching != Batching::SaintRw && g.walk_length.is_some() {
            return Err(PlanError::NotApplicable {
                setting: "walk_length",
                context: SUBGRAPHS,
                hint: "it is the length of saint-rw's random walks (`batching` saint-rw)",
            });
        }
    }
    for (v, setting) in [
        (g.clusters, "clusters"),
        (g.clusters_per_batch, "clusters_per_batch"),
        (g.saint_budget, "saint_budget"),
        (g.walk_length, "walk_length"),
        (g.saint_coverage, "saint_coverage"),
    ] {
        if v == Some(0) {
            return Err(PlanError::invalid(setting, "must be at least 1"));
        }
    }
    let not_here = |setting, hint| {
        Err(PlanError::NotApplicable {
            setting,
            context: SUBGRAPHS,
            hint,
        })
    };
    if s.batch_size.is_some() {
        return not_here(
            "batch_size",
            "subgraph batches are sized by `clusters_per_batch` or `saint_budget`",
        );
    }
    if s.task == Some(crate::TaskKind::Link) {
        return not_here("task", "subgraph batches train node classification");
    }
    if s.eval_nodes.is_some() && s.eval_fanouts.is_none() {
        return not_here(
            "eval_nodes",
            "sampled evaluation of subgraph batches needs `eval_fanouts`",
        );
    }
    Ok(())
}

/// The batching `s` asks for over `data` (of the dataset folder `dir`, `None` for a generated
/// graph), with a line saying where its clusters or normalisation came from.
pub(crate) fn batching(
    s: &TrainSettings,
    dir: Option<&Path>,
    data: GraphData<'_>,
) -> Result<Option<(SubgraphBatching, String)>> {
    let g = &s.subgraph;
    let Some(kind) = g.batching else {
        return Ok(None);
    };
    if data.train_idx.is_empty() {
        // The normalisation weighs the training nodes' loss: name it when it was asked for.
        let setting = match g.saint_coverage {
            Some(_) => "saint_coverage",
            None => "batching",
        };
        return Err(PlanError::invalid(
            setting,
            "weighs the loss of the dataset's training nodes, and it has none",
        ));
    }
    let sampler = |budget| match kind {
        Batching::SaintNode => SaintSampler::Node { budget },
        Batching::SaintEdge => SaintSampler::Edge { budget },
        _ => SaintSampler::RandomWalk {
            roots: budget,
            length: g.walk_length.unwrap_or(WALK_LENGTH),
        },
    };
    let made = match (kind, g.saint_budget) {
        (Batching::Cluster, _) => {
            let (clusters, origin) = match (&g.cluster_from, g.clusters) {
                (Some(root), _) => (
                    partition_clusters(root, data)
                        .map_err(|e| PlanError::invalid("cluster_from", e.to_string()))?,
                    ClusterOrigin::Partition(root.clone()),
                ),
                (None, Some(count)) => {
                    check_count(count, data.num_nodes()).map_err(argument)?;
                    metis_clusters(dir, data, count)?
                }
                (None, None) => return Err(PlanError::invalid("clusters", "is needed")),
            };
            let per_batch = g.clusters_per_batch.unwrap_or(1);
            if per_batch > clusters.count() {
                return Err(PlanError::invalid(
                    "clusters_per_batch",
                    format!("{per_batch} is more than the {} clusters", clusters.count()),
                ));
            }
            let line = format!("{} clusters, {origin}", clusters.count());
            let clusters = Arc::new(clusters);
            (
                SubgraphBatching::Cluster {
                    clusters,
                    per_batch,
                },
                line,
            )
        }
        (_, budget) => {
            let saint = Saint::new(sampler(budget.unwrap_or(1)), data).map_err(argument)?;
            // An epoch covers the graph's nodes about once (PyG's num_steps), unless given.
            let steps = match s.batches_per_epoch {
                Some(steps) => {
                    check_steps(data, steps).map_err(argument)?;
                    steps
                }
                None => data
                    .num_nodes()
                    .div_ceil(saint.sampler().nodes_drawn().max(1))
                    .max(1),
            };
            let norm = match g.saint_coverage {
                Some(coverage) => Some(Arc::new(
                    SaintNorm::estimate(&saint, data, coverage, steps, s.seed).map_err(argument)?,
                )),
                None => None,
            };
            let batching = SubgraphBatching::Saint {
                saint: Arc::new(saint),
                norm,
                steps,
            };
            let line = batching.describe();
            (batching, line)
        }
    };
    Ok(Some(made))
}

/// A graph error naming one of the settings, as the plan's error naming it.
fn argument(e: graphloom_graph::Error) -> PlanError {
    match e {
        graphloom_graph::Error::Argument { name, msg } => PlanError::invalid(name, msg),
        other => other.into(),
    }
}
