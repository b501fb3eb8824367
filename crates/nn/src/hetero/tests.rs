//! The relational models against a naive f64 reference, finite differences, and the whole
//! graph against sampled blocks of every neighbour.

use std::sync::Arc;

use graphloom_graph::sample::{CsrSource, HeteroSampler, RelationSource};
use graphloom_graph::{Csr, NodeId};
use graphloom_tensor::autodiff::gradcheck::max_gradient_error;
use graphloom_tensor::autodiff::ops::{self, Probability};
use graphloom_tensor::{DType, Tape, Tensor, Var};

use super::*;
use crate::kernels::aggregate::WeightedSum;
use crate::model::{Mode, Model};
use crate::testutil::{assert_close, rand_tensor};
use crate::GraphView;

/// Three node types: `a` (7 nodes, 3 features; the target), `b` (5 nodes, 2 features) and `c`
/// (4 nodes, 2 features, no edges at all). Relations: `b -> a` (bipartite, node 6 of `a` has
/// no in-edge), `a -> a` (with a duplicate edge and a self-loop), `a -> b`, and `b -> b`
/// without edges.
struct Fixture {
    sizes: Vec<usize>,
    relations: Vec<RelationSpec>,
    csrs: Vec<Csr>,
    x: Vec<Tensor>,
}

fn fixture() -> Fixture {
    let rel = |name: &str, src_type, dst_type| RelationSpec {
        name: name.into(),
        src_type,
        dst_type,
    };
    let edges = |n_dst: usize, pairs: &[(NodeId, NodeId)]| {
        let (src, dst): (Vec<NodeId>, Vec<NodeId>) = pairs.iter().copied().unzip();
        Csr::from_edges(n_dst, &src, &dst)
    };
    Fixture {
        sizes: vec![7, 5, 4],
        relations: vec![
            rel("b__writes__a", 1, 0),
            rel("a__cites__a", 0, 0),
            rel("a__rev__b", 0, 1),
            rel("b__none__b", 1, 1),
        ],
        csrs: vec![
            edges(
                7,
                &[
                    (0, 0),
                    (1, 0),
                    (4, 1),
                    (2, 2),
                    (3, 3),
                    (3, 4),
                    (0, 5),
                    (4, 5),
                ],
            ),
            edges(
                7,
                &[
                    (1, 0),
                    (1, 0),
                    (2, 1),
                    (2, 2),
                    (0, 3),
                    (5, 4),
                    (6, 5),
                    (3, 0),
                ],
            ),
            edges(5, &[(0, 0), (1, 0), (2, 2), (3, 3), (5, 4), (6, 4)]),
            edges(5, &[]),
        ],
        x: vec![
            rand_tensor(&[7, 3], 1),
            rand_tensor(&[5, 2], 2),
            rand_tensor(&[4, 2], 3),
        ],
    }
}

fn config(kind: RelationalKind, f: &Fixture, dropout: f64) -> HeteroModelConfig {
    HeteroModelConfig {
        kind,
        types: vec!["a".into(), "b".into(), "c".into()],
        in_dims: vec![3, 2, 2],
        relations: f.relations.clone(),
        target: 0,
        hidden: 4,
        out_dim: 3,
        layers: 2,
        dropout: Probability::new(dropout).unwrap(),
        num_bases: None,
        dtype: DType::F64,
    }
}

/// The models the tests run: R-GCN with a weight per relation and with 2 bases, and R-SAGE.
fn configs(f: &Fixture, dropout: f64) -> Vec<HeteroModelConfig> {
    let bases = HeteroModelConfig {
        num_bases: Some(2),
        ..config(RelationalKind::Rgcn, f, dropout)
    };
    vec![
        config(RelationalKind::Rgcn, f, dropout),
        bases,
        config(RelationalKind::Rsage, f, dropout),
    ]
}

/// `x[rows] @ w` over plain vectors: `x` is `[n, i]`, `w` `[i, o]`.
fn times(x: &[f64], i: usize, w: &Tensor) -> Vec<f64> {
    let o = w.shape()[1];
    let w = w.to_vec_f64();
    let n = x.len() / i.max(1);
    let mut out = vec![0.0; n * o];
    for r in 0..n {
        for k in 0..i {
            for c in 0..o {
                out[r * o + c] += x[r * i + k] * w[k * o + c];
            }
        }
    }
    out
}

