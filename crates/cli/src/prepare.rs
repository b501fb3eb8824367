//! `graphloom prepare`: dataset converters and the synthetic generator.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use graphloom_convert::synthetic::EdgeModel;
use graphloom_convert::{edgelist, npz, ogb, ogb_hetero, planetoid, split, synthetic, Progress};
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
        /// Folder holding the raw files, or a PyG dataset folder (Cora/, holding raw/), or the
        /// root given to PyG's Planetoid(root, name).
        #[arg(long)]
        raw: PathBuf,
        /// Dataset name, in any case: cora, citeseer, pubmed.
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
    /// An edge list (text "src dst" lines, or .npy [E, 2] or [2, E] as PyG's edge_index) with
    /// optional .npy features and labels, written in bounded memory. Unless --directed, every
    /// edge is stored both ways with self-loops and duplicates dropped.
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
        #[command(flatten)]
        split: SplitArgs,
        /// Output dataset directory.
        #[arg(long)]
        out: PathBuf,
    },
    /// The OGB raw layout (raw/edge.csv.gz, node-feat.csv.gz, node-label.csv.gz, split/*/...),
    /// or that of ogbn-papers100M (raw/data.npz, raw/node-label.npz), streamed in bounded
    /// memory; nodes without a label (NaN) are -1. ogbn-proteins' layout (with --undirected):
    /// raw/edge-feat.csv.gz becomes edge_feat.npy (a reversed edge keeps its edge's row),
    /// node-label.csv.gz's rows of 112 values binary labels (train --task multilabel), and
    /// without node-feat.csv.gz each node's features are its in-edges' mean. A heterogeneous layout (ogbn-mag:
    /// raw/num-node-dict.csv.gz, raw/relations/<src>___<rel>___<dst>/) is written as a
    /// heterogeneous dataset directory.
    Ogb {
        /// The OGB dataset folder (holding raw/ and split/).
        #[arg(long)]
        raw: PathBuf,
        /// Also store every edge reversed (as is usual for ogbn-arxiv).
        #[arg(long)]
        undirected: bool,
        /// Heterogeneous layouts (ogbn-mag): also store each relation reversed, as
        /// rev_<relation> (what PyG's ToUndirected adds), so that every node type receives
        /// messages [default: true]
        #[arg(long, action = clap::ArgAction::Set)]
        add_reverse: Option<bool>,
        /// Output dataset directory.
        #[arg(long)]
        out: PathBuf,
    },
    /// A stochastic block model or R-MAT graph with class-dependent features (learnable
    /// labels), of any size: written in bounded memory, with a progress bar per phase.
    Synthetic(SyntheticArgs),
    /// A dataset's edges split for link prediction: a copy without the held-out edges, and
    /// link_split/ (train_pos, valid/test_pos, valid/test_neg, valid/test_neg_dst).
    LinkSplit(crate::prepare_link::LinkSplitArgs),
    /// A dataset whose features are [X | A X | ... | A^K X] for each operator, computed once
    /// over the mapped graph and features in bounded memory, for SIGN (`train --model sign`):
    /// a run killed part way continues when started again with the same options.
    Propagate(PropagateArgs),
}

/// Options of `graphloom prepare propagate`.
#[derive(Args, Clone)]
pub(crate) struct PropagateArgs {
    /// The dataset directory whose features are propagated.
    #[arg(long)]
    dataset: PathBuf,
    /// Hops K per operator, at most 64.
    #[arg(long, default_value_t = 2)]
    hops: usize,
    /// Operators, comma-separated: sym (D^-1/2 A D^-1/2, PyG's SIGN), gcn (with self loops,
    /// SGC's), ppr (personalised PageRank by power iteration over gcn, --teleport).
    #[arg(long, value_delimiter = ',', default_value = "sym",
          value_parser = choice::<graphloom_convert::propagate::Operator>())]
    operators: Vec<graphloom_convert::propagate::Operator>,
    /// ppr's teleport probability, in (0, 1).
    #[arg(long, default_value_t = 0.1)]
    teleport: f64,
    /// Dtype of the written features: f32, or bf16 (half the disk; each hop computed in f32
    /// from the previous one as stored).
    #[arg(long, default_value = "f32", value_parser = choice::<StorageDType>())]
    dtype: StorageDType,
    /// Memory for the rows of output in flight, in GiB: the blocks of destination rows are
    /// sized to it; the graph and features are mapped, their pages the kernel's cache.
    #[arg(long, default_value_t = 0.25)]
    memory_gib: f64,
    /// Output dataset directory (the work in progress is kept in .NAME.propagate beside it).
    #[arg(long)]
    out: PathBuf,
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

