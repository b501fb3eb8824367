use super::*;
use crate::kernels::aggregate::to_tensor_error;
use crate::kernels::gat::FusedGat;
use crate::testutil::{assert_close, awkward_graph, rand_tensor};
use graphloom_tensor::autodiff::gradcheck::max_gradient_error;
use graphloom_tensor::autodiff::ops;
use graphloom_tensor::DType;

fn graph(self_loops: bool) -> Arc<GraphView> {
    Arc::new(GraphView::new(&awkward_graph(20, 40, 3), self_loops))
}

#[test]
fn sddmm_matches_naive_and_finite_differences() {
    let gv = graph(false);
    let (src, dst) = gv.by_dst.edges();
    for (score, width) in [(EdgeScore::AddSrcDst, 2), (EdgeScore::DotSrcDst, 6)] {
        let (a, b) = (rand_tensor(&[20, width], 1), rand_tensor(&[20, width], 2));
        let mut t = Tape::no_grad();
        let y = sddmm(
            &mut t,
            &gv,
            &Var::constant(a.clone()),
            &Var::constant(b.clone()),
            2,
            score,
        )
        .unwrap();
        let (av, bv) = (a.to_vec_f64(), b.to_vec_f64());
        let c = width / 2;
        let mut want = Vec::new();
        for (&u, &v) in src.iter().zip(&dst) {
            for k in 0..2 {
                want.push(match score {
                    EdgeScore::AddSrcDst => av[u as usize * 2 + k] + bv[v as usize * 2 + k],
                    EdgeScore::DotSrcDst => (0..c)
                        .map(|j| {
                            av[u as usize * width + k * c + j] * bv[v as usize * width + k * c + j]
                        })
                        .sum(),
                });
            }
        }
        assert_close(&y.value().to_vec_f64(), &want, 1e-12, "sddmm");
        let g2 = gv.clone();
        let f = move |t: &mut Tape, v: &[Var]| {
            sddmm(t, &g2, &v[0], &v[1], 2, score).map_err(to_tensor_error)
        };
        assert!(
            max_gradient_error(&f, &[a, b], &[true, true], 1e-6).unwrap() < 1e-8,
            "{score:?}"
        );
    }
}

#[test]
fn edge_softmax_and_weighted_sum_match_finite_differences() {
    let gv = graph(false);
    let e = gv.by_dst.num_edges();
    let (g1, g2) = (gv.clone(), gv.clone());
    let soft = move |t: &mut Tape, v: &[Var]| edge_softmax(t, &g1, &v[0]).map_err(to_tensor_error);
    assert!(max_gradient_error(&soft, &[rand_tensor(&[e, 3], 4)], &[true], 1e-6).unwrap() < 1e-8);
    let wsum = move |t: &mut Tape, v: &[Var]| {
        edge_weighted_sum(t, &g2, &v[0], &v[1]).map_err(to_tensor_error)
    };
    let inputs = [rand_tensor(&[e, 3], 5), rand_tensor(&[20, 6], 6)];
    assert!(max_gradient_error(&wsum, &inputs, &[true, true], 1e-6).unwrap() < 1e-8);
    // Softmax values: every node's in-edges sum to 1 per head (nodes with in-edges).
    let mut t = Tape::no_grad();
    let y = edge_softmax(&mut t, &gv, &Var::constant(rand_tensor(&[e, 3], 7)))
        .unwrap()
        .value()
        .to_vec_f64();
    for v in 0..20 {
        let (a, b) = (
            gv.by_dst.row_ptr[v] as usize,
            gv.by_dst.row_ptr[v + 1] as usize,
        );
        if a < b {
            for k in 0..3 {
                let s: f64 = (a..b).map(|i| y[i * 3 + k]).sum();
                assert!((s - 1.0).abs() < 1e-12);
            }
        }
    }
}

