//! What a training run was asked to do, for its summary: the dataset's path and the
//! hyperparameters with every default filled in, so that a summary alone says how to repeat
//! the run and two summaries can be compared.

use serde_json::{json, Value};

use graphloom_plan::{Choice, Common};

/// Adds `dataset_path` (null for the generated graph) and `hyperparameters` to a summary.
pub(crate) fn add_run_settings(summary: &mut Value, common: &Common) {
    let (s, model, train) = (&common.settings, &common.model, &common.train);
    summary["dataset_path"] = json!(s.dataset.as_ref().map(|d| std::path::absolute(d)
        .unwrap_or_else(|_| d.clone())
        .display()
        .to_string()));
    let mut h = json!({
        "model": model.arch.name(),
        "layers": model.layers,
        "hidden": model.hidden,
        "dropout": model.dropout.get(),
        "input_dropout": model.input_dropout.get(),
        "batch_norm": model.batch_norm,
        "lr": train.lr,
        "weight_decay": train.weight_decay,
        "optimizer": s.optimizer.name(),
        "max_epochs": train.epochs,
        "patience": train.patience,
        "eval_every": train.eval_every,
        "seed": train.seed,
        "dtype": s.dtype.name(),
    });
    if model.arch.has_heads() {
        h["heads"] = json!(model.heads);
        h["out_heads"] = json!(model.out_heads);
        h["attention_dropout"] = json!(model.attention_dropout.get());
    }
    if model.arch == graphloom_nn::Architecture::Appnp {
        h["hops"] = json!(model.hops);
        h["teleport"] = json!(model.teleport);
    }
    if let Some(f) = &s.fanouts {
        h["fanouts"] = json!(f.as_slice());
    }
    if let graphloom_nn::Head::Link(decoder) = model.head {
        h["decoder"] = json!(decoder.name());
        h["out_dim"] = json!(model.out_dim);
        h["neg_ratio"] = json!(s.neg_ratio.unwrap_or(graphloom_plan::NEG_RATIO));
        h["neg_sampling"] = json!(s.neg_sampling.unwrap_or_default().name());
        h["exclude_supervision"] = json!(s.excludes_supervision());
    }
    if let Some(dim) = s.embedding_dim {
        h["embedding_dim"] = json!(dim);
    }
    if let Some(size) = s.batch_size {
        h["batch_size"] = json!(size);
    }
    if let Some(path) = &s.init_model {
        h["init_model"] = json!(path.display().to_string());
    }
    summary["hyperparameters"] = h;
}
