//! `graphloom train` on a heterogeneous dataset: parses the options into a [`HeteroPlan`],
//! runs it, and prints and writes what it measured as a homogeneous run does.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::json;

use graphloom_nn::hetero::{HeteroBatching, HeteroModelFile};
use graphloom_nn::train::TrainReport;
use graphloom_plan::HeteroPlan;

use crate::output;
use crate::train::{epoch_line, output_plot, print_profile, summary, Splits, TrainArgs};

/// Trains a relational model on the heterogeneous dataset of `args` (checked to be one).
pub(crate) fn run(args: TrainArgs) -> Result<Option<TrainReport>> {
    let rss_peaks = graphloom_tensor::RssPeaks::start();
    let mut plan = HeteroPlan::new(args.settings.clone()).map_err(output::plan_error)?;
    plan.keep_embeddings = args.save_model.is_some();
    if !args.quiet || args.dry_run {
        for line in plan.lines() {
            eprintln!("{line}");
        }
    }
    if args.dry_run {
        return Ok(None);
    }
    let s = &plan.settings;
    let splits = Splits(plan.graph().splits.clone().map(|ids| !ids.is_empty()));
    let model = plan.model.kind.name();
    graphloom_tensor::autodiff::profile::set_enabled(args.profile);
    let buffer_cache = match args.buffer_cache_mib {
        Some(mib) => mib << 20,
        None => plan.memory.buffer_cache_bytes() as usize,
    };
    graphloom_tensor::alloc::set_cache_limit(buffer_cache);
    let log = output::EpochLog::new(s.epochs as u64, model, args.quiet);
    let (report, root) = plan
        .run_with_progress(
            |r| log.epoch(r, &epoch_line(r, splits)),
            |done, total| log.batch(done, total),
        )
        .map_err(output::plan_error)?;
    log.finish();
    let (peak_anon, peak_file) = rss_peaks.finish();
    if !root {
        // The job's first rank prints and writes its results.
        return Ok(Some(report));
    }
    let name = &plan.graph().meta.name;
    if !args.json {
        let (test, val) =
            report
                .best
                .result_text(splits.0, report.test_score, report.best_val_score);
        println!(
            "{model} on {name}: {test} at epoch {} (best validation {val}); {:.4} s/epoch; peak \
             tracked {:.1} MiB, peak anonymous {:.1} MiB",
            report.best_epoch,
            report.mean_epoch_seconds(),
            report.memory.total_peak as f64 / (1 << 20) as f64,
            peak_anon as f64 / (1 << 20) as f64,
        );
    }
    if args.profile {
        print_profile();
    }
    if args.json || args.summary_json.is_some() {
        let mut value = summary(name, model, s, &report, splits);
        value["hetero"] = json!(true);
        value["node_types"] = json!(plan.graph().types);
        value["target_node_type"] = json!(plan.graph().types[plan.graph().target]);
        value["peak_anon_bytes"] = json!(peak_anon);
        value["peak_file_bytes"] = json!(peak_file);
        value["memory_gib"] = json!(s.memory_gib);
        value["predicted_peak_bytes"] = json!(plan.memory.peak());
        value["predicted_bytes"] = (plan.memory.parts.iter())
            .map(|p| (p.name.to_string(), json!(p.bytes)))
            .collect::<serde_json::Map<_, _>>()
            .into();
        if let HeteroBatching::Sampled { batch_size, .. } = &plan.batching {
            value["fanouts_per_relation"] = plan
                .fanouts_per_relation()
                .into_iter()
                .map(|(name, f)| (name, json!(f)))
                .collect::<serde_json::Map<_, _>>()
                .into();
            value["batch_size"] = json!(batch_size);
        }
        if let Some(path) = &args.summary_json {
            output::write_json(path, &value)?;
        }
        if args.json {
            output::print_json(&value);
        }
    }
    if let Some(path) = &args.plot {
        output_plot(path, &format!("{model} on {name}"), &report)?;
    }
    if let Some(path) = &args.save_model {
        save_model(&plan, &report, path)
            .with_context(|| format!("saving the model to {}", path.display()))?;
    }
    Ok(Some(report))
}

/// Writes the best parameters and each featureless type's learnt rows of that evaluation
/// (stacked in the types' order in the report) as a relational model file.
fn save_model(plan: &HeteroPlan, report: &TrainReport, path: &Path) -> Result<()> {
    let graph = plan.graph();
    let mut embeddings = Vec::with_capacity(graph.types.len());
    let mut first = 0;
    for (t, &dim) in plan.embedding_dims.iter().enumerate() {
        if dim == 0 {
            embeddings.push(None);
            continue;
        }
        let stacked = report
            .best_input_embedding
            .as_ref()
            .context("the run kept no learnt rows")?;
        let n = graph.type_sizes[t];
        embeddings.push(Some(stacked.rows(first, first + n)?));
        first += n;
    }
    HeteroModelFile {
        config: plan.model.clone(),
        params: report.best_params.clone(),
        embeddings,
    }
    .save(path)?;
    Ok(())
}
