//! [`HeteroTraining`]: the workload that trains a [`HeteroModel`] on a heterogeneous graph,
//! full batch or on sampled batches of the target type's training nodes, each type's input
//! rows read from a feature table or a learnt embedding in the store.

use std::path::Path;
use std::sync::Arc;

use graphloom_comm::Communicator;
use graphloom_graph::sample::{CsrSource, HeteroBlock, HeteroSampler, RelationSource};
use graphloom_graph::{HeteroGraph, NodeId};
use graphloom_store::{Embedding, StoreTensor};
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::{DType, Tape, Tensor, Var};

use super::graph::HeteroLayerGraph;
use super::inference::{infer_layerwise, take_part, CHUNK_NODES};
use super::model::{HeteroModel, RelationSpec};
use crate::batches::rank_slice;
use crate::minibatch::evaluate::evaluated_subset;
use crate::minibatch::EVAL_EPOCH;
use crate::model::{Mode, Model, Param};
use crate::task::Task;
use crate::train::{correct_predictions, Evaluation, SplitCounts, Steps, Workload};
use crate::{Error, Result};

/// Where a node type's input rows come from.
// One per node type of a run: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum TypeInput {
    /// Fixed features, gathered per batch and cast to the model's dtype.
    Features(StoreTensor),
    /// A learnt embedding, trained by its sparse optimizer at the given learning rate.
    Embedding(Embedding, f32),
}

/// How the training nodes are batched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeteroBatching {
    /// One step per epoch over every training node and the whole graph.
    FullBatch,
    /// Batches of `batch_size` training nodes, each with blocks sampled with `fanouts[h][r]`
    /// neighbours of relation `r` at hop `h` (from the seeds outwards; `-1`: all).
    Sampled {
        /// Per hop, the fanout of each relation.
        fanouts: Vec<Vec<i64>>,
        /// Training nodes per batch.
        batch_size: usize,
    },
}

/// Trains a relational model on a heterogeneous graph: on one worker, or data parallel over the
/// workers of a job, each taking a slice of every global batch (sampled batching).
pub struct HeteroTraining<'a> {
    comm: Arc<dyn Communicator>,
    model: HeteroModel,
    graph: &'a HeteroGraph,
    relations: Vec<RelationSpec>,
    inputs: Vec<TypeInput>,
    batching: HeteroBatching,
    seed: u64,
    sampler: HeteroSampler,
    /// The whole graph's layer graph, built on first use (full-batch steps).
    whole: Option<HeteroLayerGraph>,
    /// Whether the loop keeps the learnt tables with the best parameters (for a saved model).
    keep_embeddings: bool,
    /// Train on the first this many batches of each epoch's order (sampled batching).
    batches_per_epoch: Option<usize>,
    /// Evaluate by sampled inference on these nodes of each split instead of exactly.
    sampled_eval: Option<SampledEval>,
    /// Called with (done, total) after each step of a sampled epoch.
    on_batch: Option<Box<dyn FnMut(usize, usize) + Send + 'a>>,
}

/// Sampled evaluation: a fixed subset of each split's nodes, classified on blocks sampled
/// with `fanouts` (per hop, per relation, as in training) from draws fixed for the run.
#[derive(Clone, Debug)]
struct SampledEval {
    nodes: [Vec<NodeId>; 3],
    fanouts: Vec<Vec<i64>>,
}

/// The relations of `graph` as a model sees them.
pub fn relation_specs(graph: &HeteroGraph) -> Vec<RelationSpec> {
    graph
        .relations
        .iter()
        .map(|r| RelationSpec {
            name: r.name.clone(),
            src_type: r.src_type,
            dst_type: r.dst_type,
        })
        .collect()
}

