//! The plan's decisions, without running anything long: which mode the settings select, the
//! defaults it fills in, the settings it refuses and how it names them, and the sizes it
//! checks before loading.

use std::path::PathBuf;

use graphloom_convert::synthetic::SyntheticConfig;
mod common;
use common::{dataset_and_parts, Scratch};
use graphloom_graph::sample::Fanouts;
use graphloom_nn::model_file::ModelFile;
use graphloom_nn::Architecture;
use graphloom_plan::{
    flag_of, Backend, Plan, PlanError, RunOutcome, TrainMode, TrainSettings, MAX_WORKERS,
};
use graphloom_sar::SarMode;

/// A small dataset directory, and the same graph partitioned into two parts.
fn datasets(name: &str) -> (Scratch, PathBuf, PathBuf) {
    let config = SyntheticConfig {
        nodes: 300,
        avg_degree: 6,
        feat_dim: 8,
        classes: 3,
        seed: 4,
        ..Default::default()
    };
    dataset_and_parts("plan", name, &config, 2)
}

fn fanouts(f: &[i64]) -> Option<Fanouts> {
    Some(Fanouts::new(f.to_vec()).unwrap())
}

fn settings(dataset: &std::path::Path) -> TrainSettings {
    TrainSettings {
        dataset: Some(dataset.to_path_buf()),
        epochs: 1,
        ..Default::default()
    }
}

/// The setting an error names, spelt for the command line.
fn flag(e: &PlanError) -> String {
    e.render(&flag_of)
}

