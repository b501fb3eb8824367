//! Whole-model properties: every family's gradients match finite differences; checkpointing
//! changes memory, not results; bf16 halves storage; results do not depend on the thread
//! count.

use std::sync::Arc;

use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::Dataset;
use graphloom_nn::{Architecture, GraphInput, Mode, Model, ModelConfig, NodeGraph};
use graphloom_tensor::autodiff::gradcheck::max_gradient_error;
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::autodiff::ops::Probability;
use graphloom_tensor::memory::{category_scope, set_thread_tracker, Category, MemoryTracker};
use graphloom_tensor::{DType, Tape, Var};

/// Columns of the edge features the datasets here give each edge (GINE's input).
const EDGE_DIM: usize = 3;

/// `ds` with `EDGE_DIM` deterministic features per edge, in `[-1, 1]`.
fn with_edge_features(mut ds: Dataset) -> Dataset {
    let e = ds.graph.num_edges();
    let values: Vec<f32> = (0..e * EDGE_DIM)
        .map(|i| ((i * 7919) % 97) as f32 / 48.0 - 1.0)
        .collect();
    ds.edge_features = Some(graphloom_tensor::Tensor::from_vec(values, &[e, EDGE_DIM]).unwrap());
    ds
}

fn dataset(dtype: DType) -> Dataset {
    let mut ds = generate(&SyntheticConfig {
        nodes: 600,
        avg_degree: 8,
        feat_dim: 24,
        classes: 5,
        seed: 3,
        ..Default::default()
    })
    .unwrap();
    ds.features = ds.features.cast(dtype).unwrap();
    with_edge_features(ds)
}

fn config(arch: Architecture, dtype: DType, checkpoint: bool) -> ModelConfig {
    ModelConfig {
        arch,
        in_dim: 24,
        hidden: 32,
        out_dim: 5,
        layers: 3,
        heads: 4,
        out_heads: 2,
        edge_dim: EDGE_DIM,
        // SIGN's input: the features and 2 propagated hops, 8 columns each.
        hops: if arch == Architecture::Sign { 2 } else { 10 },
        dropout: Probability::new(0.3).unwrap(),
        input_dropout: Probability::new(0.3).unwrap(),
        attention_dropout: Probability::new(0.2).unwrap(),
        dtype,
        checkpoint,
        ..Default::default()
    }
}

/// One training step on a fresh memory tracker: the loss, every parameter gradient, and the
/// peak bytes of activations and of features plus activations.
fn step(ds: &Dataset, cfg: ModelConfig) -> (f64, Vec<Vec<f64>>, usize, usize) {
    step_with(ds, cfg, false)
}

/// [`step`], optionally letting the model take its input as sparse features.
fn step_with(ds: &Dataset, cfg: ModelConfig, sparse: bool) -> (f64, Vec<Vec<f64>>, usize, usize) {
    let tracker = MemoryTracker::new();
    set_thread_tracker(tracker.clone());
    let features = {
        let _g = category_scope(Category::Features);
        ds.features.cast(cfg.dtype).unwrap()
    };
    let arch = cfg.arch;
    let model = Model::new(cfg, 7).unwrap();
    let edge_features = ds.edge_features.clone().map(Arc::new);
    let mut graph = NodeGraph::in_memory(arch, &ds.graph, None, edge_features).unwrap();
    if sparse {
        let copy = model.sparse_input(&features);
        assert!(copy.is_some(), "features should be sparse enough");
        graph = graph.with_sparse_input(copy);
    }
    let mut tape = Tape::new();
    let vars: Vec<Var> = model
        .params
        .iter()
        .map(|p| tape.leaf(p.value.clone(), true))
        .collect();
    let x = Var::constant(features);
    let scores = model
        .forward(
            &mut tape,
            &x,
            &vars,
            GraphInput::Nodes(&graph),
            Mode {
                training: true,
                seed: 1,
                step: 2,
            },
        )
        .unwrap();
    let logp = Model::log_probabilities(&mut tape, &scores).unwrap();
    let rows: Arc<[usize]> = ds.train_idx.clone().into();
    let labels: Arc<[i64]> = ds.train_idx.iter().map(|&i| ds.labels[i]).collect();
    let loss = ops::nll_loss(&mut tape, &logp, rows.clone(), labels, rows.len() as f64).unwrap();
    let report = tracker.report();
    let mut grads = tape.backward(&loss).unwrap();
    let g = vars
        .iter()
        .map(|v| grads.take(v).unwrap().to_vec_f64())
        .collect();
    (
        loss.value().scalar_f64().unwrap(),
        g,
        report.peak_of(Category::Activations),
        report.peak_of(Category::Activations) + ds.features.bytes(),
    )
}

