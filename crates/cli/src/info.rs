//! `graphloom info`: a dataset's shape, degrees and memory footprint.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use graphloom_graph::Dataset;

/// Arguments of `graphloom info`.
#[derive(Args)]
pub(crate) struct InfoArgs {
    /// The dataset directory.
    dataset: PathBuf,
    /// Print the figures as one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

fn human(bytes: usize) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", units[u])
}

pub(crate) fn run(args: InfoArgs) -> Result<()> {
    let ds = Dataset::load(&args.dataset)?;
    let m = &ds.meta;
    let mut deg = ds.graph.in_degrees();
    deg.sort_unstable();
    let n = deg.len().max(1);
    let isolated = deg.iter().take_while(|&&d| d == 0).count();
    if args.json {
        let stat = |i: usize| deg.get(i).copied();
        crate::output::print_json(&serde_json::json!({
            "dataset": args.dataset.display().to_string(),
            "name": m.name,
            "num_nodes": m.num_nodes,
            "num_edges": m.num_edges,
            "directed": m.directed,
            "feat_dim": m.feat_dim,
            "feat_dtype": m.feat_dtype,
            "num_classes": m.num_classes,
            "train": ds.train_idx.len(),
            "valid": ds.valid_idx.len(),
            "test": ds.test_idx.len(),
            "edge_weights": ds.edge_weight.is_some(),
            "in_degree": {
                "mean": m.num_edges as f64 / n as f64,
                "median": stat(n / 2),
                "p99": stat((n * 99 / 100).min(n - 1)),
                "max": deg.last(),
                "isolated": isolated,
            },
            "bytes": {
                "graph": ds.graph.bytes(),
                "features": ds.features.bytes(),
                "labels": ds.labels.len() * 8,
            },
        }));
        return Ok(());
    }
    println!("dataset    {} ({})", m.name, args.dataset.display());
    println!("nodes      {}", m.num_nodes);
    println!(
        "edges      {} ({})",
        m.num_edges,
        if m.directed {
            "directed"
        } else {
            "both directions stored"
        }
    );
    println!(
        "features   {} x {} {}",
        m.num_nodes, m.feat_dim, m.feat_dtype
    );
    println!("classes    {}", m.num_classes);
    println!(
        "split      train {}, valid {}, test {}",
        ds.train_idx.len(),
        ds.valid_idx.len(),
        ds.test_idx.len()
    );
    match (deg.first(), deg.last()) {
        (Some(_), Some(&max)) => println!(
            "in-degree  mean {:.2}, median {}, p99 {}, max {max}, isolated {isolated}",
            m.num_edges as f64 / n as f64,
            deg[n / 2],
            deg[(n * 99 / 100).min(n - 1)],
        ),
        _ => println!("in-degree  (no nodes)"),
    }
    println!(
        "memory     graph {}, features {}, labels {}",
        human(ds.graph.bytes()),
        human(ds.features.bytes()),
        human(ds.labels.len() * 8)
    );
    Ok(())
}
