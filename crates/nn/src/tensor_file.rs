//! Named tensors and string metadata in one safetensors file: the storage of model files and
//! training snapshots.

use std::collections::HashMap;
use std::path::Path;

use graphloom_tensor::{DType, Tensor};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

use crate::{Error, Result};

/// A format error naming `path`.
pub(crate) fn file_error(path: &Path, msg: impl Into<String>) -> Error {
    graphloom_graph::Error::format(path, msg).into()
}

/// Writes `tensors` (f32, f64 or i64) with `metadata` to `path` atomically.
pub(crate) fn write(
    path: &Path,
    tensors: &[(String, Tensor)],
    metadata: HashMap<String, String>,
) -> Result<()> {
    let views = tensors
        .iter()
        .map(|(name, t)| {
            let dtype = match t.dtype() {
                DType::F64 => Dtype::F64,
                DType::I64 => Dtype::I64,
                DType::F32 => Dtype::F32,
                other => {
                    return Err(file_error(
                        path,
                        format!("tensor '{name}' is {other}: store f32, f64 or i64"),
                    ))
                }
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

/// The contents of a file written by [`write`].
pub(crate) struct TensorFile {
    path: std::path::PathBuf,
    bytes: Vec<u8>,
    /// The metadata.
    pub(crate) metadata: HashMap<String, String>,
}

impl TensorFile {
    /// Reads `path`.
    pub(crate) fn read(path: &Path) -> Result<TensorFile> {
        let bytes = std::fs::read(path).map_err(|e| graphloom_graph::Error::io(path, e))?;
        let (_, header) = SafeTensors::read_metadata(&bytes)
            .map_err(|e| file_error(path, format!("not a safetensors file: {e}")))?;
        let metadata = header.metadata().clone().unwrap_or_default();
        Ok(TensorFile {
            path: path.to_path_buf(),
            bytes,
            metadata,
        })
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The file's size in bytes.
    pub(crate) fn size(&self) -> usize {
        self.bytes.len()
    }

    /// The number of tensors in the file.
    pub(crate) fn tensor_count(&self) -> usize {
        SafeTensors::read_metadata(&self.bytes).map_or(0, |(_, m)| m.tensors().len())
    }

    /// A format error naming the file.
    pub(crate) fn error(&self, msg: impl Into<String>) -> Error {
        file_error(&self.path, msg)
    }

    /// Metadata entry `key`.
    pub(crate) fn meta(&self, key: &str) -> Result<&str> {
        self.metadata
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| self.error(format!("metadata has no '{key}'")))
    }

    /// Whether tensor `name` is in the file.
    pub(crate) fn has(&self, name: &str) -> bool {
        SafeTensors::deserialize(&self.bytes).is_ok_and(|st| st.tensor(name).is_ok())
    }

    /// Tensor `name`.
    pub(crate) fn tensor(&self, name: &str) -> Result<Tensor> {
        let st = SafeTensors::deserialize(&self.bytes)
            .map_err(|e| self.error(format!("not a safetensors file: {e}")))?;
        let view = st
            .tensor(name)
            .map_err(|_| self.error(format!("has no tensor '{name}'")))?;
        let shape = view.shape().to_vec();
        let data = view.data();
        let t = match view.dtype() {
            Dtype::F32 => Tensor::from_vec(
                data.chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                    .collect::<Vec<f32>>(),
                &shape,
            ),
            Dtype::F64 => Tensor::from_vec(
                data.chunks_exact(8)
                    .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .collect::<Vec<f64>>(),
                &shape,
            ),
            Dtype::I64 => Tensor::from_vec(
                data.chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .collect::<Vec<i64>>(),
                &shape,
            ),
            other => {
                return Err(self.error(format!("tensor '{name}' is {other:?}, not F32, F64 or I64")))
            }
        };
        Ok(t?)
    }
}
