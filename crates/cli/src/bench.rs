//! `graphloom bench`: speed and memory against baselines measured in the same run.

use anyhow::Result;
use clap::{Args, Subcommand};

/// Arguments of `graphloom bench`.
#[derive(Args)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand)]
enum Which {
    /// Which rows a feature cache should keep: the static cache of the highest in-degrees
    /// against SIEVE, on the rows sampled batches gather, for both shapes of `bench scale`.
    Cache(crate::bench_cache::CacheArgs),
    /// Full-batch epochs of GCN, GraphSAGE and GAT against DGL and PyG on the same dataset.
    Fullbatch(crate::bench_fullbatch::FullbatchArgs),
    /// Random row gathers from the store, for every layout and location, against memcpy.
    Gather(crate::bench_gather::GatherArgs),
    /// SAR full-batch training on N workers: peak memory per worker, epoch time and traffic
    /// for the sar, sa and osa modes.
    Sar(crate::bench_sar::SarArgs),
    /// Link-prediction training (GraphSAGE over sampled blocks, batches of positive edges and
    /// uniform negatives) against DGL's and PyG's link loaders on the same split.
    Link(crate::bench_link::LinkArgs),
    /// An epoch of Cluster-GCN and of GraphSAINT random walks beside the full-batch epoch of
    /// the same model, with each run's peak anonymous memory.
    Subgraph(crate::bench_subgraph::SubgraphArgs),
    /// Neighbour-sampling throughput against DGL's and PyG's samplers on the same graphs.
    Sample(crate::bench_sample::SampleArgs),
    /// Out of core: GraphSAGE on a graph of ogbn-papers100M's shape (111M nodes, 1.6B edges,
    /// 28 GB of bf16 features on disk), against the same run with features in memory.
    Scale(crate::bench_scale::ScaleArgs),
}

pub(crate) fn run(args: BenchArgs) -> Result<()> {
    match args.which {
        Which::Cache(a) => crate::bench_cache::run(a),
        Which::Fullbatch(a) => crate::bench_fullbatch::run(a),
        Which::Gather(a) => crate::bench_gather::run(a),
        Which::Link(a) => crate::bench_link::run(a),
        Which::Sample(a) => crate::bench_sample::run(a),
        Which::Sar(a) => crate::bench_sar::run(a),
        Which::Subgraph(a) => crate::bench_subgraph::run(a),
        Which::Scale(a) => crate::bench_scale::run(a),
    }
}
