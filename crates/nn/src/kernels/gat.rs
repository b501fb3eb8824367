//! The fused GAT kernel: attention computed on the fly, never stored as an edges x heads matrix.
//!
//! For destination `v`, head `k` and in-edge `u -> v` (the graph carries one self-loop per node):
//!
//! - `s_uv = LeakyReLU(el[u, k] + er[v, k])`, with `el = h . att_src`, `er = h . att_dst`
//! - `alpha_uv = exp(s_uv - m_v) / z_v`, the softmax over `v`'s in-edges, `m_v` their max score
//!   and `z_v` the sum of `exp(s - m_v)`
//! - `out[v, k] = sum_u alpha_uv * d_uv * h[u, k]`, `d_uv` the attention-dropout factor
//!
//! Forward keeps only `m` and `z` (`[nodes, heads]`). Backward reads the neighbour rows once,
//! in three passes:
//!
//! 1. over each source's out-edges (the gathered rows are the output gradient's): the gradient
//!    of `h`, and `dA_uv` (the gradient of the dropped-out coefficient, `g_v . h_u` times its
//!    dropout factor) of every edge, written to that edge's slot of a `[edges, heads]` scratch;
//! 2. over each destination's in-edges (only scores are gathered): `c_v = sum_u alpha_uv dA_uv`,
//!    each edge's score gradient `alpha_uv (dA_uv - c_v)` times LeakyReLU's slope, in place of
//!    its `dA`, and the gradient of `er`;
//! 3. over each source's out-edges again: the gradient of `el`, the sum of the score gradients.
//!
//! The scratch lives during the backward pass only; every sum runs in a fixed edge order, so
//! results do not depend on the thread count.

use std::sync::Arc;

use graphloom_tensor::autodiff::ops::Dropout;
use graphloom_tensor::kernels::simd::with_simd;
use graphloom_tensor::prefetch::prefetch;
use graphloom_tensor::{with_float, BackwardCtx, Float, Op, Real, Tape, Tensor, Var};

use super::aggregate::PREFETCH_DISTANCE;
use crate::graph::{par_row_ranges, split_rows, GraphView};
use crate::{Error, Result};

/// The fused attention-and-aggregation step of a GAT layer.
#[derive(Clone)]
pub struct FusedGat {
    /// The graph, with one self-loop per node.
    pub graph: Arc<GraphView>,
    /// Number of heads.
    pub heads: usize,
    /// LeakyReLU's negative slope (0.2 in the paper).
    pub negative_slope: f64,
    /// Dropout on the attention coefficients; element `(v, u * heads + k)`.
    pub attention_dropout: Option<Dropout>,
}

/// The attention step of a GAT layer as a layer uses it: the fused kernel over a graph in
/// memory ([`FusedGat`]), or one spread over workers (the SAR crate's ring attention).
pub trait Attention: Send + Sync {
    /// `out = attention(h, el, er)` on the tape, for `h: [rows, heads * c]` and
    /// `el, er: [rows, heads]`, with `dropout` on the attention coefficients.
    fn apply(
        &self,
        tape: &mut Tape,
        h: &Var,
        el: &Var,
        er: &Var,
        dropout: Option<Dropout>,
    ) -> Result<Var>;
}

impl Attention for FusedGat {
    fn apply(
        &self,
        tape: &mut Tape,
        h: &Var,
        el: &Var,
        er: &Var,
        dropout: Option<Dropout>,
    ) -> Result<Var> {
        // The heads are the scores' columns: one kernel serves layers of any head count.
        let gat = FusedGat {
            heads: el.value().dims2().1,
            attention_dropout: dropout,
            ..self.clone()
        };
        FusedGat::apply(&gat, tape, h, el, er)
    }
}

struct GatOp {
    cfg: FusedGat,
    /// `[nodes, heads, 2]`: the max score and the softmax denominator of each (node, head).
    stats: Option<Tensor>,
}

