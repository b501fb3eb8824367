//! Inference with a saved relational model on a heterogeneous dataset: what `graphloom
//! predict` and `graphloom embed` compute, exact and layer by layer, after checking that the
//! model fits the dataset.

use std::sync::Arc;

use graphloom_graph::{HeteroDataset, HeteroGraph};
use graphloom_nn::hetero::{
    layer_embeddings, log_probabilities, relation_specs, HeteroModel, HeteroModelFile, TypeInput,
};
use graphloom_store::{Layout, Location, StoreSpec, StoreTensor};
use graphloom_tensor::DType;

use crate::{PlanError, Result};

/// The log-probabilities (f32) of the target type's nodes `nodes` (every node when `None`, in
/// order) of the heterogeneous dataset in `dir` under the relational model saved at `model`
/// (`graphloom train --save-model`): the dataset's node types, relations and input widths must
/// be the model's. Exact, layer by layer in chunks of nodes.
pub fn hetero_log_probabilities(
    model: &std::path::Path,
    dir: &std::path::Path,
    nodes: Option<&[i64]>,
) -> Result<graphloom_tensor::Tensor> {
    let (made, graph, mut inputs) = open_for_inference(model, dir)?;
    let logp = log_probabilities(&made, &graph, &mut inputs)?
        .cast(DType::F32)
        .map_err(graphloom_nn::Error::from)?;
    select_nodes(logp, nodes, &graph, graph.target)
}

/// The output of the first `layer` layers (from 1) of the relational model saved at `model`
/// for the nodes `nodes` (every node when `None`) of `node_type` (the target type when `None`)
/// of the heterogeneous dataset in `dir`: what `graphloom embed` writes. Exact, layer by layer
/// in chunks of nodes. A layer computes the types that lead to the target; another type is
/// refused, naming those it computes.
pub fn hetero_embeddings(
    model: &std::path::Path,
    dir: &std::path::Path,
    layer: usize,
    node_type: Option<&str>,
    nodes: Option<&[i64]>,
) -> Result<graphloom_tensor::Tensor> {
    let (made, graph, mut inputs) = open_for_inference(model, dir)?;
    let layers = made.cfg.layers;
    if layer == 0 || layer > layers {
        return Err(PlanError::invalid(
            "layer",
            format!("must be between 1 and {layers}, the model's layers, not {layer}"),
        ));
    }
    let t = match node_type {
        None => graph.target,
        Some(name) => graph.type_index(name).ok_or_else(|| {
            PlanError::invalid(
                "node_type",
                format!("{name} is not one of the node types {:?}", graph.types),
            )
        })?,
    };
    let computed = made.cfg.output_types(layer - 1);
    if !computed[t] {
        let names: Vec<&String> = graph
            .types
            .iter()
            .zip(&computed)
            .filter_map(|(name, &c)| c.then_some(name))
            .collect();
        return Err(PlanError::invalid(
            "node_type",
            format!(
                "{} is not computed at layer {layer}, which computes the types that lead to \
                 {} ({names:?})",
                graph.types[t], graph.types[graph.target]
            ),
        ));
    }
    let mut outputs = layer_embeddings(&made, &graph, &mut inputs, layer)?;
    let rows = outputs[t]
        .take()
        .expect("the layer computes the type")
        .cast(DType::F32)
        .map_err(graphloom_nn::Error::from)?;
    select_nodes(rows, nodes, &graph, t)
}

/// The relational model saved at `model`, checked against the heterogeneous dataset in `dir`
/// (its types, relations, target and classes), with the dataset's graph and each type's input
/// rows: its features, or the embedding the model learnt for it.
fn open_for_inference(
    model: &std::path::Path,
    dir: &std::path::Path,
) -> Result<(HeteroModel, HeteroGraph, Vec<TypeInput>)> {
    let file = HeteroModelFile::load(model)?;
    let graph = HeteroDataset::open(dir)?.load()?;
    let c = &file.config;
    let mismatch = |what: String| {
        PlanError::invalid(
            "model",
            format!("{} does not fit {}: {what}", model.display(), dir.display()),
        )
    };
    if c.types != graph.types || c.relations != relation_specs(&graph) {
        return Err(mismatch(format!(
            "it was trained on node types {:?} and relations {:?}, the dataset has {:?} and {:?}",
            c.types,
            c.relations.iter().map(|r| &r.name).collect::<Vec<_>>(),
            graph.types,
            graph.relations.iter().map(|r| &r.name).collect::<Vec<_>>()
        )));
    }
    if c.target != graph.target || c.out_dim != graph.meta.num_classes {
        return Err(mismatch(format!(
            "it classifies {} into {} classes, the dataset labels {} with {}",
            c.types[c.target], c.out_dim, graph.types[graph.target], graph.meta.num_classes
        )));
    }
    let comm = graphloom_comm::Local::single();
    let mut inputs = Vec::with_capacity(graph.types.len());
    for (t, name) in graph.types.iter().enumerate() {
        let rows = match (&graph.features[t], &file.embeddings[t]) {
            (Some(f), None) => f.read()?,
            (None, Some(e)) => e.clone(),
            (Some(_), Some(_)) => {
                return Err(mismatch(format!(
                    "type {name} has features, and the model learnt an embedding for it"
                )))
            }
            (None, None) => {
                return Err(mismatch(format!(
                    "type {name} has no features, and the model holds no embedding for it"
                )))
            }
        };
        if rows.shape() != [graph.type_sizes[t], c.in_dims[t]] {
            return Err(mismatch(format!(
                "type {name}'s inputs are {:?}, the model reads [{}, {}]",
                rows.shape(),
                graph.type_sizes[t],
                c.in_dims[t]
            )));
        }
        let spec = StoreSpec::new(
            rows.shape(),
            rows.dtype(),
            Layout::Continuous,
            Location::Host,
        );
        let mut table = StoreTensor::new(Arc::clone(&comm), spec)?;
        table.fill_from_whole(rows.as_bytes())?;
        inputs.push(TypeInput::Features(table));
    }
    let mut made = HeteroModel::new(c.clone(), 0)?;
    made.set_params(&file.params)?;
    Ok((made, graph, inputs))
}

/// Rows `nodes` of `rows` (every row when `None`), the nodes of type `t` of `graph`.
fn select_nodes(
    rows: graphloom_tensor::Tensor,
    nodes: Option<&[i64]>,
    graph: &HeteroGraph,
    t: usize,
) -> Result<graphloom_tensor::Tensor> {
    let Some(nodes) = nodes else {
        return Ok(rows);
    };
    let n = graph.type_sizes[t];
    if let Some(bad) = nodes.iter().find(|&&v| v < 0 || v as u64 >= n as u64) {
        return Err(PlanError::invalid(
            "nodes",
            format!(
                "holds node {bad}, not one of the {n} nodes of type {}",
                graph.types[t]
            ),
        ));
    }
    let (_, width) = rows.dims2();
    let data = rows.as_slice::<f32>().map_err(graphloom_nn::Error::from)?;
    let picked: Vec<f32> = nodes
        .iter()
        .flat_map(|&v| &data[v as usize * width..(v as usize + 1) * width])
        .copied()
        .collect();
    Ok(
        graphloom_tensor::Tensor::from_vec(picked, &[nodes.len(), width])
            .map_err(graphloom_nn::Error::from)?,
    )
}
