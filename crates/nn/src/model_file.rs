//! The model file: a trained model's parameters and everything needed to rebuild it, as one
//! safetensors file that numpy, PyTorch and the `safetensors` package read.
//!
//! # Format (version 1)
//!
//! Metadata (`__metadata__`, strings): `format` = `graphloom-model`, `format_version` = `1`,
//! `arch` (`gcn`, `sage`, `gat`), `in_dim`, `hidden`, `out_dim`, `layers`, `heads`,
//! `out_heads`, `batch_norm` (`true`/`false`), `activation` (of the hidden layers: `relu`, or
//! `elu` for GAT), `dtype` (the compute dtype the model was trained in), and the dropout rates
//! it was trained with (`dropout`, `input_dropout`, `attention_dropout`).
//!
//! Tensors, little-endian f32 (f64 for an f64 model), row-major, named `layers.{l}.{name}`
//! for layer `l` from 0. Dense weights are `[in, out]`: a layer computes `x @ weight`
//! (`torch.nn.Linear` holds the transpose).
//!
//! | arch | tensors of layer `l` |
//! |---|---|
//! | gcn | `weight [in, out]`, `bias [out]` |
//! | sage | `lin_l.weight [in, out]` (neighbour mean), `lin_l.bias [out]`, `lin_r.weight [in, out]` (root) |
//! | gat | `lin.weight [in, heads * out]`, `att_src [heads * out]`, `att_dst [heads * out]` (head-major), `bias [heads * out]` (concatenated hidden layers) or `[out]` (the averaged output layer) |
//!
//! With batch normalisation, every hidden layer also has `norm.weight [width]` and
//! `norm.bias [width]`. A model trained on a learnt input embedding (`--embedding-dim`) holds
//! it as `input_embedding [num_nodes, in_dim]`.

use std::collections::HashMap;
use std::path::Path;

use graphloom_tensor::{DType, Tensor};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

use crate::model::{Architecture, ModelConfig, Param};
use crate::{Error, Result};

/// The version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The name of the learnt input embedding in a model file.
pub const INPUT_EMBEDDING: &str = "input_embedding";

/// A trained model: its configuration, parameters and, for a model trained on a learnt input
/// embedding, that table.
pub struct ModelFile {
    /// The model's configuration (`checkpoint` is not stored: it is a choice of each run).
    pub config: ModelConfig,
    /// The parameters, in the model's order.
    pub params: Vec<Param>,
    /// The learnt input rows, one per node.
    pub input_embedding: Option<Tensor>,
}

fn file_error(path: &Path, msg: impl Into<String>) -> Error {
    graphloom_graph::Error::format(path, msg).into()
}

