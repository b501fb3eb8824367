//! SAR is exact: for N = 1, 2, 4 and 8 workers, the loss and every parameter gradient of one
//! step of every model family SAR trains (GCN, GraphSAGE, GAT, GIN, SGC, APPNP) with dropout
//! (attention dropout included) equal those of one worker on the whole graph: 1e-9 in f64,
//! 1e-4 norm-wise in f32. The three modes agree.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use graphloom_comm::{Communicator, Local, ReduceData, ReduceOp};
use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::partition::{metis, stream, Partition, StreamSettings};
use graphloom_graph::parts::Part;
use graphloom_graph::Dataset;
use graphloom_nn::{Architecture, GraphInput, Mode, Model, ModelConfig, NodeGraph};
use graphloom_sar::{sar_graph, SarMode};
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::autodiff::ops::Probability;
use graphloom_tensor::{DType, Tape, Var};

const ARCHS: [Architecture; 6] = [
    Architecture::Sage,
    Architecture::Gcn,
    Architecture::Gat,
    Architecture::Gin,
    Architecture::Sgc,
    Architecture::Appnp,
];

fn dataset() -> Dataset {
    generate(&SyntheticConfig {
        nodes: 400,
        avg_degree: 6,
        feat_dim: 10,
        classes: 3,
        seed: 12,
        ..Default::default()
    })
    .unwrap()
}

fn config(arch: Architecture, dtype: DType) -> ModelConfig {
    ModelConfig {
        arch,
        in_dim: 10,
        hidden: 12,
        out_dim: 3,
        heads: 2,
        input_dropout: Probability::new(0.2).unwrap(),
        attention_dropout: Probability::new(0.3).unwrap(),
        dtype,
        ..Default::default()
    }
}

fn mode() -> Mode {
    Mode {
        training: true,
        seed: 3,
        step: 1,
    }
}

/// Loss and parameter gradients of one step.
type Step = (f64, Vec<Vec<f64>>);

/// One step on the whole graph, one worker.
fn whole_graph(ds: &Dataset, cfg: ModelConfig) -> Step {
    let dtype = cfg.dtype;
    let weight = ds.edge_weight.as_ref().map(|w| Arc::from(w.as_slice()));
    let graph = NodeGraph::in_memory(cfg.arch, &ds.graph, weight, None).unwrap();
    let model = Model::new(cfg, 5).unwrap();
    let mut tape = Tape::new();
    let vars: Vec<Var> = model
        .params
        .iter()
        .map(|p| tape.leaf(p.value.clone(), true))
        .collect();
    let x = Var::constant(ds.features.cast(dtype).unwrap());
    let scores = model
        .forward(&mut tape, &x, &vars, GraphInput::Nodes(&graph), mode())
        .unwrap();
    let logp = Model::log_probabilities(&mut tape, &scores).unwrap();
    let labels: Arc<[i64]> = ds.train_idx.iter().map(|&v| ds.labels[v]).collect();
    let rows: Arc<[usize]> = ds.train_idx.clone().into();
    let loss = ops::nll_loss(&mut tape, &logp, rows, labels, ds.train_idx.len() as f64).unwrap();
    let grads = tape.backward(&loss).unwrap();
    (
        loss.value().scalar_f64().unwrap(),
        vars.iter()
            .map(|v| grads.get(v).unwrap().to_vec_f64())
            .collect(),
    )
}

/// The same step on this worker's part, loss and gradients summed over workers.
fn one_part(comm: Arc<dyn Communicator>, dir: &Path, cfg: ModelConfig, sar: SarMode) -> Step {
    let dtype = cfg.dtype;
    let mut part = Part::load(dir, comm.rank()).unwrap();
    let (arch, heads) = (cfg.arch, cfg.heads);
    let model = Model::new(cfg, 5).unwrap();
    let graph = sar_graph(comm.clone(), &mut part, arch, heads, sar).unwrap();
    let mut tape = Tape::new();
    let vars: Vec<Var> = model
        .params
        .iter()
        .map(|p| tape.leaf(p.value.clone(), true))
        .collect();
    let x = Var::constant(part.features.cast(dtype).unwrap());
    let scores = model
        .forward(&mut tape, &x, &vars, GraphInput::Nodes(&graph), mode())
        .unwrap();
    let logp = Model::log_probabilities(&mut tape, &scores).unwrap();
    let labels: Arc<[i64]> = part.train_idx.iter().map(|&v| part.labels[v]).collect();
    let rows: Arc<[usize]> = part.train_idx.clone().into();
    // Every worker divides by the global number of training nodes.
    let loss = ops::nll_loss(&mut tape, &logp, rows, labels, part.meta.num_train as f64).unwrap();
    let grads = tape.backward(&loss).unwrap();
    let mut total = [loss.value().scalar_f64().unwrap()];
    comm.all_reduce(ReduceData::F64(&mut total), ReduceOp::Sum)
        .unwrap();
    let grads = vars
        .iter()
        .map(|v| {
            let mut g = grads.get(v).unwrap().to_vec_f64();
            comm.all_reduce(ReduceData::F64(&mut g), ReduceOp::Sum)
                .unwrap();
            g
        })
        .collect();
    (total[0], grads)
}

