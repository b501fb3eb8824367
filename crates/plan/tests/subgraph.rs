//! Subgraph batches in a plan: the clusters kept beside the dataset and reused, a partition's
//! parts as clusters, GraphSAINT's normalisation, and the bad settings refused, each naming
//! its option.

use std::path::{Path, PathBuf};

use graphloom_convert::synthetic::SyntheticConfig;
mod common;
use common::{dataset_and_parts, Scratch};
use graphloom_graph::sample::Fanouts;
use graphloom_plan::{
    flag_of, Batching, Plan, PlanError, SubgraphSettings, TrainMode, TrainSettings,
};

/// A small dataset directory, and the same graph partitioned into three parts.
fn datasets(name: &str) -> (Scratch, PathBuf, PathBuf) {
    let config = SyntheticConfig {
        nodes: 300,
        avg_degree: 6,
        feat_dim: 8,
        classes: 3,
        seed: 4,
        ..Default::default()
    };
    dataset_and_parts("sub", name, &config, 3)
}

fn with(dataset: &Path, subgraph: SubgraphSettings) -> TrainSettings {
    TrainSettings {
        dataset: Some(dataset.to_path_buf()),
        epochs: 2,
        subgraph,
        ..Default::default()
    }
}

fn cluster(clusters: usize, per_batch: usize) -> SubgraphSettings {
    SubgraphSettings {
        batching: Some(Batching::Cluster),
        clusters: Some(clusters),
        clusters_per_batch: Some(per_batch),
        ..Default::default()
    }
}

fn saint(kind: Batching, budget: usize) -> SubgraphSettings {
    SubgraphSettings {
        batching: Some(kind),
        saint_budget: Some(budget),
        ..Default::default()
    }
}

/// Where the plan's clusters or normalisation came from.
fn origin(plan: &Plan) -> String {
    match plan {
        Plan::MiniBatch(p) => p.subgraph_origin.clone().unwrap_or_default(),
        _ => panic!("subgraph batches plan a mini-batch run"),
    }
}

#[test]
fn clusters_are_computed_once_then_reused_and_partitions_serve_as_clusters() {
    let (_root, plain, parts) = datasets("clusters");
    let first = Plan::new(with(&plain, cluster(6, 2))).unwrap();
    assert_eq!(first.mode(), TrainMode::MiniBatch);
    assert!(
        origin(&first).contains("computed by METIS"),
        "{}",
        origin(&first)
    );
    assert!(plain.join("clusters").join("metis-6.npy").exists());
    let again = Plan::new(with(&plain, cluster(6, 3))).unwrap();
    assert!(origin(&again).contains("reused"), "{}", origin(&again));
    let report = again.run(|_| {}).unwrap();
    assert_eq!(report.report().epochs.len(), 2);
    // Another count is computed afresh.
    let other = Plan::new(with(&plain, cluster(4, 1))).unwrap();
    assert!(
        origin(&other).contains("computed by METIS"),
        "{}",
        origin(&other)
    );
    let from = SubgraphSettings {
        batching: Some(Batching::Cluster),
        cluster_from: Some(parts.clone()),
        ..Default::default()
    };
    let plan = Plan::new(with(&plain, from)).unwrap();
    assert!(
        origin(&plan).starts_with("3 clusters, the parts of"),
        "{}",
        origin(&plan)
    );
    plan.run(|_| {}).unwrap();
}

#[test]
fn graphsaint_plans_its_steps_and_normalisation() {
    let (_root, plain, _) = datasets("saint");
    for kind in [Batching::SaintNode, Batching::SaintEdge, Batching::SaintRw] {
        let settings = SubgraphSettings {
            saint_coverage: Some(5),
            ..saint(kind, 40)
        };
        let plan = Plan::new(with(&plain, settings)).unwrap();
        assert!(
            origin(&plan).contains("normalised from"),
            "{}",
            origin(&plan)
        );
        let report = plan.run(|_| {}).unwrap();
        assert!(report.report().epochs.iter().all(|e| e.loss.is_finite()));
    }
}