impl<'a> HeteroTraining<'a> {
    /// The workload of `model` over `graph` on this worker of `comm`, reading type `t`'s input
    /// rows from `inputs[t]` (tables of the job, made collectively).
    pub fn new(
        comm: Arc<dyn Communicator>,
        model: HeteroModel,
        graph: &'a HeteroGraph,
        inputs: Vec<TypeInput>,
        batching: HeteroBatching,
        seed: u64,
    ) -> Result<HeteroTraining<'a>> {
        let relations = relation_specs(graph);
        let mismatch = |detail: String| Error::Mismatch {
            what: "a relational model and its graph",
            detail,
        };
        if model.cfg.relations != relations || model.cfg.types != graph.types {
            return Err(mismatch(
                "the model was made for other node types or relations".into(),
            ));
        }
        if inputs.len() != graph.types.len() {
            return Err(mismatch(format!(
                "{} input tables for {} node types",
                inputs.len(),
                graph.types.len()
            )));
        }
        for (t, input) in inputs.iter().enumerate() {
            let shape = match input {
                TypeInput::Features(table) => table.shape().to_vec(),
                TypeInput::Embedding(table, _) => table.table().shape().to_vec(),
            };
            if shape != [graph.type_sizes[t], model.cfg.in_dims[t]] {
                return Err(mismatch(format!(
                    "type {}'s input table is {shape:?}, the model reads [{}, {}]",
                    graph.types[t], graph.type_sizes[t], model.cfg.in_dims[t]
                )));
            }
        }
        match &batching {
            HeteroBatching::Sampled { fanouts, .. } if fanouts.len() != model.cfg.layers => {
                return Err(mismatch(format!(
                    "{} hops of fanouts for {} layers",
                    fanouts.len(),
                    model.cfg.layers
                )));
            }
            HeteroBatching::FullBatch if comm.size() > 1 => {
                return Err(Error::InvalidSetting {
                    setting: "workers",
                    reason: "full-batch heterogeneous training runs on one worker: sample \
                             batches (fanouts) to train data parallel"
                        .into(),
                });
            }
            _ => {}
        }
        Ok(HeteroTraining {
            keep_embeddings: false,
            batches_per_epoch: None,
            sampled_eval: None,
            on_batch: None,
            comm,
            sampler: HeteroSampler::new(&graph.type_sizes),
            model,
            graph,
            relations,
            inputs,
            batching,
            seed,
            whole: None,
        })
    }

    /// The same workload keeping every learnt table with the best parameters, to save them
    /// with the model (a copy of the tables, taken at each better evaluation).
    pub fn keeping_embeddings(mut self) -> HeteroTraining<'a> {
        self.keep_embeddings = true;
        self
    }

    /// The same workload training on the first `batches` batches of each epoch's order of the
    /// training nodes (sampled batching), so evaluation and snapshots come that often.
    pub fn with_batches_per_epoch(mut self, batches: usize) -> HeteroTraining<'a> {
        self.batches_per_epoch = Some(batches.max(1));
        self
    }

    /// The same workload evaluating by sampled inference: at most `limit` nodes of each split,
    /// a subset drawn once from the run's seed, on blocks sampled with `fanouts[h][r]` (as in
    /// training), for graphs whose exact layer-by-layer pass holds too much or takes too long.
    /// The subsets are classified in batches of the training batch size.
    pub fn with_sampled_eval(mut self, limit: usize, fanouts: Vec<Vec<i64>>) -> HeteroTraining<'a> {
        let nodes = [0, 1, 2].map(|s| evaluated_subset(&self.graph.splits[s], limit, self.seed));
        self.sampled_eval = Some(SampledEval { nodes, fanouts });
        self
    }

    /// Calls `report(done, total)` after each step of a sampled epoch (for a progress bar).
    pub fn on_batch(&mut self, report: impl FnMut(usize, usize) + Send + 'a) {
        self.on_batch = Some(Box::new(report));
    }

    /// The model (its parameters are the initial ones; [`crate::train::fit`] returns the
    /// trained ones).
    pub fn model(&self) -> &HeteroModel {
        &self.model
    }

    /// The whole graph as every layer's graph.
    fn whole(&mut self) -> Result<&HeteroLayerGraph> {
        if self.whole.is_none() {
            let csrs: Vec<_> = self
                .graph
                .relations
                .iter()
                .map(|r| r.csr.to_csr())
                .collect();
            let csrs: Vec<_> = csrs.iter().collect();
            self.whole = Some(HeteroLayerGraph::whole(
                &self.relations,
                &csrs,
                &self.graph.type_sizes,
            )?);
        }
        Ok(self.whole.as_ref().expect("built above"))
    }

    /// Samples the blocks of one batch of `seeds` (target-type ids) at `epoch`.
    pub fn sample(
        &mut self,
        seeds: &[NodeId],
        fanouts: &[Vec<i64>],
        epoch: u64,
    ) -> Result<Vec<HeteroBlock>> {
        let target = self.graph.target;
        sample_blocks(
            self.graph,
            &mut self.sampler,
            target,
            seeds,
            fanouts,
            self.seed,
            epoch,
        )
    }

    /// The layer graphs of one batch of `seeds` sampled with `fanouts` at `epoch`, and the ids
    /// of every type's input rows (its first block's sources).
    fn sampled_batch(
        &mut self,
        seeds: &[NodeId],
        fanouts: &[Vec<i64>],
        epoch: u64,
    ) -> Result<(Vec<HeteroLayerGraph>, Vec<Vec<i64>>)> {
        let blocks = self.sample(seeds, fanouts, epoch)?;
        let graphs = (blocks.iter())
            .map(|b| HeteroLayerGraph::from_block(&self.relations, b))
            .collect::<Result<Vec<_>>>()?;
        let ids = (blocks[0].src_nodes.iter())
            .map(|nodes| nodes.iter().map(|&v| i64::from(v)).collect())
            .collect();
        Ok((graphs, ids))
    }

    /// The input rows `ids[t]` of every type, in the model's dtype, as leaves of `tape` (the
    /// learnt ones requiring gradients). A type no layer reads gets no rows.
    fn gather_inputs(&mut self, tape: &mut Tape, ids: &[Vec<i64>]) -> Result<Vec<Var>> {
        let dtype = self.model.cfg.dtype;
        let reads = self.model.cfg.output_types(0);
        let mut vars = Vec::with_capacity(ids.len());
        for (t, input) in self.inputs.iter_mut().enumerate() {
            let ids = if reads_input(&self.model, &reads, t) {
                &ids[t][..]
            } else {
                &[]
            };
            vars.push(match input {
                TypeInput::Features(table) => tape.leaf(table.gather(ids)?.cast(dtype)?, false),
                TypeInput::Embedding(table, _) => tape.leaf(table.gather(ids)?.cast(dtype)?, true),
            });
        }
        Ok(vars)
    }

    /// One training step over `graphs` whose inputs are the rows `ids[t]` and whose output
    /// rows `output_rows` are the nodes `seeds`, of a global batch of `global` nodes over the
    /// job's workers; returns this worker's share of the global batch's mean loss.
    fn step(
        &mut self,
        steps: &mut Steps<'_>,
        ids: &[Vec<i64>],
        graphs: &[&HeteroLayerGraph],
        seeds: &[usize],
        output_rows: Arc<[usize]>,
        global: usize,
    ) -> Result<f64> {
        let mut tape = Tape::new();
        let (vars, mode) = steps.begin(&mut tape);
        let inputs = self.gather_inputs(&mut tape, ids)?;
        let scores = self
            .model
            .forward(&mut tape, &inputs, &vars, graphs, mode)?;
        let logp = Model::log_probabilities(&mut tape, &scores)?;
        let labels: Arc<[i64]> = seeds.iter().map(|&v| self.graph.labels[v]).collect();
        // Normalised by the global batch: the workers' gradients sum to its gradient.
        let loss = ops::nll_loss(&mut tape, &logp, output_rows, labels, global as f64)?;
        drop((scores, logp));
        let learnt: Vec<&Var> = inputs.iter().filter(|v| v.requires_grad()).collect();
        let (loss, grads) = steps.finish(tape, &loss, vars, &learnt)?;
        let mut grads = grads.into_iter();
        for (t, input) in self.inputs.iter_mut().enumerate() {
            if let TypeInput::Embedding(table, lr) = input {
                let rows = inputs[t].value();
                let grad = grads
                    .next()
                    .flatten()
                    .unwrap_or_else(|| Tensor::zeros(rows.shape(), DType::F32))
                    .cast(DType::F32)?;
                let read = if rows.shape()[0] == 0 {
                    &[][..]
                } else {
                    &ids[t][..]
                };
                table.apply_gradients(read, &grad, *lr)?;
            }
        }
        Ok(loss)
    }

    /// The step of a worker whose slice of a global batch is empty: it still takes part in the
    /// gradient sum, and in every table's collective gather and learnt table's update.
    fn skip(&mut self, steps: &mut Steps<'_>) -> Result<()> {
        steps.skip()?;
        for input in &mut self.inputs {
            match input {
                TypeInput::Features(table) => drop(table.gather(&[])?),
                TypeInput::Embedding(table, lr) => {
                    table.gather(&[])?;
                    let empty = Tensor::zeros(&[0, table.dim()], DType::F32);
                    table.apply_gradients(&[], &empty, *lr)?;
                }
            }
        }
        Ok(())
    }
}

