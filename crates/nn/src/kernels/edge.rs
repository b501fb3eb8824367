//! Edge-wise kernels: SDDMM (a value per edge from its two end nodes), edge softmax and SpMM
//! with per-edge weights. Composed, they are the unfused GAT layer that stores an edges x heads
//! matrix at every step; the fused kernel in [`super::gat`] is checked against them.
//!
//! Edge values are `[E, heads]`, in the edge order of the graph (CSR by destination), so the
//! in-edges of a node are a contiguous run of rows.

use std::sync::Arc;

use graphloom_tensor::{with_float, BackwardCtx, Float, Op, Real, Tape, Tensor, Var};
use rayon::prelude::*;

use crate::graph::{reduce_rows, split_rows, GraphView};
use crate::{Error, Result};

/// Splits `out` (rows of `width` per edge) by the destination chunks of `gv` and runs
/// `f(first_node, end_node, first_edge, rows)` on each piece in parallel.
fn par_edge_rows<T: Send>(
    gv: &GraphView,
    out: &mut [T],
    width: usize,
    f: impl Fn(usize, usize, usize, &mut [T]) + Sync,
) {
    let edge_bounds: Vec<usize> = gv
        .dst_chunks
        .iter()
        .map(|&v| gv.by_dst.row_ptr[v] as usize)
        .collect();
    split_rows(out, width, &edge_bounds)
        .into_par_iter()
        .zip(gv.dst_chunks.par_windows(2))
        .for_each(|((lo, rows), w)| f(w[0], w[1], lo, rows));
}

fn config_error(msg: String) -> graphloom_tensor::Error {
    super::aggregate::to_tensor_error(Error::Mismatch {
        what: "edge values and the graph",
        detail: msg,
    })
}

/// How an SDDMM combines the two end nodes of an edge, per head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EdgeScore {
    /// `a[src, k] + b[dst, k]` for `a, b: [n, heads]` (GAT's attention logits).
    AddSrcDst,
    /// `a[src, k] . b[dst, k]` over each head's `c` columns, for `a, b: [n, heads * c]`.
    DotSrcDst,
}

struct Sddmm {
    graph: Arc<GraphView>,
    heads: usize,
    score: EdgeScore,
}