/// Fails with a description unless `got` equals `want` to the tolerance of `dtype`.
fn compare(got: &Step, want: &Step, dtype: DType) -> Result<(), String> {
    let (tol_loss, f64_mode) = match dtype {
        DType::F64 => (1e-9, true),
        _ => (1e-5, false),
    };
    if (got.0 - want.0).abs() > tol_loss * want.0.abs() {
        return Err(format!("loss {} vs {}", got.0, want.0));
    }
    let largest = want
        .1
        .iter()
        .map(|w| w.iter().map(|b| b * b).sum::<f64>().sqrt())
        .fold(0.0, f64::max);
    for (i, (g, w)) in got.1.iter().zip(&want.1).enumerate() {
        if f64_mode {
            for (a, b) in g.iter().zip(w) {
                if (a - b).abs() > 1e-9 * (1.0 + b.abs()) {
                    return Err(format!("parameter {i}: gradient {a} vs {b}"));
                }
            }
        } else {
            let diff: f64 = g
                .iter()
                .zip(w)
                .map(|(a, b)| (a - b).powi(2))
                .sum::<f64>()
                .sqrt();
            // A gradient that is zero in exact arithmetic (a bias right before batch
            // normalisation) is rounding noise: it is held to 1e-4 of a hundredth of the
            // largest gradient's norm.
            let norm: f64 = w
                .iter()
                .map(|b| b * b)
                .sum::<f64>()
                .sqrt()
                .max(1e-2 * largest);
            if diff > 1e-4 * norm {
                return Err(format!(
                    "parameter {i}: relative difference {}",
                    diff / norm
                ));
            }
        }
    }
    Ok(())
}

fn partitioned(ds: &Dataset, parts: usize) -> PathBuf {
    written(ds, &metis(&ds.graph, &ds.train_idx, parts, 0).unwrap())
}

/// `ds` written as the parts of `partition`, in a folder of this process.
fn written(ds: &Dataset, partition: &Partition) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "graphloom-sar-{}-{}",
        std::process::id(),
        partition.parts
    ));
    ds.write_parts(partition, &dir).unwrap();
    dir
}

/// Runs one step on `parts` in-process workers and compares each worker's sums with `want`.
fn check_local(dir: &Path, parts: usize, cfg: &ModelConfig, sar: SarMode, want: &Step) {
    for got in Local::run(parts, |comm| {
        Ok::<_, graphloom_comm::CommError>(one_part(comm, dir, cfg.clone(), sar))
    }) {
        if let Err(e) = compare(&got.unwrap(), want, cfg.dtype) {
            panic!("{cfg:?} {} on {parts} workers: {e}", sar.name());
        }
    }
}

