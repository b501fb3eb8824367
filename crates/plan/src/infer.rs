//! Using a trained model: log-probabilities, predicted labels or node embeddings for the nodes
//! of a dataset, through the evaluation path of training (`graphloom_nn::train::infer`).

use std::path::PathBuf;

use graphloom_graph::{Dataset, MappedDataset, Meta};
use graphloom_nn::inference::{infer_layerwise, InferenceInput, LayerwiseConfig};
use graphloom_nn::model_file::ModelFile;
use graphloom_nn::train::{predicted_class, FullBatch, Output, Workload};
use graphloom_nn::Model;
use graphloom_store::{Layout, Location, StoreSpec, StoreTensor};
use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::{DType, Tensor};

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

/// Runs the saved model over the whole graph (exact full-neighbour inference, dropout off)
/// and returns one row per node of `settings.nodes`: f32 log-probabilities or embeddings.
pub fn infer(settings: &InferSettings) -> Result<Tensor> {
    let saved = ModelFile::load(&settings.model)?;
    if settings.dataset.join("partition.json").exists() {
        return Err(PlanError::Invalid {
            option: "--dataset",
            reason: "is partitioned: give the unpartitioned directory it was made from".into(),
        });
    }
    let cfg = saved.config.clone();
    if let Some(layerwise) = &settings.layerwise {
        return infer_mapped(settings, &saved, layerwise);
    }
    let ds = match &saved.input_embedding {
        Some(_) => Dataset::load_without_features(&settings.dataset)?,
        None => Dataset::load(&settings.dataset)?,
    };
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
    let mut workload = FullBatch::with_inputs(&ds, cfg, 0, x)?;
    workload.model_mut().set_params(&saved.params)?;
    let params: Vec<Tensor> = workload
        .model()
        .params
        .iter()
        .map(|p| p.value.clone())
        .collect();
    let out = workload
        .infer(&params, settings.output)?
        .cast(DType::F32)
        .map_err(graphloom_nn::Error::from)?;
    Ok(match &settings.nodes {
        Some(ids) => select_rows(&out, ids),
        None => out,
    })
}

/// Refuses a node id outside the dataset.
fn check_nodes(settings: &InferSettings, n: usize) -> Result<()> {
    if let Some(bad) = settings
        .nodes
        .iter()
        .flatten()
        .find(|&&v| v < 0 || v as usize >= n)
    {
        return Err(PlanError::Invalid {
            option: "--nodes",
            reason: format!("holds node {bad}, outside 0..{n}"),
        });
    }
    Ok(())
}

/// Refuses a dataset whose classes, nodes (for a learnt input embedding) or features do not
/// fit the saved model.
fn check_fits(meta: &Meta, cfg: &graphloom_nn::ModelConfig, saved: &ModelFile) -> Result<()> {
    let n = meta.num_nodes;
    let invalid = |reason: String| {
        Err(PlanError::Invalid {
            option: "--dataset",
            reason,
        })
    };
    if meta.num_classes != cfg.out_dim {
        return invalid(format!(
            "has {} classes, the model predicts {}",
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

/// [`infer`] layer by layer over the dataset mapped in place, features read from their file.
fn infer_mapped(
    settings: &InferSettings,
    saved: &ModelFile,
    layerwise: &LayerwiseConfig,
) -> Result<Tensor> {
    let ds = MappedDataset::open(&settings.dataset)?;
    if ds.edge_weight().is_some() {
        return Err(PlanError::Invalid {
            option: "--inference-memory-gib",
            reason: "layer-wise inference does not read edge weights, and this dataset has \
                     edge_weight.npy: leave the option out to infer over the whole graph"
                .into(),
        });
    }
    ds.advise_random();
    let meta = &ds.meta;
    let cfg = &saved.config;
    check_nodes(settings, meta.num_nodes)?;
    check_fits(meta, cfg, saved)?;
    let mut model = Model::for_blocks(cfg.clone(), 0)?;
    model.set_params(&saved.params)?;
    let params: Vec<Tensor> = model.params.iter().map(|p| p.value.clone()).collect();
    let rows = graphloom_comm::Local::run(1, |comm| -> Result<_> {
        let table;
        let input = match &saved.input_embedding {
            Some(e) => InferenceInput::Tensor(e),
            None => {
                let dtype = DType::parse(&meta.feat_dtype).ok_or_else(|| PlanError::Invalid {
                    option: "--dataset",
                    reason: format!("has an unknown feature dtype '{}'", meta.feat_dtype),
                })?;
                let location = Location::Mmap {
                    path: ds.features_path(),
                    writable: false,
                };
                let shape = [meta.num_nodes, meta.feat_dim];
                table = StoreTensor::new(
                    comm,
                    StoreSpec::new(&shape, dtype, Layout::Continuous, location),
                )
                .map_err(graphloom_nn::Error::from)?;
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
    });
    rows.into_iter().next().expect("one worker")
}

/// Rows `ids` of a 2-D f32 tensor, in order.
fn select_rows(t: &Tensor, ids: &[i64]) -> Tensor {
    let (_, width) = t.dims2();
    let data = t.as_slice::<f32>().expect("inference output is f32");
    let rows: Vec<f32> = ids
        .iter()
        .flat_map(|&v| &data[v as usize * width..(v as usize + 1) * width])
        .copied()
        .collect();
    Tensor::from_vec(rows, &[ids.len(), width]).expect("rows fill the shape")
}

/// The predicted class of each row of log-probabilities.
pub fn labels_of(logp: &Tensor) -> Vec<i64> {
    let (_, c) = logp.dims2();
    logp.to_vec_f64()
        .chunks(c.max(1))
        .map(|row| predicted_class(row) as i64)
        .collect()
}
