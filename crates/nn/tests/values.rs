//! Multi-label classification and regression: the loss is the mean over present targets (an
//! independent f64 sum), full-neighbour blocks train exactly as the whole graph, two workers
//! exactly as one, and the metrics are the ones recomputed from the outputs.

use graphloom_comm::Local;
use graphloom_convert::synthetic::{generate, plant, PlantedTargets, SyntheticConfig};
use graphloom_graph::sample::Fanouts;
use graphloom_graph::{Dataset, TargetKind};
use graphloom_nn::inference::Output;
use graphloom_nn::minibatch::{Inputs, MiniBatch, MiniBatchConfig};
use graphloom_nn::task::Task;
use graphloom_nn::train::{fit, EpochRecord, FullBatch, TrainConfig};
use graphloom_nn::values::{ValueMetrics, ValueTask};
use graphloom_nn::{Architecture, Head, ModelConfig, OptimizerKind};
use graphloom_store::{Layout, Location, StoreSpec, StoreTensor};
use graphloom_tensor::autodiff::ops::{Probability, RowLoss};
use graphloom_tensor::DType;

const WIDTH: usize = 3;

/// 500 nodes with `kind` targets, a fifth of those past each node's first missing, in f64.
fn dataset(kind: TargetKind) -> Dataset {
    let mut ds = generate(&SyntheticConfig {
        nodes: 500,
        avg_degree: 6,
        feat_dim: 12,
        classes: 4,
        seed: 8,
        ..Default::default()
    })
    .unwrap();
    let planted = PlantedTargets {
        kind,
        width: WIDTH,
        noise: 0.3,
        missing: 0.2,
    };
    plant(&mut ds, &planted, 3);
    ds.features = ds.features.cast(DType::F64).unwrap();
    ds
}

fn config(arch: Architecture, loss: RowLoss, dropout: f64) -> ModelConfig {
    ModelConfig {
        arch,
        in_dim: 12,
        out_dim: WIDTH,
        layers: 2,
        dropout: Probability::new(dropout).unwrap(),
        input_dropout: Probability::ZERO,
        dtype: DType::F64,
        head: match loss {
            RowLoss::Bce => Head::NodeLabels,
            _ => Head::NodeValues,
        },
        ..Default::default()
    }
}

fn train_config(epochs: usize) -> TrainConfig {
    TrainConfig {
        epochs,
        lr: 0.01,
        weight_decay: 5e-4,
        optimizer: OptimizerKind::Adam,
        patience: None,
        seed: 6,
        eval_every: 1,
        snapshots: None,
    }
}

fn task(ds: &Dataset, loss: RowLoss) -> ValueTask<'_> {
    let splits = [&ds.train_idx[..], &ds.valid_idx, &ds.test_idx];
    ValueTask::new(ds.targets.as_ref().unwrap(), loss, splits).unwrap()
}

/// Each epoch's loss and validation score, and the parameters selected.
type Run = (Vec<(f64, f64)>, Vec<Vec<f64>>);

fn run_of(records: &[EpochRecord], params: &[graphloom_nn::Param]) -> Run {
    let epochs = records
        .iter()
        .map(|r| (r.loss, r.evaluation.unwrap().validation()))
        .collect();
    (
        epochs,
        params.iter().map(|p| p.value.to_vec_f64()).collect(),
    )
}

fn full_batch(ds: &Dataset, arch: Architecture, loss: RowLoss, epochs: usize) -> Run {
    let cfg = config(arch, loss, 0.0);
    let mut workload = FullBatch::new(ds, cfg, 6)
        .unwrap()
        .with_task(Task::Values(task(ds, loss)), None)
        .unwrap();
    let report = fit(&mut workload, &train_config(epochs), |_| {}).unwrap();
    run_of(&report.epochs, &report.best_params)
}

