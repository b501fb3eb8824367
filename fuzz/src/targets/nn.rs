//! The readers of the nn crate: model files (safetensors with the model's metadata) and the
//! training snapshot (`snapshot/state.safetensors`, read by a resumed run).

use std::path::Path;
use std::sync::OnceLock;

use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::Dataset;
use graphloom_nn::model_file::ModelFile;
use graphloom_nn::train::{train_full_batch, SnapshotConfig, TrainConfig};
use graphloom_nn::{Architecture, Model, ModelConfig};

use crate::mutate::{case_files, plain, Target};

/// Model files of each architecture: a GCN, a 3-layer GraphSAGE with batch normalisation, a
/// two-head GAT with a learnt input embedding.
pub(crate) fn model_file() -> Target {
    let dir =
        std::env::temp_dir().join(format!("graphloom-fuzz-base-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let small = ModelConfig {
        in_dim: 5,
        hidden: 4,
        out_dim: 3,
        ..ModelConfig::default()
    };
    let configs = [
        ("gcn.safetensors", small.clone(), false),
        (
            "sage.safetensors",
            ModelConfig {
                arch: Architecture::Sage,
                layers: 3,
                batch_norm: true,
                ..small.clone()
            },
            false,
        ),
        (
            "gat.safetensors",
            ModelConfig {
                arch: Architecture::Gat,
                heads: 2,
                ..small.clone()
            },
            true,
        ),
    ];
    let mut files = Vec::new();
    for (name, config, embedding) in configs {
        let model = Model::new(config.clone(), 3).expect("a model");
        let file = ModelFile {
            input_embedding: embedding.then(|| {
                graphloom_tensor::Tensor::from_vec(
                    vec![0.25f32; 2 * config.in_dim],
                    &[2, config.in_dim],
                )
                .expect("an embedding")
            }),
            config,
            params: model.params.clone(),
        };
        let path = dir.join(name);
        file.save(&path).expect("save a model file");
        files.push((
            name.to_string(),
            std::fs::read(&path).expect("read it back"),
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Target {
        name: "model_file",
        files,
        encode: plain,
        read: read_model_files,
        alloc_factor: 16,
    }
}

/// Loads every model file of `dir`; one that loads must build its model.
fn read_model_files(dir: &Path) -> Vec<String> {
    let paths = case_files(dir);
    let mut errors = Vec::new();
    for p in paths {
        match ModelFile::load(&p) {
            Ok(file) => {
                let mut model = Model::new(file.config.clone(), 0)
                    .unwrap_or_else(|e| panic!("a loaded model file builds no model: {e}"));
                if let Err(e) = model.set_params(&file.params) {
                    panic!("a loaded model file's parameters do not fit its model: {e}");
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    errors
}

/// The small dataset the snapshot runs train on.
fn snapshot_dataset() -> &'static Dataset {
    static DS: OnceLock<Dataset> = OnceLock::new();
    DS.get_or_init(|| {
        generate(&SyntheticConfig {
            nodes: 30,
            avg_degree: 4,
            feat_dim: 4,
            classes: 3,
            seed: 2,
            ..Default::default()
        })
        .expect("a synthetic dataset")
    })
}

/// Trains the snapshot runs' model up to `epochs` with snapshots in `dir` (resuming when
/// `resume`).
fn snapshot_run(dir: &Path, epochs: usize, resume: bool) -> graphloom_nn::Result<()> {
    let ds = snapshot_dataset();
    let cfg = ModelConfig {
        in_dim: 4,
        hidden: 4,
        out_dim: 3,
        ..ModelConfig::default()
    };
    let tc = TrainConfig {
        epochs,
        snapshots: Some(SnapshotConfig {
            dir: dir.to_path_buf(),
            every: 1,
            resume,
        }),
        ..TrainConfig::default()
    };
    train_full_batch(ds, cfg, &tc, |_| {}).map(drop)
}

/// The snapshot of a run stopped after two epochs, resumed to three.
pub(crate) fn snapshot() -> Target {
    let dir = std::env::temp_dir().join(format!(
        "graphloom-fuzz-base-snapshot-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    snapshot_run(&dir, 2, false).expect("a run with snapshots");
    let state = "snapshot/state.safetensors";
    let files = vec![(
        state.to_string(),
        std::fs::read(dir.join(state)).expect("the snapshot's state"),
    )];
    let _ = std::fs::remove_dir_all(&dir);
    Target {
        name: "snapshot",
        files,
        encode: plain,
        read: |dir| match snapshot_run(dir, 3, true) {
            // Finite but huge parameters are a snapshot too: training from them may diverge.
            Ok(()) | Err(graphloom_nn::Error::NonFiniteLoss { .. }) => Vec::new(),
            Err(e) => vec![e.to_string()],
        },
        alloc_factor: 16,
    }
}
