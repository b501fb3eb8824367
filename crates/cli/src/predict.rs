//! `graphloom predict` and `graphloom embed`: a saved model's log-probabilities, labels or node
//! embeddings for a dataset, written as `.npy`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use graphloom_graph::npy;
use graphloom_nn::inference::Output;
use graphloom_plan::{infer, labels_of, score_links, InferSettings, TaskKind};

use crate::output::choice;

/// What `predict` and `embed` both take.
#[derive(Args)]
pub(crate) struct ModelInput {
    /// The model file written by `graphloom train --save-model`.
    #[arg(long)]
    model: PathBuf,
    /// The (unpartitioned) dataset directory.
    #[arg(long)]
    dataset: PathBuf,
    /// Where to write the `.npy` (written to a temporary name, then renamed).
    #[arg(long)]
    out: PathBuf,
    /// Only these nodes, in this order: an `.npy` of integer node ids [default: every node].
    #[arg(long)]
    nodes: Option<PathBuf>,
    /// Compute layer by layer, in chunks of nodes within this many GiB of memory (at most
    /// 1073741824, 1 EiB), the dataset mapped and each layer's output for all nodes in a scratch file when it takes more than
    /// half of it: for graphs larger than memory [default: one pass over the whole graph in
    /// memory].
    #[arg(long)]
    inference_memory_gib: Option<f64>,
    /// Folder of --inference-memory-gib's scratch files, removed after use [default: the
    /// system's temporary folder].
    #[arg(long, requires = "inference_memory_gib")]
    scratch_dir: Option<PathBuf>,
}

/// Arguments of `graphloom predict`.
#[derive(Args)]
pub(crate) struct PredictArgs {
    #[command(flatten)]
    input: ModelInput,
    /// Write each node's predicted class (int64) instead of its log-probabilities (float32,
    /// one column per class); for a multi-label model, each label as 0 or 1 (int8 [N, T], 1
    /// where the logit is positive) instead of the logits.
    #[arg(long)]
    labels: bool,
    /// What the model predicts: node classes, or (a model trained with --task link) the
    /// scores of pairs of nodes given by --pairs. A model trained with --task multilabel
    /// writes each label's logit (float32 [N, T]; its sigmoid is the probability), one
    /// trained with --task regression its predicted targets (float32 [N, T]) [default: node,
    /// or the model's own task].
    #[arg(long, value_parser = choice::<TaskKind>())]
    task: Option<TaskKind>,
    /// With --task link: the pairs to score, an `.npy` of integer node ids, `[2, P]` (sources
    /// then destinations, as PyG's `edge_label_index`) or `[P, 2]`; the output is each pair's
    /// score (a logit, float32 `[P]`; its sigmoid is the predicted probability of an edge).
    #[arg(long)]
    pairs: Option<PathBuf>,
}

/// Arguments of `graphloom embed`.
#[derive(Args)]
pub(crate) struct EmbedArgs {
    #[command(flatten)]
    input: ModelInput,
    /// The output of this many layers, from 1 (after the hidden activation; the last layer
    /// gives the class scores before the softmax). A GAT hidden layer concatenates its heads:
    /// its output is heads x hidden wide.
    #[arg(long, default_value_t = 1)]
    layer: usize,
    /// On a heterogeneous dataset: the node type whose embeddings to write (--nodes are ids of
    /// it); a layer computes the types that lead to the target [default: the target type].
    #[arg(long)]
    node_type: Option<String>,
}

impl ModelInput {
    fn settings(&self, output: Output) -> Result<InferSettings> {
        crate::output::check_writable(&self.out)?;
        let inputs = [Some(&self.model), Some(&self.dataset), self.nodes.as_ref()];
        let inputs: Vec<&Path> = inputs.into_iter().flatten().map(|p| p.as_path()).collect();
        graphloom_graph::check_output_file(&self.out, &inputs)?;
        let nodes = match &self.nodes {
            Some(path) => Some(read_nodes(path)?),
            None => None,
        };
        let layerwise = self
            .inference_memory_gib
            .map(|gib| graphloom_plan::layerwise_config(gib, self.scratch_dir.clone()))
            .transpose()
            .map_err(crate::output::plan_error)?;
        Ok(InferSettings {
            model: self.model.clone(),
            dataset: self.dataset.clone(),
            nodes,
            output,
            layerwise,
        })
    }
}

/// Node ids from an `.npy` of `[N]`.
fn read_nodes(path: &Path) -> Result<Vec<i64>> {
    let ids = npy::read_ids(path)?;
    if ids.shape.len() != 1 {
        anyhow::bail!(
            "{}: shape {:?}, expected a 1-D array of node ids",
            path.display(),
            ids.shape
        );
    }
    Ok(ids.data)
}

