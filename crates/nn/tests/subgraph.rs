//! Subgraph mini-batches (Cluster-GCN, GraphSAINT): a batch's forward pass is the dense
//! formula over the subgraph its nodes induce (f64, against a naive reference); workers take
//! the steps of one worker; Cluster-GCN
//! with every cluster in one batch takes the steps of full-batch training (GINE's edge rows
//! included); both learn Cora.

use std::path::Path;
use std::sync::Arc;

use graphloom_comm::Local;
use graphloom_convert::planetoid;
use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::sample::{Fanouts, Sampler};
use graphloom_graph::subgraph::batching::{BatchDraw, SubgraphBatching};
use graphloom_graph::subgraph::clusters::metis_clusters;
use graphloom_graph::subgraph::saint::{Saint, SaintNorm, SaintSampler};
use graphloom_graph::subgraph::NodeSet;
use graphloom_graph::{Dataset, GraphData, NodeId};
use graphloom_nn::minibatch::{batch_blocks, train_mini_batch, Inputs, MiniBatchConfig};
use graphloom_nn::train::{train_full_batch, TrainConfig, TrainReport};
use graphloom_nn::{Architecture, GraphInput, Mode, Model, ModelConfig, OptimizerKind};
use graphloom_store::{Layout, Location, StoreSpec, StoreTensor};
use graphloom_tensor::autodiff::ops::Probability;
use graphloom_tensor::{DType, Tape, Tensor, Var};

