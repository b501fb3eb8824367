//! Link prediction: sampled blocks over all neighbours take the step the whole graph takes
//! (loss and updated parameters within 1e-9 in f64, GraphSAGE and GAT), two workers take the
//! steps of one, a model learns to tell edges from non-edges, and from a learnt embedding on a
//! graph without features.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use graphloom_comm::{Communicator, Local};
use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::sample::Fanouts;
use graphloom_graph::{
    npy, Csr, Dataset, FeaturesLocation, LinkSet, LinkSplit, MappedDataset, NodeId,
};
use graphloom_nn::link::metrics::LinkMetric;
use graphloom_nn::link::{LinkTask, NegativeSampling};
use graphloom_nn::minibatch::{Inputs, MiniBatch, MiniBatchConfig};
use graphloom_nn::task::Task;
use graphloom_nn::train::{fit, Evaluation, FullBatch, TrainConfig, TrainReport};
use graphloom_nn::{Architecture, Decoder, Head, ModelConfig, OptimizerKind};
use graphloom_store::{Embedding, Layout, Location, SparseOptimizer, StoreSpec, StoreTensor};
use graphloom_tensor::autodiff::ops::Probability;
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::DType;

/// A synthetic graph (classes in its features and edges) with a tenth of its undirected edges
/// held out for validation and a tenth for test, written with its link split to `dir`.
fn link_dataset(dir: &Path, feat_dim: usize) -> Dataset {
    let mut ds = generate(&SyntheticConfig {
        nodes: 300,
        avg_degree: 8,
        feat_dim: feat_dim.max(1),
        classes: 3,
        homophily: 0.9,
        seed: 11,
        ..Default::default()
    })
    .unwrap();
    let (src, dst) = ds.graph.edges();
    let key = RngKey::new(5, 0, 0);
    // Undirected edges u < v, each held out or not by a keyed draw.
    let mut sets: [Vec<(NodeId, NodeId)>; 3] = Default::default();
    for (&u, &v) in src.iter().zip(&dst) {
        if u < v {
            let r = key.bits(u as u64, v as u64) % 10;
            sets[usize::from(r == 0) + 2 * usize::from(r == 1)].push((u, v));
        }
    }
    let held: std::collections::HashSet<(NodeId, NodeId)> = sets[1]
        .iter()
        .chain(&sets[2])
        .flat_map(|&(u, v)| [(u, v), (v, u)])
        .collect();
    let kept: Vec<(NodeId, NodeId)> = src
        .iter()
        .zip(&dst)
        .map(|(&u, &v)| (u, v))
        .filter(|e| !held.contains(e))
        .collect();
    let n = ds.graph.num_nodes();
    let (ks, kd): (Vec<NodeId>, Vec<NodeId>) = kept.into_iter().unzip();
    ds.graph = Csr::from_edges(n, &ks, &kd);
    ds.meta.num_edges = ds.graph.num_edges();
    if feat_dim == 0 {
        ds.meta.feat_dim = 0;
        ds.features = graphloom_tensor::Tensor::zeros(&[n, 0], DType::F32);
    }
    let _ = std::fs::remove_dir_all(dir);
    ds.save(dir).unwrap();
    let all: std::collections::HashSet<(NodeId, NodeId)> =
        src.iter().zip(&dst).map(|(&u, &v)| (u, v)).collect();
    let negatives = |count: usize, salt: u64| -> Vec<(NodeId, NodeId)> {
        let key = RngKey::new(salt, 0, 1);
        (0..)
            .map(|i| {
                let b = key.bits(i, 0);
                ((b % n as u64) as NodeId, ((b >> 32) % n as u64) as NodeId)
            })
            .filter(|&(u, v)| u != v && !all.contains(&(u, v)) && !all.contains(&(v, u)))
            .take(count)
            .collect()
    };
    let root = dir.join("link_split");
    std::fs::create_dir_all(&root).unwrap();
    let write = |name: &str, pairs: &[(NodeId, NodeId)]| {
        let mut flat: Vec<i64> = pairs.iter().map(|p| i64::from(p.0)).collect();
        flat.extend(pairs.iter().map(|p| i64::from(p.1)));
        npy::write(&root.join(name), &flat, &[2, pairs.len()]).unwrap();
    };
    write("train_pos.npy", &sets[0]);
    write("valid_pos.npy", &sets[1]);
    write("test_pos.npy", &sets[2]);
    write("valid_neg.npy", &negatives(sets[1].len(), 1));
    write("test_neg.npy", &negatives(sets[2].len(), 2));
    ds
}

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("graphloom-link-{name}-{}", std::process::id()))
}