#[test]
fn sar_matches_one_worker_for_every_model_on_1_2_4_and_8_workers() {
    let ds = dataset();
    // One part has no halos: its own pass finishes every row.
    let dirs: Vec<(usize, PathBuf)> = [1, 2, 4, 8].map(|n| (n, partitioned(&ds, n))).into();
    for arch in ARCHS {
        for dtype in [DType::F64, DType::F32] {
            let cfg = config(arch, dtype);
            let want = whole_graph(&ds, cfg.clone());
            for (parts, dir) in &dirs {
                check_local(dir, *parts, &cfg, SarMode::Sar, &want);
            }
        }
    }
    for (_, dir) in dirs {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// The streaming partitioner's parts, its groups split by METIS or placed by Fennel, train
/// exactly as one worker does.
#[test]
fn streamed_parts_match_one_worker() {
    let ds = dataset();
    for coarse_bytes in [0, 1 << 30] {
        let settings = StreamSettings {
            parts: 5,
            coarse_bytes,
            ..Default::default()
        };
        let (partition, _) = stream(&ds.data(), &settings, &|_, _, _| {}).unwrap();
        let dir = written(&ds, &partition);
        for arch in ARCHS {
            let cfg = config(arch, DType::F64);
            let want = whole_graph(&ds, cfg.clone());
            check_local(&dir, 5, &cfg, SarMode::Sar, &want);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn sa_and_osa_modes_match_one_worker() {
    let ds = dataset();
    let dir = partitioned(&ds, 3);
    for arch in ARCHS {
        let cfg = config(arch, DType::F64);
        let want = whole_graph(&ds, cfg.clone());
        for sar in [SarMode::Sa, SarMode::Osa] {
            check_local(&dir, 3, &cfg, sar, &want);
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// With edge weights (and some of the graph's own self-loops, weighted too), GCN's weighted
/// normalisation and GraphSAGE's weighted mean over 1 and 3 workers equal one worker's, which the
/// nn crate checks against the dense formula.
#[test]
fn edge_weights_match_one_worker() {
    let base = dataset();
    let (mut src, mut dst) = base.graph.edges();
    for v in (0..400).step_by(7) {
        src.push(v);
        dst.push(v);
    }
    let graph = graphloom_graph::Csr::from_edges(400, &src, &dst);
    let key = graphloom_tensor::rng::RngKey::new(4, 0, 0);
    let weights = (0..graph.num_edges())
        .map(|e| 0.1 + 2.0 * key.uniform(e as u64, 0) as f32)
        .collect();
    let ds = Dataset {
        meta: graphloom_graph::Meta {
            num_edges: graph.num_edges(),
            ..base.meta.clone()
        },
        graph,
        edge_weight: Some(weights),
        ..base
    };
    let dirs: Vec<(usize, PathBuf)> = [1, 3].map(|n| (n, partitioned(&ds, n))).into();
    for arch in [Architecture::Gcn, Architecture::Sage, Architecture::Gin] {
        for dtype in [DType::F64, DType::F32] {
            let cfg = config(arch, dtype);
            let want = whole_graph(&ds, cfg.clone());
            let unweighted = whole_graph(
                &Dataset {
                    edge_weight: None,
                    edge_features: None,
                    meta: ds.meta.clone(),
                    graph: ds.graph.clone(),
                    features: ds.features.clone(),
                    labels: ds.labels.clone(),
                    targets: None,
                    train_idx: ds.train_idx.clone(),
                    valid_idx: ds.valid_idx.clone(),
                    test_idx: ds.test_idx.clone(),
                },
                cfg.clone(),
            );
            assert!(
                (want.0 - unweighted.0).abs() > 1e-6,
                "the weights change the loss"
            );
            for (parts, dir) in &dirs {
                check_local(dir, *parts, &cfg, SarMode::Sar, &want);
            }
        }
    }
    for (_, dir) in dirs {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// In a directed graph, a part whose rows others read but which reads none of theirs gets
/// gradients back without receiving a halo: they join its sums before each row's scale (GCN's
/// `degree^-1/2` of the source), so its pass over its own edges must not finish the rows.
#[test]
fn a_part_that_only_sends_rows_matches_one_worker() {
    let base = dataset();
    let part_of = |v: usize| (v >= 200) as u32;
    // Every edge but those from the second half into the first.
    let (src, dst): (Vec<_>, Vec<_>) = {
        let (src, dst) = base.graph.edges();
        (src.into_iter().zip(dst))
            .filter(|&(u, v)| !(part_of(u as usize) == 1 && part_of(v as usize) == 0))
            .unzip()
    };
    let graph = graphloom_graph::Csr::from_edges(400, &src, &dst);
    let ds = Dataset {
        meta: graphloom_graph::Meta {
            num_edges: graph.num_edges(),
            ..base.meta.clone()
        },
        graph,
        ..base
    };
    let partition = Partition {
        part: (0..400).map(part_of).collect(),
        parts: 2,
    };
    let dir = written(&ds, &partition);
    for arch in ARCHS {
        let cfg = config(arch, DType::F64);
        let want = whole_graph(&ds, cfg.clone());
        check_local(&dir, 2, &cfg, SarMode::Sar, &want);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Batch normalisation with statistics summed over workers normalises as one worker does.
#[test]
fn distributed_batch_norm_matches_one_worker() {
    let ds = dataset();
    let dir = partitioned(&ds, 4);
    for arch in ARCHS {
        for dtype in [DType::F64, DType::F32] {
            let cfg = ModelConfig {
                batch_norm: true,
                layers: 3,
                ..config(arch, dtype)
            };
            let want = whole_graph(&ds, cfg.clone());
            check_local(&dir, 4, &cfg, SarMode::Sar, &want);
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;

    const DIR_ENV: &str = "GRAPHLOOM_SAR_TEST_DIR";

    #[test]
    #[ignore = "one rank of an mpirun job, started by the mpi_ tests"]
    fn rank_sar_matches_one_worker() {
        let dir = PathBuf::from(std::env::var(DIR_ENV).expect("set by the mpi_ test"));
        graphloom_comm::mpi::run_rank(|comm| {
            let ds = dataset();
            for arch in ARCHS {
                for dtype in [DType::F64, DType::F32] {
                    let want = whole_graph(&ds, config(arch, dtype));
                    let got = one_part(comm.clone(), &dir, config(arch, dtype), SarMode::Sar);
                    compare(&got, &want, dtype).map_err(|e| format!("{arch:?} {dtype}: {e}"))?;
                }
            }
            Ok::<_, String>(())
        })
        .unwrap();
    }

    #[test]
    fn mpi_sar_matches_one_worker_for_every_model() {
        let ds = dataset();
        for np in [2, 4, 8] {
            let dir = partitioned(&ds, np);
            let out = graphloom_comm::launch::mpirun(np)
                .env(DIR_ENV, &dir)
                .arg(std::env::current_exe().unwrap())
                .args([
                    "mpi::rank_sar_matches_one_worker",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "np {np}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

#[test]
fn multilabel_and_regression_train_as_on_one_worker() {
    use graphloom_convert::synthetic::{plant, PlantedTargets};
    use graphloom_graph::TargetKind;
    use graphloom_nn::task::Task;
    use graphloom_nn::train::{fit, FullBatch, TrainConfig};
    use graphloom_nn::values::ValueTask;
    use graphloom_nn::{Head, OptimizerKind};
    use graphloom_sar::Sar;
    use graphloom_tensor::autodiff::ops::RowLoss;

    let tc = TrainConfig {
        epochs: 2,
        lr: 0.01,
        weight_decay: 5e-4,
        optimizer: OptimizerKind::Adam,
        patience: None,
        seed: 5,
        eval_every: 1,
        snapshots: None,
    };
    for (kind, loss, head) in [
        (TargetKind::Binary, RowLoss::Bce, Head::NodeLabels),
        (TargetKind::Real, RowLoss::Mse, Head::NodeValues),
    ] {
        let mut ds = dataset();
        let planted = PlantedTargets {
            kind,
            width: 3,
            noise: 0.3,
            missing: 0.2,
        };
        plant(&mut ds, &planted, 7);
        // Parts hold f32 features, which each worker casts to f64.
        let dir = partitioned(&ds, 3);
        ds.features = ds.features.cast(DType::F64).unwrap();
        let cfg = ModelConfig {
            head,
            ..config(Architecture::Sage, DType::F64)
        };
        let splits = [&ds.train_idx[..], &ds.valid_idx, &ds.test_idx];
        let task = ValueTask::new(ds.targets.as_ref().unwrap(), loss, splits).unwrap();
        let mut one = FullBatch::new(&ds, cfg.clone(), tc.seed)
            .unwrap()
            .with_task(Task::Values(task), None)
            .unwrap();
        let want = fit(&mut one, &tc, |_| {}).unwrap();
        for got in Local::run(3, |comm| {
            let mut part = Part::load(&dir, comm.rank()).unwrap();
            let mut sar = Sar::new(comm, &mut part, cfg.clone(), tc.seed, SarMode::Sar)
                .unwrap()
                .with_values(loss)
                .unwrap();
            Ok::<_, graphloom_comm::CommError>(fit(&mut sar, &tc, |_| {}).unwrap())
        }) {
            let got = got.unwrap();
            for (g, w) in got.epochs.iter().zip(&want.epochs) {
                let (gv, wv) = (g.evaluation.unwrap(), w.evaluation.unwrap());
                assert!(
                    (g.loss - w.loss).abs() < 1e-9 * w.loss,
                    "{loss:?}: {g:?} vs {w:?}"
                );
                assert!(
                    (gv.validation() - wv.validation()).abs() < 1e-9,
                    "{gv:?} vs {wv:?}"
                );
                assert!((gv.test() - wv.test()).abs() < 1e-9, "{gv:?} vs {wv:?}");
            }
        }
    }
}