#[test]
fn checkpointing_gives_the_same_loss_and_gradients_with_fewer_activation_bytes() {
    let ds = dataset(DType::F64);
    for &arch in Architecture::ALL {
        let (l1, g1, peak1, _) = std::thread::scope(|s| {
            s.spawn(|| step(&ds, config(arch, DType::F64, false)))
                .join()
                .unwrap()
        });
        let (l2, g2, peak2, _) = std::thread::scope(|s| {
            s.spawn(|| step(&ds, config(arch, DType::F64, true)))
                .join()
                .unwrap()
        });
        assert!(
            (l1 - l2).abs() <= 1e-12 * l1.abs(),
            "{arch:?}: {l1} vs {l2}"
        );
        for (a, b) in g1.iter().zip(&g2) {
            for (x, y) in a.iter().zip(b) {
                assert!(
                    (x - y).abs() <= 1e-10 * (1.0 + x.abs()),
                    "{arch:?}: {x} vs {y}"
                );
            }
        }
        // The tape already drops what no backward reads; checkpointing saves the rest (what
        // each layer's backward reads) for all but the layer being recomputed. SGC's hops
        // propagate the constant input, and APPNP's steps are linear, so they keep almost
        // nothing to save; SIGN's linears read only their inputs, which the next layer holds.
        let saved_enough = match arch {
            Architecture::Sgc | Architecture::Appnp | Architecture::Sign => peak2 <= peak1,
            _ => (peak2 as f64) < 0.8 * peak1 as f64,
        };
        assert!(
            saved_enough,
            "{arch:?}: checkpointed peak {peak2} vs {peak1}"
        );
    }
}

#[test]
fn f32_follows_f64_and_bf16_halves_feature_and_activation_bytes() {
    for &arch in Architecture::ALL {
        let ds64 = dataset(DType::F64);
        let (l64, _, _, _) = std::thread::scope(|s| {
            s.spawn(|| step(&ds64, config(arch, DType::F64, false)))
                .join()
                .unwrap()
        });
        let ds32 = dataset(DType::F32);
        let (l32, _, _, both32) = std::thread::scope(|s| {
            s.spawn(|| step(&ds32, config(arch, DType::F32, false)))
                .join()
                .unwrap()
        });
        let ds16 = dataset(DType::BF16);
        let (l16, _, _, both16) = std::thread::scope(|s| {
            s.spawn(|| step(&ds16, config(arch, DType::BF16, false)))
                .join()
                .unwrap()
        });
        assert!(
            (l32 - l64).abs() < 1e-5 * l64.abs(),
            "{arch:?}: f32 {l32} vs f64 {l64}"
        );
        assert!(
            (l16 - l64).abs() < 2e-2 * l64.abs(),
            "{arch:?}: bf16 {l16} vs f64 {l64}"
        );
        let ratio = both16 as f64 / both32 as f64;
        assert!(
            (0.45..0.62).contains(&ratio),
            "{arch:?}: bf16/f32 feature+activation bytes {ratio}"
        );
    }
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let ds = dataset(DType::F32);
    for arch in [
        Architecture::Gcn,
        Architecture::Gat,
        Architecture::Gin,
        Architecture::Appnp,
    ] {
        let run = |threads| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| step(&ds, config(arch, DType::F32, false)))
        };
        let (l1, g1, _, _) = run(1);
        let (l3, g3, _, _) = run(3);
        assert_eq!(l1.to_bits(), l3.to_bits(), "{arch:?}");
        assert_eq!(g1, g3, "{arch:?}");
    }
}

