//! `graphloom bench`: speed and memory against baselines measured in the same run.
//!
//! One module per bench, each with its arguments and its `run`: [`BenchArgs`] is the clap
//! subcommand the `graphloom` binary mounts, and [`run`] runs the one it names. The benches run
//! inside the `graphloom` command: they start it again (`peers::graphloom_program`: this
//! executable, or the Python package's console command) for the runs they measure in
//! processes of their own (`graphloom train`, `bench scale`'s phases). The
//! modules `host` (the host of every JSON line), `peers` (the bench graphs and the DGL and PyG
//! scripts) and `disk` (the disk's reads and direct-read rate) serve several benches;
//! [`output`] and [`plot`] are shared with the binary's other subcommands.

mod cache;
mod disk;
mod fullbatch;
mod gather;
mod hetero;
mod host;
mod link;
pub mod output;
mod peers;
pub mod plot;
mod sample;
mod sar;
mod scale;
mod subgraph;

use anyhow::Result;
use clap::{Args, Subcommand};

/// Arguments of `graphloom bench`.
#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand)]
enum Which {
    /// Which rows a feature cache should keep: the static cache of the highest in-degrees
    /// against SIEVE, on the rows sampled batches gather, for both shapes of `bench scale`.
    Cache(cache::CacheArgs),
    /// Full-batch epochs of GCN, GraphSAGE and GAT against DGL and PyG on the same dataset.
    Fullbatch(fullbatch::FullbatchArgs),
    /// Random row gathers from the store, for every layout and location, against memcpy.
    Gather(gather::GatherArgs),
    /// Sampled R-GCN on a graph of ogbn-mag's shape against DGL's ogbn-mag R-GCN on the same
    /// directory: seeds per second, sampled edges per second, peak RSS.
    Hetero(hetero::HeteroArgs),
    /// SAR full-batch training on N workers: peak memory per worker, epoch time and traffic
    /// for the sar, sa and osa modes.
    Sar(sar::SarArgs),
    /// Link-prediction training (GraphSAGE over sampled blocks, batches of positive edges and
    /// uniform negatives) against DGL's and PyG's link loaders on the same split.
    Link(link::LinkArgs),
    /// An epoch of Cluster-GCN and of GraphSAINT random walks beside the full-batch epoch of
    /// the same model, with each run's peak anonymous memory.
    Subgraph(subgraph::SubgraphArgs),
    /// Neighbour-sampling throughput against DGL's and PyG's samplers on the same graphs.
    Sample(sample::SampleArgs),
    /// Out of core: GraphSAGE on a graph of ogbn-papers100M's shape (111M nodes, 1.6B edges,
    /// 28 GB of bf16 features on disk), against the same run with features in memory.
    Scale(scale::ScaleArgs),
}

/// Runs the bench `args` names. Benchmarks size their own thread pools, so the caller starts
/// none before.
pub fn run(args: BenchArgs) -> Result<()> {
    match args.which {
        Which::Cache(a) => cache::run(a),
        Which::Fullbatch(a) => fullbatch::run(a),
        Which::Gather(a) => gather::run(a),
        Which::Hetero(a) => hetero::run(a),
        Which::Link(a) => link::run(a),
        Which::Sample(a) => sample::run(a),
        Which::Sar(a) => sar::run(a),
        Which::Subgraph(a) => subgraph::run(a),
        Which::Scale(a) => scale::run(a),
    }
}
