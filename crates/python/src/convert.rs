//! A dataset directory written from arrays in memory (a PyG `Data`'s tensors, as numpy views
//! the Python half made without a copy), by `graphloom_convert::arrays`.

use std::path::PathBuf;

use graphloom_convert::arrays::{self, ArraysInput, FeatureRows};
use pyo3::prelude::*;

use crate::buffers::Held;
use crate::errors::{self, invalid};

/// Writes the dataset directory `path` from `edge_index` (int64 `[2, E]`), features `x` (`[N,
/// F]`, f32, f64 or bf16 bits as uint16, `x_dtype` saying which), labels `y` (int64, -1 for
/// none), the three splits' node ids (int64, named `split_names` in errors) and `edge_weight`
/// (f32 per edge). Returns the number of edges written.
#[pyfunction]
#[pyo3(signature = (path, name, num_nodes, edge_index, x, x_dtype, y, splits, split_names,
                    edge_weight))]
pub(crate) fn write_arrays(
    py: Python<'_>,
    path: PathBuf,
    name: &str,
    num_nodes: usize,
    edge_index: &Bound<'_, PyAny>,
    x: Option<&Bound<'_, PyAny>>,
    x_dtype: &str,
    y: Option<&Bound<'_, PyAny>>,
    splits: [Bound<'_, PyAny>; 3],
    split_names: [String; 3],
    edge_weight: Option<&Bound<'_, PyAny>>,
) -> PyResult<usize> {
    let edges = Held::<i64>::new(edge_index, "edge_index")?;
    let labels = y.map(|y| Held::<i64>::new(y, "y")).transpose()?;
    let weights = edge_weight
        .map(|w| Held::<f32>::new(w, "edge_weight"))
        .transpose()?;
    let split_ids = [
        Held::<i64>::new(&splits[0], &split_names[0])?,
        Held::<i64>::new(&splits[1], &split_names[1])?,
        Held::<i64>::new(&splits[2], &split_names[2])?,
    ];
    // One of the three is held, by the element type `x_dtype` names.
    let (mut x32, mut x64, mut x16) = (None, None, None);
    let mut dim = 0;
    if let Some(x) = x {
        dim = x.getattr("shape")?.get_item(1)?.extract::<usize>()?;
        match x_dtype {
            "f32" => x32 = Some(Held::<f32>::new(x, "x")?),
            "f64" => x64 = Some(Held::<f64>::new(x, "x")?),
            "bf16" => x16 = Some(Held::<u16>::new(x, "x")?),
            other => {
                return Err(invalid(format!(
                    "x: dtype {other}; features are float32, float64 or bfloat16"
                )))
            }
        }
    }
    let features = match (&x32, &x64, &x16) {
        (Some(h), _, _) => Some((FeatureRows::F32(h.slice()), dim)),
        (_, Some(h), _) => Some((FeatureRows::F64(h.slice()), dim)),
        (_, _, Some(h)) => Some((FeatureRows::Bf16(h.slice()), dim)),
        _ => None,
    };
    let input = ArraysInput {
        name,
        num_nodes,
        edge_index: edges.slice(),
        features,
        labels: labels.as_ref().map(|l| l.slice()),
        splits: [
            split_ids[0].slice(),
            split_ids[1].slice(),
            split_ids[2].slice(),
        ],
        split_names: [&split_names[0], &split_names[1], &split_names[2]],
        edge_weight: weights.as_ref().map(|w| w.slice()),
    };
    let buffer = graphloom_convert::default_buffer_bytes();
    let arrays = ["edge_index", "x", "y", "edge_weight"];
    py.detach(|| arrays::write(&input, &path, buffer, &|_, _, _| {}))
        .map(|meta| meta.num_edges)
        .map_err(|e| match &e {
            // A value of the caller's arrays: an invalid argument, named as the Data names it.
            graphloom_graph::Error::Invalid { path, .. }
                if path
                    .to_str()
                    .is_some_and(|p| arrays.contains(&p) || split_names.iter().any(|n| n == p)) =>
            {
                invalid(e.to_string())
            }
            _ => errors::raise(e),
        })
}

/// Removes the entries of `dir` named `{prefix}{pid}-...` whose process `pid` no longer runs
/// (graphloom_io's sweep of what killed runs left behind), for the folders the package makes.
#[pyfunction]
pub(crate) fn remove_abandoned(dir: PathBuf, prefix: &str) {
    graphloom_io::remove_abandoned(&dir, prefix);
}