/// The user's own split, instead of the seeded 60/20/20 one.
#[derive(Args)]
struct SplitArgs {
    /// Training nodes: a .npy of ids or a boolean mask, or a text file of one id per line
    /// (.gz too); without --valid-idx or --test-idx those splits are empty.
    #[arg(long)]
    train_idx: Option<PathBuf>,
    /// Validation nodes, as --train-idx.
    #[arg(long, requires = "train_idx")]
    valid_idx: Option<PathBuf>,
    /// Test nodes, as --train-idx.
    #[arg(long, requires = "train_idx")]
    test_idx: Option<PathBuf>,
    /// All three splits in one .npz: arrays train_idx, valid_idx and test_idx (ids or boolean
    /// masks; PyG's train_mask, val_mask and test_mask are read too).
    #[arg(long, conflicts_with_all = ["train_idx", "valid_idx", "test_idx"])]
    split: Option<PathBuf>,
}

impl SplitArgs {
    /// The split to read, when one was given.
    fn source(&self) -> Option<split::SplitSource<'_>> {
        match (&self.split, &self.train_idx) {
            (Some(npz), _) => Some(split::SplitSource::Npz(npz)),
            (None, Some(train)) => Some(split::SplitSource::Files([
                Some(train),
                self.valid_idx.as_deref(),
                self.test_idx.as_deref(),
            ])),
            (None, None) => None,
        }
    }
}

