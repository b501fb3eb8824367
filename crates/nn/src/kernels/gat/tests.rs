use super::*;
use crate::testutil::{assert_close, awkward_graph, rand_tensor};
use graphloom_tensor::autodiff::gradcheck::max_gradient_error;
use graphloom_tensor::rng::RngKey;

/// Naive GAT attention: per destination, per head, an explicit list of coefficients.
fn naive(gat: &FusedGat, h: &[f64], el: &[f64], er: &[f64], c: usize) -> Vec<f64> {
    let g = &gat.graph.by_dst;
    let heads = gat.heads;
    let mut out = vec![0.0; g.num_nodes() * heads * c];
    for v in 0..g.num_nodes() {
        for k in 0..heads {
            let nb = g.in_neighbors(v);
            let s: Vec<f64> = nb
                .iter()
                .map(|&u| {
                    let x = el[u as usize * heads + k] + er[v * heads + k];
                    if x > 0.0 {
                        x
                    } else {
                        gat.negative_slope * x
                    }
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
            for (&u, &sc) in nb.iter().zip(&s) {
                let a = (sc - m).exp() / z * gat.factor(v, u as usize, k);
                for j in 0..c {
                    out[(v * heads + k) * c + j] += a * h[(u as usize * heads + k) * c + j];
                }
            }
        }
    }
    out
}

fn setup(dropout: bool) -> (FusedGat, [Tensor; 3]) {
    let g = awkward_graph(25, 50, 11);
    let gat = FusedGat {
        graph: Arc::new(GraphView::new(&g, true)),
        heads: 3,
        negative_slope: 0.2,
        attention_dropout: dropout.then(|| Dropout {
            p: 0.3,
            key: RngKey::new(5, 1, 2),
        }),
    };
    (
        gat,
        [
            rand_tensor(&[25, 3 * 4], 1),
            rand_tensor(&[25, 3], 2),
            rand_tensor(&[25, 3], 3),
        ],
    )
}

#[test]
fn fused_gat_matches_naive_attention() {
    for dropout in [false, true] {
        let (gat, [h, el, er]) = setup(dropout);
        let mut t = Tape::no_grad();
        let y = gat
            .apply(
                &mut t,
                &Var::constant(h.clone()),
                &Var::constant(el.clone()),
                &Var::constant(er.clone()),
            )
            .unwrap();
        let want = naive(&gat, &h.to_vec_f64(), &el.to_vec_f64(), &er.to_vec_f64(), 4);
        assert_close(&y.value().to_vec_f64(), &want, 1e-12, "fused gat");
    }
}

#[test]
fn fused_gat_gradients_match_finite_differences() {
    for dropout in [false, true] {
        let (gat, inputs) = setup(dropout);
        let f = move |t: &mut Tape, v: &[Var]| {
            gat.apply(t, &v[0], &v[1], &v[2])
                .map_err(super::super::aggregate::to_tensor_error)
        };
        let err = max_gradient_error(&f, &inputs, &[true, true, true], 1e-6).unwrap();
        assert!(err < 1e-7, "dropout {dropout}: {err}");
    }
}

#[test]
fn f32_follows_f64() {
    let (gat, [h, el, er]) = setup(true);
    let mut t = Tape::no_grad();
    let run = |t: &mut Tape, dtype| {
        let c = |x: &Tensor| Var::constant(x.cast(dtype).unwrap());
        gat.apply(t, &c(&h), &c(&el), &c(&er))
            .unwrap()
            .value()
            .to_vec_f64()
    };
    let want = run(&mut t, graphloom_tensor::DType::F64);
    assert_close(
        &run(&mut t, graphloom_tensor::DType::F32),
        &want,
        1e-5,
        "f32",
    );
}

/// The backward pass's per-edge scratch is written through the source-to-destination edge
/// permutation from parallel tasks; every sum still runs in a fixed edge order, so the
/// gradients are the same bit for bit however many threads cut the graph into tasks.
#[test]
fn gradients_do_not_depend_on_the_thread_count() {
    let n = 3_000;
    let g = awkward_graph(n, 20 * n, 7);
    let inputs = [
        rand_tensor(&[n, 4 * 8], 1),
        rand_tensor(&[n, 4], 2),
        rand_tensor(&[n, 4], 3),
    ];
    let gradients = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            // Built inside the pool: its task ranges follow the thread count.
            let gat = FusedGat {
                heads: 4,
                attention_dropout: Some(Dropout {
                    p: 0.2,
                    key: RngKey::new(9, 0, 1),
                }),
                ..FusedGat::new(Arc::new(GraphView::new(&g, true)))
            };
            let mut t = Tape::new();
            let v: Vec<Var> = inputs.iter().map(|x| t.leaf(x.clone(), true)).collect();
            let y = gat.apply(&mut t, &v[0], &v[1], &v[2]).unwrap();
            let mut grads = t.backward_with(&y, rand_tensor(&[n, 4 * 8], 4)).unwrap();
            v.iter()
                .map(|x| grads.take(x).unwrap().to_vec_f64())
                .collect::<Vec<_>>()
        })
    };
    let one = gradients(1);
    assert!(one.iter().all(|g| g.iter().any(|&x| x != 0.0)));
    assert_eq!(one, gradients(3));
}