/// GAT attention built from the edge kernels, storing every edges x heads intermediate.
fn unfused_gat(
    t: &mut Tape,
    gv: &Arc<GraphView>,
    h: &Var,
    el: &Var,
    er: &Var,
    heads: usize,
) -> Result<Var> {
    let s = sddmm(t, gv, el, er, heads, EdgeScore::AddSrcDst)?;
    let s = ops::leaky_relu(t, &s, 0.2)?;
    let alpha = edge_softmax(t, gv, &s)?;
    edge_weighted_sum(t, gv, &alpha, h)
}

#[test]
fn fused_gat_equals_the_unfused_composition_in_values_and_gradients() {
    let gv = graph(true);
    let gat = FusedGat {
        graph: gv.clone(),
        heads: 2,
        negative_slope: 0.2,
        attention_dropout: None,
    };
    let inputs = [
        rand_tensor(&[20, 8], 8),
        rand_tensor(&[20, 2], 9),
        rand_tensor(&[20, 2], 10),
    ];
    let seed = rand_tensor(&[20, 8], 11);
    let run = |fused: bool| {
        let mut t = Tape::new();
        let v: Vec<Var> = inputs.iter().map(|x| t.leaf(x.clone(), true)).collect();
        let y = if fused {
            gat.apply(&mut t, &v[0], &v[1], &v[2]).unwrap()
        } else {
            unfused_gat(&mut t, &gv, &v[0], &v[1], &v[2], 2).unwrap()
        };
        let out = y.value().to_vec_f64();
        let mut g = t.backward_with(&y, seed.clone()).unwrap();
        let grads: Vec<Vec<f64>> = v.iter().map(|x| g.take(x).unwrap().to_vec_f64()).collect();
        (out, grads)
    };
    let (y1, g1) = run(true);
    let (y2, g2) = run(false);
    assert_close(&y1, &y2, 1e-12, "output");
    for (a, b) in g1.iter().zip(&g2) {
        assert_close(a, b, 1e-12, "gradient");
    }
}

/// The activation bytes GAT's attention keeps for the backward pass (everything the tape holds
/// after the forward pass but the inputs and the output), fused or composed, in f32.
fn attention_bytes(fused: bool, gv: &Arc<GraphView>, heads: usize, c: usize) -> usize {
    use graphloom_tensor::memory::{set_thread_tracker, thread_tracker, MemoryTracker};
    use graphloom_tensor::Category;
    set_thread_tracker(MemoryTracker::new());
    let n = gv.num_nodes();
    let cast = |t: Tensor| t.cast(DType::F32).unwrap();
    let inputs = [
        cast(rand_tensor(&[n, heads * c], 1)),
        cast(rand_tensor(&[n, heads], 2)),
        cast(rand_tensor(&[n, heads], 3)),
    ];
    let held = || thread_tracker().report().current_of(Category::Activations);
    let before = held();
    let mut t = Tape::new();
    let v: Vec<Var> = inputs.iter().map(|x| t.leaf(x.clone(), true)).collect();
    let y = if fused {
        let gat = FusedGat {
            graph: gv.clone(),
            heads,
            negative_slope: 0.2,
            attention_dropout: None,
        };
        gat.apply(&mut t, &v[0], &v[1], &v[2]).unwrap()
    } else {
        unfused_gat(&mut t, gv, &v[0], &v[1], &v[2], heads).unwrap()
    };
    held() - before - y.value().bytes()
}

/// The fused kernel keeps `[nodes, heads]` statistics where the composition keeps several
/// `[edges, heads]` tensors: at most a tenth of the bytes at the benchmark graphs' degree (20).
#[test]
fn fused_gat_keeps_at_most_a_tenth_of_the_unfused_attention_bytes() {
    let n = 2_000;
    let gv = Arc::new(GraphView::new(&awkward_graph(n, 20 * n, 4), true));
    let (fused, unfused) = (
        attention_bytes(true, &gv, 4, 16),
        attention_bytes(false, &gv, 4, 16),
    );
    assert!(fused > 0 && unfused > 0);
    assert!(
        fused * 10 <= unfused,
        "fused {fused} bytes, unfused {unfused} bytes"
    );
}