/// The mean over each destination's in-edges of `csr`, over plain vectors.
fn naive_mean(csr: &Csr, x: &[f64], cols: usize) -> Vec<f64> {
    let n = csr.num_nodes();
    let mut out = vec![0.0; n * cols];
    for v in 0..n {
        let nb = csr.in_neighbors(v);
        for &u in nb {
            for c in 0..cols {
                out[v * cols + c] += x[u as usize * cols + c] / nb.len() as f64;
            }
        }
    }
    out
}

/// R-GCN and R-SAGE as their definitions read, in f64 loops over the fixture's whole graph,
/// dropout off: the target type's class scores.
fn naive_forward(model: &HeteroModel, f: &Fixture) -> Vec<f64> {
    let cfg = &model.cfg;
    let param = |name: String| {
        model
            .params
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no parameter {name}"))
            .value
            .clone()
    };
    let mut h: Vec<Vec<f64>> = f.x.iter().map(Tensor::to_vec_f64).collect();
    let mut widths = cfg.in_dims.clone();
    for l in 0..cfg.layers {
        let last = l + 1 == cfg.layers;
        let out = if last { cfg.out_dim } else { cfg.hidden };
        let outputs = cfg.output_types(l);
        let mut next = vec![Vec::new(); cfg.types.len()];
        for t in (0..cfg.types.len()).filter(|&t| outputs[t]) {
            let n = f.sizes[t];
            let mut y = vec![0.0; n * out];
            let mut add = |v: Vec<f64>| y.iter_mut().zip(v).for_each(|(a, b)| *a += b);
            if cfg.kind == RelationalKind::Rgcn {
                let name = &cfg.types[t];
                add(times(
                    &h[t],
                    widths[t],
                    &param(format!("layers.{l}.loop.{name}.weight")),
                ));
                let b = param(format!("layers.{l}.loop.{name}.bias")).to_vec_f64();
                add((0..n * out).map(|i| b[i % out]).collect());
            }
            for (r, rel) in cfg.relations.iter().enumerate() {
                if rel.dst_type != t {
                    continue;
                }
                let s = rel.src_type;
                let mean = naive_mean(&f.csrs[r], &h[s], widths[s]);
                let prefix = format!("layers.{l}.rel.{}", rel.name);
                match cfg.kind {
                    RelationalKind::Rgcn => {
                        let w = match cfg.num_bases {
                            // sum_b a_rb V_b, with V_b row b of the bases, [in * out] each.
                            Some(b) => {
                                let a = param(format!("{prefix}.coefficients")).to_vec_f64();
                                let v = param(format!("layers.{l}.basis.{}", widths[s]));
                                let v = v.to_vec_f64();
                                let size = widths[s] * out;
                                let w: Vec<f64> = (0..size)
                                    .map(|i| (0..b).map(|k| a[k] * v[k * size + i]).sum())
                                    .collect();
                                Tensor::from_f64(&w, &[widths[s], out], DType::F64).unwrap()
                            }
                            None => param(format!("{prefix}.weight")),
                        };
                        add(times(&mean, widths[s], &w));
                    }
                    RelationalKind::Rsage => {
                        add(times(
                            &mean,
                            widths[s],
                            &param(format!("{prefix}.lin_l.weight")),
                        ));
                        add(times(
                            &h[t],
                            widths[t],
                            &param(format!("{prefix}.lin_r.weight")),
                        ));
                        let b = param(format!("{prefix}.lin_l.bias")).to_vec_f64();
                        add((0..n * out).map(|i| b[i % out]).collect());
                    }
                }
            }
            if !last {
                y.iter_mut().for_each(|v| *v = v.max(0.0));
            }
            next[t] = y;
        }
        h = next;
        widths = vec![out; cfg.types.len()];
    }
    h.swap_remove(cfg.target)
}

fn whole(f: &Fixture) -> HeteroLayerGraph {
    let csrs: Vec<&Csr> = f.csrs.iter().collect();
    HeteroLayerGraph::whole(&f.relations, &csrs, &f.sizes).unwrap()
}