fn config(arch: Architecture, in_dim: usize) -> ModelConfig {
    ModelConfig {
        arch,
        in_dim,
        hidden: 8,
        out_dim: 6,
        heads: 2,
        out_heads: 2,
        dropout: Probability::new(0.3).unwrap(),
        input_dropout: Probability::new(0.2).unwrap(),
        // Attention dropout is keyed by rows of the graph it runs on, which differ between a
        // block and the whole graph.
        attention_dropout: Probability::ZERO,
        dtype: DType::F64,
        head: Head::Link(Decoder::Mlp),
        ..ModelConfig::default()
    }
}

fn sgd(epochs: usize) -> TrainConfig {
    TrainConfig {
        epochs,
        lr: 0.1,
        weight_decay: 0.0,
        optimizer: OptimizerKind::Sgd { momentum: 0.0 },
        seed: 3,
        ..TrainConfig::default()
    }
}

fn task(split: &LinkSplit, exclude_supervision: bool) -> Task<'_> {
    Task::Link(LinkTask {
        split,
        neg_ratio: 2,
        neg_sampling: NegativeSampling::Both,
        metric: LinkMetric::Auc,
        exclude_supervision,
    })
}

fn params(report: &TrainReport) -> Vec<f64> {
    report
        .best_params
        .iter()
        .flat_map(|p| p.value.to_vec_f64())
        .collect()
}

fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs()))
}

/// Mini-batch training on `workers` workers, every supervision pair in one global batch of
/// blocks sampled with `fanouts`: the report of each worker.
fn mini_batch(
    dir: &Path,
    cfg: &ModelConfig,
    fanouts: &[i64],
    batch: usize,
    epochs: usize,
    workers: usize,
    exclude: bool,
) -> Vec<TrainReport> {
    let ds = MappedDataset::open(dir).unwrap();
    let split = LinkSplit::open(dir, ds.data()).unwrap();
    Local::run(workers, |comm| {
        let f = ds.feature_table(comm.clone(), Layout::Continuous, FeaturesLocation::Host)?;
        let mut mb = MiniBatchConfig::new(Fanouts::new(fanouts.to_vec()).unwrap(), batch);
        mb.queue_depth = 2;
        let workload = MiniBatch::new(ds.data(), Inputs::Features(&f), comm, cfg.clone(), 3, &mb)?;
        let mut workload = workload.with_task(task(&split, exclude))?;
        fit(&mut workload, &sgd(epochs), |_| {})
    })
    .into_iter()
    .map(|r: graphloom_nn::Result<TrainReport>| r.unwrap())
    .collect()
}

