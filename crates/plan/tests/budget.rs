//! The memory budget's decisions, without training: how `memory_gib` is divided among the
//! parts of a mini-batch run, the part a budget too small names, and the user's flags, which
//! win over the division or break the budget.

use std::path::PathBuf;

use graphloom_convert::synthetic::SyntheticConfig;
use graphloom_graph::sample::Fanouts;
use graphloom_plan::{flag_of, FeatureReads, FeaturesLocation, MiniBatchPlan, Plan, TrainSettings};
mod common;
use common::{dataset_and_parts, Scratch};

const GIB: f64 = (1u64 << 30) as f64;

/// A dataset of 20,000 nodes with 256 features (20 MB), and the same graph in two parts.
fn dataset(name: &str) -> (Scratch, PathBuf, PathBuf) {
    let config = SyntheticConfig {
        nodes: 20_000,
        avg_degree: 8,
        feat_dim: 256,
        classes: 4,
        seed: 1,
        ..Default::default()
    };
    dataset_and_parts("budget", name, &config, 2)
}

fn settings(dataset: &std::path::Path, memory_gib: Option<f64>) -> TrainSettings {
    TrainSettings {
        dataset: Some(dataset.to_path_buf()),
        epochs: 1,
        memory_gib,
        ..Default::default()
    }
}

fn mini(dataset: &std::path::Path, memory_gib: Option<f64>) -> TrainSettings {
    TrainSettings {
        fanouts: Some(Fanouts::new(vec![5, 5]).unwrap()),
        batch_size: Some(256),
        ..settings(dataset, memory_gib)
    }
}

fn mini_plan(s: TrainSettings) -> MiniBatchPlan {
    match Plan::new(s).unwrap() {
        Plan::MiniBatch(p) => p,
        _ => panic!("a mini-batch plan"),
    }
}

/// How a mini-batch plan placed its features and evaluation.
#[derive(Debug, PartialEq, PartialOrd)]
enum Placement {
    HostExact,
    HostLayerwise,
    Mapped,
}

fn placement(p: &MiniBatchPlan) -> Placement {
    match (p.features_location, p.batches.layerwise.is_some()) {
        (FeaturesLocation::Mmap, _) => Placement::Mapped,
        (_, false) => Placement::HostExact,
        (_, true) => Placement::HostLayerwise,
    }
}

#[test]
fn a_shrinking_budget_keeps_features_in_memory_then_chunks_evaluation_then_maps_them() {
    let (_root, ds, _) = dataset("shrinking");
    let free = mini_plan(mini(&ds, None));
    assert_eq!(free.memory.budget, None);
    assert_eq!(placement(&free), Placement::HostExact);
    let peak = free.memory.peak() as f64;
    let features = free.memory.part("features in memory") as f64;
    assert!(features >= 20e6, "{:?}", free.memory.parts);
    // Budgets from the unbudgeted peak down: each plan fits its budget, the placements step
    // down in order, and the smallest budgets are refused by name.
    let mut seen = Vec::new();
    for share in (1..=20).rev().map(|k| k as f64 / 20.0) {
        let budget = peak * share;
        match Plan::new(mini(&ds, Some(budget / GIB))) {
            Ok(Plan::MiniBatch(p)) => {
                assert!(
                    p.memory.peak() as f64 <= 0.9 * budget,
                    "{share}: {:?}",
                    p.memory
                );
                let at = placement(&p);
                if at == Placement::Mapped {
                    // What is left caches rows; the cache is in the division.
                    let cache = p.feature_cache_gib.unwrap_or(0.0) * GIB;
                    assert!(cache > 0.0 && cache < features, "{share}: {cache}");
                    assert!(p.memory.lines().iter().any(|l| l.contains("feature cache")));
                }
                assert!(
                    seen.last().is_none_or(|last| *last <= at),
                    "{seen:?} then {at:?}"
                );
                seen.push(at);
            }
            Ok(_) => panic!("a mini-batch plan"),
            Err(e) => {
                let msg = e.render(&flag_of);
                assert!(msg.starts_with("--memory-gib of "), "{msg}");
                assert!(msg.contains("is too small: the part \""), "{msg}");
                seen.push(Placement::Mapped);
            }
        }
    }
    assert_eq!(seen.first(), Some(&Placement::HostExact));
    assert!(seen.contains(&Placement::HostLayerwise), "{seen:?}");
    assert!(
        Plan::new(mini(&ds, Some(peak * 0.55 / GIB))).is_ok_and(|p| matches!(
            p,
            Plan::MiniBatch(ref p) if placement(p) == Placement::Mapped
        )),
        "a budget of half the peak maps the features"
    );
}

