//! `graphloom prepare link-split`: a dataset's edges split for link prediction.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use graphloom_convert::link_split::{self, LinkSplitConfig};
use graphloom_graph::link_split::LINK_SPLIT_DIR;

/// Options of `graphloom prepare link-split`.
#[derive(Args)]
pub(crate) struct LinkSplitArgs {
    /// The dataset directory whose edges are split.
    #[arg(long)]
    dataset: PathBuf,
    /// Share of the edges held out for validation, in (0, 1).
    #[arg(long, default_value_t = 0.05, allow_negative_numbers = true)]
    valid: f64,
    /// Share of the edges held out for test, in (0, 1); with --valid, less than 1.
    #[arg(long, default_value_t = 0.1, allow_negative_numbers = true)]
    test: f64,
    /// Seed of the split and of the negatives.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Negative destinations per held-out edge, for MRR (0: no neg_dst files).
    #[arg(long, default_value_t = 100)]
    neg_dst: usize,
    /// Output dataset directory: the dataset without the held-out edges, and link_split/.
    #[arg(long)]
    out: PathBuf,
}

impl LinkSplitArgs {
    /// The output directory and what is read to make it.
    pub(crate) fn out_and_inputs(&self) -> (&Path, Vec<&Path>) {
        (&self.out, vec![&self.dataset])
    }
}

/// Writes the split, with a progress bar per phase, and reports it: one line, or one JSON
/// object with `--json`.
pub(crate) fn run(args: LinkSplitArgs, json: bool, start: std::time::Instant) -> Result<()> {
    let cfg = LinkSplitConfig {
        valid: args.valid,
        test: args.test,
        seed: args.seed,
        neg_dst: args.neg_dst,
    };
    let progress = crate::output::PhaseProgress::new();
    let summary = link_split::write(&args.dataset, &cfg, &args.out, &|phase, done, total| {
        progress.update(phase.name(), done, total)
    })?;
    progress.finish();
    let split_dir = args.out.join(LINK_SPLIT_DIR);
    if json {
        crate::output::print_json(&serde_json::json!({
            "dataset": args.dataset.display().to_string(),
            "out": args.out.display().to_string(),
            "link_split": split_dir.display().to_string(),
            "num_nodes": summary.meta.num_nodes,
            "num_edges": summary.meta.num_edges,
            "directed": summary.meta.directed,
            "removed_edges": summary.removed_edges,
            "candidates": summary.candidates,
            "train": summary.train,
            "valid": summary.valid,
            "test": summary.test,
            "neg_dst": summary.neg_dst,
            "seed": cfg.seed,
            "seconds": start.elapsed().as_secs_f64(),
        }));
        return Ok(());
    }
    println!(
        "{}: {} candidate edges -> {} train, {} valid, {} test ({} negative destinations \
         each); graph {} -> {} edges -> {}",
        summary.meta.name,
        summary.candidates,
        summary.train,
        summary.valid,
        summary.test,
        summary.neg_dst,
        summary.meta.num_edges as u64 + summary.removed_edges,
        summary.meta.num_edges,
        split_dir.display()
    );
    Ok(())
}