impl Op for Sddmm {
    fn name(&self) -> &'static str {
        "sddmm"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> graphloom_tensor::Result<Tensor> {
        let (a, b, gv, heads) = (inputs[0], inputs[1], &*self.graph, self.heads);
        let (n, width) = a.dims2();
        if n != gv.num_nodes()
            || b.dims2() != (n, width)
            || heads == 0
            || width % heads != 0
            || (self.score == EdgeScore::AddSrcDst && width != heads)
        {
            return Err(config_error(format!(
                "sddmm over {} nodes, {heads} heads: {:?} and {:?}",
                gv.num_nodes(),
                a.shape(),
                b.shape()
            )));
        }
        let (c, score) = (width / heads, self.score);
        let csr = &gv.by_dst;
        with_float!(a.dtype(), "sddmm", T => {
            let (xa, xb) = (a.as_slice::<T>()?, b.as_slice::<T>()?);
            let mut out = graphloom_tensor::alloc::zeros::<T>(csr.num_edges() * heads);
            par_edge_rows(gv, &mut out, heads, |first, end, lo, rows| {
                for v in first..end {
                    for i in csr.row_ptr[v] as usize..csr.row_ptr[v + 1] as usize {
                        let u = csr.col_idx[i] as usize;
                        for k in 0..heads {
                            let val = match score {
                                EdgeScore::AddSrcDst => xa[u * heads + k].to_acc() + xb[v * heads + k].to_acc(),
                                EdgeScore::DotSrcDst => {
                                    let mut s = <<T as Float>::Acc as Real>::ZERO;
                                    for j in 0..c {
                                        s += xa[u * width + k * c + j].to_acc() * xb[v * width + k * c + j].to_acc();
                                    }
                                    s
                                }
                            };
                            rows[(i - lo) * heads + k] = T::from_acc(val);
                        }
                    }
                }
            });
            Tensor::from_vec(out, &[csr.num_edges(), heads])
        })
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> graphloom_tensor::Result<Vec<Option<Tensor>>> {
        let (a, b, g, gv, heads) = (
            ctx.inputs[0],
            ctx.inputs[1],
            ctx.grad,
            &*self.graph,
            self.heads,
        );
        let (_, width) = a.dims2();
        let (c, score) = (width / heads, self.score);
        with_float!(a.dtype(), "sddmm", T => {
            let (xa, xb, gs) = (a.as_slice::<T>()?, b.as_slice::<T>()?, g.as_slice::<T>()?);
            // d a[u] sums over u's out-edges; d b[v] over v's in-edges.
            let grad = |by_src: bool, other: &[T]| {
                reduce_rows::<T>(gv, by_src, width, |_, nb, e, acc| {
                    for k in 0..heads {
                        let ge = gs[e * heads + k].to_acc();
                        match score {
                            EdgeScore::AddSrcDst => acc[k] += ge,
                            EdgeScore::DotSrcDst => {
                                for j in 0..c {
                                    acc[k * c + j] += ge * other[nb * width + k * c + j].to_acc();
                                }
                            }
                        }
                    }
                })
            };
            let da = if ctx.needs_grad[0] { Some(Tensor::from_vec(grad(true, xb), a.shape())?) } else { None };
            let db = if ctx.needs_grad[1] { Some(Tensor::from_vec(grad(false, xa), b.shape())?) } else { None };
            Ok(vec![da, db])
        })
    }
}

/// Edge values `[E, heads]` from node values: see [`EdgeScore`].
pub(crate) fn sddmm(
    tape: &mut Tape,
    graph: &Arc<GraphView>,
    src: &Var,
    dst: &Var,
    heads: usize,
    score: EdgeScore,
) -> Result<Var> {
    Ok(tape.apply(
        Sddmm {
            graph: graph.clone(),
            heads,
            score,
        },
        &[src, dst],
    )?)
}

struct EdgeSoftmax {
    graph: Arc<GraphView>,
}

impl Op for EdgeSoftmax {
    fn name(&self) -> &'static str {
        "edge_softmax"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> graphloom_tensor::Result<Tensor> {
        let (s, gv) = (inputs[0], &*self.graph);
        let (e_count, heads) = s.dims2();
        if e_count != gv.by_dst.num_edges() {
            return Err(config_error(format!(
                "edge_softmax over {} edges got {:?}",
                gv.by_dst.num_edges(),
                s.shape()
            )));
        }
        let csr = &gv.by_dst;
        with_float!(s.dtype(), "edge_softmax", T => {
            let xs = s.as_slice::<T>()?;
            let mut out = graphloom_tensor::alloc::zeros::<T>(xs.len());
            par_edge_rows(gv, &mut out, heads, |first, end, lo, rows| {
                for v in first..end {
                    let (a, b) = (csr.row_ptr[v] as usize, csr.row_ptr[v + 1] as usize);
                    for k in 0..heads {
                        let mut m = <<T as Float>::Acc as Real>::NEG_INFINITY;
                        for i in a..b {
                            m = m.max(xs[i * heads + k].to_acc());
                        }
                        let mut z = <<T as Float>::Acc as Real>::ZERO;
                        for i in a..b {
                            z += (xs[i * heads + k].to_acc() - m).exp();
                        }
                        for i in a..b {
                            rows[(i - lo) * heads + k] = T::from_acc((xs[i * heads + k].to_acc() - m).exp() / z);
                        }
                    }
                }
            });
            Tensor::from_vec(out, s.shape())
        })
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> graphloom_tensor::Result<Vec<Option<Tensor>>> {
        // ds_e = y_e * (g_e - sum_{e' into the same node} y_e' g_e'), per head.
        let (y, g, gv) = (ctx.output, ctx.grad, &*self.graph);
        let (_, heads) = y.dims2();
        let csr = &gv.by_dst;
        with_float!(y.dtype(), "edge_softmax", T => {
            let (ys, gs) = (y.as_slice::<T>()?, g.as_slice::<T>()?);
            let mut out = graphloom_tensor::alloc::zeros::<T>(ys.len());
            par_edge_rows(gv, &mut out, heads, |first, end, lo, rows| {
                for v in first..end {
                    let (a, b) = (csr.row_ptr[v] as usize, csr.row_ptr[v + 1] as usize);
                    for k in 0..heads {
                        let mut dot = <<T as Float>::Acc as Real>::ZERO;
                        for i in a..b {
                            dot += ys[i * heads + k].to_acc() * gs[i * heads + k].to_acc();
                        }
                        for i in a..b {
                            rows[(i - lo) * heads + k] = T::from_acc(ys[i * heads + k].to_acc() * (gs[i * heads + k].to_acc() - dot));
                        }
                    }
                }
            });
            Ok(vec![Some(Tensor::from_vec(out, y.shape())?)])
        })
    }
}

/// The softmax of edge values `[E, heads]` over the in-edges of each node, per head.
pub(crate) fn edge_softmax(tape: &mut Tape, graph: &Arc<GraphView>, scores: &Var) -> Result<Var> {
    Ok(tape.apply(
        EdgeSoftmax {
            graph: graph.clone(),
        },
        &[scores],
    )?)
}

struct EdgeWeightedSum {
    graph: Arc<GraphView>,
}

impl Op for EdgeWeightedSum {
    fn name(&self) -> &'static str {
        "edge_weighted_sum"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> graphloom_tensor::Result<Tensor> {
        let (w, x, gv) = (inputs[0], inputs[1], &*self.graph);
        let (e_count, heads) = w.dims2();
        let (n, width) = x.dims2();
        if e_count != gv.by_dst.num_edges()
            || n != gv.num_nodes()
            || heads == 0
            || width % heads != 0
        {
            return Err(config_error(format!(
                "edge_weighted_sum: weights {:?}, values {:?}",
                w.shape(),
                x.shape()
            )));
        }
        let c = width / heads;
        with_float!(x.dtype(), "edge_weighted_sum", T => {
            let (ws, xs) = (w.as_slice::<T>()?, x.as_slice::<T>()?);
            let out = reduce_rows::<T>(gv, false, width, |_, u, e, acc| {
                for k in 0..heads {
                    let we = ws[e * heads + k].to_acc();
                    for j in 0..c {
                        acc[k * c + j] += we * xs[u * width + k * c + j].to_acc();
                    }
                }
            });
            Tensor::from_vec(out, x.shape())
        })
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> graphloom_tensor::Result<Vec<Option<Tensor>>> {
        let (w, x, g, gv) = (ctx.inputs[0], ctx.inputs[1], ctx.grad, &*self.graph);
        let (_, heads) = w.dims2();
        let (_, width) = x.dims2();
        let c = width / heads;
        let csr = &gv.by_dst;
        with_float!(x.dtype(), "edge_weighted_sum", T => {
            let (ws, xs, gs) = (w.as_slice::<T>()?, x.as_slice::<T>()?, g.as_slice::<T>()?);
            // d w[e, k] = g[dst, k] . x[src, k]; d x[u] = sum over out-edges of w[e] g[dst].
            let dw = if ctx.needs_grad[0] {
                let mut out = graphloom_tensor::alloc::zeros::<T>(ws.len());
                par_edge_rows(gv, &mut out, heads, |first, end, lo, rows| {
                    for v in first..end {
                        for i in csr.row_ptr[v] as usize..csr.row_ptr[v + 1] as usize {
                            let u = csr.col_idx[i] as usize;
                            for k in 0..heads {
                                let mut s = <<T as Float>::Acc as Real>::ZERO;
                                for j in 0..c {
                                    s += gs[v * width + k * c + j].to_acc() * xs[u * width + k * c + j].to_acc();
                                }
                                rows[(i - lo) * heads + k] = T::from_acc(s);
                            }
                        }
                    }
                });
                Some(Tensor::from_vec(out, w.shape())?)
            } else {
                None
            };
            let dx = if ctx.needs_grad[1] {
                Some(Tensor::from_vec(
                    reduce_rows::<T>(gv, true, width, |_, v, e, acc| {
                        for k in 0..heads {
                            let we = ws[e * heads + k].to_acc();
                            for j in 0..c {
                                acc[k * c + j] += we * gs[v * width + k * c + j].to_acc();
                            }
                        }
                    }),
                    x.shape(),
                )?)
            } else {
                None
            };
            Ok(vec![dw, dx])
        })
    }
}

/// `out[v, k] = sum_{e = (u -> v)} w[e, k] * x[u, k]` for edge weights `w: [E, heads]` and
/// node values `x: [n, heads * c]` (SpMM with a weight per edge and head).
pub(crate) fn edge_weighted_sum(
    tape: &mut Tape,
    graph: &Arc<GraphView>,
    weights: &Var,
    x: &Var,
) -> Result<Var> {
    Ok(tape.apply(
        EdgeWeightedSum {
            graph: graph.clone(),
        },
        &[weights, x],
    )?)
}

#[cfg(test)]
mod tests;