#[test]
fn a_budget_too_small_names_the_part_that_does_not_fit() {
    let (_root, ds, parts) = dataset("small");
    for s in [settings(&ds, None), settings(&parts, None)] {
        let free = Plan::new(s.clone()).unwrap();
        let memory = free.memory();
        assert_eq!(memory.budget, None);
        // Everything up to the features, and half of them.
        let before: u64 = memory
            .parts
            .iter()
            .take_while(|p| p.name != "features in memory")
            .map(|p| p.bytes)
            .sum();
        let budget = before + memory.part("features in memory") / 2;
        let e = Plan::new(TrainSettings {
            memory_gib: Some(budget as f64 / GIB),
            ..s.clone()
        })
        .err()
        .unwrap();
        let msg = e.render(&flag_of);
        assert!(
            msg.contains("the part \"features in memory\" needs"),
            "{msg}"
        );
        assert!(!msg.contains('\n'));
        // A budget of the predicted peak and a tenth more for its error plans the run.
        let fits = Plan::new(TrainSettings {
            memory_gib: Some(memory.peak() as f64 / 0.9 / GIB + 1e-6),
            ..s
        })
        .unwrap();
        assert_eq!(fits.memory().peak(), memory.peak());
    }
}

#[test]
fn flags_given_win_over_the_division_or_break_the_budget() {
    let (_root, ds, _) = dataset("flags");
    // A queue depth given is kept, so the batches in flight are known.
    let queue = |s: TrainSettings| TrainSettings {
        queue_depth: Some(1),
        ..s
    };
    let free = mini_plan(queue(mini(&ds, None)));
    let features = free.memory.part("features in memory");
    let before_features: u64 = free
        .memory
        .parts
        .iter()
        .take_while(|p| p.name != "features in memory")
        .map(|p| p.bytes)
        .sum();
    // A quarter of the features' room, with a tenth of the budget kept apart (the parts
    // before the features are summed whole, though the phases among them count only their
    // largest: the room left is less than it seems).
    let tight = (before_features + features / 4) as f64 / 0.9 / GIB;
    // Features in memory asked for, in a budget they do not fit.
    let e = Plan::new(TrainSettings {
        features_location: Some(FeaturesLocation::Host),
        ..queue(mini(&ds, Some(tight)))
    })
    .err()
    .unwrap();
    assert!(
        e.render(&flag_of).contains("\"features in memory\""),
        "{}",
        e.render(&flag_of)
    );
    // Without the flag, the same budget maps them.
    let p = mini_plan(queue(mini(&ds, Some(tight))));
    assert_eq!(p.features_location, FeaturesLocation::Mmap);
    assert_eq!(p.batches.queue_depth, 1);
    // Mapped features with the cache given: the division keeps it.
    let p = mini_plan(TrainSettings {
        features_location: Some(FeaturesLocation::Mmap),
        feature_cache_gib: Some(0.005),
        ..mini(&ds, Some(1.0))
    });
    assert_eq!(p.feature_cache_gib, Some(0.005));
    // A cache that breaks the budget: everything else fits.
    let mapped = mini_plan(TrainSettings {
        features_location: Some(FeaturesLocation::Mmap),
        ..queue(mini(&ds, Some(1.0)))
    });
    let without_cache = mapped.memory.peak() - mapped.memory.part("feature cache");
    let e = Plan::new(TrainSettings {
        features_location: Some(FeaturesLocation::Mmap),
        feature_cache_gib: Some(0.015),
        ..queue(mini(&ds, Some((without_cache + (1 << 20)) as f64 / GIB)))
    })
    .err()
    .unwrap();
    assert!(
        e.render(&flag_of).contains("\"feature cache\""),
        "{}",
        e.render(&flag_of)
    );
    // Evaluation's own budget given: it is kept.
    let p = mini_plan(TrainSettings {
        inference_memory_gib: Some(0.01),
        ..mini(&ds, Some(1.0))
    });
    assert_eq!(
        p.batches.layerwise.as_ref().map(|l| l.memory_bytes),
        Some((0.01 * GIB) as usize)
    );
    // Budgets that are not a positive number of GiB.
    for bad in [0.0, -1.0, f64::NAN] {
        let e = Plan::new(mini(&ds, Some(bad))).err().unwrap();
        assert!(
            e.render(&flag_of)
                .starts_with("--memory-gib must be a positive number"),
            "{}",
            e.render(&flag_of)
        );
    }
}

