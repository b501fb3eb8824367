//! Exact full-neighbour inference of a [`HeteroModel`], layer by layer in chunks of destination
//! nodes, so that no pass holds the whole graph's aggregations or a copy of every input table.
//!
//! Layer `l` runs for each type it outputs, [`CHUNK_NODES`] nodes at a time: the chunk's
//! in-edges of every relation form a one-hop block (every neighbour), whose input rows are read
//! from the previous layer's output for every node (from the feature and embedding tables for
//! the first layer). Each layer's output for every node of the types the next layer reads is
//! kept in memory: `[nodes, hidden]`. The result is the whole-graph pass's, up to the order of
//! additions.

use graphloom_graph::sample::HeteroSampler;
use graphloom_graph::{HeteroGraph, NodeId};
use graphloom_tensor::{DType, Tape, Tensor, Var};

use super::graph::HeteroLayerGraph;
use super::model::{HeteroModel, RelationSpec};
use super::workload::{sample_blocks, TypeInput};
use crate::inference::select;
use crate::model::Mode;
use crate::train::predicted_classes;
use crate::Result;

/// Destination nodes per chunk: their blocks of every neighbour stay small beside the layer's
/// output.
pub const CHUNK_NODES: usize = 4096;

/// Where layer-wise inference reads a layer's input rows.
enum Rows<'a> {
    /// The first layer's: the type's table (a collective gather for an embedding).
    Table(&'a mut TypeInput),
    /// A later layer's: the previous layer's output for every node of the type.
    Output(&'a Tensor),
    /// A type the layer does not read.
    None,
}

/// The class predicted for every node of the target type with parameters `params`, dropout
/// off, in chunks of `chunk_nodes` destinations ([`CHUNK_NODES`] in training), computed on
/// this worker when `compute` (a worker that does not compute takes part in the tables'
/// collective gathers with no rows, as many times as the computing one): the argmax of each
/// row's log-probabilities, taken chunk by chunk, so the pass never holds every node's class
/// scores. Returns `None` where it does not compute.
#[allow(clippy::too_many_arguments)]
pub(crate) fn infer_layerwise(
    model: &HeteroModel,
    graph: &HeteroGraph,
    relations: &[RelationSpec],
    inputs: &mut [TypeInput],
    params: &[Tensor],
    sampler: &mut HeteroSampler,
    chunk_nodes: usize,
    compute: bool,
) -> Result<Option<Vec<i64>>> {
    let outputs = layer_outputs(
        model,
        graph,
        relations,
        inputs,
        params,
        sampler,
        chunk_nodes,
        compute,
        Upto::Classes,
    )?;
    let Some(classes) = outputs.and_then(|mut o| o.swap_remove(model.cfg.target)) else {
        return Ok(None);
    };
    Ok(Some(classes.as_slice::<i64>()?.to_vec()))
}

/// How far layer-wise inference goes.
#[derive(Clone, Copy)]
pub(super) enum Upto {
    /// The first this many layers' outputs (the last layer's: class scores).
    Layers(usize),
    /// Every layer, the class scores turned into log-probabilities chunk by chunk (a row's
    /// log-softmax is its own), so that the pass never holds both.
    LogProbabilities,
    /// Every layer, each node's predicted class (the argmax of its log-probabilities) in
    /// place of its scores: an `[n, 1]` i64 tensor.
    Classes,
}

/// The rows' log-softmax: class scores as log-probabilities.
fn log_softmax(scores: Tensor) -> Result<Tensor> {
    let mut tape = Tape::no_grad();
    let logp = crate::Model::log_probabilities(&mut tape, &Var::constant(scores))?;
    Ok(logp.value().clone())
}

/// The outputs of the model's layers `upto` asks for, per type (`None` for a type the last of
/// them does not compute: a layer computes the types that lead to the target), as
/// [`infer_layerwise`] computes them.
#[allow(clippy::too_many_arguments)]
pub(super) fn layer_outputs(
    model: &HeteroModel,
    graph: &HeteroGraph,
    relations: &[RelationSpec],
    inputs: &mut [TypeInput],
    params: &[Tensor],
    sampler: &mut HeteroSampler,
    chunk_nodes: usize,
    compute: bool,
    upto: Upto,
) -> Result<Option<Vec<Option<Tensor>>>> {
    let chunk_nodes = chunk_nodes.max(1);
    let layers = match upto {
        Upto::Layers(layers) => layers,
        Upto::LogProbabilities | Upto::Classes => model.cfg.layers,
    };
    let cfg = &model.cfg;
    let vars: Vec<Var> = params.iter().map(|p| Var::constant(p.clone())).collect();
    let every = vec![vec![-1i64; relations.len()]];
    let mut previous: Vec<Option<Tensor>> = vec![None; cfg.types.len()];
    for l in 0..layers.min(cfg.layers) {
        let outputs = cfg.output_types(l);
        let mut current: Vec<Option<Tensor>> = vec![None; cfg.types.len()];
        for t in (0..cfg.types.len()).filter(|&t| outputs[t]) {
            let n = graph.type_sizes[t];
            // Each chunk's rows are copied in as they come: the layer holds one copy of its
            // output, never the chunks beside it.
            let last = l + 1 == cfg.layers;
            let (width, dtype) = match upto {
                Upto::Classes if last => (1, DType::I64),
                _ => (cfg.width_out(l), cfg.dtype),
            };
            let mut rows = Tensor::zeros(&[if compute { n } else { 0 }, width], dtype);
            for start in (0..n).step_by(chunk_nodes) {
                if !compute {
                    if l == 0 {
                        take_part(inputs)?;
                    }
                    continue;
                }
                let chunk: Vec<NodeId> = (start..(start + chunk_nodes).min(n))
                    .map(|v| v as NodeId)
                    .collect();
                let block = sample_blocks(graph, sampler, t, &chunk, &every, 0, 0)?
                    .pop()
                    .expect("one hop");
                let layer_graph = HeteroLayerGraph::from_block(relations, &block)?;
                let mut tape = Tape::no_grad();
                let mut h = Vec::with_capacity(cfg.types.len());
                for (s, input) in inputs.iter_mut().enumerate() {
                    let source = match (l, &previous[s]) {
                        (0, _) => Rows::Table(input),
                        (_, Some(out)) => Rows::Output(out),
                        (_, None) => Rows::None,
                    };
                    let ids = &block.src_nodes[s];
                    h.push(read_rows(source, ids, cfg.dtype)?.map(Var::constant));
                }
                let mut only = vec![false; cfg.types.len()];
                only[t] = true;
                let out = model.layer(
                    &mut tape,
                    l,
                    &only,
                    &h,
                    &vars,
                    &layer_graph,
                    Mode::inference(),
                )?;
                let y = out[t].as_ref().expect("the type asked for").value();
                let made;
                let y = match upto {
                    Upto::LogProbabilities if last => {
                        made = log_softmax(y.clone())?;
                        &made
                    }
                    Upto::Classes if last => {
                        let classes = predicted_classes(&log_softmax(y.clone())?);
                        let classes: Vec<i64> = classes.into_iter().map(|c| c as i64).collect();
                        let k = classes.len();
                        made = Tensor::from_vec(classes, &[k, 1])?;
                        &made
                    }
                    _ => y,
                };
                let row_bytes = width * dtype.size_in_bytes();
                rows.as_mut_bytes()[start * row_bytes..][..y.as_bytes().len()]
                    .copy_from_slice(y.as_bytes());
            }
            if compute {
                current[t] = Some(rows);
            }
        }
        previous = current;
    }
    Ok(compute.then_some(previous))
}

/// The log-probabilities of every node of `graph`'s target type under `model`, its input
/// rows read from `inputs` (one table per type, of this process alone), layer by layer in
/// chunks of [`CHUNK_NODES`]: what `graphloom predict` computes.
pub fn log_probabilities(
    model: &HeteroModel,
    graph: &HeteroGraph,
    inputs: &mut [TypeInput],
) -> Result<Tensor> {
    let mut outputs = layers_upto(model, graph, inputs, Upto::LogProbabilities)?;
    Ok(outputs
        .swap_remove(model.cfg.target)
        .expect("the last layer computes the target type"))
}

/// The output of `model`'s first `layer` layers (from 1; the last gives the class scores
/// before the softmax) for every node of each type that layer computes (`None` for the others:
/// a layer computes the types that lead to the target), exact and layer by layer in chunks of
/// [`CHUNK_NODES`], the input rows read from `inputs`: what `graphloom embed` writes.
pub fn layer_embeddings(
    model: &HeteroModel,
    graph: &HeteroGraph,
    inputs: &mut [TypeInput],
    layer: usize,
) -> Result<Vec<Option<Tensor>>> {
    layers_upto(model, graph, inputs, Upto::Layers(layer))
}

/// What [`layer_outputs`] computes up to `upto` on this process alone, with the model's own
/// parameters.
fn layers_upto(
    model: &HeteroModel,
    graph: &HeteroGraph,
    inputs: &mut [TypeInput],
    upto: Upto,
) -> Result<Vec<Option<Tensor>>> {
    let params: Vec<Tensor> = model.params.iter().map(|p| p.value.clone()).collect();
    let relations = super::workload::relation_specs(graph);
    let mut sampler = HeteroSampler::new(&graph.type_sizes);
    let outputs = layer_outputs(
        model,
        graph,
        &relations,
        inputs,
        &params,
        &mut sampler,
        CHUNK_NODES,
        true,
        upto,
    )?;
    Ok(outputs.expect("computed on this worker"))
}

/// A worker's part, with no rows of its own, in the collective gathers of every table (one
/// chunk of the first layer, or one batch of sampled evaluation), in the order the others
/// gather them.
pub(super) fn take_part(inputs: &mut [TypeInput]) -> Result<()> {
    for input in inputs {
        match input {
            TypeInput::Features(table) => drop(table.gather(&[])?),
            TypeInput::Embedding(table, _) => drop(table.gather(&[])?),
        }
    }
    Ok(())
}

/// Rows `ids` of `source` in `dtype` (`None` for a type the layer does not read).
fn read_rows(
    source: Rows<'_>,
    ids: &[NodeId],
    dtype: graphloom_tensor::DType,
) -> Result<Option<Tensor>> {
    Ok(match source {
        Rows::Table(input) => {
            let ids: Vec<i64> = ids.iter().map(|&v| i64::from(v)).collect();
            let rows = match input {
                TypeInput::Features(table) => table.gather(&ids)?,
                TypeInput::Embedding(table, _) => table.gather(&ids)?,
            };
            Some(rows.cast(dtype)?)
        }
        Rows::Output(out) => {
            let ids: Vec<usize> = ids.iter().map(|&v| v as usize).collect();
            Some(select(out, &ids)?)
        }
        Rows::None => None,
    })
}
