//! The model file of a relational model: the homogeneous model file's container (a safetensors
//! file, format `graphloom-model`, version 1) with the graph's schema in its metadata.
//!
//! Metadata: `format`, `format_version`, `arch` (`rgcn` or `rsage`), `task` (`node`),
//! `node_types` (a JSON list of names, the types' order), `in_dims` (a JSON list, one per
//! type), `relations` (a JSON list of `[name, src_type, dst_type]`, types by index),
//! `target_node_type`, `hidden`, `out_dim`, `layers`, `dropout`, `num_bases` (`none` or a
//! count) and `dtype`. Tensors: the parameters by their names (crate docs of
//! [`super::HeteroModel`]), and `embedding.{type}` (`[nodes, width]`, f32) for each type that
//! learnt its input.

use std::collections::HashMap;
use std::path::Path;

use graphloom_tensor::{DType, Tensor};

use super::model::{HeteroModel, HeteroModelConfig, RelationSpec, RelationalKind};
use crate::model::Param;
use crate::model_file::FORMAT_VERSION;
use crate::tensor_file::{self, TensorFile};
use crate::Result;

/// A trained relational model: configuration, parameters and each featureless type's learnt
/// input rows.
pub struct HeteroModelFile {
    /// The configuration.
    pub config: HeteroModelConfig,
    /// The parameters, in the model's order.
    pub params: Vec<Param>,
    /// Per type, its learnt input rows (`None` for a type with features).
    pub embeddings: Vec<Option<Tensor>>,
}

/// The tensor name of type `name`'s learnt input rows.
fn embedding_name(name: &str) -> String {
    format!("embedding.{name}")
}

/// Whether the model file at `path` holds a relational model (its `arch` is `rgcn` or
/// `rsage`); `false` for any other file, which the homogeneous reader then reads and judges.
pub fn is_hetero_model(path: &Path) -> bool {
    TensorFile::read(path)
        .ok()
        .and_then(|f| f.metadata.get("arch").cloned())
        .is_some_and(|a| a == "rgcn" || a == "rsage")
}

