//! The model file: a trained model's parameters and everything needed to rebuild it, as one
//! safetensors file that numpy, PyTorch and the `safetensors` package read.
//!
//! # Format (version 1)
//!
//! Metadata (`__metadata__`, strings): `format` = `graphloom-model`, `format_version` = `1`,
//! `arch` (`gcn`, `sage`, `gat`, `gatv2`, `gin`, `gine`, `sgc`, `appnp`, `sign`), `in_dim`,
//! `hidden`, `out_dim`, `layers`, `heads`, `out_heads`, `edge_dim` (GINE's; 0 otherwise, and
//! none in files written before GINE), `hops` and `teleport` (APPNP's; files written before
//! APPNP have none and read as its defaults), `batch_norm` (`true`/`false`), `activation` (of the
//! hidden layers: `relu`, `elu` for GAT and GATv2, `identity` for SGC), `dtype` (the compute dtype the
//! model was trained in), and the dropout rates it was trained with (`dropout`,
//! `input_dropout`, `attention_dropout`).
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
//! | gatv2 | `lin_l.weight [in, heads * out]` (sources), `lin_l.bias [heads * out]`, `lin_r.weight [in, heads * out]` (destinations), `lin_r.bias [heads * out]`, `att [heads * out]` (head-major), with `edge_dim` `lin_edge.weight [edge_dim, heads * out]`, `bias` as gat's |
//! | gin | `eps [1]`, `mlp.0.weight [in, out]`, `mlp.0.bias [out]`, `mlp.1.weight [out, out]`, `mlp.1.bias [out]` |
//! | gine | `eps [1]`, `lin.weight [edge_dim, in]`, `lin.bias [in]` (the edge features' map), then gin's `mlp` |
//!
//! A GIN or GINE model with batch normalisation also has `mlp.norm.weight [out]` and
//! `mlp.norm.bias [out]` in every layer (inside its MLP; files written before that have none,
//! and are refused by the parameter check).
//! | sgc | none for the hops before the last layer; the last as gcn's |
//! | appnp | `lin.weight [in, out]`, `lin.bias [out]` (the last layer's followed by the propagation) |
//!
//! With batch normalisation, every hidden layer also has `norm.weight [width]` and
//! `norm.bias [width]`. A link predictor's metadata has `task` = `link` and `decoder` (`dot`
//! or `mlp`; node classifiers have `task` = `node`, or none in files written before link
//! prediction), and the mlp decoder's tensors are `decoder.lin1.weight [out, out]`,
//! `decoder.lin1.bias [out]`, `decoder.lin2.weight [out, 1]`, `decoder.lin2.bias [1]`. A model trained on a learnt input embedding (`--embedding-dim`) holds
//! it as `input_embedding [num_nodes, in_dim]`.

use std::collections::HashMap;
use std::path::Path;

use graphloom_tensor::autodiff::ops::{Activation, Probability};
use graphloom_tensor::{DType, Tensor};

use crate::model::{
    Architecture, Head, Model, ModelConfig, Param, APPNP_HOPS, APPNP_TELEPORT, MAX_LAYERS,
};
use crate::task::TaskKind;
use crate::tensor_file::{self, TensorFile};
use crate::Result;

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

