//! `graphloom partition`: split a dataset into parts for distributed full-batch training, with
//! METIS or the streaming partitioner, and report what the split costs.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use graphloom_graph::partition::{
    metis, metis_can_index, metis_memory_bytes, stream, BalanceOn, Partition, StreamSettings,
};
use graphloom_graph::parts::{
    write_parts, MappedFeatures, PartInputs, PartitionMethod, SHARD_WRITER_BYTES,
};
use graphloom_graph::MappedDataset;
use graphloom_tensor::memory::{usable_memory_bytes, MemoryMeasure, RssPeaks};
use serde_json::json;

use crate::output;

/// How to split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Method {
    /// METIS while its 32-bit indices hold the graph and its memory fits, else stream.
    Auto,
    /// METIS k-way: the smallest cuts, the graph held several times over in memory.
    Metis,
    /// Over the mapped graph, in node order: groups of linked nodes (label propagation), split
    /// by METIS when the graph of the groups fits the memory (else placed by Fennel), then
    /// restreams and label-propagation refinement; 16 bytes a node, any graph size.
    Stream,
}

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
    #[arg(long, required_unless_present = "dry_run")]
    out: Option<PathBuf>,
    /// Split and report the cut, halos and balance, writing nothing: what a split costs
    /// before its parts take the disk.
    #[arg(long, conflicts_with = "out")]
    dry_run: bool,
    /// How to split.
    #[arg(long, value_enum, default_value_t = Method::Auto)]
    method: Method,
    /// The random seed (METIS's, or the streaming partitioner's tie-breaks).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Streaming: the most load a part may hold over the mean (1.03: 3% above). Training nodes
    /// are balanced by the same factor. METIS keeps its own (1.03 on nodes).
    #[arg(long, default_value_t = 1.03)]
    balance: f64,
    /// Streaming: what the load counts: nodes, or in-edges (a node weighs its in-degree, the
    /// work of a full-batch layer) [default: nodes].
    #[arg(long, value_parser = output::choice::<BalanceOn>())]
    balance_on: Option<BalanceOn>,
    /// Streaming: label-propagation passes that group linked nodes before they are placed
    /// (0: every node is a group; at most 100, as the other passes).
    #[arg(long, default_value_t = 5)]
    grouping_passes: usize,
    /// Streaming: passes after the first that place every node again.
    #[arg(long, default_value_t = 3)]
    restreams: usize,
    /// Streaming: label-propagation passes that move nodes only to cut fewer edges.
    #[arg(long, default_value_t = 5)]
    refinements: usize,
    /// The memory the split may take, in GiB, at most 1073741824 (1 EiB) [default: what is
    /// available]. `auto` picks
    /// METIS only when its estimate fits; a split that cannot fit is refused before it starts.
    #[arg(long)]
    memory_gib: Option<f64>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

/// The most passes of each kind the streaming split takes: each reads the whole graph, and
/// they settle within tens.
const MAX_PASSES: usize = 100;

/// Bytes a node costs the streaming split and the writing of the parts: its part, new id and
/// place in the order, the marks and positions of the sources a part receives, and its entry
/// in a send list.
const STREAM_BYTES_PER_NODE: u64 = 6 * 4;