#[test]
fn the_dataset_and_fanouts_select_the_mode() {
    let (_root, plain, parts) = datasets("mode");
    let full = Plan::new(settings(&plain)).unwrap();
    assert_eq!(full.mode(), TrainMode::FullBatch);
    let mini = Plan::new(TrainSettings {
        fanouts: fanouts(&[3, 3]),
        ..settings(&plain)
    })
    .unwrap();
    assert_eq!(mini.mode(), TrainMode::MiniBatch);
    let sar = Plan::new(settings(&parts)).unwrap();
    assert_eq!(sar.mode(), TrainMode::Sar);
    let Plan::Sar(sar) = sar else { unreachable!() };
    // One in-process worker per part, in sar mode, unless told otherwise.
    assert_eq!((sar.workers, sar.sar_mode), (2, SarMode::Sar));
    let e = Plan::new(TrainSettings {
        fanouts: fanouts(&[3, 3]),
        ..settings(&parts)
    })
    .err()
    .unwrap();
    assert!(
        matches!(
            e,
            PlanError::NotApplicable {
                setting: "fanouts",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn each_model_gets_its_own_defaults() {
    let (_root, plain, _) = datasets("defaults");
    for (arch, hidden, heads, dropout, lr) in [
        (Architecture::Gcn, 16, 1, 0.5, 0.01),
        (Architecture::Sage, 64, 1, 0.5, 0.01),
        (Architecture::Gat, 8, 8, 0.6, 0.005),
    ] {
        let plan = Plan::new(TrainSettings {
            model: Some(arch.into()),
            ..settings(&plain)
        })
        .unwrap();
        let c = plan.common();
        assert_eq!(c.model.hidden, hidden, "{arch:?}");
        assert_eq!(c.model.heads, heads, "{arch:?}");
        assert_eq!(c.model.dropout.get(), dropout, "{arch:?}");
        assert_eq!(c.model.input_dropout.get(), dropout, "{arch:?}");
        assert_eq!(c.train.lr, lr, "{arch:?}");
        // The widths are the dataset's.
        assert_eq!((c.model.in_dim, c.model.out_dim), (8, 3), "{arch:?}");
    }
}

#[test]
fn settings_that_do_not_apply_or_cannot_train_are_refused_by_name() {
    let (_root, plain, _) = datasets("refusals");
    let cases: Vec<(TrainSettings, &str)> = vec![
        (
            TrainSettings {
                batch_size: Some(8),
                ..settings(&plain)
            },
            "--batch-size does not apply to full-batch training",
        ),
        (
            TrainSettings {
                heads: Some(4),
                ..settings(&plain)
            },
            "--heads does not apply to",
        ),
        (
            TrainSettings {
                workers: Some(2),
                ..settings(&plain)
            },
            "--workers does not apply to full-batch training",
        ),
        (
            TrainSettings {
                sar_mode: Some(SarMode::Osa),
                fanouts: fanouts(&[2, 2]),
                ..settings(&plain)
            },
            "--mode does not apply to mini-batch training (--fanouts)",
        ),
        (
            TrainSettings {
                fanouts: fanouts(&[2, 2]),
                workers: Some(MAX_WORKERS + 1),
                ..settings(&plain)
            },
            "--workers 1025 is more than the 1024 workers one process may run",
        ),
        (
            TrainSettings {
                fanouts: fanouts(&[2]),
                ..settings(&plain)
            },
            "--fanouts has 1 values for 2 layers: give one per layer",
        ),
        (
            TrainSettings {
                lr: Some(-0.1),
                ..settings(&plain)
            },
            "--lr must be a positive number, not -0.1",
        ),
        (
            TrainSettings {
                epochs: 0,
                ..settings(&plain)
            },
            "--epochs must be at least 1",
        ),
        (
            TrainSettings {
                resume: true,
                ..settings(&plain)
            },
            "--resume needs --snapshot-dir",
        ),
        (
            TrainSettings {
                comm: Some(Backend::Mpi),
                workers: Some(2),
                fanouts: fanouts(&[2, 2]),
                ..settings(&plain)
            },
            "--workers does not apply to",
        ),
        (
            TrainSettings {
                hidden: Some(100_000_000),
                ..settings(&plain)
            },
            "this process may use",
        ),
    ];
    for (s, expect) in cases {
        let e = Plan::new(s).err().unwrap();
        assert!(flag(&e).contains(expect), "{} vs {expect}", flag(&e));
        // Spelt neutrally, no front end's flag appears.
        assert!(!e.render(&|s: &str| s.to_string()).contains("--"), "{e}");
    }
}

#[test]
fn a_saved_model_gives_its_shape_and_rates_and_must_fit_the_run() {
    let (_root, plain, _) = datasets("saved");
    let first = Plan::new(TrainSettings {
        model: Some(Architecture::Sage.into()),
        hidden: Some(12),
        ..settings(&plain)
    })
    .unwrap();
    let RunOutcome::FullBatch(report) = first.run(|_| {}).unwrap() else {
        unreachable!()
    };
    let path = plain.parent().unwrap().join("model.safetensors");
    ModelFile {
        config: first.common().model.clone(),
        params: report.best_params,
        input_embedding: None,
    }
    .save(&path)
    .unwrap();
    let again = Plan::new(TrainSettings {
        init_model: Some(path.clone()),
        ..settings(&plain)
    })
    .unwrap();
    let c = again.common();
    assert_eq!((c.model.arch, c.model.hidden), (Architecture::Sage, 12));
    let e = Plan::new(TrainSettings {
        init_model: Some(path),
        hidden: Some(13),
        ..settings(&plain)
    })
    .err()
    .unwrap();
    assert!(flag(&e).starts_with("--init-model holds a sage"), "{e}");
}

#[test]
fn link_prediction_has_its_defaults_and_refuses_what_does_not_apply() {
    use graphloom_convert::link_split::{self, LinkSplitConfig};
    use graphloom_nn::{Decoder, Head};
    use graphloom_plan::TaskKind;
    let (_root, plain, parts) = datasets("link");
    let split = plain.parent().unwrap().join("split");
    link_split::write(&plain, &LinkSplitConfig::default(), &split, &|_, _, _| {}).unwrap();
    let link = |s: TrainSettings| TrainSettings {
        task: Some(TaskKind::Link),
        ..s
    };
    let plan = Plan::new(link(settings(&split))).unwrap();
    let c = plan.common();
    assert_eq!(c.model.head, Head::Link(Decoder::Dot));
    // The embeddings are as wide as the hidden layers; no weight decay, as PyG's and OGB's
    // link examples train.
    assert_eq!(
        (c.model.out_dim, c.train.weight_decay),
        (c.model.hidden, 0.0)
    );
    let cases: Vec<(TrainSettings, &str)> = vec![
        (
            TrainSettings {
                decoder: Some(Decoder::Mlp),
                ..settings(&split)
            },
            "--decoder does not apply to node classification",
        ),
        (
            link(settings(&plain)),
            "--task link needs a dataset with a link split",
        ),
        (
            link(settings(&parts)),
            "--task does not apply to SAR training",
        ),
        (
            link(TrainSettings {
                exclude_supervision: Some(true),
                ..settings(&split)
            }),
            "--exclude-supervision does not apply to full-batch training",
        ),
        (
            link(TrainSettings {
                fanouts: fanouts(&[2, 2]),
                eval_nodes: Some(10),
                ..settings(&split)
            }),
            "--eval-nodes samples the evaluation of node classification",
        ),
        (
            link(TrainSettings {
                neg_ratio: Some(0),
                ..settings(&split)
            }),
            "--neg-ratio must be at least 1",
        ),
    ];
    for (s, expect) in cases {
        let e = Plan::new(s).err().unwrap();
        assert!(flag(&e).contains(expect), "{} vs {expect}", flag(&e));
    }
    // Without negative destinations per positive there is no MRR to select by: AUC is the
    // default, and asking for MRR is refused.
    let no_neg_dst = plain.parent().unwrap().join("split-no-neg-dst");
    let cfg = LinkSplitConfig {
        neg_dst: 0,
        ..LinkSplitConfig::default()
    };
    link_split::write(&plain, &cfg, &no_neg_dst, &|_, _, _| {}).unwrap();
    let e = Plan::new(link(TrainSettings {
        metric: Some(graphloom_nn::link::metrics::LinkMetric::Mrr),
        ..settings(&no_neg_dst)
    }))
    .err()
    .unwrap();
    assert!(flag(&e).contains("--metric mrr ranks"), "{e}");
}