/// Options of the synthetic generator.
#[derive(Args, Clone)]
pub(crate) struct SyntheticArgs {
    /// Number of nodes.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) nodes: usize,
    /// Average degree (edges = nodes * avg-degree, both directions counted, at most 2^60 - 1
    /// and as many as fit on the disk).
    #[arg(long, default_value_t = 10)]
    pub(crate) avg_degree: usize,
    /// A directed graph of exactly this many edges (CSR entries; no reverse pairs added)
    /// instead of --avg-degree: at most 1152921504606846975 (2^60 - 1), and as many as fit
    /// on the disk.
    #[arg(long, conflicts_with = "avg_degree")]
    pub(crate) edges: Option<usize>,
    /// Exact train,valid,test node counts; the nodes in no split are unlabelled (-1)
    /// [default: 60/20/20 shares of all nodes].
    #[arg(long, value_delimiter = ',')]
    pub(crate) split_counts: Option<Vec<usize>>,
    /// Feature width: the features (nodes x this x 4 bytes, 2 for bf16) must fit on the disk
    /// [default: 64; with --hetero mag, the papers': 128].
    #[arg(long)]
    pub(crate) feat_dim: Option<usize>,
    /// Number of classes.
    #[arg(long, default_value_t = 8)]
    pub(crate) classes: usize,
    /// Share of edges within a class (R-MAT: share of edges whose source is moved to the
    /// destination's class).
    #[arg(long, default_value_t = 0.5)]
    pub(crate) homophily: f64,
    /// Norm of the class signal in the features (unit noise per column).
    #[arg(long, default_value_t = 2.0)]
    pub(crate) signal: f64,
    /// Feature dtype on disk.
    #[arg(long, default_value = "f32", value_parser = choice::<StorageDType>())]
    pub(crate) feat_dtype: StorageDType,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Edge model: sbm (classes shape the edges), rmat (power-law degrees, Graph500's R-MAT),
    /// powerlaw (Chung-Lu, degree exponent 2.2, hubs spread over the ids: a citation graph's
    /// shape) or powerlaw-ordered (the same degrees, hubs at the low ids and degree falling
    /// with the id, as first-appearance numbering leaves e-mail and co-authorship graphs);
    /// with rmat and the powerlaws, --homophily of the edges join one class.
    #[arg(long, default_value = "sbm", value_parser = choice::<EdgeModel>())]
    pub(crate) edge_model: EdgeModel,
    /// A heterogeneous graph of this shape instead: mag (ogbn-mag's papers, authors,
    /// institutions and fields, four relations and their reverses, a signal the relations
    /// carry; make_hetero.py's design: 349 classes, 128 paper features), streamed in bounded
    /// memory. Takes --scale, --feat-dim, --feat-dtype and --seed.
    #[arg(long, value_parser = ["mag"], conflicts_with_all = [
        "nodes", "avg_degree", "edges", "split_counts", "classes", "homophily",
        "signal", "edge_model",
    ])]
    pub(crate) hetero: Option<String>,
    /// With --hetero: ogbn-mag's size times this (1: 736,389 papers and 1.13M authors; at most
    /// 100, past MAG240M's 244M nodes) [default: 0.1]
    #[arg(long, requires = "hetero")]
    pub(crate) scale: Option<f64>,
    /// Targets instead of classes, planted so that a 2-layer GCN learns them (S^2 X W with
    /// GCN's propagation S and a random projection W, standardised, plus --target-noise):
    /// multilabel (0/1 labels, for `train --task multilabel`) or regression (floats, for
    /// `train --task regression`). The dataset is read back into memory to plant them.
    #[arg(long, value_parser = ["multilabel", "regression"], conflicts_with = "hetero")]
    pub(crate) targets: Option<String>,
    /// With --targets: targets per node.
    #[arg(long, default_value_t = 4, requires = "targets")]
    pub(crate) num_targets: usize,
    /// With --targets: standard deviation of the noise on the standardised signal (the best
    /// R² is about 1 / (1 + noise^2)).
    #[arg(long, default_value_t = 0.3, requires = "targets")]
    pub(crate) target_noise: f64,
    /// With --targets: share of each node's targets past the first left missing (-1 or NaN).
    #[arg(long, default_value_t = 0.0, requires = "targets")]
    pub(crate) missing_targets: f64,
    /// Edge features of this many columns (edge_feat.npy, for `train --model gine`), each
    /// edge carrying its destination's class as a direction of norm --edge-signal plus unit
    /// Gaussian noise. With --homophily 0 and a weak --signal, only the edges tell a node's
    /// class. The dataset is read back into memory to plant them.
    #[arg(long, conflicts_with = "hetero")]
    pub(crate) edge_features: Option<usize>,
    /// With --edge-features: norm of the class direction in each edge's features.
    #[arg(long, default_value_t = 1.0, requires = "edge_features")]
    pub(crate) edge_signal: f64,
    /// Output dataset directory.
    #[arg(long)]
    pub(crate) out: PathBuf,
}

impl SyntheticArgs {
    /// The edge features to plant, when --edge-features asks for them.
    pub(crate) fn planted_edge_features(&self) -> Result<Option<synthetic::PlantedEdgeFeatures>> {
        let Some(dim) = self.edge_features else {
            return Ok(None);
        };
        if !(1..=4096).contains(&dim) {
            bail!("--edge-features must be 1 to 4096 columns");
        }
        if !(self.edge_signal.is_finite() && self.edge_signal >= 0.0) {
            bail!("--edge-signal must be finite and not negative");
        }
        Ok(Some(synthetic::PlantedEdgeFeatures {
            dim,
            signal: self.edge_signal,
        }))
    }

