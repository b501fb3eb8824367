//! `graphloom info`: a dataset's shape, degrees and memory footprint, or what a partitioned
//! dataset's split made and costs.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use graphloom_graph::{format_bytes, DatasetSummary, HeteroDataset};

/// Arguments of `graphloom info`.
#[derive(Args)]
pub(crate) struct InfoArgs {
    /// The dataset directory, or a partitioned one (`graphloom partition`'s output).
    dataset: PathBuf,
    /// Print the figures as one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: InfoArgs) -> Result<()> {
    if graphloom_graph::format::meta::is_hetero(&args.dataset) {
        return hetero(args);
    }
    if graphloom_graph::parts::PartitionMeta::is_partitioned(&args.dataset) {
        return partitioned(args);
    }
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
            "labels": graphloom_graph::format::targets::describe_labels(&args.dataset, m.num_classes),
            "train": train,
            "valid": valid,
            "test": test,
            "edge_weights": info.edge_weights,
            "edge_features": info.edge_features,
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
    if let Some(shape) = &info.edge_features {
        let shape: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        println!("edge feat  {} (edge_feat.npy)", shape.join(" x "));
    }
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
    println!(
        "labels     {}",
        graphloom_graph::format::targets::describe_labels(&args.dataset, m.num_classes)
    );
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

/// `info` of a heterogeneous dataset: its node types and relations, opened and checked.
fn hetero(args: InfoArgs) -> Result<()> {
    let ds = HeteroDataset::open(&args.dataset)?;
    let m = &ds.meta;
    let [train, valid, test] = ds.splits;
    let mean = |r: &graphloom_graph::format::hetero::Relation| {
        r.num_edges as f64 / (r.row_ptr.len().saturating_sub(1)).max(1) as f64
    };
    if args.json {
        let types: serde_json::Map<String, serde_json::Value> = m
            .node_types
            .iter()
            .map(|(name, t)| {
                let v = serde_json::json!({
                    "num_nodes": t.num_nodes,
                    "feat_dim": t.feat_dim,
                    "feat_dtype": t.feat_dtype,
                    // As a homogeneous dataset's: the file's shape and dtype (checked
                    // against meta.json when the dataset opened), or null without one.
                    "feature_file": ds.features.get(name).map(|shape| serde_json::json!({
                        "shape": shape,
                        "dtype": t.feat_dtype,
                    })),
                });
                (name.clone(), v)
            })
            .collect();
        let relations: Vec<serde_json::Value> = ds
            .relations
            .iter()
            .map(|r| {
                serde_json::json!({
                    "relation": r.relation,
                    "num_edges": r.num_edges,
                    "mean_in_degree": mean(r),
                    "max_in_degree": r.max_in_degree,
                    "edge_weights": r.weighted,
                })
            })
            .collect();
        crate::output::print_json(&serde_json::json!({
            "dataset": args.dataset.display().to_string(),
            "name": m.name,
            "format": m.format,
            "node_types": types,
            "relations": relations,
            "target_node_type": m.target_node_type,
            "num_classes": m.num_classes,
            "directed": m.directed,
            "train": train,
            "valid": valid,
            "test": test,
        }));
        return Ok(());
    }
    println!("dataset    {} ({})", m.name, args.dataset.display());
    println!(
        "format     heterogeneous: {} node types, {} relations; labels on {} ({} classes)",
        m.node_types.len(),
        m.edge_types.len(),
        m.target_node_type,
        m.num_classes
    );
    for (name, t) in &m.node_types {
        let features = match t.feat_dim {
            0 => "no features".to_string(),
            d => format!("features {d} {}", t.feat_dtype),
        };
        println!(
            "node type  {name:<24} {:>12} nodes  {features}",
            t.num_nodes
        );
    }
    for r in &ds.relations {
        println!(
            "relation   {:<40} {:>12} edges  in-degree mean {:.2}, max {}{}",
            graphloom_graph::format::hetero::relation_name(&r.relation),
            r.num_edges,
            mean(r),
            r.max_in_degree,
            if r.weighted { ", weighted" } else { "" }
        );
    }
    println!(
        "splits     train {train}, valid {valid}, test {test} ({} nodes)",
        m.target_node_type
    );
    Ok(())
}

/// A partitioned dataset: its parts, the cut and halos, and how it was split.
fn partitioned(args: InfoArgs) -> Result<()> {
    let meta = graphloom_graph::parts::PartitionMeta::load(&args.dataset)?;
    let edges = meta.dataset.num_edges.max(1) as f64;
    let mean = meta.dataset.num_nodes as f64 / meta.parts.max(1) as f64;
    let most = meta.nodes.iter().copied().max().unwrap_or(0) as f64 / mean;
    if args.json {
        crate::output::print_json(&serde_json::json!({
            "dataset": args.dataset.display().to_string(),
            "name": meta.dataset.name,
            "parts": meta.parts,
            "nodes": meta.nodes,
            "train_nodes": meta.train_nodes,
            "edge_cut": meta.edge_cut,
            "edge_cut_fraction": meta.edge_cut as f64 / edges,
            "max_part_nodes_over_mean": most,
            "halo": meta.halo,
            "method": meta.method,
        }));
        return Ok(());
    }
    let method = meta
        .method
        .as_ref()
        .map_or("not recorded".to_string(), |m| {
            let balance = m
                .balance
                .map(|b| {
                    format!(
                        ", balance {b} on {}",
                        m.balance_on.as_deref().unwrap_or("nodes")
                    )
                })
                .unwrap_or_default();
            format!("{} (seed {}{balance})", m.name, m.seed)
        });
    println!(
        "partition  {} parts of {} ({})",
        meta.parts,
        meta.dataset.name,
        args.dataset.display()
    );
    println!("method     {method}");
    println!(
        "edge cut   {} of {} edges ({:.1}%), largest part {most:.3} of the mean",
        meta.edge_cut,
        meta.dataset.num_edges,
        100.0 * meta.edge_cut as f64 / edges
    );
    crate::partition::print_parts(&meta.nodes, &meta.train_nodes, &meta.halo);
    Ok(())
}
