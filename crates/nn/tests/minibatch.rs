//! Mini-batch training: a model on full-neighbour blocks computes exactly what it computes on
//! the whole graph (values and parameter gradients, in f64); sampled training learns; bad
//! configurations are refused.

use std::sync::Arc;

use graphloom_comm::Local;
use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::sample::{CsrSource, Fanouts, Sampler, SamplerKind};
use graphloom_graph::Dataset;
use graphloom_nn::batches::epoch_batches;
use graphloom_nn::kernels::aggregate::GcnNorm;
use graphloom_nn::layers::Aggregation;
use graphloom_nn::minibatch::{train_mini_batch, Inputs, MiniBatchConfig};
use graphloom_nn::train::TrainConfig;
use graphloom_nn::{
    Architecture, GraphInput, LayerGraph, Mode, Model, ModelConfig, NodeGraph, OptimizerKind,
};
use graphloom_store::{Layout, Location, StoreSpec, StoreTensor};
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::autodiff::ops::Probability;
use graphloom_tensor::{DType, Tape, Tensor, Var};

fn fanouts(f: &[i64]) -> Fanouts {
    Fanouts::new(f.to_vec()).unwrap()
}

fn p(p: f64) -> Probability {
    Probability::new(p).unwrap()
}

/// Columns of the edge features [`dataset`] gives each edge (GINE's input).
const EDGE_DIM: usize = 3;

fn dataset() -> Dataset {
    let mut ds = generate(&SyntheticConfig {
        nodes: 500,
        avg_degree: 6,
        feat_dim: 12,
        classes: 4,
        seed: 8,
        ..Default::default()
    })
    .unwrap();
    let e = ds.graph.num_edges();
    let values: Vec<f32> = (0..e * EDGE_DIM)
        .map(|i| ((i * 7919) % 97) as f32 / 48.0 - 1.0)
        .collect();
    ds.edge_features = Some(Tensor::from_vec(values, &[e, EDGE_DIM]).unwrap());
    ds
}

fn config(arch: Architecture, dtype: DType) -> ModelConfig {
    ModelConfig {
        arch,
        in_dim: 12,
        out_dim: 4,
        layers: 3,
        heads: 2,
        out_heads: 2,
        edge_dim: EDGE_DIM,
        // SIGN's input: the features and 2 propagated hops, 4 columns each.
        hops: if arch == Architecture::Sign { 2 } else { 10 },
        dropout: Probability::ZERO,
        input_dropout: Probability::ZERO,
        dtype,
        ..Default::default()
    }
}

