//! Using a trained model: log-probabilities, predicted labels or node embeddings for the nodes
//! of a dataset, through the evaluation path of training (`graphloom_nn::inference`).

use std::path::PathBuf;
use std::sync::Arc;

use graphloom_graph::parts::PartitionMeta;
use graphloom_graph::{Dataset, FeaturesLocation, MappedDataset, Meta};
use graphloom_nn::inference::{infer_layerwise, InferenceInput, LayerwiseConfig, Output};
use graphloom_nn::model_file::ModelFile;
use graphloom_nn::train::predicted_class;
use graphloom_nn::{GraphInput, Head, Model, NodeGraph};
use graphloom_store::Layout;
use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::{DType, Tensor, Var};

use crate::{PlanError, Result};

/// What to compute with a saved model.
#[derive(Clone, Debug)]
pub struct InferSettings {
    /// The model file (`--save-model` of `graphloom train`).
    pub model: PathBuf,
    /// An unpartitioned dataset directory whose features (or, for a model with a learnt input
    /// embedding, whose node count) fit the model.
    pub dataset: PathBuf,
    /// Only these nodes' rows, in this order [default: every node].
    pub nodes: Option<Vec<i64>>,
    /// Log-probabilities, or the output of the first k layers.
    pub output: Output,
    /// Layer by layer in chunks over the mapped dataset ([`infer_layerwise`]) instead of one
    /// pass over the whole graph in memory.
    pub layerwise: Option<LayerwiseConfig>,
}

/// Layer-wise inference within `gib` GiB of memory, its scratch files in `scratch_dir` (default:
/// the system's temporary folder): the settings of `inference_memory_gib` and `scratch_dir`,
/// for training's evaluation and for inference alike. Fails on a budget that is not a positive
/// number of GiB, or a scratch folder that is not one.
pub fn layerwise_config(gib: f64, scratch_dir: Option<PathBuf>) -> Result<LayerwiseConfig> {
    let memory_bytes = crate::budget::gib_bytes("inference_memory_gib", gib)?;
    let scratch_dir = scratch_dir.unwrap_or_else(std::env::temp_dir);
    if !scratch_dir.is_dir() {
        return Err(PlanError::invalid(
            "scratch_dir",
            format!("{} is not a folder", scratch_dir.display()),
        ));
    }
    Ok(LayerwiseConfig {
        memory_bytes: usize::try_from(memory_bytes).unwrap_or(usize::MAX),
        scratch_dir,
    })
}

/// Runs the saved model over the whole graph (exact full-neighbour inference, dropout off)
/// and returns one row per node of `settings.nodes`, f32: a classifier's log-probabilities, a
/// multi-label model's logits, a regressor's values, or a layer's output.
pub fn infer(settings: &InferSettings) -> Result<Tensor> {
    let saved = ModelFile::load(&settings.model)?;
    // A multi-label model's predictions are its logits, a regressor's its values: the last
    // layer's output, with no softmax after it.
    let predictions;
    let settings = match (saved.config.head, settings.output) {
        (Head::NodeLabels | Head::NodeValues, Output::LogProbabilities) => {
            predictions = InferSettings {
                output: Output::Layer(saved.config.layers),
                ..settings.clone()
            };
            &predictions
        }
        _ => settings,
    };
    if PartitionMeta::is_partitioned(&settings.dataset) {
        return Err(PlanError::invalid(
            "dataset",
            "is partitioned: give the unpartitioned directory it was made from",
        ));
    }
    let cfg = saved.config.clone();
    if matches!(cfg.head, graphloom_nn::Head::Link(_))
        && settings.output == graphloom_nn::inference::Output::LogProbabilities
    {
        return Err(PlanError::NoClasses);
    }
    if let Some(layerwise) = &settings.layerwise {
        return infer_mapped(settings, &saved, layerwise);
    }
    let mut ds = match &saved.input_embedding {
        Some(_) => Dataset::load_without_features(&settings.dataset)?,
        None => Dataset::load(&settings.dataset)?,
    };
    if cfg.edge_dim > 0 {
        ds.load_edge_features(&settings.dataset)?;
        check_edge_features(ds.edge_features.as_ref(), cfg.edge_dim)?;
    }
    let n = ds.meta.num_nodes;
    check_nodes(settings, n)?;
    check_fits(&ds.meta, &cfg, &saved)?;
    let x = {
        let _g = category_scope(Category::Features);
        match &saved.input_embedding {
            Some(e) => e.cast(cfg.dtype),
            None => ds.features.cast(cfg.dtype),
        }
        .map_err(graphloom_nn::Error::from)?
    };
    let model = saved_model(&saved)?;
    let weight = ds.edge_weight.as_ref().map(|w| Arc::from(w.as_slice()));
    let graph = NodeGraph::in_memory(
        cfg.arch,
        &ds.graph,
        weight,
        ds.edge_features.clone().map(Arc::new),
    )?;
    let params: Vec<Tensor> = model.params.iter().map(|p| p.value.clone()).collect();
    let out = graphloom_nn::inference::infer(
        &model,
        &Var::constant(x),
        GraphInput::Nodes(&graph),
        &params,
        settings.output,
    )?
    .cast(DType::F32)
    .map_err(graphloom_nn::Error::from)?;
    Ok(match &settings.nodes {
        Some(ids) => select_rows(&out, ids)?,
        None => out,
    })
}

