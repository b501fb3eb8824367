//! The `graphloom` command: prepare datasets, inspect them, train GNNs and benchmark.

mod hints;
mod info;
mod kernel_threads;
mod out_of_memory;
mod output;
mod partition;
mod plot;
mod predict;
mod prepare;
mod prepare_link;
mod run_settings;
mod train;
mod train_hetero;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: out_of_memory::ExitOnOutOfMemory = out_of_memory::ExitOnOutOfMemory;

/// Train graph neural networks on graphs too large for one memory.
#[derive(Parser)]
#[command(name = "graphloom", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Convert a published dataset (or generate one) into a dataset directory.
    Prepare(prepare::PrepareArgs),
    /// Print a dataset's shape, degrees and memory footprint.
    Info(info::InfoArgs),
    /// Split a dataset into parts with METIS for distributed full-batch training.
    Partition(partition::PartitionArgs),
    /// Train a GCN, GraphSAGE or GAT model: full batch, sampled mini-batches (--fanouts), or
    /// full batch over the parts of a partitioned dataset with SAR (--workers).
    Train(Box<train::TrainArgs>),
    /// Write a saved model's log-probabilities (or labels) for a dataset's nodes as .npy.
    Predict(predict::PredictArgs),
    /// Write a saved model's node embeddings (the output of its first K layers) as .npy.
    Embed(predict::EmbedArgs),
    /// Measure speed and memory against baselines.
    Bench(graphloom_bench::BenchArgs),
}

fn main() {
    // Like other Unix tools, end quietly when the reader of stdout goes away (`| head`)
    // instead of panicking on the failed write.
    // SAFETY: setting a signal's disposition to the default has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    out_of_memory::fit_allocator_to_limit();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = Cli::command()
        .mut_subcommand("train", train::with_defaults)
        .try_get_matches_from(&args)
        .and_then(|m| Cli::from_arg_matches(&m))
        .unwrap_or_else(|e| hints::with_tips(e, &args).exit());
    // Benchmarks size their own pools; every other command starts the kernels' pool first.
    let threads = match &cli.command {
        Command::Bench(_) => Ok(()),
        Command::Train(a) => kernel_threads::start(a.threads),
        _ => kernel_threads::start(None),
    };
    let result = threads.and_then(|()| match cli.command {
        Command::Prepare(a) => prepare::run(a),
        Command::Info(a) => info::run(a),
        Command::Partition(a) => partition::run(a),
        Command::Train(a) => train::run(*a).map(|_| ()),
        Command::Predict(a) => predict::predict(a),
        Command::Embed(a) => predict::embed(a),
        Command::Bench(a) => graphloom_bench::run(a),
    });
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