impl HeteroTraining<'_> {
    /// This worker's counts of sampled evaluation: each split's evaluated nodes in global
    /// batches of the training batch size, each worker classifying its slice (a worker with an
    /// empty slice still takes part in the tables' gathers).
    fn evaluate_sampled(&mut self, eval: &SampledEval, params: &[Tensor]) -> Result<SplitCounts> {
        let batch_size = match &self.batching {
            HeteroBatching::Sampled { batch_size, .. } => *batch_size,
            HeteroBatching::FullBatch => usize::MAX,
        };
        let (rank, ranks) = (self.comm.rank(), self.comm.size());
        let vars: Vec<Var> = params.iter().map(|p| Var::constant(p.clone())).collect();
        let mut counts = SplitCounts::default();
        for (split, nodes) in eval.nodes.iter().enumerate() {
            counts.total[split] = nodes.len() as f64;
            for global in nodes.chunks(batch_size.max(1)) {
                let seeds = rank_slice(global, rank, ranks);
                if seeds.is_empty() {
                    take_part(&mut self.inputs)?;
                    continue;
                }
                let (graphs, ids) = self.sampled_batch(seeds, &eval.fanouts, EVAL_EPOCH)?;
                let mut tape = Tape::no_grad();
                let inputs: Vec<Var> = self
                    .gather_inputs(&mut tape, &ids)?
                    .into_iter()
                    .map(|v| Var::constant(v.value().clone()))
                    .collect();
                let graphs: Vec<&HeteroLayerGraph> = graphs.iter().collect();
                let scores =
                    self.model
                        .forward(&mut tape, &inputs, &vars, &graphs, Mode::inference())?;
                let labels: Vec<i64> = seeds
                    .iter()
                    .map(|&v| self.graph.labels[v as usize])
                    .collect();
                counts.correct[split] += correct_predictions(scores.value(), &labels);
            }
        }
        Ok(counts)
    }
}

