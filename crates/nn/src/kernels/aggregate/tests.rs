use super::*;
use crate::testutil::{assert_close, awkward_graph, rand_tensor};
use graphloom_tensor::autodiff::gradcheck::max_gradient_error;
use graphloom_tensor::DType;

/// Naive weighted sum: loops over the edge list, no CSR tricks, f64.
fn naive_weighted(g: &graphloom_graph::Csr, x: &[f64], cols: usize, kind: &str) -> Vec<f64> {
    let n = g.num_nodes();
    let (src, dst) = g.edges();
    let mut deg = vec![0.0; n];
    for &d in &dst {
        deg[d as usize] += 1.0;
    }
    let has_loop: Vec<bool> = (0..n)
        .map(|v| {
            src.iter()
                .zip(&dst)
                .any(|(&s, &d)| s == d && d as usize == v)
        })
        .collect();
    let mut out = vec![0.0; n * cols];
    for (&s, &d) in src.iter().zip(&dst) {
        let (s, d) = (s as usize, d as usize);
        let w = match kind {
            "sum" => 1.0,
            "mean" => 1.0 / deg[d],
            _ => {
                let ds = deg[s] + if has_loop[s] { 0.0 } else { 1.0 };
                let dd = deg[d] + if has_loop[d] { 0.0 } else { 1.0 };
                1.0 / (ds * dd).sqrt()
            }
        };
        for j in 0..cols {
            out[d * cols + j] += w * x[s * cols + j];
        }
    }
    if kind == "gcn" {
        for v in 0..n {
            if !has_loop[v] {
                let w = 1.0 / (deg[v] + 1.0);
                for j in 0..cols {
                    out[v * cols + j] += w * x[v * cols + j];
                }
            }
        }
    }
    out
}

#[test]
fn weighted_sums_match_naive_and_finite_differences() {
    let g = awkward_graph(40, 90, 1);
    let gv = Arc::new(GraphView::new(&g, false));
    let x = rand_tensor(&[40, 5], 2);
    for (kind, agg) in [
        ("sum", WeightedSum::sum(gv.clone())),
        ("mean", WeightedSum::mean(gv.clone())),
        ("gcn", WeightedSum::gcn(gv.clone())),
    ] {
        let mut t = Tape::no_grad();
        let y = agg.apply(&mut t, &Var::constant(x.clone())).unwrap();
        assert_close(
            &y.value().to_vec_f64(),
            &naive_weighted(&g, &x.to_vec_f64(), 5, kind),
            1e-12,
            kind,
        );
        let f = move |t: &mut Tape, v: &[Var]| -> graphloom_tensor::Result<Var> {
            agg.apply(t, &v[0]).map_err(to_tensor_error)
        };
        let small = rand_tensor(&[40, 2], 3);
        assert!(
            max_gradient_error(&f, &[small], &[true], 1e-6).unwrap() < 1e-8,
            "{kind}"
        );
    }
}

/// A graph's own self-loops count once in GCN's normalisation wherever they sit in their row:
/// the rows of a graph with loops, reversed so each loop is out of order, give the naive
/// result of the sorted graph.
#[test]
fn gcn_counts_a_graphs_own_loop_once_in_any_row_order() {
    let base = awkward_graph(30, 80, 4);
    let (mut src, mut dst) = base.edges();
    for v in (0..30).step_by(3) {
        src.push(v);
        dst.push(v);
    }
    let sorted = graphloom_graph::Csr::from_edges(30, &src, &dst);
    let mut reversed = sorted.clone();
    for v in 0..30 {
        let (a, b) = (
            reversed.row_ptr[v] as usize,
            reversed.row_ptr[v + 1] as usize,
        );
        reversed.col_idx[a..b].reverse();
    }
    assert_ne!(reversed, sorted);
    let x = rand_tensor(&[30, 3], 5);
    let expect = naive_weighted(&sorted, &x.to_vec_f64(), 3, "gcn");
    for g in [&sorted, &reversed] {
        let agg = WeightedSum::gcn(Arc::new(GraphView::new(g, false)));
        let y = agg
            .apply(&mut Tape::no_grad(), &Var::constant(x.clone()))
            .unwrap();
        assert_close(&y.value().to_vec_f64(), &expect, 1e-12, "gcn");
    }
}

