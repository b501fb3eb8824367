//! Inference with dropout off, which evaluation during training and `predict`/`embed` after
//! it share: [`infer`], one forward pass over a graph value (over the whole graph, exact
//! full-neighbour inference), and [`infer_layerwise`], exact full-neighbour inference layer by
//! layer, in chunks of nodes under a memory budget, for graphs whose every node's input rows
//! (or one layer's output for every node) do not fit in memory at once.
//!
//! Layer `l` runs over all nodes one chunk of destinations at a time: the chunk's in-edges
//! form a block (the chunk first, then its other in-neighbours), whose input rows are
//! gathered from the previous layer's output (the features for the first layer). Each
//! layer's output for every node is kept in memory when it fits in half the budget, else in
//! a scratch file mapped from the given folder and removed afterwards. GCN's normalisation
//! uses every node's degree in the whole graph, so the result is the whole-graph forward
//! pass's, up to the order of additions.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use graphloom_graph::sample::{Sampler, SamplerKind};
use graphloom_graph::{GraphData, NodeId};
use graphloom_store::RowSource;
use graphloom_tensor::{DType, Tape, Tensor, Var};

use crate::kernels::aggregate::GcnNorm;
use crate::layers::Aggregation;
use crate::model::{GraphInput, LayerGraph, Mode, Model};
use crate::{Error, Result};

/// What inference computes for every node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Log-probabilities of the classes.
    LogProbabilities,
    /// The output of the first `k` layers (node embeddings; for the last layer, the class
    /// scores before the softmax).
    Layer(usize),
}

impl Output {
    /// How many layers the output runs through, for a model of `layers`.
    fn layers(self, layers: usize) -> Result<usize> {
        match self {
            Output::LogProbabilities => Ok(layers),
            Output::Layer(k) if (1..=layers).contains(&k) => Ok(k),
            Output::Layer(k) => Err(Error::InvalidSetting {
                setting: "layer",
                reason: format!("{k} of a model of {layers} layers: give 1..={layers}"),
            }),
        }
    }
}

/// Inference over the rows of `x` and `graph` with parameters `values` and dropout off, in one
/// forward pass: `output` for every output row.
pub fn infer(
    model: &Model,
    x: &Var,
    graph: GraphInput<'_>,
    values: &[Tensor],
    output: Output,
) -> Result<Tensor> {
    let mut tape = Tape::no_grad();
    let vars: Vec<Var> = values.iter().map(|v| Var::constant(v.clone())).collect();
    let layers = output.layers(model.num_layers())?;
    let mut out = model.forward_layers(&mut tape, x, &vars, graph, Mode::inference(), 0..layers)?;
    if output == Output::LogProbabilities {
        out = Model::log_probabilities(&mut tape, &out)?;
    }
    Ok(out.value().clone())
}

/// The memory and scratch space of layer-wise inference.
#[derive(Clone, Debug)]
pub struct LayerwiseConfig {
    /// Bytes the chunks' work and the layer outputs held in memory may take.
    pub memory_bytes: usize,
    /// Where a layer output larger than half of `memory_bytes` goes, as a scratch file.
    pub scratch_dir: PathBuf,
}

/// One row per node of a layer's output: in memory, or in a mapped scratch file (removed
/// when this is dropped).
pub struct LayerRows {
    chunks: usize,
    rows: usize,
    width: usize,
    dtype: DType,
    store: RowStore,
}

enum RowStore {
    Memory(Vec<u8>),
    File {
        /// Declared before `map` so that the range is unnamed before it is unmapped.
        _name: graphloom_io::FaultName,
        map: memmap2::MmapMut,
        path: PathBuf,
    },
}