#[test]
fn bad_subgraph_settings_are_one_line_errors_naming_the_option() {
    let (_root, plain, parts) = datasets("bad");
    let untrained = plain.parent().unwrap().join("untrained");
    let mut ds = graphloom_graph::Dataset::load(&plain).unwrap();
    ds.train_idx.clear();
    ds.save(&untrained).unwrap();
    let error = |s: TrainSettings| -> String {
        let e: PlanError = Plan::new(s).err().expect("refused");
        let text = e.render(&flag_of);
        assert!(!text.contains('\n'), "{text}");
        text
    };
    let cases: Vec<(TrainSettings, &str)> = vec![
        (
            with(&plain, cluster(301, 1)),
            "--clusters cannot cut 300 nodes into 301",
        ),
        (
            with(&plain, cluster(5, 6)),
            "--clusters-per-batch 6 is more than the 5 clusters",
        ),
        (with(&plain, cluster(0, 1)), "--clusters must be at least 1"),
        (
            with(&plain, saint(Batching::SaintNode, 0)),
            "--saint-budget must be at least 1",
        ),
        (
            with(
                &plain,
                SubgraphSettings {
                    walk_length: Some(0),
                    ..saint(Batching::SaintRw, 5)
                },
            ),
            "--walk-length must be at least 1",
        ),
        (
            with(
                &plain,
                SubgraphSettings {
                    walk_length: Some(2),
                    ..saint(Batching::SaintEdge, 5)
                },
            ),
            "--walk-length does not apply",
        ),
        (
            with(
                &plain,
                SubgraphSettings {
                    saint_coverage: Some(0),
                    ..saint(Batching::SaintRw, 5)
                },
            ),
            "--saint-coverage must be at least 1",
        ),
        (
            with(
                &plain,
                SubgraphSettings {
                    batching: Some(Batching::Cluster),
                    ..Default::default()
                },
            ),
            "--batching cluster needs --clusters",
        ),
        (
            with(
                &plain,
                SubgraphSettings {
                    clusters: Some(4),
                    ..Default::default()
                },
            ),
            "--clusters does not apply to training without subgraph batches",
        ),
        (
            with(
                &plain,
                SubgraphSettings {
                    cluster_from: Some(plain.clone()),
                    ..cluster(3, 1)
                },
            ),
            "--cluster-from gives the clusters",
        ),
        (
            with(
                &plain,
                SubgraphSettings {
                    cluster_from: Some(plain.join("nowhere")),
                    clusters: None,
                    ..cluster(3, 1)
                },
            ),
            "--cluster-from",
        ),
        (
            TrainSettings {
                fanouts: Some(Fanouts::new(vec![3, 3]).unwrap()),
                ..with(&plain, cluster(4, 1))
            },
            "--batching trains on whole subgraphs",
        ),
        (
            TrainSettings {
                batch_size: Some(10),
                ..with(&plain, cluster(4, 1))
            },
            "--batch-size does not apply to subgraph batches",
        ),
        (with(&parts, cluster(4, 1)), "--batching does not apply"),
        (
            with(
                &untrained,
                SubgraphSettings {
                    saint_coverage: Some(3),
                    ..saint(Batching::SaintRw, 5)
                },
            ),
            "--saint-coverage weighs the loss of the dataset's training nodes, and it has none",
        ),
    ];
    for (settings, want) in cases {
        let got = error(settings);
        assert!(got.contains(want), "{got:?} should say {want:?}");
    }
}

#[test]
fn a_resumed_subgraph_run_is_the_uninterrupted_one() {
    let (_root, plain, _) = datasets("resume");
    let snapshots = plain.parent().unwrap().join("snapshots");
    let settings = SubgraphSettings {
        saint_coverage: Some(4),
        ..saint(Batching::SaintRw, 30)
    };
    for batching in [cluster(6, 2), settings] {
        let _ = std::fs::remove_dir_all(&snapshots);
        let run = |epochs, resume| {
            let plan = Plan::new(TrainSettings {
                epochs,
                snapshot_dir: Some(snapshots.clone()),
                resume,
                ..with(&plain, batching.clone())
            })
            .unwrap();
            let outcome = plan.run(|_| {}).unwrap();
            let report = outcome.report();
            let losses: Vec<f64> = report.epochs.iter().map(|e| e.loss).collect();
            (losses, report.test_score)
        };
        let whole = {
            let _ = std::fs::remove_dir_all(&snapshots);
            run(4, false)
        };
        let _ = std::fs::remove_dir_all(&snapshots);
        run(2, false);
        assert_eq!(run(4, true), whole);
    }
}

#[test]
fn subgraph_batches_read_mapped_features_or_learn_an_input_embedding() {
    let (_root, plain, _) = datasets("inputs");
    for settings in [
        TrainSettings {
            features_location: Some(graphloom_plan::FeaturesLocation::Mmap),
            feature_cache_gib: Some(0.001),
            ..with(&plain, cluster(5, 2))
        },
        TrainSettings {
            embedding_dim: Some(8),
            ..with(&plain, saint(Batching::SaintNode, 50))
        },
    ] {
        let outcome = Plan::new(settings).unwrap().run(|_| {}).unwrap();
        let report = outcome.report();
        assert!(report.epochs.iter().all(|e| e.loss.is_finite()));
    }
}

#[test]
fn two_workers_train_as_one() {
    let (_root, plain, _) = datasets("workers");
    for batching in [cluster(6, 2), saint(Batching::SaintEdge, 40)] {
        let run = |workers| {
            let plan = Plan::new(TrainSettings {
                workers: Some(workers),
                ..with(&plain, batching.clone())
            })
            .unwrap();
            let outcome = plan.run(|_| {}).unwrap();
            let report = outcome.report();
            let losses: Vec<f64> = report.epochs.iter().map(|e| e.loss).collect();
            (losses, report.test_score)
        };
        let (one, two) = (run(1), run(2));
        for (a, b) in one.0.iter().zip(&two.0) {
            assert!((a - b).abs() < 1e-4 * a.abs(), "{a} vs {b}");
        }
        assert!((one.1 - two.1).abs() < 0.02, "{} vs {}", one.1, two.1);
    }
}