    /// The targets to plant, when --targets asks for them.
    pub(crate) fn planted(&self) -> Result<Option<synthetic::PlantedTargets>> {
        let Some(kind) = &self.targets else {
            return Ok(None);
        };
        if !(1..=4096).contains(&self.num_targets) {
            bail!("--num-targets must be 1 to 4096");
        }
        if !(self.target_noise.is_finite() && self.target_noise >= 0.0) {
            bail!("--target-noise must be finite and not negative");
        }
        if !(0.0..1.0).contains(&self.missing_targets) {
            bail!("--missing-targets is a share: at least 0, below 1");
        }
        Ok(Some(synthetic::PlantedTargets {
            kind: match kind.as_str() {
                "multilabel" => graphloom_graph::TargetKind::Binary,
                _ => graphloom_graph::TargetKind::Real,
            },
            width: self.num_targets,
            noise: self.target_noise,
            missing: self.missing_targets,
        }))
    }

    pub(crate) fn config(&self) -> Result<synthetic::SyntheticConfig> {
        if self.nodes < 2 || self.classes < 2 || self.feat_dim == Some(0) {
            bail!("--nodes and --classes must be at least 2, --feat-dim positive");
        }
        let split = match self.split_counts.as_deref() {
            Some(&[a, b, c]) => synthetic::SplitSizes::Counts(a, b, c),
            Some(_) => bail!("--split-counts takes three counts: train,valid,test"),
            None => synthetic::SplitSizes::Fractions(0.6, 0.2, 0.2),
        };
        Ok(synthetic::SyntheticConfig {
            edge_model: self.edge_model,
            edges: self.edges,
            split,
            nodes: self.nodes,
            avg_degree: self.avg_degree,
            feat_dim: self.feat_dim.unwrap_or(64),
            classes: self.classes,
            homophily: self.homophily,
            signal: self.signal,
            feat_dtype: self.feat_dtype.0,
            seed: self.seed,
        })
    }
}

impl Source {
    /// The output directory and what is read to make it.
    fn out_and_inputs(&self) -> (&Path, Vec<&Path>) {
        match self {
            Source::Planetoid { raw, out, .. } | Source::Ogb { raw, out, .. } => (out, vec![raw]),
            Source::Npz { file, out, .. } => (out, vec![file]),
            Source::Edgelist {
                edges,
                features,
                labels,
                split,
                out,
                ..
            } => {
                let files = [Some(edges), features.as_ref(), labels.as_ref()];
                let mut inputs: Vec<&Path> =
                    files.into_iter().flatten().map(|p| p.as_path()).collect();
                inputs.extend(split.source().iter().flat_map(|s| s.paths()));
                (out, inputs)
            }
            Source::Synthetic(s) => (&s.out, Vec::new()),
            Source::Propagate(p) => (&p.out, vec![&p.dataset]),
            Source::LinkSplit(a) => a.out_and_inputs(),
        }
    }
}