#[test]
fn a_bipartite_mean_is_the_naive_mean_and_its_gradient_the_finite_differences() {
    let f = fixture();
    // b -> a: 5 sources, 7 destinations; a -> b: 7 sources, 5 destinations.
    for (r, src) in [(0, 1), (2, 0)] {
        let csr = &f.csrs[r];
        let mean = WeightedSum::mean(Arc::new(GraphView::bipartite(csr, f.sizes[src]).unwrap()));
        let x = &f.x[src];
        let mut tape = Tape::no_grad();
        let out = mean.apply(&mut tape, &Var::constant(x.clone())).unwrap();
        assert_eq!(out.value().shape(), [csr.num_nodes(), x.shape()[1]]);
        let expected = naive_mean(csr, &x.to_vec_f64(), x.shape()[1]);
        assert_close(
            &out.value().to_vec_f64(),
            &expected,
            1e-12,
            "bipartite mean",
        );
        let g = |tape: &mut Tape, v: &[Var]| {
            mean.apply(tape, &v[0])
                .map_err(crate::kernels::aggregate::to_tensor_error)
        };
        let err = max_gradient_error(&g, std::slice::from_ref(x), &[true], 1e-6).unwrap();
        assert!(err < 1e-8, "relation {r}: gradient error {err}");
    }
}

#[test]
fn a_relation_reading_a_source_beyond_its_type_is_refused() {
    let csr = Csr::from_edges(2, &[0, 3], &[0, 1]);
    let err = GraphView::bipartite(&csr, 3).err().expect("source 3 of 3");
    assert!(err.to_string().contains("source 3"), "{err}");
}

#[test]
fn both_models_compute_their_definitions_over_the_whole_graph() {
    let f = fixture();
    for cfg in configs(&f, 0.0) {
        let kind = cfg.kind;
        let model = HeteroModel::new(cfg, 5).unwrap();
        let graph = whole(&f);
        let mut tape = Tape::no_grad();
        let inputs: Vec<Var> = f.x.iter().cloned().map(Var::constant).collect();
        let params: Vec<Var> = model
            .params
            .iter()
            .map(|p| Var::constant(p.value.clone()))
            .collect();
        let out = model
            .forward(
                &mut tape,
                &inputs,
                &params,
                &[&graph, &graph],
                Mode::inference(),
            )
            .unwrap();
        assert_eq!(out.value().shape(), [7, 3]);
        let expected = naive_forward(&model, &f);
        assert_close(&out.value().to_vec_f64(), &expected, 1e-12, kind.name());
    }
}

#[test]
fn the_last_layer_has_parameters_only_for_what_reaches_the_target() {
    let f = fixture();
    let model = HeteroModel::new(config(RelationalKind::Rgcn, &f, 0.0), 5).unwrap();
    let names: Vec<&str> = model.params.iter().map(|p| p.name.as_str()).collect();
    assert!(names.contains(&"layers.1.rel.b__writes__a.weight"));
    assert!(names.contains(&"layers.1.loop.a.weight"));
    // The last layer outputs only the target `a`: nothing into `b`, nothing of `c`.
    assert!(!names
        .iter()
        .any(|n| n.starts_with("layers.1.rel.a__rev__b")));
    assert!(!names.iter().any(|n| n.starts_with("layers.1.loop.b")));
    // `c` has no edges: no layer reads or outputs it.
    assert!(!names.iter().any(|n| n.contains(".loop.c")), "{names:?}");
}

#[test]
fn parameter_gradients_are_the_finite_differences() {
    let f = fixture();
    for cfg in configs(&f, 0.0) {
        let kind = cfg.kind;
        let model = HeteroModel::new(cfg, 9).unwrap();
        let graph = whole(&f);
        let mut all: Vec<Tensor> = f.x.clone();
        all.extend(model.params.iter().map(|p| p.value.clone()));
        let types = f.x.len();
        let g = |tape: &mut Tape, v: &[Var]| {
            model
                .forward(
                    tape,
                    &v[..types],
                    &v[types..],
                    &[&graph, &graph],
                    Mode::inference(),
                )
                .map_err(crate::kernels::aggregate::to_tensor_error)
        };
        // Inputs too: a learnt embedding's rows take these gradients.
        let wrt = vec![true; all.len()];
        let err = max_gradient_error(&g, &all, &wrt, 1e-6).unwrap();
        assert!(err < 1e-7, "{}: gradient error {err}", kind.name());
    }
}

