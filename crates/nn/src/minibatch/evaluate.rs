//! Evaluation of the mini-batch workload: exact inference over every node (in one pass, or
//! layer by layer within a memory budget) and sampled inference on fixed subsets of the
//! splits, each summed over the workers.

use super::*;

/// `output` for every node: in memory, or (layer-wise inference) in a layer's rows.
pub(super) enum AllNodes {
    Tensor(Tensor),
    Rows(LayerRows),
}

impl AllNodes {
    /// Rows `ids`.
    pub(super) fn gather(&self, ids: &[usize]) -> Result<Tensor> {
        match self {
            AllNodes::Tensor(t) => crate::inference::select(t, ids),
            AllNodes::Rows(r) => r.gather(ids),
        }
    }

    /// Every row as one tensor.
    pub(super) fn into_tensor(self) -> Result<Tensor> {
        match self {
            AllNodes::Tensor(t) => Ok(t),
            AllNodes::Rows(r) => r.to_tensor(),
        }
    }
}

impl MiniBatch<'_> {
    /// `output` for every node by exact inference with parameters `params`: layer by layer
    /// within the budget when asked, else one pass over the whole graph (built, with every
    /// node's feature rows, on first use). Every worker computes every node.
    pub(super) fn infer_all(&mut self, params: &[Tensor], output: Output) -> Result<AllNodes> {
        let d = self.data;
        let dtype = self.model.cfg.dtype;
        if let Some(layerwise) = &self.mb.layerwise {
            let table;
            let input = match &mut self.inputs {
                Inputs::Features(f) => InferenceInput::Rows(*f),
                inputs @ Inputs::Embedding { .. } => {
                    table = inputs.all_rows(dtype)?;
                    InferenceInput::Tensor(&table)
                }
            };
            let rows = infer_layerwise(&self.model, d, input, params, output, layerwise)?;
            return Ok(AllNodes::Rows(rows));
        }
        if self.exact.is_none() {
            let edge_features = d.edge_features.cloned().map(Arc::new);
            let graph =
                NodeGraph::in_memory(self.model.cfg.arch, &d.to_csr(), None, edge_features)?;
            let fixed = match &mut self.inputs {
                Inputs::Features(_) => Some(Var::constant(self.inputs.all_rows(dtype)?)),
                Inputs::Embedding { .. } => None,
            };
            self.exact = Some((graph, fixed));
        }
        let embedded;
        let (graph, x) = match &self.exact {
            Some((graph, Some(x))) => (graph, x),
            Some((graph, None)) => {
                embedded = Var::constant(self.inputs.all_rows(dtype)?);
                (graph, &embedded)
            }
            None => return Err(Error::NoTrainingNodes),
        };
        let out = infer(&self.model, x, GraphInput::Nodes(graph), params, output)?;
        Ok(AllNodes::Tensor(out))
    }
}

impl EvaluationSource for MiniBatch<'_> {
    fn model(&self) -> &Model {
        &self.model
    }

    /// Correct predictions on the three splits with parameters `params` and dropout off,
    /// summed over the job's workers: sampled when asked, else exact.
    fn split_counts(&mut self, params: &[Tensor]) -> Result<SplitCounts> {
        if self.mb.sampled_eval.is_some() {
            return self.evaluate_sampled(params);
        }
        let d = self.data;
        let logp = self.infer_all(params, Output::LogProbabilities)?;
        // Every worker evaluates the whole graph: its counts are the job's. Only the splits'
        // rows are read back, since every node's may not fit in memory.
        let mut counts = SplitCounts::default();
        for (s, ids) in [d.train_idx, d.valid_idx, d.test_idx].iter().enumerate() {
            let labels: Vec<i64> = ids.iter().map(|&v| d.labels[v]).collect();
            counts.correct[s] = correct_predictions(&logp.gather(ids)?, &labels);
            counts.total[s] = ids.len() as f64;
        }
        Ok(counts)
    }

    /// Every node's last layer, by exact inference (in one pass, or layer by layer).
    fn embeddings(&mut self, params: &[Tensor]) -> Result<Tensor> {
        let layers = self.model.num_layers();
        self.infer_all(params, Output::Layer(layers))?.into_tensor()
    }
}

