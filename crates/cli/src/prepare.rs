//! `graphloom prepare`: dataset converters and the synthetic generator.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use graphloom_graph::convert::synthetic::EdgeModel;
use graphloom_graph::convert::{edgelist, npz, ogb, planetoid, synthetic};
use graphloom_plan::StorageDType;

use crate::output::choice;

/// Arguments of `graphloom prepare`.
#[derive(Args)]
pub(crate) struct PrepareArgs {
    #[command(subcommand)]
    source: Source,
    /// Print what was written as one JSON object on stdout.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum Source {
    /// Raw Planetoid files (ind.NAME.x, tx, allx, y, ty, ally, graph, test.index), public split.
    Planetoid {
        /// Folder holding the raw files.
        #[arg(long)]
        raw: PathBuf,
        /// Dataset name as in the file names: cora, citeseer, pubmed.
        #[arg(long)]
        name: String,
        /// Output dataset directory.
        #[arg(long)]
        out: PathBuf,
    },
    /// A GNN-benchmark .npz file (adj_*, attr_* or attr_matrix, labels); seeded 60/20/20 split.
    Npz {
        /// The .npz file.
        #[arg(long)]
        file: PathBuf,
        #[command(flatten)]
        graph: GraphOptions,
        /// Output dataset directory.
        #[arg(long)]
        out: PathBuf,
    },
    /// An edge list (text "src dst" lines or .npy [E, 2]) with optional .npy features and labels.
    Edgelist {
        /// The edge file.
        #[arg(long)]
        edges: PathBuf,
        /// Node features, one row of F values per node (.npy).
        #[arg(long)]
        features: Option<PathBuf>,
        /// Integer labels, one per node (.npy).
        #[arg(long)]
        labels: Option<PathBuf>,
        /// Number of nodes [default: feature rows, else largest id + 1].
        #[arg(long)]
        num_nodes: Option<usize>,
        #[command(flatten)]
        graph: GraphOptions,
        /// Output dataset directory.
        #[arg(long)]
        out: PathBuf,
    },
    /// The OGB raw layout (raw/edge.csv.gz, node-feat.csv.gz, node-label.csv.gz, split/*/...).
    Ogb {
        /// The OGB dataset folder (holding raw/ and split/).
        #[arg(long)]
        raw: PathBuf,
        /// Also store every edge reversed (as is usual for ogbn-arxiv).
        #[arg(long)]
        undirected: bool,
        /// Output dataset directory.
        #[arg(long)]
        out: PathBuf,
    },
    /// A stochastic block model with class-dependent features (learnable labels), any size.
    Synthetic(SyntheticArgs),
}

/// Options shared by the converters of sources without a published split.
#[derive(Args)]
struct GraphOptions {
    /// Keep edges as given instead of storing both directions.
    #[arg(long)]
    directed: bool,
    /// Seed of the 60/20/20 split.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Options of the synthetic generator.
#[derive(Args, Clone)]
pub(crate) struct SyntheticArgs {
    /// Number of nodes.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) nodes: usize,
    /// Average degree (edges = nodes * avg-degree, both directions counted).
    #[arg(long, default_value_t = 10)]
    pub(crate) avg_degree: usize,
    /// Feature width.
    #[arg(long, default_value_t = 64)]
    pub(crate) feat_dim: usize,
    /// Number of classes.
    #[arg(long, default_value_t = 8)]
    pub(crate) classes: usize,
    /// Share of edges within a class.
    #[arg(long, default_value_t = 0.5)]
    pub(crate) homophily: f64,
    /// Strength of the class signal in the features.
    #[arg(long, default_value_t = 2.0)]
    pub(crate) signal: f64,
    /// Feature dtype on disk.
    #[arg(long, default_value = "f32", value_parser = choice::<StorageDType>())]
    pub(crate) feat_dtype: StorageDType,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Edge model: sbm (classes shape the edges) or rmat (power-law degrees, Graph500's R-MAT).
    #[arg(long, default_value = "sbm", value_parser = choice::<EdgeModel>())]
    pub(crate) edge_model: EdgeModel,
    /// Output dataset directory.
    #[arg(long)]
    pub(crate) out: PathBuf,
}

impl SyntheticArgs {
    pub(crate) fn config(&self) -> Result<synthetic::SyntheticConfig> {
        if self.nodes < 2 || self.classes == 0 || self.feat_dim == 0 {
            bail!("--nodes must be at least 2, --classes and --feat-dim positive");
        }
        Ok(synthetic::SyntheticConfig {
            edges: self.edge_model,
            nodes: self.nodes,
            avg_degree: self.avg_degree,
            feat_dim: self.feat_dim,
            classes: self.classes,
            homophily: self.homophily,
            signal: self.signal,
            feat_dtype: self.feat_dtype.0,
            seed: self.seed,
        })
    }
}

pub(crate) fn run(args: PrepareArgs) -> Result<()> {
    let start = std::time::Instant::now();
    let spinner = crate::output::spinner("preparing dataset");
    let (ds, out) = match args.source {
        Source::Planetoid { raw, name, out } => (planetoid::convert(&raw, &name)?, out),
        Source::Npz { file, graph, out } => {
            (npz::convert(&file, !graph.directed, graph.seed)?, out)
        }
        Source::Edgelist {
            edges,
            features,
            labels,
            num_nodes,
            graph,
            out,
        } => (
            edgelist::convert(
                &edges,
                features.as_deref(),
                labels.as_deref(),
                num_nodes,
                !graph.directed,
                graph.seed,
            )?,
            out,
        ),
        Source::Ogb {
            raw,
            undirected,
            out,
        } => (ogb::convert(&raw, undirected)?, out),
        Source::Synthetic(s) => {
            let out = s.out.clone();
            (synthetic::generate(&s.config()?)?, out)
        }
    };
    spinner.set_message(format!("writing {}", out.display()));
    ds.save(&out)?;
    spinner.finish_and_clear();
    if args.json {
        crate::output::print_json(&serde_json::json!({
            "name": ds.meta.name,
            "out": out.display().to_string(),
            "num_nodes": ds.meta.num_nodes,
            "num_edges": ds.meta.num_edges,
            "feat_dim": ds.meta.feat_dim,
            "feat_dtype": ds.meta.feat_dtype,
            "num_classes": ds.meta.num_classes,
            "directed": ds.meta.directed,
            "train": ds.train_idx.len(),
            "valid": ds.valid_idx.len(),
            "test": ds.test_idx.len(),
            "seconds": start.elapsed().as_secs_f64(),
        }));
        return Ok(());
    }
    println!(
        "{}: {} nodes, {} edges, {} features ({}), {} classes, split {}/{}/{} -> {}",
        ds.meta.name,
        ds.meta.num_nodes,
        ds.meta.num_edges,
        ds.meta.feat_dim,
        ds.meta.feat_dtype,
        ds.meta.num_classes,
        ds.train_idx.len(),
        ds.valid_idx.len(),
        ds.test_idx.len(),
        out.display()
    );
    Ok(())
}