fn dataset() -> Dataset {
    generate(&SyntheticConfig {
        nodes: 400,
        avg_degree: 6,
        feat_dim: 10,
        classes: 4,
        seed: 12,
        ..Default::default()
    })
    .unwrap()
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

/// Rows `ids` of a row-major matrix `width` wide.
fn rows_of(all: &[f64], width: usize, ids: &[NodeId]) -> Vec<f64> {
    ids.iter()
        .flat_map(|&v| all[v as usize * width..(v as usize + 1) * width].to_vec())
        .collect()
}

/// `a [n, k] * b [k, m]`.
fn matmul(a: &[f64], b: &[f64], n: usize, k: usize, m: usize) -> Vec<f64> {
    let mut out = vec![0.0; n * m];
    for i in 0..n {
        for j in 0..m {
            out[i * m + j] = (0..k).map(|t| a[i * k + t] * b[t * m + j]).sum();
        }
    }
    out
}

/// One layer of GCN or GraphSAGE over a weighted edge list `(src, dst, w)` of `n` nodes, from
/// the formulas: GCN `D^-1/2 (A + I) D^-1/2 X W + b` (degrees the weight sums plus the loop),
/// GraphSAGE `mean_w(X) W_l + b_l + X W_r` (weighted mean over in-edges).
fn naive_layer(
    arch: Architecture,
    edges: &[(usize, usize, f64)],
    x: &[f64],
    n: usize,
    width: usize,
    params: &[Vec<f64>],
    out: usize,
) -> Vec<f64> {
    let mut degree = vec![0.0; n];
    for &(_, v, w) in edges {
        degree[v] += w;
    }
    let mut agg = vec![0.0; n * width];
    let coefficient = |u: usize, v: usize, w: f64| match arch {
        Architecture::Gcn => w / ((degree[u] + 1.0) * (degree[v] + 1.0)).sqrt(),
        _ => w / degree[v],
    };
    for &(u, v, w) in edges {
        for c in 0..width {
            agg[v * width + c] += coefficient(u, v, w) * x[u * width + c];
        }
    }
    let mut y = match arch {
        Architecture::Gcn => {
            for v in 0..n {
                for c in 0..width {
                    agg[v * width + c] += x[v * width + c] / (degree[v] + 1.0);
                }
            }
            matmul(&agg, &params[0], n, width, out)
        }
        _ => {
            let own = matmul(x, &params[2], n, width, out);
            let nb = matmul(&agg, &params[0], n, width, out);
            nb.iter().zip(own).map(|(a, b)| a + b).collect()
        }
    };
    for v in 0..n {
        for c in 0..out {
            y[v * out + c] += params[1][c];
        }
    }
    y
}

#[test]
fn a_batch_forward_is_the_dense_formula_over_its_induced_subgraph_at_its_training_rows() {
    let mut ds = dataset();
    ds.features = ds.features.cast(DType::F64).unwrap();
    let data = ds.data();
    let saint = Saint::new(
        SaintSampler::RandomWalk {
            roots: 30,
            length: 2,
        },
        data,
    )
    .unwrap();
    let norm = SaintNorm::estimate(&saint, data, 4, 3, 1).unwrap();
    let nodes = saint.sample(data, 1, 7, 0);
    let n = nodes.len();
    // The batch's edges, from the whole graph's edge list: both ends in the batch.
    let position = |v: NodeId| nodes.binary_search(&v).ok();
    for (arch, normalised) in [
        (Architecture::Gcn, false),
        (Architecture::Gcn, true),
        (Architecture::Sage, true),
    ] {
        let mut edges = Vec::new();
        for v in 0..data.num_nodes() as NodeId {
            let lo = data.row_ptr[v as usize] as usize;
            for (k, &u) in data.in_neighbors(v).iter().enumerate() {
                if let (Some(pu), Some(pv)) = (position(u), position(v)) {
                    let w = if normalised {
                        norm.edge_norm(lo + k, v) as f32 as f64
                    } else {
                        1.0
                    };
                    edges.push((pu, pv, w));
                }
            }
        }
        let cfg = ModelConfig {
            arch,
            in_dim: 10,
            hidden: 6,
            out_dim: 4,
            layers: 2,
            dtype: DType::F64,
            ..Default::default()
        };
        let model = Model::new(cfg, 3).unwrap();
        let mut set = NodeSet::new(data.num_nodes());
        let sub = set.members(&nodes).induced(data);
        // The outputs of every third node of the batch (as its training nodes would be).
        let rows: Vec<usize> = (0..n).filter(|p| p % 3 == 1).collect();
        let mut sampler = Sampler::new(data.num_nodes());
        let norm_given = normalised.then_some(&norm);
        let (graphs, ids) =
            batch_blocks(arch, 2, &sub, norm_given, &rows, &mut sampler, None).unwrap();
        let ids: Vec<NodeId> = ids.iter().map(|&v| v as NodeId).collect();
        let x_in = rows_of(ds.features.as_slice::<f64>().unwrap(), 10, &ids);
        let x = rows_of(ds.features.as_slice::<f64>().unwrap(), 10, &nodes);
        let vars: Vec<Var> = model
            .params
            .iter()
            .map(|p| Var::constant(p.value.clone()))
            .collect();
        let mut tape = Tape::no_grad();
        let got = model
            .forward(
                &mut tape,
                &Var::constant(Tensor::from_vec(x_in, &[ids.len(), 10]).unwrap()),
                &vars,
                GraphInput::Blocks(&graphs),
                Mode::inference(),
            )
            .unwrap()
            .value()
            .to_vec_f64();
        let p: Vec<Vec<f64>> = model.params.iter().map(|p| p.value.to_vec_f64()).collect();
        let per_layer = p.len() / 2;
        let h = naive_layer(arch, &edges, &x, n, 10, &p[..per_layer], 6);
        let h: Vec<f64> = h.into_iter().map(|a| a.max(0.0)).collect();
        let want = naive_layer(arch, &edges, &h, n, 6, &p[per_layer..], 4);
        let want: Vec<f64> = rows
            .iter()
            .flat_map(|&p| want[p * 4..(p + 1) * 4].to_vec())
            .collect();
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(&want) {
            assert!(
                (a - b).abs() <= 1e-10 * (1.0 + b.abs()),
                "{arch:?} {normalised}: {a} vs {b}"
            );
        }
    }
}

fn loop_config(epochs: usize, seed: u64) -> TrainConfig {
    TrainConfig {
        epochs,
        lr: 0.01,
        weight_decay: 5e-4,
        optimizer: OptimizerKind::Adam,
        patience: None,
        seed,
        eval_every: 1,
        snapshots: None,
    }
}

/// Trains `cfg` on `ds` in the subgraph batches of `batching`, on one worker.
fn train_subgraphs(
    ds: &Dataset,
    cfg: ModelConfig,
    tc: &TrainConfig,
    batching: SubgraphBatching,
) -> TrainReport {
    train_on(1, ds, cfg, tc, batching).remove(0)
}

/// Trains `cfg` on `ds` in the subgraph batches of `batching` over `workers` workers: every
/// worker's report.
fn train_on(
    workers: usize,
    ds: &Dataset,
    cfg: ModelConfig,
    tc: &TrainConfig,
    batching: SubgraphBatching,
) -> Vec<TrainReport> {
    let fanouts = Fanouts::new(vec![-1; cfg.layers]).unwrap();
    let mut mb = MiniBatchConfig::new(fanouts, 1);
    mb.subgraph = Some(batching);
    let reports = Local::run(workers, |comm| {
        let features = features_in_store(ds, comm.clone());
        train_mini_batch(
            ds.data(),
            Inputs::Features(&features),
            comm,
            cfg.clone(),
            tc,
            &mb,
            |_| {},
        )
        .map(|(report, _)| report)
    });
    reports.into_iter().map(|r| r.unwrap()).collect()
}

#[test]
fn one_batch_of_every_cluster_takes_the_steps_of_full_batch_training() {
    let mut ds = dataset();
    ds.features = ds.features.cast(DType::F64).unwrap();
    // GINE's edge features: a batch's rows come by its subgraph's edge ids, then its blocks'.
    let e = ds.graph.num_edges();
    let values: Vec<f64> = (0..e * 3)
        .map(|i| ((i * 37) % 11) as f64 / 5.0 - 1.0)
        .collect();
    ds.edge_features = Some(Tensor::from_vec(values, &[e, 3]).unwrap());
    let (clusters, _) = metis_clusters(None, ds.data(), 5).unwrap();
    let p = |x| Probability::new(x).unwrap();
    for arch in [
        Architecture::Gcn,
        Architecture::Sage,
        Architecture::Gat,
        Architecture::Gine,
    ] {
        let cfg = ModelConfig {
            arch,
            edge_dim: 3,
            in_dim: 10,
            hidden: 8,
            out_dim: 4,
            layers: 2,
            heads: 2,
            dropout: p(0.5),
            input_dropout: p(0.2),
            dtype: DType::F64,
            ..Default::default()
        };
        let tc = loop_config(4, 5);
        let batching = SubgraphBatching::Cluster {
            clusters: Arc::new(clusters.clone()),
            per_batch: 5,
        };
        let sub = train_subgraphs(&ds, cfg.clone(), &tc, batching);
        let full = train_full_batch(&ds, cfg, &tc, |_| {}).unwrap();
        for (a, b) in sub.epochs.iter().zip(&full.epochs) {
            assert!(
                (a.loss - b.loss).abs() <= 1e-9 * b.loss,
                "{arch:?}: {} vs {}",
                a.loss,
                b.loss
            );
        }
        for (a, b) in sub.best_params.iter().zip(&full.best_params) {
            for (x, y) in a.value.to_vec_f64().iter().zip(b.value.to_vec_f64()) {
                assert!(
                    (x - y).abs() <= 1e-9 * (1.0 + y.abs()),
                    "{arch:?} {}: {x} vs {y}",
                    a.name
                );
            }
        }
    }
}

/// Cora, from the Planetoid files in the repository.
fn cora() -> Dataset {
    let raw = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/planetoid");
    planetoid::convert(&raw, "cora").unwrap()
}

#[test]
fn cluster_gcn_and_graphsaint_learn_cora() {
    let ds = cora();
    let data: GraphData<'_> = ds.data();
    let (clusters, _) = metis_clusters(None, data, 16).unwrap();
    let clusters = Arc::new(clusters);
    let walk = SaintSampler::RandomWalk {
        roots: 500,
        length: 2,
    };
    let saint = Saint::new(walk, data).unwrap();
    let steps = 2;
    let norm = SaintNorm::estimate(&saint, data, 50, steps, 0).unwrap();
    let runs = [
        (Architecture::Gcn, "cluster"),
        (Architecture::Sage, "cluster"),
        (Architecture::Gat, "cluster"),
        (Architecture::Gcn, "saint-rw"),
    ];
    for (arch, method) in runs {
        let batching = match method {
            "cluster" => SubgraphBatching::Cluster {
                clusters: clusters.clone(),
                per_batch: 4,
            },
            _ => SubgraphBatching::Saint {
                saint: Arc::new(saint.clone()),
                norm: Some(Arc::new(norm.clone())),
                steps,
            },
        };
        let cfg = ModelConfig {
            in_dim: ds.meta.feat_dim,
            out_dim: ds.meta.num_classes,
            ..ModelConfig::of(arch)
        };
        let tc = TrainConfig {
            lr: arch.defaults().lr,
            ..loop_config(60, 0)
        };
        let report = train_subgraphs(&ds, cfg, &tc, batching);
        assert!(
            report.test_score > 0.7,
            "{arch:?} {method}: test accuracy {}",
            report.test_score
        );
    }
}

#[test]
fn workers_take_the_steps_of_one_worker_to_1e_9_in_f64() {
    let mut ds = dataset();
    // Sparse features (5% non-zero, as bag-of-words), which a whole graph would multiply in
    // sparse form: dropout must still draw each node's own mask.
    let dense = ds.features.to_vec_f64();
    let sparse: Vec<f64> = dense
        .iter()
        .enumerate()
        .map(|(i, &x)| if i % 20 == 3 { x + 1.0 } else { 0.0 })
        .collect();
    ds.features = Tensor::from_vec(sparse, ds.features.shape()).unwrap();
    let data = ds.data();
    let (clusters, _) = metis_clusters(None, data, 6).unwrap();
    let walk = SaintSampler::RandomWalk {
        roots: 25,
        length: 2,
    };
    let saint = Saint::new(walk, data).unwrap();
    let norm = SaintNorm::estimate(&saint, data, 5, 3, 2).unwrap();
    let p = |x| Probability::new(x).unwrap();
    let batchings = [
        SubgraphBatching::Cluster {
            clusters: Arc::new(clusters),
            per_batch: 2,
        },
        SubgraphBatching::Saint {
            saint: Arc::new(saint),
            norm: Some(Arc::new(norm)),
            steps: 3,
        },
        // Samples of at most two nodes: with three workers, one has no training node.
        SubgraphBatching::Saint {
            saint: Arc::new(Saint::new(SaintSampler::Node { budget: 2 }, data).unwrap()),
            norm: None,
            steps: 6,
        },
    ];
    for batching in batchings {
        for arch in [Architecture::Gcn, Architecture::Sage, Architecture::Gat] {
            let cfg = ModelConfig {
                arch,
                in_dim: 10,
                hidden: 8,
                out_dim: 4,
                layers: 2,
                heads: 2,
                dropout: p(0.5),
                input_dropout: p(0.2),
                dtype: DType::F64,
                ..Default::default()
            };
            let tc = loop_config(2, 7);
            let one = train_subgraphs(&ds, cfg.clone(), &tc, batching.clone());
            for workers in [2, 3] {
                let runs = train_on(workers, &ds, cfg.clone(), &tc, batching.clone());
                for (rank, got) in runs.iter().enumerate() {
                    let what = format!(
                        "{arch:?}, {}, rank {rank} of {workers}",
                        batching.describe()
                    );
                    for (a, b) in got.epochs.iter().zip(&one.epochs) {
                        let (x, y) = (a.loss, b.loss);
                        assert!((x - y).abs() <= 1e-9 * y, "{what}: loss {x} vs {y}");
                    }
                    for (a, b) in got.best_params.iter().zip(&one.best_params) {
                        for (x, y) in a.value.to_vec_f64().iter().zip(b.value.to_vec_f64()) {
                            let close = (x - y).abs() <= 1e-9 * (1.0 + y.abs());
                            assert!(close, "{what}, {}: {x} vs {y}", a.name);
                        }
                    }
                }
            }
        }
    }
}

/// A draw of the other batching is an error, not an empty batch.
#[test]
fn a_draw_of_the_other_batching_is_refused() {
    let ds = dataset();
    let (clusters, _) = metis_clusters(None, ds.data(), 5).unwrap();
    let batching = SubgraphBatching::Cluster {
        clusters: Arc::new(clusters),
        per_batch: 2,
    };
    let draw = &batching.epoch(0, 0)[0];
    assert!(!batching.nodes(ds.data(), draw, 0, 0).unwrap().is_empty());
    let e = batching
        .nodes(ds.data(), &BatchDraw::Sample(0), 0, 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("Sample(0) is not a draw of Cluster-GCN"), "{e}");
}