/// The loss over `seeds` of the target type and its gradients (parameters, then inputs),
/// with dropout on at step 3.
fn loss_and_gradients(
    model: &HeteroModel,
    inputs: &[Tensor],
    graphs: &[&HeteroLayerGraph],
    rows: &[usize],
    labels: &[i64],
) -> (f64, Vec<Vec<f64>>) {
    let mut tape = Tape::new();
    let params: Vec<Var> = model
        .params
        .iter()
        .map(|p| tape.leaf(p.value.clone(), true))
        .collect();
    let xs: Vec<Var> = inputs.iter().map(|x| tape.leaf(x.clone(), true)).collect();
    let mode = Mode {
        training: true,
        seed: 11,
        step: 3,
    };
    let scores = model
        .forward(&mut tape, &xs, &params, graphs, mode)
        .unwrap();
    let logp = Model::log_probabilities(&mut tape, &scores).unwrap();
    let loss = ops::nll_loss(
        &mut tape,
        &logp,
        rows.into(),
        labels.into(),
        rows.len() as f64,
    )
    .unwrap();
    let mut grads = tape.backward(&loss).unwrap();
    let value = loss.value().scalar_f64().unwrap();
    let g = params
        .iter()
        .map(|p| grads.take(p).map_or(vec![], |t| t.to_vec_f64()))
        .collect();
    (value, g)
}

#[test]
fn sampled_blocks_of_every_neighbour_give_the_whole_graphs_loss_and_gradients() {
    let f = fixture();
    let seeds: Vec<NodeId> = vec![5, 0, 3];
    let labels = [2i64, 0, 1];
    for cfg in configs(&f, 0.5) {
        let model = HeteroModel::new(cfg, 4).unwrap();
        let graph = whole(&f);
        let rows: Vec<usize> = seeds.iter().map(|&v| v as usize).collect();
        let (loss, grads) = loss_and_gradients(&model, &f.x, &[&graph, &graph], &rows, &labels);

        let sources: Vec<CsrSource<'_>> = f.csrs.iter().map(CsrSource::new).collect();
        let relations: Vec<RelationSource<'_>> = f
            .relations
            .iter()
            .zip(&sources)
            .map(|(r, s)| RelationSource {
                src_type: r.src_type,
                dst_type: r.dst_type,
                graph: s,
            })
            .collect();
        let all = vec![vec![-1i64; 4]; 2];
        let blocks = HeteroSampler::new(&f.sizes)
            .sample(&relations, 0, &seeds, &all, 1, 0)
            .unwrap();
        let graphs: Vec<HeteroLayerGraph> = blocks
            .iter()
            .map(|b| HeteroLayerGraph::from_block(&f.relations, b).unwrap())
            .collect();
        let inputs: Vec<Tensor> = blocks[0]
            .src_nodes
            .iter()
            .zip(&f.x)
            .map(|(ids, x)| {
                let cols = x.shape()[1];
                let v = x.to_vec_f64();
                let rows: Vec<f64> = ids
                    .iter()
                    .flat_map(|&i| v[i as usize * cols..(i as usize + 1) * cols].to_vec())
                    .collect();
                Tensor::from_f64(&rows, &[ids.len(), cols], DType::F64).unwrap()
            })
            .collect();
        let refs: Vec<&HeteroLayerGraph> = graphs.iter().collect();
        let (sampled_loss, sampled_grads) =
            loss_and_gradients(&model, &inputs, &refs, &[0, 1, 2], &labels);
        assert!(
            (loss - sampled_loss).abs() <= 1e-9,
            "{loss} vs {sampled_loss}"
        );
        for (p, (a, b)) in model.params.iter().zip(grads.iter().zip(&sampled_grads)) {
            assert_close(a, b, 1e-9, &p.name);
        }
    }
}

