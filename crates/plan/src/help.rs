//! The defaults `--help` shows for settings whose default the run decides, read off the
//! definitions the run uses (the training crate's per-model table and the plan's constants).

use graphloom_nn::train::TrainConfig;
use graphloom_nn::{Architecture, ModelConfig};

/// The defaults that `--help` shows for settings whose default the run decides (so clap has
/// no default value to show), each read off the definition the run uses: `(setting, text)`.
pub fn help_defaults() -> Vec<(&'static str, String)> {
    use crate::hetero;
    let arch = |a: Architecture| a.defaults();
    let [gcn, sage, gat, gin, sgc, appnp, sign] = [
        Architecture::Gcn,
        Architecture::Sage,
        Architecture::Gat,
        Architecture::Gin,
        Architecture::Sgc,
        Architecture::Appnp,
        Architecture::Sign,
    ]
    .map(arch);
    let model = ModelConfig::of(Architecture::Gat);
    vec![
        (
            "layers",
            format!(
                "{}, or that of --init-model; for sgc the hops (K), for appnp its MLP's layers, \
                 for sign its hops' linears and the linears after them",
                model.layers
            ),
        ),
        ("out_heads", model.out_heads.to_string()),
        ("hops", model.hops.to_string()),
        ("teleport", model.teleport.to_string()),
        (
            "embedding_lr",
            format!(
                "{}; rgcn and rsage {}",
                crate::data::EMBEDDING_LR,
                hetero::EMBEDDING_LR
            ),
        ),
        ("neg_ratio", crate::NEG_RATIO.to_string()),
        ("metric", crate::LINK_METRIC.name().to_string()),
        (
            "hidden",
            format!(
                "gcn {}, sage {}, gat and gatv2 {}, gin and gine {}, appnp {}, sign {} per hop (sgc has \
                 no hidden layer), rgcn and rsage {}, or that of --init-model; the same holds \
                 for every model option below",
                gcn.hidden,
                sage.hidden,
                gat.hidden,
                gin.hidden,
                appnp.hidden,
                sign.hidden,
                hetero::HIDDEN
            ),
        ),
        ("heads", gat.heads.to_string()),
        (
            "dropout",
            format!(
                "gcn {}, sage {}, gat and gatv2 {}, gin and gine {}, sgc {}, appnp {}, sign {}, rgcn and \
                 rsage {}; link prediction {}; regression 0",
                gcn.dropout.get(),
                sage.dropout.get(),
                gat.dropout.get(),
                gin.dropout.get(),
                sgc.dropout.get(),
                appnp.dropout.get(),
                sign.dropout.get(),
                hetero::DROPOUT,
                graphloom_nn::link::DROPOUT
            ),
        ),
        (
            "lr",
            format!(
                "gcn {}, sage {}, gat and gatv2 {}, gin and gine {}, sgc {}, appnp {}, sign {}, rgcn {}, \
                 rsage {}",
                gcn.lr,
                sage.lr,
                gat.lr,
                gin.lr,
                sgc.lr,
                appnp.lr,
                sign.lr,
                hetero::RGCN_LR,
                hetero::RSAGE_LR
            ),
        ),
        (
            "weight_decay",
            format!(
                "{}; sgc {}; link prediction {}, as PyG's and OGB's link examples train; rgcn \
                 and rsage 0, as DGL's ogbn-mag example",
                TrainConfig::default().weight_decay,
                sgc.weight_decay,
                graphloom_nn::link::WEIGHT_DECAY
            ),
        ),
        (
            "batch_size",
            format!(
                "{}; full-batch link prediction: every pair in one step; rgcn and rsage {}",
                crate::mini_batch::BATCH_SIZE,
                hetero::BATCH_SIZE
            ),
        ),
        (
            "queue_depth",
            graphloom_nn::batches::DEFAULT_QUEUE_DEPTH.to_string(),
        ),
    ]
}