/// GCN and the mean with edge weights equal the dense formulas in f64: `D^-1/2 (A_w + I)
/// D^-1/2 X` with weighted degrees and a loop of weight 1 added where a node has none, and
/// `sum w x / sum w`. The gradients match finite differences.
#[test]
fn weighted_gcn_and_mean_match_the_dense_formula() {
    let base = awkward_graph(25, 70, 6);
    let (mut src, mut dst) = base.edges();
    src.extend([3, 7]);
    dst.extend([3, 7]);
    let g = graphloom_graph::Csr::from_edges(25, &src, &dst);
    let n = g.num_nodes();
    let key = graphloom_tensor::rng::RngKey::new(9, 0, 0);
    let w: Arc<[f32]> = (0..g.num_edges())
        .map(|e| 0.25 + key.uniform(e as u64, 0) as f32)
        .collect();
    let mut a = vec![0.0f64; n * n];
    let mut has_loop = vec![false; n];
    for v in 0..n {
        for e in g.row_ptr[v] as usize..g.row_ptr[v + 1] as usize {
            let u = g.col_idx[e] as usize;
            a[v * n + u] += w[e] as f64;
            has_loop[v] |= u == v;
        }
    }
    let x = rand_tensor(&[n, 4], 8);
    let xs = x.to_vec_f64();
    let dense = |m: &[f64]| -> Vec<f64> {
        let mut out = vec![0.0; n * 4];
        for v in 0..n {
            for u in 0..n {
                for j in 0..4 {
                    out[v * 4 + j] += m[v * n + u] * xs[u * 4 + j];
                }
            }
        }
        out
    };
    let deg: Vec<f64> = (0..n).map(|v| a[v * n..(v + 1) * n].iter().sum()).collect();
    let mut gcn = a.clone();
    for v in 0..n {
        if !has_loop[v] {
            gcn[v * n + v] += 1.0;
        }
    }
    let dinv: Vec<f64> = (0..n)
        .map(|v| 1.0 / gcn[v * n..(v + 1) * n].iter().sum::<f64>().sqrt())
        .collect();
    for v in 0..n {
        for u in 0..n {
            gcn[v * n + u] *= dinv[v] * dinv[u];
        }
    }
    let mut mean = a.clone();
    for v in 0..n {
        for u in 0..n {
            mean[v * n + u] = if deg[v] > 0.0 {
                a[v * n + u] / deg[v]
            } else {
                0.0
            };
        }
    }
    let gv = Arc::new(GraphView::new(&g, false).with_edge_weight(w).unwrap());
    for (kind, agg, expect) in [
        ("gcn", WeightedSum::gcn(gv.clone()), dense(&gcn)),
        ("mean", WeightedSum::mean(gv.clone()), dense(&mean)),
    ] {
        let y = agg
            .apply(&mut Tape::no_grad(), &Var::constant(x.clone()))
            .unwrap();
        assert_close(&y.value().to_vec_f64(), &expect, 1e-9, kind);
        let f = move |t: &mut Tape, v: &[Var]| -> graphloom_tensor::Result<Var> {
            agg.apply(t, &v[0]).map_err(to_tensor_error)
        };
        let small = rand_tensor(&[n, 2], 10);
        assert!(
            max_gradient_error(&f, &[small], &[true], 1e-6).unwrap() < 1e-8,
            "{kind}"
        );
    }
}

#[test]
fn f32_and_bf16_follow_f64() {
    let g = awkward_graph(300, 2000, 4);
    let gv = Arc::new(GraphView::new(&g, false));
    let x = rand_tensor(&[300, 16], 5);
    let agg = WeightedSum::gcn(gv);
    let mut t = Tape::no_grad();
    let want = agg
        .apply(&mut t, &Var::constant(x.clone()))
        .unwrap()
        .value()
        .to_vec_f64();
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2)] {
        let got = agg
            .apply(&mut t, &Var::constant(x.cast(dtype).unwrap()))
            .unwrap();
        assert_eq!(got.value().dtype(), dtype);
        assert_close(&got.value().to_vec_f64(), &want, tol, dtype.name());
    }
}

#[test]
fn wrong_row_count_is_an_error() {
    let gv = Arc::new(GraphView::new(&awkward_graph(10, 10, 1), false));
    let mut t = Tape::no_grad();
    let x = Var::constant(Tensor::zeros(&[9, 2], DType::F32));
    assert!(WeightedSum::sum(gv).apply(&mut t, &x).is_err());
}

#[test]
fn input_features_are_aggregated_once_per_tensor() {
    let gv = Arc::new(GraphView::new(&awkward_graph(12, 30, 2), false));
    let agg = WeightedSum::mean(gv);
    let features = |seed| {
        let _g = graphloom_tensor::memory::category_scope(Category::Features);
        rand_tensor(&[12, 3], seed).cast(DType::F64).unwrap()
    };
    let (x, y) = (features(1), features(2));
    let mut t = Tape::no_grad();
    let a = agg.apply(&mut t, &Var::constant(x.clone())).unwrap();
    let b = agg.apply(&mut t, &Var::constant(x.clone())).unwrap();
    assert!(
        a.value().is_same_view(b.value()),
        "the second call reuses the first result"
    );
    let c = agg.apply(&mut t, &Var::constant(y.clone())).unwrap();
    assert!(!c.value().is_same_view(a.value()));
    // An equal-valued activation (not features) is never served from the cache.
    let act = Var::constant(Tensor::from_f64(&y.to_vec_f64(), &[12, 3], DType::F64).unwrap());
    let d = agg.apply(&mut t, &act).unwrap();
    assert!(!d.value().is_same_view(c.value()));
    assert_eq!(d.value().to_vec_f64(), c.value().to_vec_f64());
}
