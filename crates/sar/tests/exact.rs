//! SAR is exact: for N = 2, 3 and 4 workers, the loss and every parameter gradient of one
//! GraphSAGE or GCN step with dropout equal those of one worker on the whole graph (1e-9 in f64,
//! 1e-4 norm-wise in f32).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use graphloom_comm::{Communicator, Local, ReduceData, ReduceOp};
use graphloom_graph::convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::partition::metis;
use graphloom_graph::parts::{write_parts, Part};
use graphloom_graph::Dataset;
use graphloom_nn::{Architecture, Mode, Model, ModelConfig};
use graphloom_sar::{Normalisation, PartGraph, RingAggregation};
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::{DType, Tape, Var};

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
        layers: 2,
        heads: 1,
        out_heads: 1,
        dropout: 0.5,
        input_dropout: 0.2,
        attention_dropout: 0.0,
        dtype,
        checkpoint: false,
    }
}

fn mode() -> Mode {
    Mode {
        training: true,
        seed: 3,
        step: 1,
    }
}

/// Loss and parameter gradients of one step on the whole graph, one worker.
fn whole_graph(ds: &Dataset, arch: Architecture, dtype: DType) -> (f64, Vec<Vec<f64>>) {
    let model = Model::new(config(arch, dtype), &ds.graph, 5).unwrap();
    let mut tape = Tape::new();
    let vars: Vec<Var> = model
        .params
        .iter()
        .map(|p| tape.leaf(p.value.clone(), true))
        .collect();
    let x = Var::constant(ds.features.cast(dtype).unwrap());
    let logp = model.forward(&mut tape, &x, &vars, mode()).unwrap();
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

/// Loss and parameter gradients of the same step on this worker's part, summed over workers.
fn one_part(
    comm: Arc<dyn Communicator>,
    dir: &Path,
    arch: Architecture,
    dtype: DType,
) -> (f64, Vec<Vec<f64>>) {
    let part = Part::load(dir, comm.rank()).unwrap();
    let graph = Arc::new(PartGraph::new(&part));
    let norm = if arch == Architecture::Gcn {
        Normalisation::Gcn
    } else {
        Normalisation::Mean
    };
    let agg = Arc::new(RingAggregation::new(comm.clone(), graph, norm));
    let model = Model::with_aggregation(config(arch, dtype), 5, agg).unwrap();
    let mut tape = Tape::new();
    let vars: Vec<Var> = model
        .params
        .iter()
        .map(|p| tape.leaf(p.value.clone(), true))
        .collect();
    let x = Var::constant(part.features.cast(dtype).unwrap());
    let ids: Arc<[i64]> = part.orig_ids.clone().into();
    let logp = model
        .forward_rows(&mut tape, &x, &vars, mode(), ids)
        .unwrap();
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

fn partitioned(ds: &Dataset, parts: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphloom-sar-{}-{parts}", std::process::id()));
    write_parts(
        ds,
        &metis(&ds.graph, &ds.train_idx, parts, 0).unwrap(),
        &dir,
    )
    .unwrap();
    dir
}

#[test]
fn sar_sage_and_gcn_match_one_worker_in_f64_and_f32() {
    let ds = dataset();
    for parts in [2, 3, 4] {
        let dir = partitioned(&ds, parts);
        let cases = [Architecture::Sage, Architecture::Gcn]
            .into_iter()
            .flat_map(|a| [(a, DType::F64), (a, DType::F32)]);
        for (arch, dtype) in cases {
            let (want_loss, want) = whole_graph(&ds, arch, dtype);
            for (got_loss, got) in Local::run(parts, |comm| {
                Ok::<_, String>(one_part(comm, &dir, arch, dtype))
            })
            .into_iter()
            .map(|r| r.unwrap())
            {
                if dtype == DType::F64 {
                    assert!(
                        (got_loss - want_loss).abs() <= 1e-9 * want_loss.abs(),
                        "{parts} parts: loss {got_loss} vs {want_loss}"
                    );
                    for (g, w) in got.iter().zip(&want) {
                        for (a, b) in g.iter().zip(w) {
                            assert!(
                                (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
                                "{parts} parts: {a} vs {b}"
                            );
                        }
                    }
                } else {
                    assert!((got_loss - want_loss).abs() <= 1e-5 * want_loss.abs());
                    for (g, w) in got.iter().zip(&want) {
                        let diff: f64 = g
                            .iter()
                            .zip(w)
                            .map(|(a, b)| (a - b).powi(2))
                            .sum::<f64>()
                            .sqrt();
                        let norm: f64 = w.iter().map(|b| b * b).sum::<f64>().sqrt();
                        assert!(
                            diff <= 1e-4 * norm,
                            "{parts} parts: relative difference {}",
                            diff / norm
                        );
                    }
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;

    const DIR_ENV: &str = "GRAPHLOOM_SAR_TEST_DIR";

    #[test]
    #[ignore = "one rank of an mpirun job, started by the mpi_ tests"]
    fn rank_sar_sage_matches_one_worker() {
        let dir = PathBuf::from(std::env::var(DIR_ENV).expect("set by the mpi_ test"));
        graphloom_comm::mpi::run_rank(|comm| {
            let (want_loss, want) = whole_graph(&dataset(), Architecture::Sage, DType::F64);
            let (got_loss, got) = one_part(comm, &dir, Architecture::Sage, DType::F64);
            if (got_loss - want_loss).abs() > 1e-9 * want_loss.abs() {
                return Err(format!("loss {got_loss} vs {want_loss}"));
            }
            for (g, w) in got.iter().zip(&want) {
                for (a, b) in g.iter().zip(w) {
                    if (a - b).abs() > 1e-9 * (1.0 + b.abs()) {
                        return Err(format!("gradient {a} vs {b}"));
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn mpi_sar_sage_matches_one_worker() {
        let ds = dataset();
        for np in [2, 4] {
            let dir = partitioned(&ds, np);
            let out = graphloom_comm::launch::mpirun(np)
                .env(DIR_ENV, &dir)
                .arg(std::env::current_exe().unwrap())
                .args([
                    "mpi::rank_sar_sage_matches_one_worker",
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
