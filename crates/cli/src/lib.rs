//! The `graphloom` command as a library: [`run`] parses a command line and runs it. The
//! `graphloom` binary is a `main` around it, and the Python package's `graphloom` console
//! command calls it through the extension, so that a wheel installed with pip has the same
//! command without a second build.

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

pub use out_of_memory::ExitOnOutOfMemory;

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
    /// Train a GCN, GraphSAGE, GAT, GATv2, GIN, GINE, SGC, APPNP or SIGN model: full batch, sampled
    /// mini-batches (--fanouts), or full batch over the parts of a partitioned dataset with SAR
    /// (--workers); R-GCN or R-SAGE on a heterogeneous dataset.
    Train(Box<train::TrainArgs>),
    /// Write a saved model's log-probabilities (or labels) for a dataset's nodes as .npy.
    Predict(predict::PredictArgs),
    /// Write a saved model's node embeddings (the output of its first K layers) as .npy.
    Embed(predict::EmbedArgs),
    /// Measure speed and memory against baselines.
    Bench(graphloom_bench::BenchArgs),
}

/// Runs the command line `args` (the program's name first) and returns the process's exit
/// status: 0, 1 after an error (printed to stderr as one line), or clap's status after a
/// usage error or `--help` (printed with tips for typos). Sets up the process first: SIGPIPE
/// back to its default, so that a closed reader of stdout (`| head`) ends the run quietly
/// rather than failing a write (Python ignores SIGPIPE), and glibc's arenas fitted to an
/// address-space limit. Call it once per process, before other threads start: it starts the
/// kernels' thread pool.
pub fn run(args: Vec<std::ffi::OsString>) -> i32 {
    // SAFETY: setting a signal's disposition to the default has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    out_of_memory::fit_allocator_to_limit();
    let matches = Cli::command()
        .mut_subcommand("train", train::with_defaults)
        .try_get_matches_from(&args)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match matches {
        Ok(cli) => cli,
        Err(e) => {
            let e = hints::with_tips(e, &args);
            // Nothing more can be said when stderr itself cannot be written.
            let _ = e.print();
            return e.exit_code();
        }
    };
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
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}