#[test]
fn sparse_input_gives_the_dense_loss_and_gradients() {
    // Keep about 5% of the features, as bag-of-words inputs are.
    let mut ds = dataset(DType::F64);
    let key = graphloom_tensor::rng::RngKey::new(4, 0, 0);
    let v: Vec<f64> = ds
        .features
        .to_vec_f64()
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            if key.uniform(i as u64, 0) < 0.05 {
                x
            } else {
                0.0
            }
        })
        .collect();
    ds.features = graphloom_tensor::Tensor::from_f64(&v, ds.features.shape(), DType::F64).unwrap();
    // SGC's first layer propagates, and reads no weight; SIGN's blocks' product takes no
    // sparse input, and GINE adds edge rows to its dense input before any product.
    for &arch in Architecture::ALL.iter().filter(|&&a| {
        !matches!(
            a,
            Architecture::Sgc | Architecture::Sign | Architecture::Gine
        )
    }) {
        // A first layer that narrows, so that it projects before aggregating.
        let cfg = ModelConfig {
            hidden: 8,
            ..config(arch, DType::F64, false)
        };
        let (l1, g1, _, _) = std::thread::scope(|s| {
            s.spawn(|| step_with(&ds, cfg.clone(), false))
                .join()
                .unwrap()
        });
        let (l2, g2, _, _) = std::thread::scope(|s| {
            s.spawn(|| step_with(&ds, cfg.clone(), true))
                .join()
                .unwrap()
        });
        assert!(
            (l1 - l2).abs() <= 1e-12 * l1.abs(),
            "{arch:?}: {l1} vs {l2}"
        );
        for (a, b) in g1.iter().zip(&g2) {
            for (x, y) in a.iter().zip(b) {
                assert!(
                    (x - y).abs() <= 1e-10 * (1.0 + x.abs()),
                    "{arch:?}: {x} vs {y}"
                );
            }
        }
    }
}

#[test]
fn every_family_s_gradients_match_finite_differences() {
    let ds = with_edge_features(
        generate(&SyntheticConfig {
            nodes: 30,
            avg_degree: 4,
            feat_dim: 5,
            classes: 3,
            seed: 8,
            ..Default::default()
        })
        .unwrap(),
    );
    let x = Var::constant(ds.features.cast(DType::F64).unwrap());
    let rows: Arc<[usize]> = ds.train_idx.clone().into();
    let labels: Arc<[i64]> = ds.train_idx.iter().map(|&i| ds.labels[i]).collect();
    // Every family, and GIN and GINE with the normalisation inside their MLPs.
    let families = Architecture::ALL.iter().map(|&a| (a, false));
    for (arch, batch_norm) in
        families.chain([(Architecture::Gin, true), (Architecture::Gine, true)])
    {
        // Narrow then wide layers, so both orders of GIN's and GCN's products run.
        let cfg = ModelConfig {
            arch,
            in_dim: 5,
            hidden: 7,
            out_dim: 3,
            layers: 3,
            heads: 2,
            out_heads: 2,
            edge_dim: EDGE_DIM,
            batch_norm,
            // SIGN's input: 5 blocks of 1 column.
            hops: if arch == Architecture::Sign { 4 } else { 3 },
            teleport: 0.2,
            dropout: Probability::ZERO,
            input_dropout: Probability::ZERO,
            attention_dropout: Probability::ZERO,
            dtype: DType::F64,
            ..Default::default()
        };
        let model = Model::new(cfg, 3).unwrap();
        let edge_features = ds.edge_features.clone().map(Arc::new);
        let graph = NodeGraph::in_memory(arch, &ds.graph, None, edge_features).unwrap();
        // GIN's eps starts at 0, where a wrong gradient for it could hide: move it.
        let params: Vec<_> = model
            .params
            .iter()
            .map(|p| match p.name.ends_with("eps") {
                true => graphloom_tensor::Tensor::from_f64(&[0.3], &[1], DType::F64).unwrap(),
                false => p.value.clone(),
            })
            .collect();
        let loss = |tape: &mut Tape, v: &[Var]| {
            let scores = model
                .forward(tape, &x, v, GraphInput::Nodes(&graph), Mode::inference())
                .map_err(|e| graphloom_tensor::Error::Autodiff(e.to_string()))?;
            let logp = Model::log_probabilities(tape, &scores)
                .map_err(|e| graphloom_tensor::Error::Autodiff(e.to_string()))?;
            ops::nll_loss(tape, &logp, rows.clone(), labels.clone(), rows.len() as f64)
        };
        let err = max_gradient_error(&loss, &params, &vec![true; params.len()], 1e-6).unwrap();
        assert!(err < 1e-6, "{arch:?}, batch norm {batch_norm}: {err}");
    }
}