impl ModelFile {
    /// Writes the file atomically (a temporary file renamed into place).
    pub fn save(&self, path: &Path) -> Result<()> {
        let c = &self.config;
        let activation = hidden_activation(c.arch);
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
            ("edge_dim", c.edge_dim.to_string()),
            ("hops", c.hops.to_string()),
            ("teleport", c.teleport.to_string()),
            ("batch_norm", c.batch_norm.to_string()),
            ("activation", activation.to_string()),
            ("dtype", c.dtype.name().to_string()),
            ("dropout", c.dropout.to_string()),
            ("input_dropout", c.input_dropout.to_string()),
            ("attention_dropout", c.attention_dropout.to_string()),
            ("task", TaskKind::of(c.head).name().to_string()),
        ]
        .into_iter()
        .chain(match c.head {
            Head::Link(d) => Some(("decoder", d.name().to_string())),
            _ => None,
        })
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
        tensor_file::write(path, &tensors, metadata)
    }

    /// Reads a model file, checking its format version and that every parameter the
    /// configuration implies is there with its shape.
    pub fn load(path: &Path) -> Result<ModelFile> {
        let file = TensorFile::read(path)?;
        let number = |key: &str| -> Result<usize> {
            file.meta(key)?
                .parse()
                .map_err(|_| file.error(format!("metadata '{key}' is not a count")))
        };
        let rate = |key: &str| -> Result<Probability> {
            file.meta(key)?
                .parse()
                .map_err(|e| file.error(format!("metadata '{key}' {e}")))
        };
        if file.metadata.get("format").map(String::as_str) != Some("graphloom-model") {
            return Err(file.error("not a GraphLoom model file"));
        }
        let version = file.meta("format_version")?;
        if version != FORMAT_VERSION.to_string() {
            return Err(file.error(format!(
                "format version {version}; this build reads version {FORMAT_VERSION}"
            )));
        }
        let arch = match file.meta("arch")? {
            "rgcn" | "rsage" => {
                return Err(file.error(
                    "holds a relational model (rgcn or rsage): give it a heterogeneous dataset",
                ))
            }
            name => Architecture::parse(name).ok_or_else(|| {
                file.error(
                    "metadata 'arch' is not gcn, sage, gat, gatv2, gin, gine, sgc, appnp or sign",
                )
            })?,
        };
        // The hidden activation is fixed by the architecture: a file that asks for another
        // would be computed with the wrong one.
        let activation = file.meta("activation")?;
        if activation != hidden_activation(arch) {
            return Err(file.error(format!(
                "metadata 'activation' is '{activation}'; a {} model computes {}",
                arch.name(),
                hidden_activation(arch)
            )));
        }
        let dtype = DType::parse(file.meta("dtype")?)
            .filter(|d| d.is_float())
            .ok_or_else(|| file.error("metadata 'dtype' is not a float dtype"))?;
        let config = ModelConfig {
            arch,
            in_dim: number("in_dim")?,
            hidden: number("hidden")?,
            out_dim: number("out_dim")?,
            layers: number("layers")?,
            heads: number("heads")?,
            out_heads: number("out_heads")?,
            // Files written before GINE have no edge features.
            edge_dim: match file.metadata.get("edge_dim") {
                Some(_) => number("edge_dim")?,
                None => 0,
            },
            hops: match file.metadata.get("hops") {
                Some(_) => number("hops")?,
                None => APPNP_HOPS,
            },
            teleport: match file.metadata.get("teleport") {
                Some(t) => t
                    .parse()
                    .map_err(|_| file.error("metadata 'teleport' is not a number"))?,
                None => APPNP_TELEPORT,
            },
            batch_norm: match file.meta("batch_norm")? {
                "true" => true,
                "false" => false,
                other => {
                    return Err(file.error(format!(
                        "metadata 'batch_norm' is '{other}', not true or false"
                    )))
                }
            },
            dtype,
            dropout: rate("dropout")?,
            input_dropout: rate("input_dropout")?,
            attention_dropout: rate("attention_dropout")?,
            checkpoint: false,
            head: head(&file)?,
        };
        // Widths a damaged file names could ask for more memory than there is: the model is
        // built (to learn its parameters' shapes) only once the file can hold its weights.
        // (The count of layers is checked first, so that listing the layers is quick.)
        let fits = config.layers <= MAX_LAYERS
            && least_values(&config).is_some_and(|v| v <= file.size() / size_of::<f32>());
        if !fits {
            return Err(file.error(format!(
                "metadata describes a model ({} layers of widths {}, {}, {}) whose weights do \
                 not fit in the file's {} bytes",
                config.layers,
                config.in_dim,
                config.hidden,
                config.out_dim,
                file.size()
            )));
        }
        // The parameters this configuration has, with their shapes, in the model's order.
        let params = Model::param_shapes(&config)
            .map_err(|e| file.error(e.to_string()))?
            .into_iter()
            .map(|(name, shape)| {
                let value = file.tensor(&name)?;
                if value.shape() != shape.as_slice() {
                    return Err(file.error(format!(
                        "tensor '{name}' has shape {:?}, the model needs {shape:?}",
                        value.shape()
                    )));
                }
                check_finite(&file, &name, &value)?;
                Ok(Param { name, value })
            })
            .collect::<Result<Vec<_>>>()?;
        let input_embedding = if file.has(INPUT_EMBEDDING) {
            let table = file.tensor(INPUT_EMBEDDING)?;
            check_finite(&file, INPUT_EMBEDDING, &table)?;
            Some(table)
        } else {
            None
        };
        Ok(ModelFile {
            config,
            params,
            input_embedding,
        })
    }
}