impl ModelFile {
    /// Writes the file atomically (a temporary file renamed into place).
    pub fn save(&self, path: &Path) -> Result<()> {
        let c = &self.config;
        let activation = if c.arch == Architecture::Gat {
            "elu"
        } else {
            "relu"
        };
        let metadata: HashMap<String, String> = [
            ("format", "graphloom-model".to_string()),
            ("format_version", FORMAT_VERSION.to_string()),
            ("arch", c.arch.name().to_string()),
            ("in_dim", c.in_dim.to_string()),
            ("hidden", c.hidden.to_string()),
            ("out_dim", c.out_dim.to_string()),
            ("layers", c.layers.to_string()),
            ("heads", c.heads.to_string()),
            ("out_heads", c.out_heads.to_string()),
            ("batch_norm", c.batch_norm.to_string()),
            ("activation", activation.to_string()),
            ("dtype", c.dtype.name().to_string()),
            ("dropout", c.dropout.to_string()),
            ("input_dropout", c.input_dropout.to_string()),
            ("attention_dropout", c.attention_dropout.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut tensors: Vec<(String, Tensor)> = self
            .params
            .iter()
            .map(|p| Ok((p.name.clone(), stored(&p.value)?)))
            .collect::<Result<_>>()?;
        if let Some(e) = &self.input_embedding {
            tensors.push((INPUT_EMBEDDING.to_string(), stored(e)?));
        }
        let views = tensors
            .iter()
            .map(|(name, t)| {
                let dtype = if t.dtype() == DType::F64 {
                    Dtype::F64
                } else {
                    Dtype::F32
                };
                TensorView::new(dtype, t.shape().to_vec(), t.as_bytes())
                    .map(|v| (name.clone(), v))
                    .map_err(|e| file_error(path, e.to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        let bytes = safetensors::tensor::serialize(views, &Some(metadata))
            .map_err(|e| file_error(path, e.to_string()))?;
        graphloom_graph::write_atomic(path, |w| std::io::Write::write_all(w, &bytes))
            .map_err(graphloom_graph::Error::from)?;
        Ok(())
    }

    /// Reads a model file, checking its format version and that every parameter the
    /// configuration implies is there with its shape.
    pub fn load(path: &Path) -> Result<ModelFile> {
        let bytes = std::fs::read(path).map_err(|e| graphloom_graph::Error::io(path, e))?;
        let (_, header) = SafeTensors::read_metadata(&bytes)
            .map_err(|e| file_error(path, format!("not a safetensors file: {e}")))?;
        let meta = header
            .metadata()
            .clone()
            .ok_or_else(|| file_error(path, "no metadata: not a GraphLoom model file"))?;
        let get = |key: &str| -> Result<&str> {
            meta.get(key)
                .map(String::as_str)
                .ok_or_else(|| file_error(path, format!("metadata has no '{key}'")))
        };
        let number = |key: &str| -> Result<usize> {
            get(key)?
                .parse()
                .map_err(|_| file_error(path, format!("metadata '{key}' is not a count")))
        };
        let rate = |key: &str| -> Result<f64> {
            get(key)?
                .parse()
                .map_err(|_| file_error(path, format!("metadata '{key}' is not a number")))
        };
        if get("format")? != "graphloom-model" {
            return Err(file_error(path, "not a GraphLoom model file"));
        }
        let version = get("format_version")?;
        if version != FORMAT_VERSION.to_string() {
            return Err(file_error(
                path,
                format!("format version {version}; this build reads version {FORMAT_VERSION}"),
            ));
        }
        let arch = Architecture::parse(get("arch")?)
            .ok_or_else(|| file_error(path, "metadata 'arch' is not gcn, sage or gat"))?;
        let dtype = DType::parse(get("dtype")?)
            .filter(|d| d.is_float())
            .ok_or_else(|| file_error(path, "metadata 'dtype' is not a float dtype"))?;
        let config = ModelConfig {
            arch,
            in_dim: number("in_dim")?,
            hidden: number("hidden")?,
            out_dim: number("out_dim")?,
            layers: number("layers")?,
            heads: number("heads")?,
            out_heads: number("out_heads")?,
            batch_norm: get("batch_norm")? == "true",
            dtype,
            dropout: rate("dropout")?,
            input_dropout: rate("input_dropout")?,
            attention_dropout: rate("attention_dropout")?,
            checkpoint: false,
        };
        let st = SafeTensors::deserialize(&bytes)
            .map_err(|e| file_error(path, format!("not a safetensors file: {e}")))?;
        let read = |name: &str| -> Result<Tensor> {
            let view = st
                .tensor(name)
                .map_err(|_| file_error(path, format!("has no tensor '{name}'")))?;
            let shape = view.shape().to_vec();
            let data = view.data();
            match view.dtype() {
                Dtype::F32 => Ok(Tensor::from_vec(
                    data.chunks_exact(4)
                        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                        .collect::<Vec<f32>>(),
                    &shape,
                )?),
                Dtype::F64 => Ok(Tensor::from_vec(
                    data.chunks_exact(8)
                        .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
                        .collect::<Vec<f64>>(),
                    &shape,
                )?),
                other => Err(file_error(
                    path,
                    format!("tensor '{name}' is {other:?}, not F32 or F64"),
                )),
            }
        };
        // The parameters this configuration has, with their shapes, in the model's order.
        let expected = crate::model::Model::param_shapes(&config)?;
        let params = expected
            .into_iter()
            .map(|(name, shape)| {
                let value = read(&name)?;
                if value.shape() != shape.as_slice() {
                    return Err(file_error(
                        path,
                        format!(
                            "tensor '{name}' has shape {:?}, the model needs {shape:?}",
                            value.shape()
                        ),
                    ));
                }
                Ok(Param { name, value })
            })
            .collect::<Result<Vec<_>>>()?;
        let input_embedding = match st.tensor(INPUT_EMBEDDING) {
            Ok(_) => Some(read(INPUT_EMBEDDING)?),
            Err(_) => None,
        };
        Ok(ModelFile {
            config,
            params,
            input_embedding,
        })
    }
}

/// The stored copy of a parameter: f64 stays f64, every other float becomes f32.
fn stored(t: &Tensor) -> Result<Tensor> {
    Ok(if t.dtype() == DType::F64 {
        t.clone()
    } else {
        t.cast(DType::F32)?
    })
}