impl FusedGat {
    /// The kernel over `graph` (which must have one self-loop per node), as a layer uses it
    /// through [`Attention`]: the head count is taken from the scores of each call.
    pub fn new(graph: Arc<GraphView>) -> FusedGat {
        FusedGat {
            graph,
            heads: 1,
            negative_slope: crate::layers::GAT_NEGATIVE_SLOPE,
            attention_dropout: None,
        }
    }

    /// `out = attention(h, el, er)` for `h: [n, heads * c]`, `el, er: [n, heads]`.
    pub fn apply(&self, tape: &mut Tape, h: &Var, el: &Var, er: &Var) -> Result<Var> {
        Ok(tape.apply(
            GatOp {
                cfg: self.clone(),
                stats: None,
            },
            &[h, el, er],
        )?)
    }

    #[inline(always)]
    fn factor(&self, v: usize, u: usize, k: usize) -> f64 {
        self.attention_dropout
            .map_or(1.0, |d| d.factor(v as u64, (u * self.heads + k) as u64))
    }

    fn check(&self, h: &Tensor, el: &Tensor, er: &Tensor) -> Result<(usize, usize)> {
        let n = self.graph.num_nodes();
        let (rows, width) = h.dims2();
        if self.heads == 0
            || self.heads > MAX_HEADS_ON_STACK
            || rows != n
            || width % self.heads != 0
            || el.dims2() != (n, self.heads)
            || er.dims2() != (n, self.heads)
        {
            return Err(Error::Mismatch {
                what: "the fused GAT's inputs",
                detail: format!(
                    "fused GAT over {n} nodes, {} heads: h {:?}, el {:?}, er {:?}",
                    self.heads,
                    h.shape(),
                    el.shape(),
                    er.shape()
                ),
            });
        }
        Ok((n, width / self.heads))
    }
}

/// A slice written from parallel tasks at indices no two tasks share: pass 1 of the backward
/// pass writes each edge's slot through the `by_src` to `by_dst` permutation, so one task's
/// slots are scattered among the others'.
struct DisjointWrites<'a, A> {
    ptr: *mut A,
    len: usize,
    _slice: std::marker::PhantomData<&'a mut [A]>,
}

// SAFETY: the writer only hands out writes of `A` values, and `write`'s contract keeps any two
// tasks off the same index.
unsafe impl<A: Send> Sync for DisjointWrites<'_, A> {}

impl<'a, A> DisjointWrites<'a, A> {
    fn new(slice: &'a mut [A]) -> Self {
        DisjointWrites {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
            _slice: std::marker::PhantomData,
        }
    }

    /// Writes `value` at `index` (checked against the slice's length).
    ///
    /// # Safety
    /// No other task may read or write `index` while this writer lives.
    #[inline(always)]
    unsafe fn write(&self, index: usize, value: A) {
        assert!(index < self.len, "slot {index} of {}", self.len);
        // SAFETY: in bounds (checked above); exclusive by the caller's contract.
        unsafe { self.ptr.add(index).write(value) }
    }
}

/// The most heads a layer may have: per-node partial sums of the backward pass live on the
/// stack.
const MAX_HEADS_ON_STACK: usize = 64;

/// Lanes of the dot product's partial sums: independent sums the compiler can keep in one
/// vector register, where a single running sum would wait on every addition.
pub(crate) const DOT_LANES: usize = 8;