/// The fewest parameter values a model of `c` has, counting only the largest tensor of each
/// layer (its weight matrix), or `None` when the count overflows. A file holding fewer values
/// cannot hold the model.
fn least_values(c: &ModelConfig) -> Option<usize> {
    c.conv_layers().iter().try_fold(0usize, |total, layer| {
        let largest = layer
            .param_shapes()?
            .iter()
            .try_fold(0usize, |most, (_, s)| {
                Some(most.max(s.iter().try_fold(1usize, |n, &d| n.checked_mul(d))?))
            })?;
        total.checked_add(largest)
    })
}

/// The stored copy of a parameter: f64 stays f64, every other float becomes f32.
fn stored(t: &Tensor) -> Result<Tensor> {
    Ok(if t.dtype() == DType::F64 {
        t.clone()
    } else {
        t.cast(DType::F32)?
    })
}

/// The head a model file's metadata names: `task` node (also when absent, as files written
/// before link prediction are) or link with its `decoder`.
fn head(file: &TensorFile) -> Result<Head> {
    let get = |key: &str| file.metadata.get(key).map(String::as_str);
    TaskKind::head(get("task"), get("decoder")).map_err(|e| file.error(format!("metadata: {e}")))
}

/// The activation of an architecture's hidden layers, as the file names it.
fn hidden_activation(arch: Architecture) -> &'static str {
    match arch.hidden_activation() {
        Activation::Identity => "identity",
        Activation::Relu => "relu",
        Activation::Elu(_) => "elu",
        Activation::LeakyRelu(_) => "leaky_relu",
    }
}

/// Refuses a stored tensor holding NaN or an infinity: every prediction made with it would be
/// NaN.
fn check_finite(file: &TensorFile, name: &str, t: &Tensor) -> Result<()> {
    let bad = graphloom_tensor::with_float!(t.dtype(), "a model file's tensor", T => {
        t.as_slice::<T>()
            .map(|v| v.iter().position(|x| !graphloom_tensor::Float::to_acc(*x).is_finite()))
    })?;
    match bad {
        Some(i) => Err(file.error(format!(
            "tensor '{name}' holds a non-finite value (NaN or infinity) at element {i}"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Model;

    /// A saved two-layer GCN, rewritten by `edit` (its metadata and its tensors) and loaded.
    fn load_edited(
        name: &str,
        edit: impl FnOnce(&mut HashMap<String, String>, &mut Vec<(String, Tensor)>),
    ) -> Result<ModelFile> {
        let config = ModelConfig {
            in_dim: 4,
            hidden: 3,
            out_dim: 2,
            ..Default::default()
        };
        let shapes = Model::param_shapes(&config).unwrap();
        let params: Vec<Param> = shapes
            .iter()
            .map(|(name, shape)| Param {
                name: name.clone(),
                value: Tensor::zeros(shape, DType::F32),
            })
            .collect();
        let path =
            std::env::temp_dir().join(format!("graphloom-model-{}-{name}", std::process::id()));
        ModelFile {
            config,
            params,
            input_embedding: None,
        }
        .save(&path)
        .unwrap();
        let file = TensorFile::read(&path).unwrap();
        let mut metadata = file.metadata.clone();
        let mut tensors: Vec<(String, Tensor)> = shapes
            .into_iter()
            .map(|(name, _)| {
                let t = file.tensor(&name).unwrap();
                (name, t)
            })
            .collect();
        edit(&mut metadata, &mut tensors);
        tensor_file::write(&path, &tensors, metadata).unwrap();
        let loaded = ModelFile::load(&path);
        std::fs::remove_file(&path).unwrap();
        loaded
    }

    #[test]
    fn a_non_finite_parameter_is_refused() {
        load_edited("finite", |_, _| {}).unwrap();
        let err = load_edited("nan", |_, tensors| {
            let (_, t) = &mut tensors[1];
            let mut v = t.as_slice::<f32>().unwrap().to_vec();
            v[1] = f32::NAN;
            *t = Tensor::from_vec(v, t.shape()).unwrap();
        })
        .err()
        .unwrap()
        .to_string();
        assert!(
            err.contains("non-finite value") && err.contains("element 1"),
            "{err}"
        );
    }

    #[test]
    fn an_activation_the_architecture_does_not_compute_is_refused() {
        let err = load_edited("tanh", |metadata, _| {
            metadata.insert("activation".into(), "tanh".into());
        })
        .err()
        .unwrap()
        .to_string();
        assert!(
            err.contains("'activation' is 'tanh'") && err.contains("gcn model computes relu"),
            "{err}"
        );
    }
}
