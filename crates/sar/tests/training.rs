//! SAR training follows one worker's full-batch run: the same losses epoch by epoch over 20
//! epochs, with 1 and 4 workers, and a partition for another worker count is refused.

use graphloom_comm::{CommError, Local};
use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::partition::metis;
use graphloom_graph::parts::Part;
use graphloom_nn::train::{train_full_batch, TrainConfig};
use graphloom_nn::{Architecture, ModelConfig, OptimizerKind};
use graphloom_sar::{train_sar, SarMode};
use graphloom_tensor::autodiff::ops::Probability;

#[test]
fn four_workers_train_like_one_for_twenty_epochs() {
    let ds = generate(&SyntheticConfig {
        nodes: 600,
        avg_degree: 8,
        feat_dim: 16,
        classes: 4,
        seed: 21,
        ..Default::default()
    })
    .unwrap();
    let tc = TrainConfig {
        epochs: 20,
        lr: 0.01,
        weight_decay: 5e-4,
        optimizer: OptimizerKind::Adam,
        patience: None,
        seed: 4,
        eval_every: 1,
        snapshots: None,
    };
    for arch in [Architecture::Sage, Architecture::Gcn] {
        let cfg = ModelConfig {
            arch,
            in_dim: 16,
            out_dim: 4,
            ..Default::default()
        };
        let one = train_full_batch(&ds, cfg.clone(), &tc, |_| {}).unwrap();
        let dir = std::env::temp_dir().join(format!(
            "graphloom-sar-train-{}-{arch:?}",
            std::process::id()
        ));
        ds.write_parts(&metis(&ds.graph, &ds.train_idx, 4, 0).unwrap(), &dir)
            .unwrap();
        for report in Local::run(
            4,
            |comm| -> Result<_, Box<dyn std::error::Error + Send + Sync>> {
                let mut part = Part::load(&dir, comm.rank())?;
                Ok(train_sar(
                    comm,
                    &mut part,
                    cfg.clone(),
                    &tc,
                    SarMode::Sar,
                    |_| {},
                )?)
            },
        ) {
            let report = report.unwrap();
            for (a, b) in report.epochs.iter().zip(&one.epochs) {
                assert!(
                    (a.loss - b.loss).abs() <= 1e-4 * b.loss.abs(),
                    "{arch:?} epoch {}: {} vs {}",
                    a.epoch,
                    a.loss,
                    b.loss
                );
            }
            assert_eq!(report.best_epoch, one.best_epoch, "{arch:?}");
            assert!(
                (report.test_score - one.test_score).abs() < 1e-9,
                "{arch:?}"
            );
        }
        // A partition into 4 parts cannot run on 2 workers.
        for r in Local::run(2, |comm| -> Result<(), graphloom_sar::Error> {
            let mut part = Part::load(&dir, comm.rank())?;
            train_sar(comm, &mut part, cfg.clone(), &tc, SarMode::Sar, |_| {}).map(drop)
        }) {
            assert!(matches!(
                r.unwrap_err(),
                graphloom_sar::Error::WorkerCount {
                    workers: 2,
                    parts: 4,
                    ..
                }
            ));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A worker that stops mid-training makes every other worker fail with an error naming it,
/// instead of waiting for it forever.
#[test]
fn a_worker_that_dies_is_named_by_the_others() {
    let ds = generate(&SyntheticConfig {
        nodes: 300,
        avg_degree: 6,
        feat_dim: 8,
        classes: 3,
        seed: 2,
        ..Default::default()
    })
    .unwrap();
    let dir = std::env::temp_dir().join(format!("graphloom-sar-dies-{}", std::process::id()));
    ds.write_parts(&metis(&ds.graph, &ds.train_idx, 3, 0).unwrap(), &dir)
        .unwrap();
    let cfg = ModelConfig {
        arch: Architecture::Gat,
        in_dim: 8,
        hidden: 4,
        out_dim: 3,
        heads: 2,
        attention_dropout: Probability::new(0.5).unwrap(),
        ..Default::default()
    };
    let results = Local::run(3, |comm| -> Result<(), graphloom_sar::Error> {
        let rank = comm.rank();
        let mut part = Part::load(&dir, rank)?;
        let tc = TrainConfig {
            epochs: if rank == 1 { 2 } else { 10 },
            weight_decay: 0.0,
            seed: 1,
            ..Default::default()
        };
        train_sar(comm, &mut part, cfg.clone(), &tc, SarMode::Sar, |_| {})?;
        if rank == 1 {
            return Err(CommError::Invalid("worker 1 stopped".into()).into());
        }
        Ok(())
    });
    for (rank, r) in results.into_iter().enumerate() {
        let e = r.unwrap_err();
        if rank == 1 {
            assert!(
                matches!(&e, graphloom_sar::Error::Comm(CommError::Invalid(m)) if m == "worker 1 stopped"),
                "{e}"
            );
        } else {
            // The failure keeps its type and the failing rank through the ops and the loop.
            assert!(
                matches!(e.comm(), Some(CommError::PeerFailed { rank: 1, .. })),
                "rank {rank}: {e:?}"
            );
            assert!(
                e.to_string().starts_with("rank 1 failed: "),
                "rank {rank}: {e}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A partition without training nodes is refused on every worker, not trained to a NaN loss.
#[test]
fn no_training_nodes_is_named() {
    let mut ds = generate(&SyntheticConfig {
        nodes: 200,
        avg_degree: 6,
        feat_dim: 8,
        classes: 3,
        seed: 5,
        ..Default::default()
    })
    .unwrap();
    ds.valid_idx.append(&mut ds.train_idx);
    let dir = std::env::temp_dir().join(format!("graphloom-sar-notrain-{}", std::process::id()));
    ds.write_parts(&metis(&ds.graph, &ds.train_idx, 2, 0).unwrap(), &dir)
        .unwrap();
    let cfg = ModelConfig {
        in_dim: 8,
        out_dim: 3,
        ..Default::default()
    };
    for r in Local::run(2, |comm| -> Result<(), graphloom_sar::Error> {
        let mut part = Part::load(&dir, comm.rank())?;
        let tc = TrainConfig {
            epochs: 2,
            ..Default::default()
        };
        train_sar(comm, &mut part, cfg.clone(), &tc, SarMode::Sar, |_| {}).map(drop)
    }) {
        assert!(
            matches!(
                r,
                Err(graphloom_sar::Error::Train(
                    graphloom_nn::Error::NoTrainingNodes
                ))
            ),
            "{r:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
