//! GINE's messages (Hu et al., <https://arxiv.org/abs/1905.12265>; PyG's `GINEConv`): each
//! node sums `ReLU(x_u + e_uv)` over its in-edges `u -> v`, `e_uv` the edge's features already
//! mapped to the width of `x`.
//!
//! One pass per direction and no per-edge tensor kept for the backward: whether an edge's
//! message was positive is recomputed from the inputs, so the memory is that of the inputs
//! (the edge rows themselves, `[E, F]`) and the output.

use std::sync::Arc;

use graphloom_tensor::{with_float, BackwardCtx, Float, Op, Real, Tape, Tensor, Var};
use rayon::prelude::*;

use crate::graph::{reduce_rows, split_rows, GraphView};
use crate::{Error, Result};

struct GineMessages {
    graph: Arc<GraphView>,
}

impl Op for GineMessages {
    fn name(&self) -> &'static str {
        "gine_messages"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> graphloom_tensor::Result<Tensor> {
        let (x, edges, gv) = (inputs[0], inputs[1], &*self.graph);
        let (n, width) = x.dims2();
        if n != gv.num_sources() || edges.dims2() != (gv.by_dst.num_edges(), width) {
            return Err(super::aggregate::to_tensor_error(Error::Mismatch {
                what: "GINE's nodes, edges and graph",
                detail: format!(
                    "node rows {:?} and edge rows {:?} over {} sources and {} edges",
                    x.shape(),
                    edges.shape(),
                    gv.num_sources(),
                    gv.by_dst.num_edges()
                ),
            }));
        }
        with_float!(x.dtype(), "gine_messages", T => {
            let (xs, es) = (x.as_slice::<T>()?, edges.as_slice::<T>()?);
            let out = reduce_rows::<T>(gv, false, width, |_, u, e, acc| {
                let (xu, ee) = (&xs[u * width..][..width], &es[e * width..][..width]);
                for ((a, &xv), &ev) in acc.iter_mut().zip(xu).zip(ee) {
                    let m = xv.to_acc() + ev.to_acc();
                    if m > Real::ZERO {
                        *a += m;
                    }
                }
            });
            Tensor::from_vec(out, &[gv.num_nodes(), width])
        })
    }

    fn backward(&self, ctx: &BackwardCtx<'_>) -> graphloom_tensor::Result<Vec<Option<Tensor>>> {
        let (x, edges, g, gv) = (ctx.inputs[0], ctx.inputs[1], ctx.grad, &*self.graph);
        let width = x.dims2().1;
        let csr = &gv.by_dst;
        with_float!(x.dtype(), "gine_messages", T => {
            let (xs, es, gs) = (x.as_slice::<T>()?, edges.as_slice::<T>()?, g.as_slice::<T>()?);
            // Each message passes its destination's gradient where it was positive.
            let passes = |u: usize, e: usize, j: usize| {
                xs[u * width + j].to_acc() + es[e * width + j].to_acc() > Real::ZERO
            };
            let d_edges = if ctx.needs_grad[1] {
                let mut out = graphloom_tensor::alloc::zeros::<T>(es.len());
                let bounds: Vec<usize> =
                    gv.dst_chunks.iter().map(|&v| csr.row_ptr[v] as usize).collect();
                split_rows(&mut out, width, &bounds)
                    .into_par_iter()
                    .zip(gv.dst_chunks.par_windows(2))
                    .for_each(|((lo, rows), w)| {
                        for v in w[0]..w[1] {
                            for e in csr.row_ptr[v] as usize..csr.row_ptr[v + 1] as usize {
                                let u = csr.col_idx[e] as usize;
                                for j in 0..width {
                                    if passes(u, e, j) {
                                        rows[(e - lo) * width + j] = gs[v * width + j];
                                    }
                                }
                            }
                        }
                    });
                Some(Tensor::from_vec(out, edges.shape())?)
            } else {
                None
            };
            let d_x = if ctx.needs_grad[0] {
                let out = reduce_rows::<T>(gv, true, width, |u, v, e, acc| {
                    for (j, a) in acc.iter_mut().enumerate() {
                        if passes(u, e, j) {
                            *a += gs[v * width + j].to_acc();
                        }
                    }
                });
                Some(Tensor::from_vec(out, x.shape())?)
            } else {
                None
            };
            Ok(vec![d_x, d_edges])
        })
    }
}

/// `out[v] = sum over in-edges e = (u -> v) of ReLU(x[u] + edges[e])`, for node rows
/// `x: [sources, F]` and edge rows `edges: [E, F]` in the edge order of `graph` (CSR by
/// destination): GINE's aggregation, `[graph.num_nodes(), F]`.
pub fn gine_messages(tape: &mut Tape, graph: &Arc<GraphView>, x: &Var, edges: &Var) -> Result<Var> {
    Ok(tape.apply(
        GineMessages {
            graph: graph.clone(),
        },
        &[x, edges],
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::aggregate::to_tensor_error;
    use crate::testutil::{assert_close, awkward_graph, rand_tensor};
    use graphloom_tensor::autodiff::gradcheck::max_gradient_error;

    #[test]
    fn gine_messages_match_naive_and_finite_differences() {
        let gv = Arc::new(GraphView::new(&awkward_graph(20, 40, 3), false));
        let (src, dst) = gv.by_dst.edges();
        let width = 3;
        let x = rand_tensor(&[20, width], 1);
        let edges = rand_tensor(&[src.len(), width], 2);
        let mut t = Tape::no_grad();
        let y = gine_messages(
            &mut t,
            &gv,
            &Var::constant(x.clone()),
            &Var::constant(edges.clone()),
        )
        .unwrap();
        let (xv, ev) = (x.to_vec_f64(), edges.to_vec_f64());
        let mut want = vec![0.0; 20 * width];
        for (e, (&u, &v)) in src.iter().zip(&dst).enumerate() {
            for j in 0..width {
                want[v as usize * width + j] +=
                    (xv[u as usize * width + j] + ev[e * width + j]).max(0.0);
            }
        }
        assert_close(&y.value().to_vec_f64(), &want, 1e-12, "gine_messages");
        let g = gv.clone();
        let f = move |t: &mut Tape, v: &[Var]| {
            gine_messages(t, &g, &v[0], &v[1]).map_err(to_tensor_error)
        };
        let err = max_gradient_error(&f, &[x, edges], &[true, true], 1e-6).unwrap();
        assert!(err < 1e-8, "{err}");
    }
}