/// The saved link predictor's scores (logits, `[pairs]`, f32) of the pairs `(src[i],
/// dst[i])` of the dataset's nodes: every node's embedding by exact inference (layer by layer
/// when `settings.layerwise` asks), scored by the model's decoder. `settings.output` and
/// `settings.nodes` are not used.
pub fn score_links(settings: &InferSettings, src: &[i64], dst: &[i64]) -> Result<Tensor> {
    let saved = ModelFile::load(&settings.model)?;
    if !matches!(saved.config.head, graphloom_nn::Head::Link(_)) {
        return Err(PlanError::invalid(
            "model",
            "classifies nodes: it has no link decoder to score pairs (train one with `task` link)",
        ));
    }
    if src.len() != dst.len() {
        return Err(PlanError::invalid(
            "pairs",
            format!("has {} sources for {} destinations", src.len(), dst.len()),
        ));
    }
    let all = InferSettings {
        nodes: None,
        output: Output::Layer(saved.config.layers),
        ..settings.clone()
    };
    let h = infer(&all)?;
    let n = h.shape()[0] as i64;
    if let Some(bad) = src.iter().chain(dst).find(|&&v| v < 0 || v >= n) {
        return Err(PlanError::invalid(
            "pairs",
            format!("holds node {bad}, outside 0..{n}"),
        ));
    }
    let model = saved_model(&saved)?;
    let params: Vec<Tensor> = model.params.iter().map(|p| p.value.clone()).collect();
    let h = h
        .cast(saved.config.dtype)
        .map_err(graphloom_nn::Error::from)?;
    let scores = graphloom_nn::link::score(&model, &h, &params, src, dst)?;
    let scores: Vec<f32> = scores.into_iter().map(|s| s as f32).collect();
    let count = scores.len();
    Ok(Tensor::from_vec(scores, &[count]).map_err(graphloom_nn::Error::from)?)
}

/// Refuses a node id outside the dataset.
fn check_nodes(settings: &InferSettings, n: usize) -> Result<()> {
    if let Some(bad) = settings
        .nodes
        .iter()
        .flatten()
        .find(|&&v| v < 0 || v as usize >= n)
    {
        return Err(PlanError::invalid(
            "nodes",
            format!("holds node {bad}, outside 0..{n}"),
        ));
    }
    Ok(())
}

/// Refuses a dataset whose classes, nodes (for a learnt input embedding) or features do not
/// fit the saved model.
fn check_fits(meta: &Meta, cfg: &graphloom_nn::ModelConfig, saved: &ModelFile) -> Result<()> {
    let n = meta.num_nodes;
    let invalid = |reason: String| Err(PlanError::invalid("dataset", reason));
    let what = match cfg.head {
        Head::NodeClasses => "classes",
        Head::NodeLabels => "labels per node",
        Head::NodeValues => "targets per node",
        Head::Link(_) => "",
    };
    if !what.is_empty() && meta.num_classes != cfg.out_dim {
        return invalid(format!(
            "has {} {what}, the model predicts {}",
            meta.num_classes, cfg.out_dim
        ));
    }
    match &saved.input_embedding {
        Some(e) if e.shape()[0] != n => invalid(format!(
            "has {n} nodes, the model's learnt input embedding {}",
            e.shape()[0]
        )),
        None if meta.feat_dim != cfg.in_dim => invalid(format!(
            "has {} features per node, the model reads {}",
            meta.feat_dim, cfg.in_dim
        )),
        _ => Ok(()),
    }
}