/// Loss over `seeds` and the gradient of every parameter, from the whole graph or from
/// full-neighbour blocks around the seeds.
fn loss_and_grads(
    ds: &Dataset,
    model: &Model,
    seeds: &[u32],
    blocks: bool,
) -> (Vec<f64>, f64, Vec<Vec<f64>>) {
    let mut tape = Tape::new();
    let vars: Vec<Var> = model
        .params
        .iter()
        .map(|p| tape.leaf(p.value.clone(), true))
        .collect();
    let mode = Mode {
        training: true,
        seed: 1,
        step: 1,
    };
    let features = ds.features.cast(DType::F64).unwrap();
    let (logp, rows): (Var, Vec<usize>) = if blocks {
        let mut sampler = Sampler::new(ds.graph.num_nodes());
        let b = sampler
            .sample(
                &CsrSource::new(&ds.graph),
                seeds,
                &[-1, -1, -1],
                SamplerKind::Uniform,
                0,
                0,
            )
            .unwrap();
        // GCN's families normalise by the whole graph's degrees, as layer-wise inference does.
        let norm: Option<GcnNorm> = (model.cfg.arch.aggregation() == Aggregation::Gcn).then(|| {
            (0..ds.graph.num_nodes())
                .map(|v| {
                    let row = ds.graph.in_neighbors(v);
                    GcnNorm::of(row.len() as f64, row.contains(&(v as u32)))
                })
                .collect()
        });
        let graphs: Vec<LayerGraph> = b
            .iter()
            .map(|b| {
                let mut g =
                    LayerGraph::new(b, model.cfg.arch, ds.edge_features.as_ref(), DType::F64)
                        .unwrap();
                if let Some(norm) = &norm {
                    let rows: Vec<usize> = b.src_nodes.iter().map(|&v| v as usize).collect();
                    g.gcn_norm = Some(Arc::new(norm.select(&rows)));
                }
                g
            })
            .collect();
        let ids: Vec<usize> = b[0].src_nodes.iter().map(|&v| v as usize).collect();
        let width = features.shape()[1];
        let all = features.as_slice::<f64>().unwrap();
        let x: Vec<f64> = ids
            .iter()
            .flat_map(|&v| all[v * width..(v + 1) * width].to_vec())
            .collect();
        let x = Var::constant(Tensor::from_vec(x, &[ids.len(), width]).unwrap());
        let scores = model
            .forward(&mut tape, &x, &vars, GraphInput::Blocks(&graphs), mode)
            .unwrap();
        (
            Model::log_probabilities(&mut tape, &scores).unwrap(),
            (0..seeds.len()).collect(),
        )
    } else {
        let x = Var::constant(features);
        let edge_features = ds.edge_features.clone().map(Arc::new);
        let graph = NodeGraph::in_memory(model.cfg.arch, &ds.graph, None, edge_features).unwrap();
        let scores = model
            .forward(&mut tape, &x, &vars, GraphInput::Nodes(&graph), mode)
            .unwrap();
        (
            Model::log_probabilities(&mut tape, &scores).unwrap(),
            seeds.iter().map(|&s| s as usize).collect(),
        )
    };
    let width = logp.value().shape()[1];
    let all = logp.value().to_vec_f64();
    let seed_rows: Vec<f64> = rows
        .iter()
        .flat_map(|&r| all[r * width..(r + 1) * width].to_vec())
        .collect();
    let labels: Arc<[i64]> = seeds.iter().map(|&s| ds.labels[s as usize]).collect();
    let loss = ops::nll_loss(
        &mut tape,
        &logp,
        rows.clone().into(),
        labels,
        seeds.len() as f64,
    )
    .unwrap();
    let grads = tape.backward(&loss).unwrap();
    let grads = vars
        .iter()
        .map(|v| grads.get(v).unwrap().to_vec_f64())
        .collect();
    (seed_rows, loss.value().scalar_f64().unwrap(), grads)
}

#[test]
fn full_neighbour_blocks_compute_what_the_whole_graph_computes() {
    let ds = dataset();
    let seeds: Vec<u32> = (0..40).map(|i| i * 11 + 3).collect();
    // GCN and SGC take the whole graph's degrees here, which sampled training gives them with
    // fanouts -1 (`GcnNorm::of_sampled`). APPNP refuses blocks
    // (`appnp_refuses_sampled_blocks`).
    for &arch in Architecture::ALL
        .iter()
        .filter(|&&a| a != Architecture::Appnp)
    {
        let model = Model::new(config(arch, DType::F64), 5).unwrap();
        let (whole_rows, whole_loss, whole_grads) = loss_and_grads(&ds, &model, &seeds, false);
        let (block_rows, block_loss, block_grads) = loss_and_grads(&ds, &model, &seeds, true);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-10 * (1.0 + b.abs());
        assert!(
            whole_rows
                .iter()
                .zip(&block_rows)
                .all(|(a, b)| close(*a, *b)),
            "{arch:?} outputs"
        );
        assert!(
            close(block_loss, whole_loss),
            "{arch:?}: {block_loss} vs {whole_loss}"
        );
        for (g, w) in block_grads.iter().zip(&whole_grads) {
            assert!(
                g.iter().zip(w).all(|(a, b)| close(*a, *b)),
                "{arch:?} gradients"
            );
        }
    }
}

