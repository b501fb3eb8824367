//! `graphloom prepare`: dataset converters and the synthetic generator.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use graphloom_graph::convert::{planetoid, synthetic};
use graphloom_tensor::DType;

/// Arguments of `graphloom prepare`.
#[derive(Args)]
pub(crate) struct PrepareArgs {
    #[command(subcommand)]
    source: Source,
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
    /// A stochastic block model with class-dependent features (learnable labels), any size.
    Synthetic(SyntheticArgs),
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
    /// Feature dtype on disk: f32 or bf16.
    #[arg(long, default_value = "f32")]
    pub(crate) feat_dtype: String,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Output dataset directory.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

impl SyntheticArgs {
    pub(crate) fn config(&self) -> Result<synthetic::SyntheticConfig> {
        let feat_dtype = match DType::parse(&self.feat_dtype) {
            Some(d @ (DType::F32 | DType::BF16)) => d,
            _ => bail!(
                "--feat-dtype must be f32 or bf16, not '{}'",
                self.feat_dtype
            ),
        };
        if self.nodes < 2 || self.classes == 0 || self.feat_dim == 0 {
            bail!("--nodes must be at least 2, --classes and --feat-dim positive");
        }
        Ok(synthetic::SyntheticConfig {
            nodes: self.nodes,
            avg_degree: self.avg_degree,
            feat_dim: self.feat_dim,
            classes: self.classes,
            homophily: self.homophily,
            signal: self.signal,
            feat_dtype,
            seed: self.seed,
        })
    }
}

pub(crate) fn run(args: PrepareArgs) -> Result<()> {
    let spinner = crate::output::spinner("preparing dataset");
    let (ds, out) = match args.source {
        Source::Planetoid { raw, name, out } => (planetoid::convert(&raw, &name)?, out),
        Source::Synthetic(s) => {
            let out = s.out.clone().context("--out is required")?;
            (synthetic::generate(&s.config()?)?, out)
        }
    };
    spinner.set_message(format!("writing {}", out.display()));
    ds.save(&out)?;
    spinner.finish_and_clear();
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