impl HeteroModelFile {
    /// Writes the file atomically (a temporary file renamed into place).
    pub fn save(&self, path: &Path) -> Result<()> {
        let c = &self.config;
        let relations: Vec<(String, usize, usize)> = c
            .relations
            .iter()
            .map(|r| (r.name.clone(), r.src_type, r.dst_type))
            .collect();
        let json = |v: serde_json::Value| v.to_string();
        let metadata: HashMap<String, String> = [
            ("format", "graphloom-model".to_string()),
            ("format_version", FORMAT_VERSION.to_string()),
            ("arch", c.kind.name().to_string()),
            ("task", "node".to_string()),
            ("node_types", json(serde_json::json!(c.types))),
            ("in_dims", json(serde_json::json!(c.in_dims))),
            ("relations", json(serde_json::json!(relations))),
            ("target_node_type", c.types[c.target].clone()),
            ("hidden", c.hidden.to_string()),
            ("out_dim", c.out_dim.to_string()),
            ("layers", c.layers.to_string()),
            ("dropout", c.dropout.to_string()),
            (
                "num_bases",
                c.num_bases.map_or("none".into(), |b| b.to_string()),
            ),
            ("dtype", c.dtype.name().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut tensors: Vec<(String, Tensor)> = self
            .params
            .iter()
            .map(|p| (p.name.clone(), p.value.clone()))
            .collect();
        for (t, e) in self.embeddings.iter().enumerate() {
            if let Some(rows) = e {
                tensors.push((embedding_name(&c.types[t]), rows.cast(DType::F32)?));
            }
        }
        tensor_file::write(path, &tensors, metadata)
    }

    /// Reads a relational model file, checking its version, its schema, and that every
    /// parameter the configuration implies is there with its shape and finite.
    pub fn load(path: &Path) -> Result<HeteroModelFile> {
        let file = TensorFile::read(path)?;
        if file.metadata.get("format").map(String::as_str) != Some("graphloom-model") {
            return Err(file.error("not a GraphLoom model file"));
        }
        let version = file.meta("format_version")?;
        if version != FORMAT_VERSION.to_string() {
            return Err(file.error(format!(
                "format version {version}; this build reads version {FORMAT_VERSION}"
            )));
        }
        let kind = match file.meta("arch")? {
            "rgcn" => RelationalKind::Rgcn,
            "rsage" => RelationalKind::Rsage,
            other => {
                return Err(file.error(format!("metadata 'arch' is {other}, not rgcn or rsage")))
            }
        };
        let number = |key: &str| -> Result<usize> {
            file.meta(key)?
                .parse()
                .map_err(|_| file.error(format!("metadata '{key}' is not a count")))
        };
        let parse = |key: &str| -> Result<serde_json::Value> {
            serde_json::from_str(file.meta(key)?)
                .map_err(|e| file.error(format!("metadata '{key}': {e}")))
        };
        let types: Vec<String> = serde_json::from_value(parse("node_types")?)
            .map_err(|e| file.error(format!("metadata 'node_types': {e}")))?;
        let in_dims: Vec<usize> = serde_json::from_value(parse("in_dims")?)
            .map_err(|e| file.error(format!("metadata 'in_dims': {e}")))?;
        let relations: Vec<(String, usize, usize)> = serde_json::from_value(parse("relations")?)
            .map_err(|e| file.error(format!("metadata 'relations': {e}")))?;
        let target_name = file.meta("target_node_type")?;
        let target = types
            .iter()
            .position(|t| t == target_name)
            .ok_or_else(|| file.error(format!("target type {target_name:?} is not a node type")))?;
        let config = HeteroModelConfig {
            kind,
            in_dims,
            relations: relations
                .into_iter()
                .map(|(name, src_type, dst_type)| RelationSpec {
                    name,
                    src_type,
                    dst_type,
                })
                .collect(),
            target,
            hidden: number("hidden")?,
            out_dim: number("out_dim")?,
            layers: number("layers")?,
            dropout: file
                .meta("dropout")?
                .parse()
                .map_err(|e| file.error(format!("metadata 'dropout' {e}")))?,
            num_bases: match file.meta("num_bases")? {
                "none" => None,
                _ => Some(number("num_bases")?),
            },
            dtype: DType::parse(file.meta("dtype")?)
                .filter(|d| matches!(d, DType::F32 | DType::F64))
                .ok_or_else(|| file.error("metadata 'dtype' is not f32 or f64"))?,
            types,
        };
        // The model's own parameters (shapes checked against a freshly made model of the
        // configuration, which also checks the configuration).
        if config.layers > file.tensor_count() {
            return Err(file.error(format!(
                "metadata says {} layers; the file holds {} tensors",
                config.layers,
                file.tensor_count()
            )));
        }
        let made = HeteroModel::new(config.clone(), 0).map_err(|e| file.error(e.to_string()))?;
        let params = made
            .params
            .iter()
            .map(|p| {
                let value = file.tensor(&p.name)?;
                if value.shape() != p.value.shape() {
                    return Err(file.error(format!(
                        "tensor '{}' has shape {:?}, the model needs {:?}",
                        p.name,
                        value.shape(),
                        p.value.shape()
                    )));
                }
                finite(&file, &p.name, &value)?;
                Ok(Param {
                    name: p.name.clone(),
                    value,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let embeddings = config
            .types
            .iter()
            .enumerate()
            .map(|(t, name)| {
                let key = embedding_name(name);
                if !file.has(&key) {
                    return Ok(None);
                }
                let rows = file.tensor(&key)?;
                if rows.shape().len() != 2 || rows.shape()[1] != config.in_dims[t] {
                    return Err(file.error(format!(
                        "tensor '{key}' has shape {:?}, type {name} reads {} columns",
                        rows.shape(),
                        config.in_dims[t]
                    )));
                }
                finite(&file, &key, &rows)?;
                Ok(Some(rows))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(HeteroModelFile {
            config,
            params,
            embeddings,
        })
    }
}

/// Refuses a tensor with a value that is not finite, naming it.
fn finite(file: &TensorFile, name: &str, t: &Tensor) -> Result<()> {
    if t.to_vec_f64().iter().any(|v| !v.is_finite()) {
        return Err(file.error(format!("tensor '{name}' holds a value that is not finite")));
    }
    Ok(())
}