#[test]
fn appnp_refuses_sampled_blocks() {
    let ds = dataset();
    let model = Model::new(config(Architecture::Appnp, DType::F64), 5).unwrap();
    let mut sampler = Sampler::new(ds.graph.num_nodes());
    let seeds = [1, 2, 3];
    let blocks = sampler
        .sample(
            &CsrSource::new(&ds.graph),
            &seeds,
            &[-1, -1, -1],
            SamplerKind::Uniform,
            0,
            0,
        )
        .unwrap();
    let graphs: Vec<LayerGraph> = blocks
        .iter()
        .map(|b| LayerGraph::new(b, Architecture::Appnp, None, DType::F64).unwrap())
        .collect();
    let rows = blocks[0].src_nodes.len();
    let x = Var::constant(Tensor::zeros(&[rows, 12], DType::F64));
    let mut tape = Tape::new();
    let vars: Vec<Var> = model
        .params
        .iter()
        .map(|p| tape.leaf(p.value.clone(), true))
        .collect();
    let err = model
        .forward(
            &mut tape,
            &x,
            &vars,
            GraphInput::Blocks(&graphs),
            Mode::inference(),
        )
        .expect_err("APPNP over blocks");
    assert!(
        err.to_string().contains("propagates over all its hops"),
        "{err}"
    );
}

fn features_in_store(ds: &Dataset, comm: Arc<dyn graphloom_comm::Communicator>) -> StoreTensor {
    let spec = StoreSpec::new(
        ds.features.shape(),
        ds.features.dtype(),
        Layout::Continuous,
        Location::Host,
    );
    let mut t = StoreTensor::new(comm, spec).unwrap();
    t.fill_from_whole(ds.features.as_bytes()).unwrap();
    t
}

#[test]
fn sampled_training_learns_and_bad_configurations_are_refused() {
    let ds = dataset();
    let tc = TrainConfig {
        epochs: 15,
        lr: 0.01,
        weight_decay: 5e-4,
        optimizer: OptimizerKind::Adam,
        patience: None,
        seed: 2,
        eval_every: 1,
        snapshots: None,
    };
    for r in Local::run(1, |comm| {
        let features = features_in_store(&ds, comm.clone());
        for arch in [Architecture::Gcn, Architecture::Sage, Architecture::Gat] {
            let mut cfg = config(arch, DType::F32);
            cfg.layers = 2;
            cfg.dropout = p(0.2);
            let mut mb = MiniBatchConfig::new(fanouts(&[5, 5]), 64);
            mb.queue_depth = 2;
            let (report, stages) = train_mini_batch(
                ds.data(),
                Inputs::Features(&features),
                comm.clone(),
                cfg.clone(),
                &tc,
                &mb,
                |_| {},
            )
            .unwrap();
            assert!(
                report.test_score > 0.6,
                "{arch:?}: test accuracy {}",
                report.test_score
            );
            assert!(report.epochs.last().unwrap().loss < report.epochs[0].loss);
            assert!(stages.sample > 0.0 && stages.gather > 0.0 && stages.compute > 0.0);
            let bad = MiniBatchConfig {
                fanouts: fanouts(&[5]),
                ..mb
            };
            let err = train_mini_batch(
                ds.data(),
                Inputs::Features(&features),
                comm.clone(),
                cfg,
                &tc,
                &bad,
                |_| {},
            )
            .err()
            .unwrap();
            assert!(
                matches!(
                    &err,
                    graphloom_nn::Error::Mismatch {
                        what: "fanouts and layers",
                        ..
                    }
                ),
                "{err}"
            );
        }
        Ok::<(), graphloom_nn::Error>(())
    }) {
        r.unwrap();
    }
}

#[test]
fn workers_split_every_global_batch_and_together_hold_its_seeds() {
    let train: Vec<usize> = (0..1003).map(|i| i * 3).collect();
    let one = epoch_batches(&train, 4, 2, 100, 0, 1);
    for ranks in [2, 3] {
        let parts: Vec<Vec<Vec<u32>>> = (0..ranks)
            .map(|r| epoch_batches(&train, 4, 2, 100, r, ranks))
            .collect();
        for (step, batch) in one.iter().enumerate() {
            let joined: Vec<u32> = parts.iter().flat_map(|p| p[step].clone()).collect();
            assert_eq!(&joined, batch, "step {step} on {ranks} workers");
        }
    }
}

