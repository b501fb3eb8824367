//! `graphloom partition`: split a dataset with METIS into parts for distributed full-batch
//! training, and report what the split costs.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use graphloom_graph::parts::write_parts;
use graphloom_graph::Dataset;

use crate::output;

/// Arguments of `graphloom partition`.
#[derive(Args)]
pub(crate) struct PartitionArgs {
    /// Dataset directory to split.
    #[arg(long)]
    dataset: PathBuf,
    /// Number of parts (one per worker).
    #[arg(long)]
    parts: usize,
    /// Output directory: partition.json and one part_{p} folder per part.
    #[arg(long)]
    out: PathBuf,
    /// METIS's random seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: PartitionArgs) -> Result<()> {
    graphloom_graph::check_output_dir(
        &args.out,
        graphloom_graph::OutputKind::Partitioned,
        &[&args.dataset],
    )?;
    let ds = Dataset::load(&args.dataset)?;
    let spinner = output::spinner(&format!("METIS: {} parts", args.parts));
    let partition = output::with_stdout_on_stderr(|| {
        graphloom_graph::partition::metis(&ds.graph, &ds.train_idx, args.parts, args.seed)
    })?;
    spinner.set_message("writing the parts".to_string());
    let report = write_parts(&ds, &partition, &args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    spinner.finish_and_clear();
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "parts": args.parts,
                "nodes": report.nodes,
                "train_nodes": report.train_nodes,
                "edge_cut": report.edge_cut,
                "edge_cut_share": report.edge_cut as f64 / ds.graph.num_edges().max(1) as f64,
                "halo": report.halo,
            })
        );
        return Ok(());
    }
    println!(
        "{} parts of {}: edge cut {} of {} edges ({:.1}%)",
        args.parts,
        ds.meta.name,
        report.edge_cut,
        ds.graph.num_edges(),
        100.0 * report.edge_cut as f64 / ds.graph.num_edges().max(1) as f64
    );
    println!(
        "{:>5} {:>10} {:>12} {:>12}",
        "part", "nodes", "train nodes", "halo rows"
    );
    for p in 0..args.parts {
        println!(
            "{p:>5} {:>10} {:>12} {:>12}",
            report.nodes[p], report.train_nodes[p], report.halo[p]
        );
    }
    Ok(())
}