#[test]
fn layer_wise_inference_in_chunks_is_the_whole_graph_pass() {
    use graphloom_graph::format::hetero::{HeteroMeta, NodeType};
    use graphloom_graph::{HeteroGraph, TypedRelation};
    use graphloom_store::{Layout, Location, StoreSpec, StoreTensor};

    let f = fixture();
    let names = ["a", "b", "c"];
    let graph = HeteroGraph {
        meta: HeteroMeta {
            name: "fixture".into(),
            format: "hetero".into(),
            node_types: names
                .iter()
                .zip(&f.sizes)
                .map(|(n, &num_nodes)| {
                    let t = NodeType {
                        num_nodes,
                        feat_dim: 0,
                        feat_dtype: "f32".into(),
                    };
                    (n.to_string(), t)
                })
                .collect(),
            edge_types: Vec::new(),
            target_node_type: "a".into(),
            num_classes: 3,
            directed: true,
        },
        types: names.iter().map(|n| n.to_string()).collect(),
        type_sizes: f.sizes.clone(),
        target: 0,
        relations: f
            .relations
            .iter()
            .zip(&f.csrs)
            .map(|(r, csr)| TypedRelation {
                name: r.name.clone(),
                src_type: r.src_type,
                dst_type: r.dst_type,
                csr: csr.clone().into(),
            })
            .collect(),
        features: Vec::new(),
        labels: Vec::new(),
        splits: Default::default(),
    };
    let comm = graphloom_comm::Local::single();
    for cfg in configs(&f, 0.5) {
        let kind = cfg.kind;
        let model = HeteroModel::new(cfg, 2).unwrap();
        let mut inputs: Vec<TypeInput> = f
            .x
            .iter()
            .map(|x| {
                let spec = StoreSpec::new(x.shape(), x.dtype(), Layout::Continuous, Location::Host);
                let mut t = StoreTensor::new(comm.clone(), spec).unwrap();
                t.fill_from_whole(x.as_bytes()).unwrap();
                TypeInput::Features(t)
            })
            .collect();
        let params: Vec<Tensor> = model.params.iter().map(|p| p.value.clone()).collect();
        let mut sampler = HeteroSampler::new(&f.sizes);
        // Chunks of 3 destinations: the 7 nodes of `a` in three chunks, the 5 of `b` in two.
        let chunked = super::inference::layer_outputs(
            &model,
            &graph,
            &f.relations,
            &mut inputs,
            &params,
            &mut sampler,
            3,
            true,
            super::inference::Upto::LogProbabilities,
        )
        .unwrap()
        .unwrap()
        .swap_remove(0)
        .unwrap();
        let classes = super::inference::infer_layerwise(
            &model,
            &graph,
            &f.relations,
            &mut inputs,
            &params,
            &mut sampler,
            3,
            true,
        )
        .unwrap()
        .unwrap();
        let whole_graph = whole(&f);
        let mut tape = Tape::no_grad();
        let xs: Vec<Var> = f.x.iter().cloned().map(Var::constant).collect();
        let ps: Vec<Var> = params.iter().cloned().map(Var::constant).collect();
        let scores = model
            .forward(
                &mut tape,
                &xs,
                &ps,
                &[&whole_graph, &whole_graph],
                Mode::inference(),
            )
            .unwrap();
        let expected = Model::log_probabilities(&mut tape, &scores).unwrap();
        assert_close(
            &chunked.to_vec_f64(),
            &expected.value().to_vec_f64(),
            1e-12,
            kind.name(),
        );
        let predicted = crate::train::predicted_classes(expected.value());
        let predicted: Vec<i64> = predicted.into_iter().map(|c| c as i64).collect();
        assert_eq!(classes, predicted, "{}", kind.name());
    }
}

#[test]
fn the_parameter_count_is_the_parameters_made_and_bounds_widths_before_allocating() {
    let f = fixture();
    for cfg in configs(&f, 0.0) {
        let model = HeteroModel::new(cfg.clone(), 1).unwrap();
        let made: usize = model.params.iter().map(|p| p.value.numel()).sum();
        assert_eq!(
            cfg.param_count(),
            Some(made),
            "{:?} {:?}",
            cfg.kind,
            cfg.num_bases
        );
    }
    // An input width past any memory is refused, not allocated (nor overflowed).
    let huge = HeteroModelConfig {
        in_dims: vec![3, usize::MAX, 2],
        ..config(RelationalKind::Rgcn, &f, 0.0)
    };
    let err = HeteroModel::new(huge, 1).err().expect("refused");
    assert!(err.to_string().contains("parameters"), "{err}");
    // More bases than relations decompose nothing.
    let bases = HeteroModelConfig {
        num_bases: Some(5),
        ..config(RelationalKind::Rgcn, &f, 0.0)
    };
    let err = HeteroModel::new(bases, 1).err().expect("refused");
    assert!(err.to_string().contains("5 bases for 4 relations"), "{err}");
}