#[test]
fn blocks_over_all_neighbours_take_the_step_of_the_whole_graph() {
    let dir = scratch("exact");
    let mut ds = link_dataset(&dir, 8);
    ds.features = ds.features.cast(DType::F64).unwrap();
    let split = LinkSplit::open(&dir, ds.data()).unwrap();
    let pairs = split.pairs(LinkSet::TrainPos).len();
    for arch in [Architecture::Sage, Architecture::Gat] {
        let cfg = config(arch, 8);
        let mut whole = FullBatch::new(&ds, cfg.clone(), 3)
            .unwrap()
            .with_task(task(&split, false), None)
            .unwrap();
        let want = fit(&mut whole, &sgd(1), |_| {}).unwrap();
        let got = mini_batch(&dir, &cfg, &[-1, -1], pairs, 1, 1, false).remove(0);
        let (a, b) = (got.epochs[0].loss, want.epochs[0].loss);
        assert!((a - b).abs() <= 1e-9 * b.abs(), "{arch:?}: loss {a} vs {b}");
        // One SGD step from the same parameters: equal parameters are equal gradients.
        assert!(close(&params(&got), &params(&want), 1e-9), "{arch:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_workers_take_the_steps_of_one() {
    let dir = scratch("workers");
    link_dataset(&dir, 8);
    let cfg = config(Architecture::Sage, 8);
    // Batches of 37 pairs: the last global batch has too few to give every worker one. With
    // exclusion, every worker hides the whole global batch's positives.
    for exclude in [false, true] {
        let one = mini_batch(&dir, &cfg, &[4, 3], 37, 2, 1, exclude).remove(0);
        let two = mini_batch(&dir, &cfg, &[4, 3], 37, 2, 2, exclude);
        for (rank, got) in two.iter().enumerate() {
            for (e, w) in got.epochs.iter().zip(&one.epochs) {
                assert!(
                    (e.loss - w.loss).abs() <= 1e-9 * w.loss.abs(),
                    "rank {rank}, exclude {exclude}: {} vs {}",
                    e.loss,
                    w.loss
                );
            }
            assert!(close(&params(got), &params(&one), 1e-9), "rank {rank}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn auc(report: &TrainReport) -> f64 {
    match report.best {
        Evaluation::Link(l) => l.test.auc,
        _ => panic!("a link prediction run evaluates links"),
    }
}

#[test]
fn models_learn_links_from_features_and_from_a_learnt_embedding() {
    let dir = scratch("learn");
    let ds = link_dataset(&dir, 8);
    let split = LinkSplit::open(&dir, ds.data()).unwrap();
    let tc = TrainConfig {
        epochs: 60,
        lr: 0.01,
        weight_decay: 0.0,
        eval_every: 10,
        ..TrainConfig::default()
    };
    let cfg = ModelConfig {
        dtype: DType::F32,
        head: Head::Link(Decoder::Dot),
        ..config(Architecture::Gcn, 8)
    };
    let mut features = FullBatch::new(&ds, cfg.clone(), 1)
        .unwrap()
        .with_task(task(&split, false), Some(64))
        .unwrap();
    let report = fit(&mut features, &tc, |_| {}).unwrap();
    assert!(
        auc(&report) > 0.8,
        "from features: test AUC {}",
        auc(&report)
    );
    // Without features: a learnt input table, trained by its sparse optimizer.
    let dir2 = scratch("learn-embedding");
    let plain = link_dataset(&dir2, 0);
    let plain = Dataset::load_without_features(&dir2).unwrap_or(plain);
    let split2 = LinkSplit::open(&dir2, plain.data()).unwrap();
    let comm: Arc<dyn Communicator> = Local::single();
    let spec = StoreSpec::new(&[300, 16], DType::F32, Layout::Distributed, Location::Host);
    let mut table = Embedding::trainable(
        StoreTensor::new(comm, spec).unwrap(),
        SparseOptimizer::lazy_adam(),
    )
    .unwrap();
    table.init_uniform(2, 0.25).unwrap();
    let cfg = ModelConfig {
        arch: Architecture::Sage,
        in_dim: 16,
        ..cfg
    };
    let mut learnt = FullBatch::with_embedding(&plain, cfg, 1, &mut table, 0.05)
        .unwrap()
        .with_task(task(&split2, false), None)
        .unwrap();
    let report = fit(&mut learnt, &TrainConfig { epochs: 100, ..tc }, |_| {}).unwrap();
    assert!(
        auc(&report) > 0.75,
        "from an embedding: test AUC {}",
        auc(&report)
    );
    assert!(report.best_input_embedding.is_some());
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&dir2).unwrap();
}

#[test]
fn an_mlp_decoder_whose_weight_overflows_a_count_is_refused() {
    // 2^32 x 2^32 is past usize: the count itself must not overflow.
    for out_dim in [1 << 20, 1 << 32] {
        let cfg = ModelConfig {
            out_dim,
            ..config(Architecture::Sage, 4)
        };
        let e = graphloom_nn::Model::param_shapes(&cfg)
            .unwrap_err()
            .to_string();
        assert!(e.contains("make more than 1099511627776 parameters"), "{e}");
    }
}