pub(crate) fn run(args: PrepareArgs) -> Result<()> {
    let (start, json) = (std::time::Instant::now(), args.json);
    // Before any work: the output replaces nothing of the user's and no input.
    let (out, inputs) = args.source.out_and_inputs();
    graphloom_graph::check_output_dir(out, graphloom_graph::OutputKind::Dataset, &inputs)?;
    // Sources that stream to disk in bounded memory write as they go; the others are built
    // in memory, then saved.
    type Convert = Box<dyn FnOnce() -> graphloom_graph::Result<graphloom_graph::Dataset>>;
    let (convert, out): (Convert, PathBuf) = match args.source {
        Source::LinkSplit(a) => return crate::prepare_link::run(a, json, start),
        Source::Propagate(p) => {
            if !(p.memory_gib > 0.0 && p.memory_gib <= (1u64 << 30) as f64) {
                bail!("--memory-gib must be above 0 and at most 1073741824 (1 EiB)");
            }
            let out = p.out.clone();
            return streamed(&out, json, start, |_, progress| {
                let settings = graphloom_convert::propagate::Settings {
                    hops: p.hops,
                    operators: p.operators.clone(),
                    teleport: p.teleport,
                    bf16: p.dtype.0 == graphloom_tensor::DType::BF16,
                    block_bytes: (p.memory_gib * (1u64 << 30) as f64).min(usize::MAX as f64)
                        as usize,
                };
                graphloom_convert::propagate::propagate(&p.dataset, &p.out, &settings, progress)
            });
        }
        Source::Synthetic(s) if s.hetero.is_some() => {
            let defaults = synthetic::MagConfig::default();
            let cfg = synthetic::MagConfig {
                scale: s.scale.unwrap_or(defaults.scale),
                feat_dim: s.feat_dim.unwrap_or(defaults.feat_dim),
                seed: s.seed,
                feat_dtype: s.feat_dtype.0,
                ..defaults
            };
            let progress = crate::output::PhaseProgress::new();
            let meta = synthetic::write_mag(
                &cfg,
                &s.out,
                graphloom_convert::default_buffer_bytes(),
                &|phase, done, total| progress.update(phase.name(), done, total),
            )?;
            progress.finish();
            let ds = graphloom_graph::HeteroDataset::open(&s.out)?;
            debug_assert_eq!(ds.meta, meta);
            report_hetero(&ds, &s.out, json, start);
            return Ok(());
        }
        Source::Synthetic(s) => {
            let cfg = s.config()?;
            let planted = s.planted()?;
            let edge_features = s.planted_edge_features()?;
            return streamed(&s.out, json, start, |buffer, progress| {
                synthetic::write_with_targets(
                    &cfg,
                    planted.as_ref(),
                    edge_features.as_ref(),
                    &s.out,
                    buffer,
                    progress,
                )
            });
        }
        Source::Edgelist {
            edges,
            features,
            labels,
            num_nodes,
            graph,
            split,
            out,
        } => {
            let input = edgelist::EdgeListInput {
                edges: &edges,
                features: features.as_deref(),
                labels: labels.as_deref(),
                num_nodes,
                undirected: !graph.directed,
                seed: graph.seed,
                split: split.source(),
            };
            return streamed(&out, json, start, |buffer, progress| {
                edgelist::write(&input, &out, buffer, progress)
            });
        }
        Source::Ogb {
            raw,
            add_reverse,
            undirected,
            out,
        } if ogb_hetero::has_layout(&raw) => {
            if undirected {
                anyhow::bail!(
                    "--undirected is for homogeneous layouts: a heterogeneous one (ogbn-mag) \
                     stores each relation reversed as its own relation (--add-reverse, on by \
                     default)"
                );
            }
            let spinner = crate::output::spinner("converting a heterogeneous OGB dataset");
            let ds = ogb_hetero::write(&raw, add_reverse.unwrap_or(true), &out)?;
            spinner.finish_and_clear();
            report_hetero(&ds, &out, json, start);
            return Ok(());
        }
        Source::Ogb {
            add_reverse: Some(_),
            ..
        } => {
            anyhow::bail!(
                "--add-reverse is for heterogeneous layouts (ogbn-mag); a homogeneous one stores \
                 every edge reversed with --undirected"
            );
        }
        Source::Ogb {
            raw,
            undirected,
            out,
            ..
        } if ogb::has_npz_layout(&raw) => {
            return streamed(&out, json, start, |buffer, progress| {
                ogb::write_npz(&raw, undirected, &out, buffer, progress)
            });
        }
        Source::Ogb {
            raw,
            undirected,
            out,
            ..
        } => (Box::new(move || ogb::convert(&raw, undirected)), out),
        Source::Planetoid { raw, name, out } => {
            let (raw, name) = planetoid::locate(&raw, &name)?;
            (Box::new(move || planetoid::convert(&raw, &name)), out)
        }
        Source::Npz { file, graph, out } => (
            Box::new(move || npz::convert(&file, !graph.directed, graph.seed)),
            out,
        ),
    };
    let spinner = crate::output::spinner("preparing dataset");
    let ds = convert()?;
    spinner.set_message(format!("writing {}", out.display()));
    ds.save(&out)?;
    spinner.finish_and_clear();
    let splits = [ds.train_idx.len(), ds.valid_idx.len(), ds.test_idx.len()];
    report(&ds.meta, splits, &out, json, start);
    Ok(())
}