/// Samples the blocks of `graph` around `seeds` (ids of type `seed_type`) with `fanouts[h][r]`
/// neighbours of relation `r` at hop `h`, drawn from `seed` and `epoch`.
pub fn sample_blocks(
    graph: &HeteroGraph,
    sampler: &mut HeteroSampler,
    seed_type: usize,
    seeds: &[NodeId],
    fanouts: &[Vec<i64>],
    seed: u64,
    epoch: u64,
) -> Result<Vec<HeteroBlock>> {
    let sources: Vec<CsrSource<'_>> = graph.relations.iter().map(|r| r.csr.source()).collect();
    let relations: Vec<RelationSource<'_>> = graph
        .relations
        .iter()
        .zip(&sources)
        .map(|(r, s)| RelationSource {
            src_type: r.src_type,
            dst_type: r.dst_type,
            graph: s,
        })
        .collect();
    Ok(sampler.sample(&relations, seed_type, seeds, fanouts, seed, epoch)?)
}

/// Whether layer 0 reads type `t`'s input rows: as the source of a relation into a type it
/// outputs, or as a type it outputs (its own rows).
fn reads_input(model: &HeteroModel, outputs: &[bool], t: usize) -> bool {
    outputs[t]
        || model
            .cfg
            .relations
            .iter()
            .any(|r| r.src_type == t && outputs[r.dst_type])
}