/// One epoch of data-parallel training in f64, with dropout: the parameters of every worker
/// after the epoch, and the epoch's loss.
fn train_on(arch: Architecture, workers: usize, batch_size: usize) -> Vec<(Vec<Vec<f64>>, f64)> {
    let tc = TrainConfig {
        epochs: 1,
        lr: 0.01,
        weight_decay: 5e-4,
        optimizer: OptimizerKind::Adam,
        patience: None,
        seed: 6,
        eval_every: 1,
        snapshots: None,
    };
    let mut ds = dataset();
    ds.features = ds.features.cast(DType::F64).unwrap();
    Local::run(workers, |comm| {
        let features = features_in_store(&ds, comm.clone());
        let mut cfg = config(arch, DType::F64);
        cfg.layers = 2;
        cfg.dropout = p(0.5);
        cfg.input_dropout = p(0.2);
        let mut mb = MiniBatchConfig::new(fanouts(&[4, 3]), batch_size);
        mb.queue_depth = 2;
        let (report, _) = train_mini_batch(
            ds.data(),
            Inputs::Features(&features),
            comm,
            cfg,
            &tc,
            &mb,
            |_| {},
        )?;
        let params = report
            .best_params
            .iter()
            .map(|p| p.value.to_vec_f64())
            .collect();
        Ok::<_, graphloom_nn::Error>((params, report.epochs[0].loss))
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

#[test]
fn two_workers_take_the_steps_of_one_to_1e_9_in_f64() {
    // 300 training nodes in batches of 299: the last global batch has one seed, so one
    // worker's slice is empty at that step.
    assert_eq!(dataset().train_idx.len(), 300);
    // GCN and SGC normalise a source by what it draws as a destination of its hop, not by
    // whether it is one in this worker's block, so their steps too do not depend on how the
    // batch is split.
    for arch in [
        Architecture::Sage,
        Architecture::GatV2,
        Architecture::Gin,
        Architecture::Gine,
        Architecture::Gcn,
        Architecture::Sgc,
    ] {
        let one = train_on(arch, 1, 299);
        let two = train_on(arch, 2, 299);
        let (want, want_loss) = &one[0];
        for (rank, (got, loss)) in two.iter().enumerate() {
            assert!(
                (loss - want_loss).abs() <= 1e-9 * want_loss.abs(),
                "{arch:?} rank {rank}: loss {loss} vs {want_loss}"
            );
            for (g, w) in got.iter().zip(want) {
                for (a, b) in g.iter().zip(w) {
                    assert!(
                        (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
                        "{arch:?} rank {rank}: {a} vs {b}"
                    );
                }
            }
        }
    }
}

/// A graph trained from a node-embedding table instead of features: the table learns (LazyAdam,
/// rows updated by their owners), and two workers train like one.
fn train_embedding(workers: usize) -> Vec<Vec<f64>> {
    let ds = generate(&SyntheticConfig {
        nodes: 400,
        avg_degree: 10,
        feat_dim: 1,
        classes: 2,
        homophily: 0.9,
        seed: 3,
        ..Default::default()
    })
    .unwrap();
    let tc = TrainConfig {
        epochs: 12,
        lr: 0.01,
        weight_decay: 0.0,
        optimizer: OptimizerKind::Adam,
        patience: None,
        seed: 1,
        eval_every: 1,
        snapshots: None,
    };
    Local::run(workers, |comm| {
        let spec = StoreSpec::new(&[400, 8], DType::F32, Layout::Distributed, Location::Host);
        let mut table = graphloom_store::Embedding::trainable(
            StoreTensor::new(comm.clone(), spec)?,
            graphloom_store::SparseOptimizer::lazy_adam(),
        )?;
        table.init_uniform(4, 0.3)?;
        let mut cfg = config(Architecture::Sage, DType::F32);
        cfg.in_dim = 8;
        cfg.out_dim = 2;
        cfg.layers = 2;
        let mut mb = MiniBatchConfig::new(fanouts(&[5, 5]), 60);
        mb.queue_depth = 2;
        let inputs = Inputs::Embedding {
            table: &mut table,
            lr: 0.05,
        };
        let (report, _) = train_mini_batch(ds.data(), inputs, comm, cfg, &tc, &mb, |_| {})?;
        assert!(
            report.test_score > 0.8,
            "test accuracy {}",
            report.test_score
        );
        Ok::<_, graphloom_nn::Error>(report.epochs.iter().map(|e| e.loss).collect::<Vec<f64>>())
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

#[test]
fn a_graph_without_features_trains_a_node_embedding_table() {
    let one = train_embedding(1);
    let two = train_embedding(2);
    for (a, b) in two[0].iter().zip(&one[0]) {
        assert!((a - b).abs() < 1e-4 * b.abs(), "{a} vs {b}");
    }
}

/// Accuracies of each epoch and the losses of a two-epoch f64 run on `workers` workers,
/// evaluated as `eval` says, with `batches_per_epoch`; also the steps of each epoch.
fn evaluated_run(
    arch: Architecture,
    workers: usize,
    eval: Option<graphloom_nn::minibatch::SampledEval>,
    batches_per_epoch: Option<usize>,
) -> (Vec<(f64, [f64; 3])>, usize) {
    let tc = TrainConfig {
        epochs: 2,
        lr: 0.01,
        weight_decay: 0.0,
        optimizer: OptimizerKind::Adam,
        patience: None,
        seed: 3,
        eval_every: 1,
        snapshots: None,
    };
    let mut ds = dataset();
    ds.features = ds.features.cast(DType::F64).unwrap();
    let steps = std::sync::atomic::AtomicUsize::new(0);
    let runs = Local::run(workers, |comm| {
        let rank = comm.rank();
        let features = features_in_store(&ds, comm.clone());
        let mut mb = MiniBatchConfig::new(fanouts(&[3, 2, 2]), 40);
        mb.queue_depth = 2;
        mb.batches_per_epoch = batches_per_epoch;
        mb.sampled_eval = eval.clone();
        let mut workload = graphloom_nn::minibatch::MiniBatch::new(
            ds.data(),
            Inputs::Features(&features),
            comm,
            config(arch, DType::F64),
            tc.seed,
            &mb,
        )?;
        workload.on_batch(|_, total| {
            if rank == 0 {
                steps.store(total, std::sync::atomic::Ordering::Relaxed)
            }
        });
        let mut records = Vec::new();
        graphloom_nn::train::fit(&mut workload, &tc, |r| {
            let a = r.evaluation.and_then(|e| e.accuracy()).unwrap();
            records.push((r.loss, [a.train, a.val, a.test]));
        })?;
        Ok::<_, graphloom_nn::Error>(records)
    });
    let records = runs.into_iter().next().unwrap().unwrap();
    (records, steps.into_inner())
}

#[test]
fn sampled_evaluation_over_all_neighbours_is_exact_evaluation() {
    use graphloom_nn::minibatch::SampledEval;
    let every = || SampledEval {
        fanouts: fanouts(&[-1, -1, -1]),
        nodes: usize::MAX,
    };
    // GCN is left out for the reason given in full_neighbour_blocks_compute_what_the_whole_
    // graph_computes: on blocks it normalises by block degrees.
    for arch in [Architecture::Sage, Architecture::Gat] {
        let (exact, _) = evaluated_run(arch, 1, None, None);
        let (sampled, _) = evaluated_run(arch, 1, Some(every()), None);
        assert_eq!(exact, sampled, "{arch:?}");
        // Two workers share each evaluation batch and add up their counts.
        let (two, _) = evaluated_run(arch, 2, Some(every()), None);
        assert_eq!(
            exact.iter().map(|r| r.1).collect::<Vec<_>>(),
            two.iter().map(|r| r.1).collect::<Vec<_>>(),
            "{arch:?}"
        );
    }
    // A subset of 30 nodes per split: accuracies are multiples of 1/30, the same each run;
    // an epoch capped at 4 batches runs 4 steps.
    let subset = SampledEval {
        fanouts: fanouts(&[2, 2, 2]),
        nodes: 30,
    };
    let (a, steps) = evaluated_run(Architecture::Sage, 1, Some(subset.clone()), Some(4));
    let (b, _) = evaluated_run(Architecture::Sage, 1, Some(subset), Some(4));
    assert_eq!(a, b);
    assert_eq!(steps, 4);
    for (_, acc) in &a {
        for x in acc {
            assert!((x * 30.0 - (x * 30.0).round()).abs() < 1e-9, "{x}");
        }
    }
}