/// Sampled training on `workers` workers with `fanouts` and `batch_size` seeds a step.
fn sampled(
    ds: &Dataset,
    loss: RowLoss,
    dropout: f64,
    workers: usize,
    fanouts: &[i64],
    batch_size: usize,
) -> Vec<Run> {
    Local::run(workers, |comm| {
        let spec = StoreSpec::new(
            ds.features.shape(),
            ds.features.dtype(),
            Layout::Continuous,
            Location::Host,
        );
        let mut features = StoreTensor::new(comm.clone(), spec)?;
        features.fill_from_whole(ds.features.as_bytes())?;
        let mut mb = MiniBatchConfig::new(Fanouts::new(fanouts.to_vec()).unwrap(), batch_size);
        mb.queue_depth = 2;
        let cfg = config(Architecture::Sage, loss, dropout);
        let mut workload =
            MiniBatch::new(ds.data(), Inputs::Features(&features), comm, cfg, 6, &mb)?
                .with_task(Task::Values(task(ds, loss)))?;
        let report = fit(&mut workload, &train_config(2), |_| {})?;
        Ok::<_, graphloom_nn::Error>(run_of(&report.epochs, &report.best_params))
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

fn assert_close(got: &Run, want: &Run, what: &str) {
    for ((l, v), (wl, wv)) in got.0.iter().zip(&want.0) {
        assert!(
            (l - wl).abs() <= 1e-9 * wl.abs(),
            "{what}: loss {l} vs {wl}"
        );
        assert!((v - wv).abs() <= 1e-9, "{what}: validation {v} vs {wv}");
    }
    for (g, w) in got.1.iter().zip(&want.1) {
        for (a, b) in g.iter().zip(w) {
            assert!(
                (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
                "{what}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn the_loss_is_the_mean_over_present_targets() {
    for (kind, loss) in [
        (TargetKind::Binary, RowLoss::Bce),
        (TargetKind::Real, RowLoss::Mse),
        (TargetKind::Real, RowLoss::L1),
    ] {
        let ds = dataset(kind);
        let cfg = config(Architecture::Gcn, loss, 0.0);
        let mut workload = FullBatch::new(&ds, cfg, 6)
            .unwrap()
            .with_task(Task::Values(task(&ds, loss)), None)
            .unwrap();
        let params: Vec<_> = graphloom_nn::train::Workload::params(&workload)
            .iter()
            .map(|p| p.value.clone())
            .collect();
        let out = workload
            .infer(&params, Output::Layer(2))
            .unwrap()
            .to_vec_f64();
        let targets = ds.targets.as_ref().unwrap();
        let (mut total, mut terms) = (0.0, 0);
        for &v in &ds.train_idx {
            for (j, &y) in targets.row(v).iter().enumerate() {
                if y.is_nan() {
                    continue;
                }
                let (x, y) = (out[v * WIDTH + j], f64::from(y));
                let p = 1.0 / (1.0 + (-x).exp());
                total += match loss {
                    RowLoss::Bce => -(y * p.ln() + (1.0 - y) * (1.0 - p).ln()),
                    RowLoss::Mse => (x - y) * (x - y),
                    RowLoss::L1 => (x - y).abs(),
                };
                terms += 1;
            }
        }
        assert!(
            terms < ds.train_idx.len() * WIDTH,
            "some targets are missing"
        );
        // The first epoch's loss is the loss of the initial parameters (no dropout).
        let report = fit(&mut workload, &train_config(1), |_| {}).unwrap();
        let want = total / terms as f64;
        let got = report.epochs[0].loss;
        assert!(
            (got - want).abs() < 1e-10 * want,
            "{loss:?}: {got} vs {want}"
        );
    }
}

#[test]
fn full_neighbour_blocks_train_as_the_whole_graph() {
    // Every training node in one batch with every neighbour: the step of the whole graph.
    // GraphSAGE (GCN's sampled normalisation is its own: `minibatch.rs`'s tests check it).
    for (kind, loss) in [
        (TargetKind::Binary, RowLoss::Bce),
        (TargetKind::Real, RowLoss::Mse),
    ] {
        let ds = dataset(kind);
        let whole = full_batch(&ds, Architecture::Sage, loss, 2);
        let blocks = sampled(&ds, loss, 0.0, 1, &[-1, -1], ds.train_idx.len());
        assert_close(&blocks[0], &whole, &format!("{loss:?}"));
    }
}

#[test]
fn two_workers_train_as_one() {
    // 300 training nodes in batches of 299: one worker's slice of the last batch is empty.
    for (kind, loss) in [
        (TargetKind::Binary, RowLoss::Bce),
        (TargetKind::Real, RowLoss::L1),
    ] {
        let ds = dataset(kind);
        assert_eq!(ds.train_idx.len(), 300);
        let one = sampled(&ds, loss, 0.5, 1, &[4, 3], 299);
        for (rank, got) in sampled(&ds, loss, 0.5, 2, &[4, 3], 299).iter().enumerate() {
            assert_close(got, &one[0], &format!("{loss:?} rank {rank}"));
        }
    }
}

#[test]
fn evaluation_reports_the_metrics_of_the_outputs() {
    let ds = dataset(TargetKind::Real);
    let loss = RowLoss::Mse;
    let cfg = config(Architecture::Gcn, loss, 0.0);
    let mut workload = FullBatch::new(&ds, cfg, 6)
        .unwrap()
        .with_task(Task::Values(task(&ds, loss)), None)
        .unwrap();
    let report = fit(&mut workload, &train_config(30), |_| {}).unwrap();
    let params: Vec<_> = report.best_params.iter().map(|p| p.value.clone()).collect();
    let out = workload.infer(&params, Output::Layer(2)).unwrap();
    let evaluation = task(&ds, loss).evaluate(&out).unwrap();
    assert_eq!(
        report.best,
        graphloom_nn::train::Evaluation::Values(evaluation)
    );
    let ValueMetrics::Regression { r2, .. } = evaluation.splits[2] else {
        panic!("regression is scored by regression metrics")
    };
    assert!(r2 > 0.3, "30 epochs learn the planted target: R² {r2}");
}
