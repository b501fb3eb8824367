//! Model files (`graphloom_nn::model_file`) to and from Python, and inference with a saved
//! model through the plan (the same path as `graphloom predict`).

use std::collections::HashMap;
use std::path::PathBuf;

use graphloom_nn::inference::Output;
use graphloom_nn::model_file::ModelFile;
use graphloom_nn::task::TaskKind;
use graphloom_nn::{Architecture, Head, Model, ModelConfig, Param};
use graphloom_plan::InferSettings;
use graphloom_store::DlpackView;
use graphloom_tensor::autodiff::ops::Probability;
use graphloom_tensor::{DType, Tensor};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::buffers::Held;
use crate::errors::{self, invalid};
use crate::process::check_pool;
use crate::view::View;

/// Reads a model file: (configuration as a dict, [(name, tensor)] in the model's order, the
/// learnt input embedding or None).
#[pyfunction]
#[allow(clippy::type_complexity)]
pub(crate) fn read_model_file<'py>(
    py: Python<'py>,
    path: PathBuf,
) -> PyResult<(Bound<'py, PyDict>, Vec<(String, View)>, Option<View>)> {
    check_pool()?;
    let file = py
        .detach(|| ModelFile::load(&path))
        .map_err(errors::raise)?;
    let c = &file.config;
    let config = PyDict::new(py);
    config.set_item("arch", c.arch.name())?;
    config.set_item("in_dim", c.in_dim)?;
    config.set_item("hidden", c.hidden)?;
    config.set_item("out_dim", c.out_dim)?;
    config.set_item("layers", c.layers)?;
    config.set_item("heads", c.heads)?;
    config.set_item("out_heads", c.out_heads)?;
    config.set_item("edge_dim", c.edge_dim)?;
    config.set_item("hops", c.hops)?;
    config.set_item("teleport", c.teleport)?;
    config.set_item("batch_norm", c.batch_norm)?;
    config.set_item("dtype", c.dtype.name())?;
    config.set_item("dropout", c.dropout.get())?;
    config.set_item("input_dropout", c.input_dropout.get())?;
    config.set_item("attention_dropout", c.attention_dropout.get())?;
    config.set_item("task", TaskKind::of(c.head).name())?;
    if let Head::Link(d) = c.head {
        config.set_item("decoder", d.name())?;
    }
    let params = file
        .params
        .into_iter()
        .map(|p| (p.name, View::new(DlpackView::of_tensor(p.value))))
        .collect();
    let embedding = file
        .input_embedding
        .map(|e| View::new(DlpackView::of_tensor(e)));
    Ok((config, params, embedding))
}

fn item<'py>(config: &Bound<'py, PyDict>, key: &str) -> PyResult<Bound<'py, PyAny>> {
    config
        .get_item(key)?
        .ok_or_else(|| invalid(format!("model configuration: '{key}' is missing")))
}