/// Refuses edge features that a model reading them (GINE, or GATv2 trained with them; of
/// `edge_dim` columns) cannot take: none, or another width.
fn check_edge_features(features: Option<&Tensor>, edge_dim: usize) -> Result<()> {
    let width = features.map(|f| f.dims2().1);
    if width == Some(edge_dim) {
        return Ok(());
    }
    Err(PlanError::invalid(
        "dataset",
        match width {
            Some(w) => format!("has {w} edge features per edge, the model reads {edge_dim}"),
            None => {
                format!("has no edge_feat.npy, and the model reads {edge_dim} features per edge")
            }
        },
    ))
}

/// [`infer`] layer by layer over the dataset mapped in place, features read from their file.
fn infer_mapped(
    settings: &InferSettings,
    saved: &ModelFile,
    layerwise: &LayerwiseConfig,
) -> Result<Tensor> {
    if saved.config.arch == graphloom_nn::Architecture::Appnp {
        return Err(PlanError::invalid(
            "inference_memory_gib",
            "infers layer by layer, one hop a layer, and APPNP's last layer takes all its hops: \
             leave it out to infer over the whole graph",
        ));
    }
    let mut ds = MappedDataset::open(&settings.dataset)?;
    if saved.config.edge_dim > 0 {
        ds.load_edge_features()?;
        check_edge_features(ds.data().edge_features, saved.config.edge_dim)?;
    }
    if ds.edge_weight().is_some() {
        return Err(PlanError::invalid(
            "inference_memory_gib",
            "layer-wise inference does not read edge weights, and this dataset has \
             edge_weight.npy: leave it out to infer over the whole graph",
        ));
    }
    ds.advise_random();
    let meta = &ds.meta;
    let cfg = &saved.config;
    check_nodes(settings, meta.num_nodes)?;
    check_fits(meta, cfg, saved)?;
    let model = saved_model(saved)?;
    let params: Vec<Tensor> = model.params.iter().map(|p| p.value.clone()).collect();
    let comm = graphloom_comm::Local::single();
    let table;
    let input = match &saved.input_embedding {
        Some(e) => InferenceInput::Tensor(e),
        None => {
            table = ds.feature_table(comm, Layout::Continuous, FeaturesLocation::Mmap)?;
            InferenceInput::Rows(&table)
        }
    };
    let out = infer_layerwise(
        &model,
        ds.data(),
        input,
        &params,
        settings.output,
        layerwise,
    )?;
    let ids: Vec<usize> = match &settings.nodes {
        Some(ids) => ids.iter().map(|&v| v as usize).collect(),
        None => (0..meta.num_nodes).collect(),
    };
    Ok(out
        .gather(&ids)?
        .cast(DType::F32)
        .map_err(graphloom_nn::Error::from)?)
}

/// The saved model with its parameters.
fn saved_model(saved: &ModelFile) -> Result<Model> {
    let mut model = Model::new(saved.config.clone(), 0)?;
    model.set_params(&saved.params)?;
    Ok(model)
}

/// Rows `ids` (checked to be rows of `t`) of a 2-D f32 tensor, in order.
fn select_rows(t: &Tensor, ids: &[i64]) -> Result<Tensor> {
    let (_, width) = t.dims2();
    let data = t.as_slice::<f32>().map_err(graphloom_nn::Error::from)?;
    let rows: Vec<f32> = ids
        .iter()
        .flat_map(|&v| &data[v as usize * width..(v as usize + 1) * width])
        .copied()
        .collect();
    Ok(Tensor::from_vec(rows, &[ids.len(), width]).map_err(graphloom_nn::Error::from)?)
}

/// The predicted class of each row of log-probabilities.
pub fn labels_of(logp: &Tensor) -> Vec<i64> {
    let (_, c) = logp.dims2();
    logp.to_vec_f64()
        .chunks(c.max(1))
        .map(|row| predicted_class(row) as i64)
        .collect()
}