impl Workload for HeteroTraining<'_> {
    fn params(&self) -> &[Param] {
        &self.model.params
    }

    fn set_params(&mut self, params: &[Param]) -> Result<()> {
        self.model.set_params(params)
    }

    fn model_fingerprint(&self) -> String {
        self.model.cfg.fingerprint()
    }

    fn gradient_comm(&self) -> Option<Arc<dyn Communicator>> {
        (self.comm.size() > 1).then(|| self.comm.clone())
    }

    /// Every featureless type's learnt rows, stacked in the types' order (they share one
    /// width), kept with the best parameters. Collective.
    fn input_embedding(&mut self) -> Result<Option<Tensor>> {
        if !self.keep_embeddings {
            return Ok(None);
        }
        let mut parts = Vec::new();
        for (t, input) in self.inputs.iter_mut().enumerate() {
            if let TypeInput::Embedding(table, _) = input {
                let ids: Vec<i64> = (0..self.graph.type_sizes[t] as i64).collect();
                parts.push(table.gather(&ids)?.cast(DType::F32)?);
            }
        }
        if parts.is_empty() {
            return Ok(None);
        }
        let width = parts[0].shape()[1];
        let rows: usize = parts.iter().map(|p| p.shape()[0]).sum();
        let mut bytes = Vec::with_capacity(rows * width * 4);
        for p in &parts {
            bytes.extend_from_slice(p.as_bytes());
        }
        let values: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok(Some(Tensor::from_vec(values, &[rows, width])?))
    }

    fn save_state(&mut self, dir: &Path) -> Result<()> {
        for (t, input) in self.inputs.iter().enumerate() {
            if let TypeInput::Embedding(table, _) = input {
                table.save(&dir.join(embedding_prefix(&self.graph.types[t])))?;
            }
        }
        Ok(())
    }

    fn restore_state(&mut self, dir: &Path, saved_workers: usize) -> Result<()> {
        for (t, input) in self.inputs.iter_mut().enumerate() {
            if let TypeInput::Embedding(table, _) = input {
                table.restore(
                    &dir.join(embedding_prefix(&self.graph.types[t])),
                    saved_workers,
                )?;
            }
        }
        Ok(())
    }

    fn train_epoch(&mut self, epoch: usize, steps: &mut Steps<'_>) -> Result<f64> {
        let train = self.graph.splits[0].clone();
        match self.batching.clone() {
            HeteroBatching::FullBatch => {
                let ids = every_node(&self.graph.type_sizes);
                self.whole()?;
                let whole = self.whole.take().expect("built above");
                let graphs = vec![&whole; self.model.cfg.layers];
                let rows: Arc<[usize]> = train.clone().into();
                let loss = self.step(steps, &ids, &graphs, &train, rows, train.len());
                self.whole = Some(whole);
                loss
            }
            HeteroBatching::Sampled {
                fanouts,
                batch_size,
            } => {
                let (rank, ranks) = (self.comm.rank(), self.comm.size());
                let mut epoch_batches = Task::Node.epoch(
                    &train,
                    self.seed,
                    epoch as u64,
                    Some(batch_size),
                    rank,
                    ranks,
                );
                if let Some(batches) = self.batches_per_epoch {
                    epoch_batches.truncate(batches);
                }
                let weights = epoch_batches.weights;
                let batches = epoch_batches.mine.len();
                let mine = epoch_batches.mine.into_iter().map(Ok);
                let total = steps.run_batches(mine, |steps, seeds, i| {
                    if let Some(report) = &mut self.on_batch {
                        report(i, batches);
                    }
                    let global = weights[i];
                    if seeds.is_empty() {
                        self.skip(steps)?;
                        return Ok(Some((0.0, global)));
                    }
                    let nodes: Vec<NodeId> = seeds.iter().map(|&v| v as NodeId).collect();
                    let (graphs, ids) = self.sampled_batch(&nodes, &fanouts, epoch as u64)?;
                    let rows: Arc<[usize]> = (0..seeds.len()).collect();
                    let graphs: Vec<&HeteroLayerGraph> = graphs.iter().collect();
                    let loss = self.step(steps, &ids, &graphs, &seeds, rows, global)?;
                    Ok(Some((loss * global as f64, global)))
                })?;
                total.mean_over(self.comm.as_ref())
            }
        }
    }

    fn evaluate(&mut self, params: &[Tensor]) -> Result<Evaluation> {
        if let Some(eval) = self.sampled_eval.clone() {
            let mut counts = self.evaluate_sampled(&eval, params)?;
            counts.sum_over(self.comm.as_ref())?;
            return Ok(Evaluation::Node(counts.accuracy()));
        }
        // Every worker takes part in the tables' gathers; the first computes the one pass over
        // the whole graph, and the job adds up its counts.
        let mut counts = SplitCounts::default();
        let classes = infer_layerwise(
            &self.model,
            self.graph,
            &self.relations,
            &mut self.inputs,
            params,
            &mut self.sampler,
            CHUNK_NODES,
            self.comm.rank() == 0,
        )?;
        if let Some(classes) = classes {
            let g = self.graph;
            let splits = [&g.splits[0][..], &g.splits[1][..], &g.splits[2][..]];
            counts = SplitCounts::of_classes(&classes, &g.labels, splits);
        }
        counts.sum_over(self.comm.as_ref())?;
        Ok(Evaluation::Node(counts.accuracy()))
    }

    fn fingerprint(&self) -> String {
        let g = self.graph;
        format!(
            "{} with {} nodes of types {:?} and {} edges of relations {:?}, {} training \
             nodes, {:?}",
            g.meta.name,
            g.type_sizes.iter().sum::<usize>(),
            g.types,
            g.relations.iter().map(|r| r.csr.num_edges()).sum::<usize>(),
            self.relations.iter().map(|r| &r.name).collect::<Vec<_>>(),
            g.splits[0].len(),
            self.batching
        )
    }
}

/// The file prefix of type `name`'s learnt embedding in a snapshot folder.
fn embedding_prefix(name: &str) -> String {
    format!("embedding.{name}")
}

/// The ids `0..n` of every node of each type.
fn every_node(type_sizes: &[usize]) -> Vec<Vec<i64>> {
    type_sizes
        .iter()
        .map(|&n| (0..n as i64).collect())
        .collect()
}