/// Writes a model file (atomically) from a configuration dict (the keys `read_model_file`
/// gives) and float32 parameters `[(name, array, shape)]`; every parameter the configuration
/// implies must be there, with its shape.
#[pyfunction]
pub(crate) fn write_model_file(
    py: Python<'_>,
    path: PathBuf,
    config: &Bound<'_, PyDict>,
    params: Vec<(String, Bound<'_, PyAny>, Vec<usize>)>,
) -> PyResult<()> {
    check_pool()?;
    let arch: String = item(config, "arch")?.extract()?;
    let config = ModelConfig {
        arch: Architecture::parse(&arch).ok_or_else(|| {
            invalid(format!(
                "model configuration: arch '{arch}' is not gcn, sage, gat, gatv2, gin, gine, sgc, appnp or sign"
            ))
        })?,
        in_dim: item(config, "in_dim")?.extract()?,
        hidden: item(config, "hidden")?.extract()?,
        out_dim: item(config, "out_dim")?.extract()?,
        layers: item(config, "layers")?.extract()?,
        heads: item(config, "heads")?.extract()?,
        out_heads: item(config, "out_heads")?.extract()?,
        // Configurations written before GINE have no edge features.
        edge_dim: match config.get_item("edge_dim")? {
            Some(v) => v.extract()?,
            None => 0,
        },
        // Configurations written before APPNP have no propagation settings.
        hops: match config.get_item("hops")? {
            Some(v) => v.extract()?,
            None => graphloom_nn::APPNP_HOPS,
        },
        teleport: match config.get_item("teleport")? {
            Some(v) => v.extract()?,
            None => graphloom_nn::APPNP_TELEPORT,
        },
        dropout: rate(config, "dropout")?,
        input_dropout: rate(config, "input_dropout")?,
        attention_dropout: rate(config, "attention_dropout")?,
        dtype: DType::F32,
        checkpoint: false,
        batch_norm: item(config, "batch_norm")?.extract()?,
        head: head(config)?,
    };
    let mut given: HashMap<String, Tensor> = HashMap::new();
    for (name, array, shape) in params {
        let values = Held::<f32>::new(&array, &name)?.slice().to_vec();
        let tensor = Tensor::from_vec(values, &shape).map_err(|_| {
            invalid(format!(
                "parameter '{name}': its values do not fill shape {shape:?}"
            ))
        })?;
        given.insert(name, tensor);
    }
    let expected = Model::param_shapes(&config).map_err(errors::raise)?;
    let mut ordered = Vec::with_capacity(expected.len());
    for (name, shape) in expected {
        let value = given
            .remove(&name)
            .ok_or_else(|| invalid(format!("parameter '{name}' (shape {shape:?}) is missing")))?;
        if value.shape() != shape.as_slice() {
            return Err(invalid(format!(
                "parameter '{name}' has shape {:?}, the model needs {shape:?}",
                value.shape()
            )));
        }
        ordered.push(Param { name, value });
    }
    if let Some(extra) = given.keys().next() {
        return Err(invalid(format!(
            "parameter '{extra}' is not one of this model's"
        )));
    }
    let file = ModelFile {
        config,
        params: ordered,
        input_embedding: None,
    };
    py.detach(|| file.save(&path)).map_err(errors::raise)
}

/// Log-probabilities of a saved model over a dataset directory (exact full-neighbour
/// inference, as `graphloom predict`), or with `layer` the output of its first `layer` layers
/// (as `graphloom embed`), for `nodes` (int64) or every node; with `inference_memory_gib`,
/// layer by layer over the mapped dataset within that budget, scratch files in `scratch_dir`.
#[pyfunction]
#[pyo3(signature = (model, dataset, nodes=None, layer=None, inference_memory_gib=None,
                    scratch_dir=None))]
pub(crate) fn predict(
    py: Python<'_>,
    model: PathBuf,
    dataset: PathBuf,
    nodes: Option<&Bound<'_, PyAny>>,
    layer: Option<usize>,
    inference_memory_gib: Option<f64>,
    scratch_dir: Option<PathBuf>,
) -> PyResult<View> {
    check_pool()?;
    let nodes = match nodes {
        Some(ids) => Some(Held::<i64>::new(ids, "nodes")?.slice().to_vec()),
        None => None,
    };
    let layerwise = inference_memory_gib
        .map(|gib| graphloom_plan::layerwise_config(gib, scratch_dir))
        .transpose()
        .map_err(errors::raise)?;
    let settings = InferSettings {
        model,
        dataset,
        nodes,
        output: layer.map_or(Output::LogProbabilities, Output::Layer),
        layerwise,
    };
    let out = py
        .detach(|| graphloom_plan::infer(&settings))
        .map_err(errors::raise)?;
    Ok(View::new(DlpackView::of_tensor(out)))
}

/// The head a model configuration dict names: `task` node (or no `task`) or link with its
/// `decoder`.
fn head(config: &Bound<'_, PyDict>) -> PyResult<Head> {
    let text = |key: &str| -> PyResult<Option<String>> {
        config.get_item(key)?.map(|v| v.extract()).transpose()
    };
    let (task, decoder) = (text("task")?, text("decoder")?);
    TaskKind::head(task.as_deref(), decoder.as_deref())
        .map_err(|e| invalid(format!("model configuration: {e}")))
}

/// A dropout rate of a model configuration dict, checked to be a probability.
fn rate(config: &Bound<'_, PyDict>, key: &str) -> PyResult<Probability> {
    let p: f64 = item(config, key)?.extract()?;
    Probability::new(p).map_err(|e| invalid(format!("model configuration: {key} {e}")))
}