/// Runs a writer that streams a dataset into `out` in bounded memory, with a progress bar per
/// phase, then reports what it wrote.
fn streamed(
    out: &std::path::Path,
    json: bool,
    start: std::time::Instant,
    write: impl FnOnce(usize, Progress<'_>) -> graphloom_graph::Result<graphloom_graph::Meta>,
) -> Result<()> {
    let progress = crate::output::PhaseProgress::new();
    let meta = write(
        graphloom_convert::default_buffer_bytes(),
        &|phase, done, total| progress.update(phase.name(), done, total),
    )?;
    progress.finish();
    report(&meta, graphloom_graph::split_sizes(out)?, out, json, start);
    Ok(())
}

/// Prints what was written: one line, or one JSON object.
/// What a heterogeneous dataset written to `out` holds, in one line or one JSON object.
fn report_hetero(
    ds: &graphloom_graph::HeteroDataset,
    out: &std::path::Path,
    json: bool,
    start: std::time::Instant,
) {
    let m = &ds.meta;
    let nodes: usize = m.node_types.values().map(|t| t.num_nodes).sum();
    let edges: usize = ds.relations.iter().map(|r| r.num_edges).sum();
    let [train, valid, test] = ds.splits;
    if json {
        crate::output::print_json(&serde_json::json!({
            "name": m.name,
            "out": out.display().to_string(),
            "format": m.format,
            "node_types": m.node_types.len(),
            "relations": m.edge_types.len(),
            "num_nodes": nodes,
            "num_edges": edges,
            "target_node_type": m.target_node_type,
            "num_classes": m.num_classes,
            "train": train,
            "valid": valid,
            "test": test,
            "seconds": start.elapsed().as_secs_f64(),
        }));
        return;
    }
    println!(
        "{}: {} node types ({nodes} nodes), {} relations ({edges} edges), labels on {} ({} \
         classes), split {train}/{valid}/{test} -> {}",
        m.name,
        m.node_types.len(),
        m.edge_types.len(),
        m.target_node_type,
        m.num_classes,
        out.display()
    );
}

fn report(
    meta: &graphloom_graph::Meta,
    splits: [usize; 3],
    out: &std::path::Path,
    json: bool,
    start: std::time::Instant,
) {
    if json {
        crate::output::print_json(&serde_json::json!({
            "name": meta.name,
            "out": out.display().to_string(),
            "num_nodes": meta.num_nodes,
            "num_edges": meta.num_edges,
            "feat_dim": meta.feat_dim,
            "feat_dtype": meta.feat_dtype,
            "num_classes": meta.num_classes,
            "directed": meta.directed,
            "train": splits[0],
            "valid": splits[1],
            "test": splits[2],
            "seconds": start.elapsed().as_secs_f64(),
            // This process's peak resident set (mapped pages included) and its anonymous
            // pages at the end.
            "peak_rss_bytes": graphloom_tensor::memory::RssReport::read().peak_bytes,
            "anon_bytes": graphloom_tensor::memory::RssReport::read().anon_bytes,
        }));
        return;
    }
    println!(
        "{}: {} nodes, {} edges, {} features ({}), {}, split {}/{}/{} -> {}",
        meta.name,
        meta.num_nodes,
        meta.num_edges,
        meta.feat_dim,
        meta.feat_dtype,
        graphloom_graph::format::targets::describe_labels(out, meta.num_classes),
        splits[0],
        splits[1],
        splits[2],
        out.display()
    );
}