/// `sum_i a[i] * b[i]` in the accumulation type, summed in a fixed order (lane-wise, then the
/// lanes in order), so the result does not depend on the machine.
#[inline(always)]
pub fn dot<T: Float>(a: &[T], b: &[T]) -> T::Acc {
    let mut lanes = [<T::Acc as Real>::ZERO; DOT_LANES];
    let (ca, cb) = (a.chunks_exact(DOT_LANES), b.chunks_exact(DOT_LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..DOT_LANES {
            lanes[l] += x[l].to_acc() * y[l].to_acc();
        }
    }
    let mut s = <T::Acc as Real>::ZERO;
    for l in lanes {
        s += l;
    }
    for (&x, &y) in ra.iter().zip(rb) {
        s += x.to_acc() * y.to_acc();
    }
    s
}

/// LeakyReLU with negative slope `slope` (below 1), as a maximum, which compiles without a
/// branch: in GATv2's backward pass a branch on the sign of each pre-activation, taken about
/// half the time, cost more than half the pass.
#[inline(always)]
pub fn leaky<R: Real>(x: R, slope: R) -> R {
    x.max(slope * x)
}

/// LeakyReLU's derivative at `x` (1 above 0, `slope` at and below).
#[inline(always)]
pub fn dleaky<R: Real>(x: R, slope: R) -> R {
    if x > R::ZERO {
        R::ONE
    } else {
        slope
    }
}

impl Op for GatOp {
    fn name(&self) -> &'static str {
        "fused_gat"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> graphloom_tensor::Result<Tensor> {
        let (h, el, er) = (inputs[0], inputs[1], inputs[2]);
        let cfg = &self.cfg;
        let (n, c) = cfg
            .check(h, el, er)
            .map_err(super::aggregate::to_tensor_error)?;
        let heads = cfg.heads;
        let csr = &cfg.graph.by_dst;
        let mut stats = vec![0f64; n * heads * 2];
        let out = with_float!(h.dtype(), "fused_gat", T => {
            let (hs, els, ers) = (h.as_slice::<T>()?, el.as_slice::<T>()?, er.as_slice::<T>()?);
            let slope = <<T as Float>::Acc as Real>::from_f64(cfg.negative_slope);
            let mut out = graphloom_tensor::alloc::zeros::<T>(n * heads * c);
            // Output rows and stats rows are split by the same node ranges.
            let bounds = &cfg.graph.dst_chunks;
            let outs: Vec<_> = split_rows(&mut out, heads * c, bounds)
                .into_iter()
                .zip(split_rows(&mut stats, heads * 2, bounds))
                .map(|((first, o), (_, s))| (first, o, s))
                .collect();
            use rayon::prelude::*;
            outs.into_par_iter().for_each(|(first, o, st)| with_simd(#[inline(always)] || {
                type A = <T as Float>::Acc;
                let width = heads * c;
                let mut acc = vec![A::ZERO; width];
                // Per destination: the coefficients of its in-edges, [degree, heads]. A row's
                // worth of scratch, reused; never the whole edges x heads matrix.
                let mut coef: Vec<A> = Vec::new();
                let mut m = vec![A::ZERO; heads];
                let mut z = vec![A::ZERO; heads];
                for r in 0..o.len() / width.max(1) {
                    let v = first + r;
                    let first_edge = csr.row_ptr[v] as usize;
                    let nb = &csr.col_idx[first_edge..csr.row_ptr[v + 1] as usize];
                    coef.clear();
                    m.iter_mut().for_each(|x| *x = A::NEG_INFINITY);
                    for &u in nb {
                        for k in 0..heads {
                            let sc = leaky(els[u as usize * heads + k].to_acc() + ers[v * heads + k].to_acc(), slope);
                            m[k] = m[k].max(sc);
                            coef.push(sc);
                        }
                    }
                    z.iter_mut().for_each(|x| *x = A::ZERO);
                    for e in coef.chunks_mut(heads) {
                        for k in 0..heads {
                            e[k] = (e[k] - m[k]).exp();
                            z[k] += e[k];
                        }
                    }
                    acc.iter_mut().for_each(|a| *a = A::ZERO);
                    // Edge-major: each neighbour's row of all heads is read once, contiguously.
                    for (i, (&u, e)) in nb.iter().zip(coef.chunks(heads)).enumerate() {
                        // Ahead in the whole edge list, so the next destination's first rows
                        // are on their way too.
                        if let Some(&ahead) = csr.col_idx.get(first_edge + i + PREFETCH_DISTANCE) {
                            prefetch(&hs[ahead as usize * width..(ahead as usize + 1) * width]);
                        }
                        let hu = &hs[u as usize * width..(u as usize + 1) * width];
                        for k in 0..heads {
                            let a = e[k] / z[k] * A::from_f64(cfg.factor(v, u as usize, k));
                            for (x, &hv) in acc[k * c..(k + 1) * c].iter_mut().zip(&hu[k * c..(k + 1) * c]) {
                                *x += a * hv.to_acc();
                            }
                        }
                    }
                    for (d, &x) in o[r * width..(r + 1) * width].iter_mut().zip(&acc) {
                        *d = T::from_acc(x);
                    }
                    for k in 0..heads {
                        st[(r * heads + k) * 2] = m[k].to_f64();
                        st[(r * heads + k) * 2 + 1] = z[k].to_f64();
                    }
                }
            }));
            Tensor::from_vec(out, h.shape())
        })?;
        self.stats = Some(Tensor::from_vec(stats, &[n, heads, 2])?);
        Ok(out)
    }

    fn backward(&self, ctx: &BackwardCtx<'_>) -> graphloom_tensor::Result<Vec<Option<Tensor>>> {
        let (h, el, er, g) = (ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.grad);
        let cfg = &self.cfg;
        let heads = cfg.heads;
        let (n, c) = cfg
            .check(h, el, er)
            .map_err(super::aggregate::to_tensor_error)?;
        let stats = self.stats.as_ref().ok_or_else(|| {
            graphloom_tensor::Error::Autodiff("fused_gat: backward before forward".into())
        })?;
        let st = stats.as_slice::<f64>()?;
        let gv = &*cfg.graph;
        with_float!(h.dtype(), "fused_gat", T => {
            type A = <T as Float>::Acc;
            let (hs, els, ers, gs) = (h.as_slice::<T>()?, el.as_slice::<T>()?, er.as_slice::<T>()?, g.as_slice::<T>()?);
            let slope = A::from_f64(cfg.negative_slope);
            let width = heads * c;
            // alpha (before dropout), the pre-activation score, of edge u -> v at head k.
            let alpha = |u: usize, v: usize, k: usize| {
                let pre = els[u * heads + k].to_acc() + ers[v * heads + k].to_acc();
                let (m, z) = (A::from_f64(st[(v * heads + k) * 2]), A::from_f64(st[(v * heads + k) * 2 + 1]));
                ((leaky(pre, slope) - m).exp() / z, pre)
            };
            // Per edge of `by_dst` and head: dA after pass 1, the score's gradient after pass 2.
            let mut edge_grad = graphloom_tensor::alloc::zeros::<A>(gv.by_dst.num_edges() * heads);

            // Pass 1, by source: the gradient of h, and dA for every edge.
            let mut dh = graphloom_tensor::alloc::zeros::<T>(n * width);
            {
                let csr = &gv.by_src;
                let edge_slots = DisjointWrites::new(&mut edge_grad);
                par_row_ranges(&mut dh, width, &gv.src_chunks, #[inline(always)] |first, hpart| {
                    let mut acc = vec![A::ZERO; width];
                    for r in 0..hpart.len() / width.max(1) {
                        let u = first + r;
                        let hu = &hs[u * width..(u + 1) * width];
                        acc.iter_mut().for_each(|a| *a = A::ZERO);
                        let out_edges = csr.row_ptr[u] as usize..csr.row_ptr[u + 1] as usize;
                        let out_nb = &csr.col_idx[out_edges.clone()];
                        // Edge-major: each destination's gradient row is read once, contiguously.
                        for (i, (&v, &e)) in out_nb.iter().zip(&gv.src_edge[out_edges.clone()]).enumerate() {
                            // Ahead in the whole edge list, as in the forward pass.
                            if let Some(&ahead) = csr.col_idx.get(out_edges.start + i + PREFETCH_DISTANCE) {
                                prefetch(&gs[ahead as usize * width..(ahead as usize + 1) * width]);
                            }
                            let v = v as usize;
                            let gv_row = &gs[v * width..(v + 1) * width];
                            for k in 0..heads {
                                let (a, _) = alpha(u, v, k);
                                let f = A::from_f64(cfg.factor(v, u, k));
                                let gvk = &gv_row[k * c..(k + 1) * c];
                                let da = dot(gvk, &hu[k * c..(k + 1) * c]) * f;
                                // SAFETY: `src_edge` is a permutation of the edges and every
                                // entry `i` of `by_src` belongs to one task, so no other task
                                // touches edge `e` while the writes last.
                                unsafe { edge_slots.write(e * heads + k, da) };
                                let w = a * f;
                                for (x, &gval) in acc[k * c..(k + 1) * c].iter_mut().zip(gvk) {
                                    *x += w * gval.to_acc();
                                }
                            }
                        }
                        for (d, &x) in hpart[r * width..(r + 1) * width].iter_mut().zip(&acc) {
                            *d = T::from_acc(x);
                        }
                    }
                });
            }

            // Pass 2, by destination: c_v = sum_u alpha_uv dA_uv, each edge's score gradient
            // alpha_uv (dA_uv - c_v) LeakyReLU'(pre_uv) in place of its dA, and the gradient
            // of er, their sum over the in-edges.
            let mut der = graphloom_tensor::alloc::zeros::<T>(n * heads);
            {
                let csr = &gv.by_dst;
                let edge_bounds: Vec<usize> = gv.dst_chunks.iter().map(|&v| csr.row_ptr[v] as usize).collect();
                let pieces: Vec<_> = split_rows(&mut der, heads, &gv.dst_chunks)
                    .into_iter()
                    .zip(split_rows(&mut edge_grad, heads, &edge_bounds))
                    .collect();
                use rayon::prelude::*;
                pieces.into_par_iter().for_each(|((first, dpart), (first_edge, epart))| with_simd(#[inline(always)] || {
                    // Per in-edge and head of one destination: alpha and the pre-activation score.
                    let mut scratch: Vec<(A, A)> = Vec::new();
                    for r in 0..dpart.len() / heads {
                        let v = first + r;
                        let (lo, hi) = (csr.row_ptr[v] as usize - first_edge, csr.row_ptr[v + 1] as usize - first_edge);
                        let grads = &mut epart[lo * heads..hi * heads];
                        scratch.clear();
                        // At most MAX_HEADS_ON_STACK heads (checked by FusedGat::check).
                        let mut sums = [A::ZERO; MAX_HEADS_ON_STACK];
                        for (&u, da) in csr.col_idx[lo + first_edge..hi + first_edge].iter().zip(grads.chunks(heads)) {
                            for k in 0..heads {
                                let (a, pre) = alpha(u as usize, v, k);
                                scratch.push((a, pre));
                                sums[k] += a * da[k];
                            }
                        }
                        let mut d = [A::ZERO; MAX_HEADS_ON_STACK];
                        for (e, ap) in grads.chunks_mut(heads).zip(scratch.chunks(heads)) {
                            for k in 0..heads {
                                let (a, pre) = ap[k];
                                let ds = a * (e[k] - sums[k]) * dleaky(pre, slope);
                                e[k] = ds;
                                d[k] += ds;
                            }
                        }
                        for k in 0..heads {
                            dpart[r * heads + k] = T::from_acc(d[k]);
                        }
                    }
                }));
            }

            // Pass 3, by source: the gradient of el, the sum of the out-edges' score gradients.
            let mut del = graphloom_tensor::alloc::zeros::<T>(n * heads);
            {
                let csr = &gv.by_src;
                par_row_ranges(&mut del, heads, &gv.src_chunks, #[inline(always)] |first, lpart| {
                    for r in 0..lpart.len() / heads {
                        let u = first + r;
                        let mut sums = [A::ZERO; MAX_HEADS_ON_STACK];
                        for &e in &gv.src_edge[csr.row_ptr[u] as usize..csr.row_ptr[u + 1] as usize] {
                            for k in 0..heads {
                                sums[k] += edge_grad[e * heads + k];
                            }
                        }
                        for k in 0..heads {
                            lpart[r * heads + k] = T::from_acc(sums[k]);
                        }
                    }
                });
            }
            graphloom_tensor::alloc::recycle(edge_grad);
            Ok(vec![
                Some(Tensor::from_vec(dh, h.shape())?),
                Some(Tensor::from_vec(del, el.shape())?),
                Some(Tensor::from_vec(der, er.shape())?),
            ])
        })
    }
    fn reads_output(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests;
