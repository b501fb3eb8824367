//! The probe of a model's activations: one full-batch epoch on a small generated graph of the
//! run's widths and degree, under a memory tracker of its own.

use std::path::Path;

use graphloom_comm::Local;
use graphloom_graph::convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::Meta;
use graphloom_nn::inference::Output;
use graphloom_nn::train::{fit, FullBatch, TrainConfig, Workload};
use graphloom_nn::{Head, ModelConfig, OptimizerKind};
use graphloom_store::{Layout, Location, StoreSpec, StoreTensor};
use graphloom_tensor::memory::{set_thread_tracker, Category, MemoryTracker};
use graphloom_tensor::{DType, Tensor};

use super::model_bytes;
use crate::{PlanError, Result};

/// Nodes of the probe graph that measures the activations per node.
const PROBE_NODES: usize = 1024;
/// The probe graph's average degree at most (GAT keeps a score per edge, so the degree
/// matters; the probe stays small).
const PROBE_MAX_DEGREE: usize = 64;

/// What the probe of a model measured (see the module docs).
pub(crate) struct Probe {
    /// Bytes of activations and gradients a training step holds per node (or evaluation,
    /// when it holds more).
    pub(super) per_node: f64,
    /// Bytes an evaluation pass (inference, no gradients) holds per node.
    pub(super) eval_per_node: f64,
    /// The probe's own peak, held while the plan is made.
    pub(super) peak: u64,
}

/// Rows of the dataset's features in `dir` for the probe, spread over the file and read
/// through a mapping (page cache, not anonymous memory), so the probe sees the features'
/// real density (a sparse input takes the sparse first layer); `None` without features.
pub(crate) fn probe_rows(dir: &Path, meta: &Meta) -> Result<Option<Tensor>> {
    let path = dir.join("node_feat.npy");
    let dtype = DType::parse(&meta.feat_dtype);
    let (Some(dtype), true, true) = (dtype, meta.feat_dim > 0, path.is_file()) else {
        return Ok(None);
    };
    let n = meta.num_nodes;
    let k = PROBE_NODES.min(n);
    let spec = StoreSpec::new(
        &[n, meta.feat_dim],
        dtype,
        Layout::Continuous,
        Location::Mmap {
            path,
            writable: false,
        },
    );
    let table = StoreTensor::new(Local::single(), spec)?;
    let ids: Vec<i64> = (0..k).map(|i| (i * n / k.max(1)) as i64).collect();
    Ok(Some(table.gather(&ids)?))
}

/// Trains one full-batch epoch of `model` on a small generated graph of average degree
/// `avg_degree` (with `rows` as its features when given) under a tracker of its own, and
/// returns the bytes per node its step held beyond the features, the parameters, their
/// gradients and the optimizer's state.
pub(crate) fn probe(model: &ModelConfig, avg_degree: f64, rows: Option<&Tensor>) -> Result<Probe> {
    let mut cfg = model.clone();
    // The probe classifies nodes: a link head's decoder works on pairs, not on nodes.
    cfg.head = Head::NodeClasses;
    let nodes = rows.map_or(PROBE_NODES, |r| r.shape()[0]).max(2);
    let degree = (avg_degree.round() as usize).clamp(1, PROBE_MAX_DEGREE.min(nodes - 1));
    let params = model_bytes(&cfg, OptimizerKind::Sgd { momentum: 0.0 })? / 2;
    let measured = std::thread::scope(|s| {
        s.spawn(|| -> Result<Probe> {
            let tracker = MemoryTracker::new();
            set_thread_tracker(tracker.clone());
            let mut ds = generate(&SyntheticConfig {
                nodes,
                avg_degree: degree,
                feat_dim: if rows.is_some() { 1 } else { cfg.in_dim },
                classes: cfg.out_dim.max(2),
                seed: 0,
                ..Default::default()
            })?;
            if let Some(rows) = rows {
                ds.meta.feat_dim = cfg.in_dim;
                ds.features = rows.clone();
            }
            ds.features = ds
                .features
                .cast(cfg.dtype)
                .map_err(graphloom_nn::Error::from)?;
            let held = tracker.report().total_current as u64;
            let mut workload = FullBatch::new(&ds, cfg.clone(), 0)?;
            let train = TrainConfig {
                epochs: 1,
                ..Default::default()
            };
            fit(&mut workload, &train, |_| {})?;
            let r = tracker.report();
            // The graph's view is a part of its own in the plan (`view_bytes`).
            let step = (r.total_peak as u64)
                .saturating_sub(held)
                .saturating_sub(r.peak_of(Category::Optimizer) as u64)
                .saturating_sub(r.peak_of(Category::Graph) as u64)
                .saturating_sub(params);
            // An evaluation pass alone, under a tracker of its own.
            let params: Vec<Tensor> = workload
                .model()
                .params
                .iter()
                .map(|p| p.value.clone())
                .collect();
            let eval = MemoryTracker::new();
            set_thread_tracker(eval.clone());
            drop(workload.infer(&params, Output::LogProbabilities)?);
            // The rows it was given are held while it runs.
            let given = rows.map_or(0, |r| r.as_bytes().len() as u64);
            Ok(Probe {
                per_node: step as f64 / nodes as f64,
                eval_per_node: eval.report().total_peak as f64 / nodes as f64,
                peak: r.total_peak as u64 + given,
            })
        })
        .join()
    });
    measured.unwrap_or_else(|_| {
        Err(PlanError::invalid(
            "memory_gib",
            "could not be checked: the probe of the model's memory failed",
        ))
    })
}