impl MiniBatch<'_> {
    /// Sampled inference on each split's evaluated nodes, in batches whose seeds the workers
    /// share out as they do in training, made ahead by the batch stream; the counts are
    /// summed over the workers. Collective.
    pub(super) fn evaluate_sampled(&mut self, params: &[Tensor]) -> Result<SplitCounts> {
        let Some(eval) = self.mb.sampled_eval.clone() else {
            return Err(Error::InvalidSetting {
                setting: "evaluation",
                reason: "sampled evaluation was not asked for".into(),
            });
        };
        let (rank, ranks) = (self.comm.rank(), self.comm.size());
        // Every split's global batches, in order, each with its split.
        let batches: Vec<(usize, Vec<NodeId>)> = self
            .eval_nodes
            .iter()
            .enumerate()
            .flat_map(|(split, nodes)| {
                nodes
                    .chunks(self.mb.batch_size.max(1))
                    .map(move |global| (split, rank_slice(global, rank, ranks).to_vec()))
            })
            .collect();
        let vars: Vec<Var> = params.iter().map(|v| Var::constant(v.clone())).collect();
        let mut counts = SplitCounts::default();
        for (split, nodes) in self.eval_nodes.iter().enumerate() {
            counts.total[split] = nodes.len() as f64;
        }
        let settings = self.stream_settings(batches.len());
        let (data, seed, cfg) = (self.data, self.seed, self.model.cfg.clone());
        let features = self.inputs.features();
        std::thread::scope(|scope| -> Result<()> {
            let make = |sampler: &mut Sampler, i: usize| {
                prepare(
                    data,
                    features,
                    sampler,
                    TaskBatch::Nodes(batches[i].1.clone()),
                    &eval.fanouts,
                    &cfg,
                    seed,
                    EVAL_EPOCH,
                )
            };
            let mut stream = BatchStream::scoped(scope, settings, make)?;
            let mut result = Ok(());
            for &(split, _) in &batches {
                let Some(batch) = stream.next() else { break };
                let step = batch.and_then(|batch| {
                    let Some(batch) = batch else {
                        // An empty slice still takes part in the embedding table's gather.
                        if let Inputs::Embedding { table, .. } = &mut self.inputs {
                            table.gather(&[])?;
                        }
                        return Ok(());
                    };
                    let ids = &batch.sampled.input_ids;
                    let x = self.inputs.batch_rows(batch.sampled.x, ids, cfg.dtype)?;
                    let mut tape = Tape::no_grad();
                    let scores = self.model.forward(
                        &mut tape,
                        &Var::constant(x),
                        &vars,
                        GraphInput::Blocks(&batch.graphs),
                        Mode::inference(),
                    )?;
                    let Targets::Nodes { labels, .. } = &batch.targets else {
                        return Err(Error::InvalidSetting {
                            setting: "evaluation",
                            reason: "sampled evaluation classifies nodes".into(),
                        });
                    };
                    counts.correct[split] += correct_predictions(scores.value(), labels);
                    Ok(())
                });
                if let Err(e) = step {
                    result = Err(e);
                    break;
                }
            }
            self.sampler = Some(stream.finish()?);
            result
        })?;
        // Totals are the job's already; correct predictions are summed over the workers.
        let mut correct = counts.correct;
        self.comm
            .all_reduce(ReduceData::F64(&mut correct), ReduceOp::Sum)?;
        counts.correct = correct;
        Ok(counts)
    }
}

/// At most `limit` of `ids`, drawn once from `seed` and sorted: sampled evaluation's nodes.
pub(crate) fn evaluated_subset(ids: &[usize], limit: usize, seed: u64) -> Vec<NodeId> {
    let key = RngKey::new(seed, 0, EVAL_NODES_PURPOSE);
    let mut order: Vec<(u64, NodeId)> = ids
        .iter()
        .map(|&v| (key.bits(v as u64, 0), v as NodeId))
        .collect();
    if order.len() > limit {
        order.select_nth_unstable(limit);
        order.truncate(limit);
    }
    let mut nodes: Vec<NodeId> = order.into_iter().map(|(_, v)| v).collect();
    nodes.sort_unstable();
    nodes
}