pub(crate) fn run(args: PartitionArgs) -> Result<()> {
    if args.parts == 0 {
        bail!("--parts must be at least 1");
    }
    if !(args.balance >= 1.0 && args.balance.is_finite()) {
        bail!(
            "--balance {} is below 1: no part can hold less than the mean",
            args.balance
        );
    }
    for (passes, flag) in [
        (args.grouping_passes, "--grouping-passes"),
        (args.restreams, "--restreams"),
        (args.refinements, "--refinements"),
    ] {
        if passes > MAX_PASSES {
            bail!("{flag} must be at most {MAX_PASSES}, not {passes}");
        }
    }
    let budget = match args.memory_gib {
        Some(gib) => graphloom_plan::gib_bytes("memory_gib", gib).map_err(output::plan_error)?,
        None => usable_memory_bytes(MemoryMeasure::Available).unwrap_or(u64::MAX),
    };
    if let Some(out) = &args.out {
        graphloom_graph::check_output_dir(
            out,
            graphloom_graph::OutputKind::Partitioned,
            &[&args.dataset],
        )?;
    }
    let ds = MappedDataset::open(&args.dataset)?;
    let data = ds.data();
    let (n, entries) = (data.num_nodes(), data.num_edges());
    if args.parts > n.max(1) {
        bail!("cannot cut {n} nodes into {} parts", args.parts);
    }
    let writing = STREAM_BYTES_PER_NODE * n as u64 + SHARD_WRITER_BYTES * args.parts as u64;
    // METIS takes a copy of the graph in memory besides its own arrays.
    let metis_bytes = metis_memory_bytes(n, entries) + 8 * n as u64 + 4 * entries as u64;
    let method = match args.method {
        Method::Auto if metis_can_index(n, entries) && metis_bytes.max(writing) <= budget => {
            Method::Metis
        }
        Method::Auto => Method::Stream,
        chosen => chosen,
    };
    let needed = match method {
        Method::Metis => metis_bytes.max(writing),
        _ => writing,
    };
    if needed > budget {
        bail!(
            "{} of {n} nodes and {entries} edges needs about {} of memory, more than the {} \
             {}{}",
            if method == Method::Metis {
                "METIS"
            } else {
                "the streaming split"
            },
            graphloom_graph::format_bytes(needed),
            graphloom_graph::format_bytes(budget),
            if args.memory_gib.is_some() {
                "--memory-gib gives"
            } else {
                "available"
            },
            if method == Method::Metis {
                "; --method stream splits it in less"
            } else {
                ""
            }
        );
    }
    let start = Instant::now();
    let peaks = RssPeaks::start();
    let (partition, record) = split(&args, method, &ds, budget.saturating_sub(writing))?;
    let split_seconds = start.elapsed().as_secs_f64();
    let split_peak = RssPeaks::finish(peaks).0;
    let peaks = RssPeaks::start();
    let report = match &args.out {
        Some(out) => {
            let features = MappedFeatures::open(&ds)?;
            let inputs = PartInputs {
                data,
                edge_weight: ds.edge_weight(),
                features: features.rows(ds.meta.feat_dim),
            };
            let progress = output::PhaseProgress::new();
            let report = write_parts(
                &inputs,
                &partition,
                Some(record.clone()),
                out,
                &|done, total| progress.update("writing the parts", done, total),
            )
            .with_context(|| format!("writing {}", out.display()))?;
            progress.finish();
            report
        }
        None => {
            let spinner = output::spinner("measuring the cut");
            let report = partition.report(&data);
            spinner.finish_and_clear();
            report
        }
    };
    let peak = RssPeaks::finish(peaks).0.max(split_peak);
    let cut_fraction = report.edge_cut as f64 / entries.max(1) as f64;
    let mean = n as f64 / args.parts as f64;
    let most = report.nodes.iter().copied().max().unwrap_or(0) as f64;
    if args.json {
        output::print_json(&json!({
            "method": record.name,
            "parts": args.parts,
            "written": args.out.is_some(),
            "nodes": report.nodes,
            "train_nodes": report.train_nodes,
            "edge_cut": report.edge_cut,
            "edge_cut_fraction": cut_fraction,
            "max_part_nodes_over_mean": most / mean,
            "halo": report.halo,
            "passes": record.passes,
            "split_seconds": split_seconds,
            "seconds": start.elapsed().as_secs_f64(),
            "split_peak_anon_bytes": split_peak,
            "peak_anon_bytes": peak,
        }));
        return Ok(());
    }
    println!(
        "{} parts of {} by {}: edge cut {} of {} edges ({:.1}%), largest part {:.3} of the mean; \
         {:.1} s ({:.1} s to split), peak memory {}",
        args.parts,
        ds.meta.name,
        record.name,
        report.edge_cut,
        entries,
        100.0 * cut_fraction,
        most / mean,
        start.elapsed().as_secs_f64(),
        split_seconds,
        graphloom_graph::format_bytes(peak),
    );
    print_parts(&report.nodes, &report.train_nodes, &report.halo);
    Ok(())
}

/// The table of a partition's parts: nodes, training nodes and halo rows of each.
pub(crate) fn print_parts(nodes: &[usize], train_nodes: &[usize], halo: &[usize]) {
    println!(
        "{:>5} {:>10} {:>12} {:>12}",
        "part", "nodes", "train nodes", "halo rows"
    );
    for (p, ((nodes, train), halo)) in nodes.iter().zip(train_nodes).zip(halo).enumerate() {
        println!("{p:>5} {nodes:>10} {train:>12} {halo:>12}");
    }
}

/// Splits the graph by `method`; returns the partition and what made it.
fn split(
    args: &PartitionArgs,
    method: Method,
    ds: &MappedDataset,
    spare_bytes: u64,
) -> Result<(Partition, PartitionMethod)> {
    let data = ds.data();
    let mut record = PartitionMethod {
        name: "metis".into(),
        seed: args.seed,
        balance: None,
        balance_on: None,
        passes: Vec::new(),
    };
    if method == Method::Metis {
        let spinner = output::spinner(&format!("METIS: {} parts", args.parts));
        let graph = data.to_csr();
        let partition =
            output::with_stdout_on_stderr(|| metis(&graph, data.train_idx, args.parts, args.seed))?;
        spinner.finish_and_clear();
        return Ok((partition, record));
    }
    let settings = StreamSettings {
        parts: args.parts,
        balance: args.balance,
        balance_on: args.balance_on.unwrap_or(BalanceOn::Nodes),
        seed: args.seed,
        grouping_passes: args.grouping_passes,
        restreams: args.restreams,
        refinements: args.refinements,
        coarse_bytes: spare_bytes,
        ..Default::default()
    };
    let progress = output::PhaseProgress::new();
    let (partition, passes) = output::with_stdout_on_stderr(|| {
        stream(&data, &settings, &|pass, done, total| {
            progress.update(pass, done, total)
        })
    })?;
    progress.finish();
    record.name = "stream".into();
    record.balance = Some(args.balance);
    record.balance_on = Some(settings.balance_on.name().to_string());
    record.passes = passes
        .into_iter()
        .map(|p| (p.kind.to_string(), p.moved))
        .collect();
    Ok((partition, record))
}