pub(crate) fn predict(args: PredictArgs) -> Result<()> {
    let link = args.task == Some(TaskKind::Link);
    match (&args.pairs, link) {
        (Some(_), false) => anyhow::bail!("--pairs scores links: give --task link"),
        (None, true) => anyhow::bail!("--task link scores the pairs of --pairs: give the file"),
        (Some(_), true) if args.labels || args.input.nodes.is_some() => {
            anyhow::bail!("--task link scores pairs: --labels and --nodes are for node classes")
        }
        _ => {}
    }
    if let Some(path) = &args.pairs {
        graphloom_graph::check_output_file(&args.input.out, &[path.as_path()])?;
        let (src, dst) = npy::read_id_pairs(path)?;
        let settings = args.input.settings(Output::LogProbabilities)?;
        let scores = score_links(&settings, &src, &dst).map_err(crate::output::plan_error)?;
        let out = &args.input.out;
        npy::write(out, scores.as_slice::<f32>()?, scores.shape())
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!(
            "wrote {} pair scores to {}",
            scores.shape()[0],
            out.display()
        );
        return Ok(());
    }
    let (logp, head) = if graphloom_graph::format::meta::is_hetero(&args.input.dataset) {
        (
            hetero_log_probabilities(&args.input)?,
            graphloom_nn::Head::NodeClasses,
        )
    } else {
        let settings = args.input.settings(Output::LogProbabilities)?;
        let head = graphloom_nn::model_file::ModelFile::load(&settings.model)
            .map_err(|e| anyhow::anyhow!(e))?
            .config
            .head;
        (infer(&settings).map_err(crate::output::plan_error)?, head)
    };
    let out = &args.input.out;
    if let Some(task) = args.task.filter(|&t| t != TaskKind::of(head)) {
        anyhow::bail!(
            "--task {}: the model was trained with --task {}",
            task.name(),
            TaskKind::of(head).name()
        );
    }
    if args.labels && head == graphloom_nn::Head::NodeValues {
        anyhow::bail!("--labels writes classes or 0/1 labels: a regressor predicts values");
    }
    if args.labels && head == graphloom_nn::Head::NodeLabels {
        let bits: Vec<i8> = logp
            .to_vec_f64()
            .iter()
            .map(|&x| i8::from(x > 0.0))
            .collect();
        npy::write(out, &bits, logp.shape())
    } else if args.labels {
        let labels = labels_of(&logp);
        npy::write(out, &labels, &[labels.len()])
    } else {
        npy::write(out, logp.as_slice::<f32>()?, logp.shape())
    }
    .with_context(|| format!("writing {}", out.display()))?;
    eprintln!("wrote {} rows to {}", logp.shape()[0], out.display());
    Ok(())
}

/// The target type's log-probabilities under a relational model, for `predict` on a
/// heterogeneous dataset (always exact and layer by layer in chunks of nodes).
fn hetero_log_probabilities(input: &ModelInput) -> Result<graphloom_tensor::Tensor> {
    let nodes = check_hetero_input(input)?;
    graphloom_plan::hetero_log_probabilities(&input.model, &input.dataset, nodes.as_deref())
        .map_err(crate::output::plan_error)
}

/// Checks `predict`'s or `embed`'s arguments on a heterogeneous dataset and reads `--nodes`.
fn check_hetero_input(input: &ModelInput) -> Result<Option<Vec<i64>>> {
    if input.inference_memory_gib.is_some() {
        anyhow::bail!(
            "--inference-memory-gib: a heterogeneous dataset's prediction runs layer by layer in \
             chunks of nodes already"
        );
    }
    if !graphloom_nn::hetero::is_hetero_model(&input.model) {
        anyhow::bail!(
            "{} is a heterogeneous dataset: give a model trained on one (rgcn or rsage)",
            input.dataset.display()
        );
    }
    crate::output::check_writable(&input.out)?;
    let paths = [
        Some(&input.model),
        Some(&input.dataset),
        input.nodes.as_ref(),
    ];
    let paths: Vec<&Path> = paths.into_iter().flatten().map(|p| p.as_path()).collect();
    graphloom_graph::check_output_file(&input.out, &paths)?;
    input.nodes.as_deref().map(read_nodes).transpose()
}

pub(crate) fn embed(args: EmbedArgs) -> Result<()> {
    let h = if graphloom_graph::format::meta::is_hetero(&args.input.dataset) {
        let nodes = check_hetero_input(&args.input)?;
        graphloom_plan::hetero_embeddings(
            &args.input.model,
            &args.input.dataset,
            args.layer,
            args.node_type.as_deref(),
            nodes.as_deref(),
        )
        .map_err(crate::output::plan_error)?
    } else {
        if args.node_type.is_some() {
            anyhow::bail!(
                "--node-type: {} has one node type; the option is for heterogeneous datasets",
                args.input.dataset.display()
            );
        }
        infer(&args.input.settings(Output::Layer(args.layer))?)
            .map_err(crate::output::plan_error)?
    };
    let out = &args.input.out;
    npy::write(out, h.as_slice::<f32>()?, h.shape())
        .with_context(|| format!("writing {}", out.display()))?;
    eprintln!(
        "wrote {} x {} embeddings to {}",
        h.shape()[0],
        h.shape()[1],
        out.display()
    );
    Ok(())
}