impl Drop for RowStore {
    fn drop(&mut self) {
        if let RowStore::File { path, .. } = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl LayerRows {
    /// Room for `rows` rows of `width` values of `dtype`: in memory within `memory_bytes`,
    /// else a scratch file in `scratch_dir`.
    fn new(
        rows: usize,
        width: usize,
        dtype: DType,
        memory_bytes: usize,
        scratch_dir: &Path,
    ) -> Result<LayerRows> {
        let bytes = rows
            .checked_mul(width)
            .and_then(|n| n.checked_mul(dtype.size_in_bytes()))
            .ok_or_else(|| Error::InvalidSetting {
                setting: "inference",
                reason: format!("{rows} x {width} outputs overflow"),
            })?;
        let store = if bytes <= memory_bytes {
            RowStore::Memory(vec![0; bytes])
        } else {
            // Scratch files of killed runs are removed first; this run's are removed on drop.
            graphloom_io::remove_abandoned(scratch_dir, SCRATCH_PREFIX);
            let path = scratch_dir.join(format!(
                "{SCRATCH_PREFIX}{}-{}.bin",
                std::process::id(),
                SCRATCH_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ));
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .map_err(|e| graphloom_io::Error::io(&path, e))
                .map_err(graphloom_graph::Error::from)?;
            // Every block is claimed before the map is written: a full disk is an error now,
            // not a SIGBUS at the first page it cannot hold.
            let mapped = graphloom_io::reserve(&file, &path, bytes.max(1) as u64).and_then(|()| {
                // SAFETY: the scratch file is this process's own, named uniquely and removed
                // on drop.
                unsafe { memmap2::MmapMut::map_mut(&file) }
                    .map_err(|e| graphloom_io::Error::io(&path, e))
            });
            match mapped {
                Ok(map) => RowStore::File {
                    _name: graphloom_io::FaultName::register(&map, &path),
                    map,
                    path,
                },
                Err(e) => {
                    let _ = std::fs::remove_file(&path);
                    return Err(graphloom_graph::Error::from(e).into());
                }
            }
        };
        Ok(LayerRows {
            chunks: 0,
            rows,
            width,
            dtype,
            store,
        })
    }

    fn bytes(&self) -> &[u8] {
        match &self.store {
            RowStore::Memory(v) => v,
            RowStore::File { map, .. } => map,
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.store {
            RowStore::Memory(v) => v,
            RowStore::File { map, .. } => map,
        }
    }

    fn row_bytes(&self) -> usize {
        self.width * self.dtype.size_in_bytes()
    }

    /// The chunks of nodes the layer was computed in.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// Whether the rows live in a scratch file.
    pub fn in_file(&self) -> bool {
        matches!(self.store, RowStore::File { .. })
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Rows `ids` as a `[ids.len(), width]` tensor.
    pub fn gather(&self, ids: &[usize]) -> Result<Tensor> {
        select_rows(self.bytes(), self.rows, self.width, self.dtype, ids)
    }

    /// Every row as one tensor.
    pub fn to_tensor(&self) -> Result<Tensor> {
        let mut t = Tensor::zeros(&[self.rows, self.width], self.dtype);
        t.as_mut_bytes().copy_from_slice(self.bytes());
        Ok(t)
    }
}

/// Rows `ids` of a 2-D tensor, as a tensor.
pub(crate) fn select(t: &Tensor, ids: &[usize]) -> Result<Tensor> {
    let (rows, width) = t.dims2();
    select_rows(t.as_bytes(), rows, width, t.dtype(), ids)
}

/// Rows `ids` of `rows x width` values of `dtype` laid out in `bytes`, as a tensor.
fn select_rows(
    bytes: &[u8],
    rows: usize,
    width: usize,
    dtype: DType,
    ids: &[usize],
) -> Result<Tensor> {
    let rb = width * dtype.size_in_bytes();
    let mut out = Tensor::zeros(&[ids.len(), width], dtype);
    for (dst, &v) in out.as_mut_bytes().chunks_exact_mut(rb.max(1)).zip(ids) {
        if v >= rows {
            return Err(Error::InvalidSetting {
                setting: "inference rows",
                reason: format!("row {v} of {rows}"),
            });
        }
        dst.copy_from_slice(&bytes[v * rb..(v + 1) * rb]);
    }
    Ok(out)
}

static SCRATCH_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The start of a scratch file's name, followed by the process id and a counter.
const SCRATCH_PREFIX: &str = ".graphloom-inference-";

/// Where layer-wise inference reads the first layer's input rows.
pub enum InferenceInput<'a> {
    /// A feature table.
    Rows(&'a dyn RowSource),
    /// A tensor with one row per node (a learnt input embedding, say).
    Tensor(&'a Tensor),
}

impl InferenceInput<'_> {
    fn gather(&self, ids: &[i64]) -> Result<Tensor> {
        Ok(match self {
            InferenceInput::Rows(r) => r.gather(ids)?,
            InferenceInput::Tensor(t) => {
                let (rows, width) = t.dims2();
                let ids: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
                select_rows(t.as_bytes(), rows, width, t.dtype(), &ids)?
            }
        })
    }
}

/// Why layer-wise inference refuses a model with batch normalisation: each chunk of rows
/// would be normalised by its own statistics, where the model takes every node's.
pub const LAYERWISE_BATCH_NORM: &str = "layer-wise inference normalises each chunk of nodes \
    by its own statistics, and a model with batch normalisation takes every node's";

/// Exact inference of `model` with parameters `params` over every node of `data`, layer by
/// layer in chunks of nodes (see the module docs): `output` for every node, one row per node.
/// A model with batch normalisation is refused ([`LAYERWISE_BATCH_NORM`]).
pub fn infer_layerwise(
    model: &Model,
    data: GraphData<'_>,
    input: InferenceInput<'_>,
    params: &[Tensor],
    output: Output,
    cfg: &LayerwiseConfig,
) -> Result<LayerRows> {
    if model.cfg.batch_norm {
        return Err(Error::InvalidSetting {
            setting: "inference_memory_gib",
            reason: format!("{LAYERWISE_BATCH_NORM}: leave it out (one pass over the graph)"),
        });
    }
    let n = data.num_nodes();
    let layers = output.layers(model.num_layers())?;
    let cfg_model = &model.cfg;
    let aggregation = cfg_model.arch.aggregation();
    let norm = (aggregation == Aggregation::Gcn).then(|| Arc::new(whole_graph_gcn_norm(data)));
    let vars: Vec<Var> = params.iter().map(|v| Var::constant(v.clone())).collect();
    let mut sampler = Sampler::new(n);
    let source = data.source();
    // Half the budget for the layer outputs held in memory, half for a chunk's work.
    let (keep, work) = (cfg.memory_bytes / 2, cfg.memory_bytes / 2);
    let mut previous: Option<LayerRows> = None;
    for l in 0..layers {
        let in_width = match &previous {
            Some(p) => p.width,
            None => cfg_model.in_dim,
        };
        let last = l + 1 == model.num_layers();
        let out_width = model.layer_width(l);
        let out_dtype =
            if last && output == Output::LogProbabilities && cfg_model.dtype == DType::BF16 {
                DType::F32
            } else {
                cfg_model.dtype
            };
        let mut out = LayerRows::new(n, out_width, out_dtype, keep, &cfg.scratch_dir)?;
        // A chunk's block holds its destinations' in-edges and their sources' rows, a few
        // copies of each while the layer runs.
        let per_node = (1.0 + data.num_edges() as f64 / n.max(1) as f64)
            * (in_width + out_width) as f64
            * cfg_model.dtype.size_in_bytes() as f64
            * 4.0;
        let chunk = ((work as f64 / per_node) as usize).clamp(1, n.max(1));
        let rb = out.row_bytes();
        for start in (0..n).step_by(chunk) {
            let end = (start + chunk).min(n);
            let seeds: Vec<NodeId> = (start as NodeId..end as NodeId).collect();
            let blocks = sampler.sample(&source, &seeds, &[-1], SamplerKind::Uniform, 0, 0)?;
            let block = &blocks[0];
            let rows: Vec<usize> = block.src_nodes.iter().map(|&v| v as usize).collect();
            let mut graph =
                LayerGraph::new(block, cfg_model.arch, data.edge_features, cfg_model.dtype)?;
            let x = match &previous {
                Some(p) => p.gather(&rows)?,
                None => input.gather(&graph.src_ids)?.cast(cfg_model.dtype)?,
            };
            if let Some(norm) = &norm {
                graph.gcn_norm = Some(Arc::new(norm.select(&rows)));
            }
            let mut tape = Tape::no_grad();
            let mut h = model.forward_layers(
                &mut tape,
                &Var::constant(x),
                &vars,
                GraphInput::Blocks(std::slice::from_ref(&graph)),
                Mode::inference(),
                l..l + 1,
            )?;
            if last && output == Output::LogProbabilities {
                h = Model::log_probabilities(&mut tape, &h)?;
            }
            let h = h.value().cast(out_dtype)?;
            out.bytes_mut()[start * rb..end * rb].copy_from_slice(h.as_bytes());
            out.chunks += 1;
        }
        previous = Some(out);
    }
    Ok(previous.expect("at least one layer"))
}

/// GCN's normalisation of every node of the whole graph (unweighted in-degrees).
fn whole_graph_gcn_norm(data: GraphData<'_>) -> GcnNorm {
    (0..data.num_nodes())
        .map(|v| GcnNorm::of_sampled(data, v as NodeId, -1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_file_without_room_is_an_error_and_is_removed() {
        let dir = std::env::temp_dir().join(format!("graphloom-scratch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // A scratch file that a killed run left: its process is gone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        std::fs::write(dir.join(format!("{SCRATCH_PREFIX}{dead}-0.bin")), b"x").unwrap();
        // 2^28 rows of 2^20 f32: 1 PiB, more than the file system holds.
        let err = LayerRows::new(1 << 28, 1 << 20, DType::F32, 0, &dir)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("no room for 1.0 PiB"), "{err}");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert!(left.is_empty(), "{left:?}");
        // Room that exists is claimed, and freed on drop.
        let rows = LayerRows::new(1000, 16, DType::F32, 0, &dir).unwrap();
        assert!(rows.in_file());
        drop(rows);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