#[test]
fn rows_that_may_miss_are_read_through_the_page_cache_when_it_can_keep_them() {
    // 20 MB of features beside a machine's memory: the page cache keeps every row that may
    // miss, so `auto` maps them, and the plan says why; a choice the user makes stands.
    let (_root, ds, _) = dataset("reads");
    let on_disk = |reads: Option<FeatureReads>| {
        mini_plan(TrainSettings {
            features_location: Some(FeaturesLocation::Mmap),
            feature_cache_gib: Some(0.005),
            feature_reads: reads,
            ..mini(&ds, None)
        })
    };
    let auto = on_disk(None);
    assert_eq!(auto.feature_reads, FeatureReads::Mapped);
    let why = auto
        .memory
        .lines()
        .into_iter()
        .find(|l| l.contains("read through the page cache"))
        .unwrap_or_else(|| panic!("no reason given: {:?}", auto.memory.lines()));
    // The rows that may miss: the nodes with an in-edge less the cache's 5 MiB of rows.
    assert!(why.contains("GiB of rows that may miss"), "{why}");
    assert_eq!(
        on_disk(Some(FeatureReads::Direct)).feature_reads,
        FeatureReads::Direct
    );
    assert_eq!(
        on_disk(Some(FeatureReads::Mapped)).feature_reads,
        FeatureReads::Mapped
    );
    // Under MPI each process maps its own rows, and the plan says so rather than "directly".
    let mpi = mini_plan(TrainSettings {
        comm: Some(graphloom_plan::Backend::Mpi),
        features_location: Some(FeaturesLocation::Mmap),
        feature_cache_gib: Some(0.005),
        ..mini(&ds, None)
    });
    assert_eq!(mpi.feature_reads, FeatureReads::Mapped);
    assert!(
        mpi.memory.lines().iter().any(|l| l.contains("under MPI")),
        "{:?}",
        mpi.memory.lines()
    );
    // Features in memory read no rows from the file.
    let host = mini_plan(mini(&ds, None));
    assert!(!host.memory.lines().iter().any(|l| l.contains("page cache")));
}

/// The cache of freed buffers holds as much as the largest phase, never less than the
/// allocator's default without a budget, and no more than a budget leaves beside the
/// predicted peak.
#[test]
fn the_buffer_cache_holds_a_training_step_within_what_the_budget_leaves() {
    use graphloom_plan::{MemoryPart, MemoryPlan};
    const MIB: u64 = 1 << 20;
    let floor = graphloom_tensor::alloc::DEFAULT_CACHE_LIMIT as u64;
    let plan = |budget: Option<u64>, step: u64| MemoryPlan {
        budget,
        parts: vec![
            MemoryPart {
                name: "features in memory",
                bytes: 3000 * MIB,
                transient: false,
            },
            MemoryPart {
                name: "dataset loading",
                bytes: 100 * MIB,
                transient: true,
            },
            MemoryPart {
                name: "training step",
                bytes: step,
                transient: true,
            },
        ],
        decisions: Vec::new(),
    };
    // A small step: the default.
    assert_eq!(plan(None, 10 * MIB).buffer_cache_bytes(), floor);
    // A large one: all of it.
    assert_eq!(plan(None, 2500 * MIB).buffer_cache_bytes(), 2500 * MIB);
    // Under a budget of 8 GiB (7.2 GiB planned, 5.4 GiB predicted): the 1.8 GiB left.
    let budget = 8192 * MIB;
    let left = budget - budget / 10 - (3000 + 2500) * MIB;
    assert_eq!(plan(Some(budget), 2500 * MIB).buffer_cache_bytes(), left);
    // A budget that leaves less than the default keeps what it leaves: the cache's limit is
    // memory the process reaches.
    let budget = 6400 * MIB;
    let left = budget - budget / 10 - (3000 + 2500) * MIB;
    assert!(left < floor);
    assert_eq!(plan(Some(budget), 2500 * MIB).buffer_cache_bytes(), left);
}
