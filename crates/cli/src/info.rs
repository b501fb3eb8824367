//! `graphloom info`: a dataset's shape, degrees and memory footprint.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use graphloom_graph::{format_bytes, DatasetSummary};

/// Arguments of `graphloom info`.
#[derive(Args)]
pub(crate) struct InfoArgs {
    /// The dataset directory.
    dataset: PathBuf,
    /// Print the figures as one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: InfoArgs) -> Result<()> {
    // Headers and one streaming pass over the offsets: no array is loaded whole.
    let info = DatasetSummary::read(&args.dataset)?;
    let m = &info.meta;
    let [train, valid, test] = info.splits;
    let [graph_bytes, feature_bytes, label_bytes] = info.bytes;
    if args.json {
        crate::output::print_json(&serde_json::json!({
            "dataset": args.dataset.display().to_string(),
            "name": m.name,
            "num_nodes": m.num_nodes,
            "num_edges": m.num_edges,
            "directed": m.directed,
            "feat_dim": m.feat_dim,
            "feat_dtype": m.feat_dtype,
            "feature_file": {
                "shape": info.feature_shape,
                "dtype": info.feature_dtype,
                "matches_meta": info.features_match_meta(),
            },
            "num_classes": m.num_classes,
            "train": train,
            "valid": valid,
            "test": test,
            "edge_weights": info.edge_weights,
            "in_degree": info.degrees.map(|d| serde_json::json!({
                "mean": d.mean,
                "median": d.median,
                "p99": d.p99,
                "max": d.max,
                "isolated": d.isolated,
            })),
            // The two figures that say whether a graph's degrees are heavy-tailed but not
            // degenerate (what a feature cache of its hottest rows can expect).
            "isolated_fraction": info.degrees.map(|d| d.isolated as f64 / m.num_nodes.max(1) as f64),
            "top1pct_degree_share": info.degrees.map(|d| d.top_percent_share),
            "bytes": {
                "graph": graph_bytes,
                "features": feature_bytes,
                "labels": label_bytes,
            },
        }));
        return Ok(());
    }
    println!("dataset    {} ({})", m.name, args.dataset.display());
    println!("nodes      {}", m.num_nodes);
    println!(
        "edges      {} ({}{})",
        m.num_edges,
        if m.directed {
            "directed"
        } else {
            "both directions stored"
        },
        if info.edge_weights { ", weighted" } else { "" }
    );
    let shape: Vec<String> = info.feature_shape.iter().map(|d| d.to_string()).collect();
    let disagreement = if info.features_match_meta() {
        String::new()
    } else {
        format!(
            " (meta.json says {} x {} {})",
            m.num_nodes, m.feat_dim, m.feat_dtype
        )
    };
    println!(
        "features   {} {}{disagreement}",
        shape.join(" x "),
        info.feature_dtype
    );
    println!("classes    {}", m.num_classes);
    println!("split      train {train}, valid {valid}, test {test}");
    match info.degrees {
        Some(d) => println!(
            "in-degree  mean {:.2}, median {}, p99 {}, max {}, isolated {} ({:.1}%); the top 1% \
             of nodes hold {:.1}% of the edges",
            d.mean,
            d.median,
            d.p99,
            d.max,
            d.isolated,
            100.0 * d.isolated as f64 / m.num_nodes.max(1) as f64,
            100.0 * d.top_percent_share
        ),
        None => println!("in-degree  (no nodes)"),
    }
    println!(
        "memory     graph {}, features {}, labels {}",
        format_bytes(graph_bytes),
        format_bytes(feature_bytes),
        format_bytes(label_bytes)
    );
    Ok(())
}
