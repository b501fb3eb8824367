//! The fused GATv2 kernel (Brody, Alon and Yahav, <https://arxiv.org/abs/2105.14491>): dynamic
//! attention computed on the fly, no per-edge tensor kept from forward to backward.
//!
//! For destination `v`, head `k` and in-edge `u -> v` (the graph carries one self-loop per node),
//! with `xl = x W_l + b_l` and `xr = x W_r + b_r` split in heads of `c` columns:
//!
//! - `pre_uv = xl[u, k] + xr[v, k]` (+ `ee[e, k]`, the edge's mapped features, when the layer
//!   reads edge features: PyG's `edge_dim`), `s_uv = att[k] . LeakyReLU(pre_uv)`
//! - `alpha_uv = exp(s_uv - m_v) / z_v`, the softmax over `v`'s in-edges
//! - `out[v, k] = sum_u alpha_uv * d_uv * xl[u, k]`, `d_uv` the attention-dropout factor
//!
//! Unlike GAT's, the score does not split into a source and a destination term, so each edge's
//! score is a `c`-long dot product. Forward keeps only `m` and `z` (`[nodes, heads]`); backward
//! recomputes the scores in two passes:
//!
//! 1. by destination: `dA_uv = d_uv g_v . xl_u`, `c_v = sum_u alpha_uv dA_uv`, each edge's
//!    score gradient `ds_uv = alpha_uv (dA_uv - c_v)`; from it the gradient of `xr` (a sum over
//!    the in-edges) and of `att` (a partial per row range, the partials added in range order),
//!    and of `ee` (an edge's own `ds_uv att * LeakyReLU'(pre_uv)`);
//!    each edge's `alpha_uv d_uv` and `ds_uv` go to a `[edges, heads, 2]` scratch;
//! 2. by source: the gradient of `xl`, `sum_v alpha_uv d_uv g_v + ds_uv att * LeakyReLU'(pre_uv)`
//!    over the out-edges, the coefficients read from the scratch.
//!
//! Every sum runs in a fixed order, so results do not depend on the thread count.

use std::sync::Arc;

use graphloom_tensor::autodiff::ops::Dropout;
use graphloom_tensor::kernels::simd::with_simd;
use graphloom_tensor::{with_float, BackwardCtx, Float, Op, Real, Tape, Tensor, Var};

use super::gat::{dleaky, dot, leaky, DOT_LANES};
use crate::graph::{balanced_chunks, par_row_ranges, split_rows, GraphView};
use crate::{Error, Result};

/// The fused attention-and-aggregation step of GATv2 layers over one graph; each call gives
/// its layer's heads and attention dropout.
#[derive(Clone)]
pub struct FusedGatV2 {
    /// The graph, with one self-loop per node.
    pub graph: Arc<GraphView>,
    /// LeakyReLU's negative slope (0.2, as in the paper and PyG).
    pub negative_slope: f64,
}

/// The row ranges of backward's first pass, of about equal edge counts: enough for any thread
/// count to balance, and fixed, so att's gradient adds its partials in one order.
const ATT_GRAD_RANGES: usize = 256;

/// One call of the kernel: its graph, heads and dropout, and what forward keeps for backward.
struct GatV2Op {
    graph: Arc<GraphView>,
    negative_slope: f64,
    heads: usize,
    /// Dropout on the attention coefficients; element `(v, u * heads + k)`.
    attention_dropout: Option<Dropout>,
    /// `[nodes, heads, 2]`: the max score and the softmax denominator of each (node, head).
    stats: Option<Tensor>,
    /// Whether a fourth input adds a row per edge (`[edges, heads * c]`) to each score's sum.
    edges: bool,
}

/// The right-hand side of edge `e`'s sum at head columns `head`: `xr[v]`'s, plus `ee[e]`'s
/// (in `buf`) when there are edge rows.
#[inline(always)]
fn right<'b, T: Float>(
    xr_v: &'b [T],
    ee: Option<&[T]>,
    e: usize,
    width: usize,
    head: std::ops::Range<usize>,
    buf: &'b mut [T],
) -> &'b [T] {
    match ee {
        None => &xr_v[head],
        Some(ee) => {
            let row = &ee[e * width..(e + 1) * width];
            for ((b, &r), &x) in buf.iter_mut().zip(&xr_v[head.clone()]).zip(&row[head]) {
                *b = T::from_acc(r.to_acc() + x.to_acc());
            }
            buf
        }
    }
}

impl FusedGatV2 {
    /// The kernel over `graph` (which must have one self-loop per node).
    pub fn new(graph: Arc<GraphView>) -> FusedGatV2 {
        FusedGatV2 {
            graph,
            negative_slope: crate::layers::GAT_NEGATIVE_SLOPE,
        }
    }

    /// `out = attention(xl, xr, att)` for `xl, xr: [n, heads * c]` and `att: [heads * c]`, with
    /// `heads` heads and `dropout` on the coefficients.
    pub fn apply(
        &self,
        tape: &mut Tape,
        xl: &Var,
        xr: &Var,
        att: &Var,
        heads: usize,
        dropout: Option<Dropout>,
    ) -> Result<Var> {
        self.apply_with_edges(tape, xl, xr, att, None, heads, dropout)
    }

    /// [`FusedGatV2::apply`] with `ee: [edges, heads * c]` (a row per edge of the graph, in
    /// its destination order, self-loops included) added to each edge's sum, when given.
    #[allow(clippy::too_many_arguments)]
    pub fn apply_with_edges(
        &self,
        tape: &mut Tape,
        xl: &Var,
        xr: &Var,
        att: &Var,
        ee: Option<&Var>,
        heads: usize,
        dropout: Option<Dropout>,
    ) -> Result<Var> {
        let op = GatV2Op {
            graph: self.graph.clone(),
            negative_slope: self.negative_slope,
            heads,
            attention_dropout: dropout,
            stats: None,
            edges: ee.is_some(),
        };
        Ok(match ee {
            Some(ee) => tape.apply(op, &[xl, xr, att, ee])?,
            None => tape.apply(op, &[xl, xr, att])?,
        })
    }
}

impl GatV2Op {
    #[inline(always)]
    fn factor(&self, v: usize, u: usize, k: usize) -> f64 {
        self.attention_dropout
            .map_or(1.0, |d| d.factor(v as u64, (u * self.heads + k) as u64))
    }

    /// The node count and the width of a head, once the inputs' shapes are checked.
    fn check(&self, inputs: &[&Tensor]) -> Result<(usize, usize)> {
        let (xl, xr, att) = (inputs[0], inputs[1], inputs[2]);
        let n = self.graph.num_nodes();
        let (rows, width) = xl.dims2();
        let edges_fit = match inputs.get(3) {
            Some(ee) => {
                ee.dims2() == (self.graph.by_dst.num_edges(), width) && ee.dtype() == xl.dtype()
            }
            None => !self.edges,
        };
        if self.heads == 0
            || rows != n
            || width % self.heads != 0
            || xr.shape() != xl.shape()
            || att.numel() != width
            || xr.dtype() != xl.dtype()
            || att.dtype() != xl.dtype()
            || !edges_fit
        {
            return Err(Error::Mismatch {
                what: "the fused GATv2's inputs",
                detail: format!(
                    "fused GATv2 over {n} nodes, {} heads: xl {:?}, xr {:?}, att {:?}",
                    self.heads,
                    xl.shape(),
                    xr.shape(),
                    att.shape()
                ),
            });
        }
        Ok((n, width / self.heads))
    }
}

/// `att . LeakyReLU(xl + xr)` over one head's `c` columns, summed as [`dot`] sums: in lanes
/// the compiler keeps in a vector register (one running sum made the score a chain of
/// dependent additions, three times slower), then the lanes in order.
#[inline(always)]
fn score<T: Float>(xl: &[T], xr: &[T], att: &[T], slope: T::Acc) -> T::Acc {
    let mut lanes = [<T::Acc as Real>::ZERO; DOT_LANES];
    let chunks = xl
        .chunks_exact(DOT_LANES)
        .zip(xr.chunks_exact(DOT_LANES))
        .zip(att.chunks_exact(DOT_LANES));
    for ((l, r), a) in chunks {
        for i in 0..DOT_LANES {
            lanes[i] += a[i].to_acc() * leaky(l[i].to_acc() + r[i].to_acc(), slope);
        }
    }
    let mut s = <T::Acc as Real>::ZERO;
    for x in lanes {
        s += x;
    }
    let done = xl.len() - xl.len() % DOT_LANES;
    for ((&l, &r), &a) in xl[done..].iter().zip(&xr[done..]).zip(&att[done..]) {
        s += a.to_acc() * leaky(l.to_acc() + r.to_acc(), slope);
    }
    s
}

/// What the backward pass recomputes each edge's coefficient from.
struct Scores<'a, T: Float> {
    xl: &'a [T],
    xr: &'a [T],
    att: &'a [T],
    /// The rows added per edge, when there are.
    ee: Option<&'a [T]>,
    /// `[nodes, heads, 2]`: each (node, head)'s max score and softmax denominator.
    stats: &'a [f64],
    cfg: &'a GatV2Op,
    /// The width of a head.
    c: usize,
    slope: T::Acc,
}

impl<T: Float> Scores<'_, T> {
    /// alpha (before dropout) of edge `e`, `u -> v`, at head `k`, and its dropout factor;
    /// `buf` holds a head's right-hand side when there are edge rows.
    #[inline(always)]
    fn alpha(&self, u: usize, v: usize, e: usize, k: usize, buf: &mut [T]) -> (T::Acc, T::Acc) {
        let (heads, c) = (self.cfg.heads, self.c);
        let (lo, hi) = (k * c, (k + 1) * c);
        let width = heads * c;
        let xr_v = &self.xr[v * width..(v + 1) * width];
        let s = score::<T>(
            &self.xl[u * width + lo..u * width + hi],
            right(xr_v, self.ee, e, width, lo..hi, buf),
            &self.att[lo..hi],
            self.slope,
        );
        let at = (v * heads + k) * 2;
        let (m, z) = (
            <T::Acc as Real>::from_f64(self.stats[at]),
            <T::Acc as Real>::from_f64(self.stats[at + 1]),
        );
        (
            (s - m).exp() / z,
            <T::Acc as Real>::from_f64(self.cfg.factor(v, u, k)),
        )
    }
}

impl Op for GatV2Op {
    fn name(&self) -> &'static str {
        "fused_gatv2"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> graphloom_tensor::Result<Tensor> {
        let (xl, xr, att) = (inputs[0], inputs[1], inputs[2]);
        let cfg = &*self;
        let (n, c) = cfg
            .check(inputs)
            .map_err(super::aggregate::to_tensor_error)?;
        let heads = cfg.heads;
        let width = heads * c;
        let csr = &cfg.graph.by_dst;
        let mut stats = vec![0f64; n * heads * 2];
        let out = with_float!(xl.dtype(), "fused_gatv2", T => {
            type A = <T as Float>::Acc;
            let (ls, rs, ats) = (xl.as_slice::<T>()?, xr.as_slice::<T>()?, att.as_slice::<T>()?);
            let ee = inputs.get(3).map(|t| t.as_slice::<T>()).transpose()?;
            let slope = A::from_f64(cfg.negative_slope);
            let mut out = graphloom_tensor::alloc::zeros::<T>(n * width);
            let bounds = &cfg.graph.dst_chunks;
            let pieces: Vec<_> = split_rows(&mut out, width, bounds)
                .into_iter()
                .zip(split_rows(&mut stats, heads * 2, bounds))
                .map(|((first, o), (_, s))| (first, o, s))
                .collect();
            use rayon::prelude::*;
            pieces.into_par_iter().for_each(|(first, o, st)| with_simd(#[inline(always)] || {
                let mut acc = vec![A::ZERO; width];
                // One destination's scores, [degree, heads], reused from row to row.
                let mut scores: Vec<A> = Vec::new();
                let (mut m, mut z) = (vec![A::ZERO; heads], vec![A::ZERO; heads]);
                let mut buf = vec![T::from_acc(A::ZERO); c];
                for r in 0..o.len() / width.max(1) {
                    let v = first + r;
                    let lo = csr.row_ptr[v] as usize;
                    let nb = &csr.col_idx[lo..csr.row_ptr[v + 1] as usize];
                    let xr_v = &rs[v * width..(v + 1) * width];
                    scores.clear();
                    m.iter_mut().for_each(|x| *x = A::NEG_INFINITY);
                    for (i, &u) in nb.iter().enumerate() {
                        let xl_u = &ls[u as usize * width..(u as usize + 1) * width];
                        for k in 0..heads {
                            let head = k * c..(k + 1) * c;
                            let xr_k = right(xr_v, ee, lo + i, width, head.clone(), &mut buf);
                            let s = score::<T>(&xl_u[head.clone()], xr_k, &ats[head], slope);
                            m[k] = m[k].max(s);
                            scores.push(s);
                        }
                    }
                    z.iter_mut().for_each(|x| *x = A::ZERO);
                    for e in scores.chunks_mut(heads) {
                        for k in 0..heads {
                            e[k] = (e[k] - m[k]).exp();
                            z[k] += e[k];
                        }
                    }
                    acc.iter_mut().for_each(|a| *a = A::ZERO);
                    for (&u, e) in nb.iter().zip(scores.chunks(heads)) {
                        let xl_u = &ls[u as usize * width..(u as usize + 1) * width];
                        for k in 0..heads {
                            let a = e[k] / z[k] * A::from_f64(cfg.factor(v, u as usize, k));
                            for (x, &l) in acc[k * c..(k + 1) * c].iter_mut().zip(&xl_u[k * c..(k + 1) * c]) {
                                *x += a * l.to_acc();
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
            Tensor::from_vec(out, xl.shape())
        })?;
        self.stats = Some(Tensor::from_vec(stats, &[n, heads, 2])?);
        Ok(out)
    }

    fn backward(&self, ctx: &BackwardCtx<'_>) -> graphloom_tensor::Result<Vec<Option<Tensor>>> {
        let (xl, xr, att, g) = (ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.grad);
        let cfg = self;
        let heads = cfg.heads;
        let (n, c) = cfg
            .check(ctx.inputs)
            .map_err(super::aggregate::to_tensor_error)?;
        let width = heads * c;
        let stats = self.stats.as_ref().ok_or_else(|| {
            graphloom_tensor::Error::Autodiff("fused_gatv2: backward before forward".into())
        })?;
        let st = stats.as_slice::<f64>()?;
        let gv = &*cfg.graph;
        with_float!(xl.dtype(), "fused_gatv2", T => {
            type A = <T as Float>::Acc;
            let (ls, rs, ats, gs) = (xl.as_slice::<T>()?, xr.as_slice::<T>()?, att.as_slice::<T>()?, g.as_slice::<T>()?);
            let ee = ctx.inputs.get(3).map(|t| t.as_slice::<T>()).transpose()?;
            let slope = A::from_f64(cfg.negative_slope);
            let scores = Scores { xl: ls, xr: rs, att: ats, ee, stats: st, cfg, c, slope };

            // Pass 1, by destination: the gradient of xr, a partial gradient of att per row
            // range, and each edge's (alpha d, ds) in the scratch, whose rows are `by_dst`'s
            // edges, so a range of destinations writes a range of it. The ranges are fixed by
            // the graph, not by the thread count (as `dst_chunks` are), because the partials
            // of att are added in range order.
            let csr = &gv.by_dst;
            let mut dxr = graphloom_tensor::alloc::zeros::<T>(n * width);
            let mut coef = graphloom_tensor::alloc::zeros::<A>(csr.num_edges() * heads * 2);
            let bounds = &balanced_chunks(&csr.row_ptr, ATT_GRAD_RANGES);
            let edge_bounds: Vec<usize> = bounds.iter().map(|&v| csr.row_ptr[v] as usize).collect();
            // The gradient of the edge rows, each edge's own: rows of `by_dst`'s edges too.
            let ee_width = if ee.is_some() { width } else { 0 };
            let mut dee = graphloom_tensor::alloc::zeros::<T>(csr.num_edges() * ee_width);
            let pieces: Vec<_> = split_rows(&mut dxr, width, bounds)
                .into_iter()
                .zip(split_rows(&mut coef, heads * 2, &edge_bounds))
                .zip(split_rows(&mut dee, ee_width, &edge_bounds))
                .map(|(((first, d), (first_edge, e)), (_, de))| (first, d, first_edge, e, de))
                .collect();
            use rayon::prelude::*;
            let partials: Vec<Vec<A>> = pieces.into_par_iter().map(|(first, dpart, first_edge, epart, deepart)| with_simd(#[inline(always)] || {
                let mut datt = vec![A::ZERO; width];
                let mut acc = vec![A::ZERO; width];
                let mut cv = vec![A::ZERO; heads];
                let mut buf = vec![T::from_acc(A::ZERO); c];
                // dA per in-edge and head of one destination.
                let mut das: Vec<A> = Vec::new();
                for r in 0..dpart.len() / width.max(1) {
                    let v = first + r;
                    let (lo, hi) = (csr.row_ptr[v] as usize, csr.row_ptr[v + 1] as usize);
                    let nb = &csr.col_idx[lo..hi];
                    // (alpha d, alpha), then (alpha d, ds), per in-edge and head.
                    let edges = &mut epart[(lo - first_edge) * heads * 2..(hi - first_edge) * heads * 2];
                    let (xr_v, g_v) = (&rs[v * width..(v + 1) * width], &gs[v * width..(v + 1) * width]);
                    cv.iter_mut().for_each(|x| *x = A::ZERO);
                    das.clear();
                    for (i, (&u, e)) in nb.iter().zip(edges.chunks_mut(heads * 2)).enumerate() {
                        let xl_u = &ls[u as usize * width..(u as usize + 1) * width];
                        for k in 0..heads {
                            let (a, f) = scores.alpha(u as usize, v, lo + i, k, &mut buf);
                            let da = f * dot(&g_v[k * c..(k + 1) * c], &xl_u[k * c..(k + 1) * c]);
                            cv[k] += a * da;
                            e[2 * k] = a * f;
                            e[2 * k + 1] = a;
                            das.push(da);
                        }
                    }
                    acc.iter_mut().for_each(|x| *x = A::ZERO);
                    for (i, ((&u, e), da)) in nb.iter().zip(edges.chunks_mut(heads * 2)).zip(das.chunks(heads)).enumerate() {
                        let xl_u = &ls[u as usize * width..(u as usize + 1) * width];
                        for k in 0..heads {
                            let ds = e[2 * k + 1] * (da[k] - cv[k]);
                            e[2 * k + 1] = ds;
                            let head = k * c..(k + 1) * c;
                            let xl_k = &xl_u[head.clone()];
                            let xr_k = right(xr_v, ee, lo + i, width, head.clone(), &mut buf);
                            if ee.is_some() {
                                // An edge row enters its own score only: its gradient is the
                                // edge's part of xr's.
                                let at_row = (lo + i - first_edge) * width;
                                let inputs = xl_k.iter().zip(xr_k.iter()).zip(&ats[head.clone()]);
                                for (de, ((&l, &r), &at)) in deepart[at_row..][head.clone()].iter_mut().zip(inputs) {
                                    *de = T::from_acc(ds * at.to_acc() * dleaky(l.to_acc() + r.to_acc(), slope));
                                }
                            }
                            // Two loops of one output each: as one loop the compiler kept it
                            // scalar, and it took three quarters of the backward pass.
                            let inputs = xl_k.iter().zip(xr_k).zip(&ats[head.clone()]);
                            for (dr, ((&l, &r), &at)) in acc[head.clone()].iter_mut().zip(inputs) {
                                *dr += ds * at.to_acc() * dleaky(l.to_acc() + r.to_acc(), slope);
                            }
                            for (dt, (&l, &r)) in datt[head].iter_mut().zip(xl_k.iter().zip(xr_k)) {
                                *dt += ds * leaky(l.to_acc() + r.to_acc(), slope);
                            }
                        }
                    }
                    for (d, &x) in dpart[r * width..(r + 1) * width].iter_mut().zip(&acc) {
                        *d = T::from_acc(x);
                    }
                }
                datt
            })).collect();
            let mut datt = vec![A::ZERO; width];
            for p in partials {
                for (t, x) in datt.iter_mut().zip(p) {
                    *t += x;
                }
            }

            // Pass 2, by source: the gradient of xl over each source's out-edges, with each
            // edge's coefficients from the scratch.
            let mut dxl = graphloom_tensor::alloc::zeros::<T>(n * width);
            par_row_ranges(&mut dxl, width, &gv.src_chunks, #[inline(always)] |first, lpart| {
                let by_src = &gv.by_src;
                let mut acc = vec![A::ZERO; width];
                let mut buf = vec![T::from_acc(A::ZERO); c];
                for r in 0..lpart.len() / width.max(1) {
                    let u = first + r;
                    let xl_u = &ls[u * width..(u + 1) * width];
                    acc.iter_mut().for_each(|x| *x = A::ZERO);
                    let out_edges = by_src.row_ptr[u] as usize..by_src.row_ptr[u + 1] as usize;
                    for (&v, &e) in by_src.col_idx[out_edges.clone()].iter().zip(&gv.src_edge[out_edges]) {
                        let v = v as usize;
                        let (xr_v, g_v) = (&rs[v * width..(v + 1) * width], &gs[v * width..(v + 1) * width]);
                        let coefs = &coef[e * heads * 2..(e + 1) * heads * 2];
                        for k in 0..heads {
                            let (af, ds) = (coefs[2 * k], coefs[2 * k + 1]);
                            let head = k * c..(k + 1) * c;
                            let xr_k = right(xr_v, ee, e, width, head.clone(), &mut buf);
                            let inputs = xl_u[head.clone()].iter().zip(xr_k).zip(&ats[head.clone()]).zip(&g_v[head.clone()]);
                            for (d, (((&l, &r), &at), &gi)) in acc[head].iter_mut().zip(inputs) {
                                let pre = l.to_acc() + r.to_acc();
                                *d += af * gi.to_acc() + ds * at.to_acc() * dleaky(pre, slope);
                            }
                        }
                    }
                    for (d, &x) in lpart[r * width..(r + 1) * width].iter_mut().zip(&acc) {
                        *d = T::from_acc(x);
                    }
                }
            });
            graphloom_tensor::alloc::recycle(coef);
            let datt: Vec<T> = datt.into_iter().map(T::from_acc).collect();
            let mut grads = vec![
                ctx.needs_grad[0].then(|| Tensor::from_vec(dxl, xl.shape())).transpose()?,
                ctx.needs_grad[1].then(|| Tensor::from_vec(dxr, xr.shape())).transpose()?,
                ctx.needs_grad[2].then(|| Tensor::from_vec(datt, att.shape())).transpose()?,
            ];
            if let Some(rows) = ctx.inputs.get(3) {
                grads.push(ctx.needs_grad[3].then(|| Tensor::from_vec(dee, rows.shape())).transpose()?);
            }
            Ok(grads)
        })
    }

    fn reads_output(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{assert_close, awkward_graph, rand_tensor};
    use graphloom_tensor::autodiff::gradcheck::max_gradient_error;
    use graphloom_tensor::rng::RngKey;
    use graphloom_tensor::DType;

    /// Naive GATv2 attention: per destination and head, an explicit list of coefficients.
    fn naive(
        gat: &FusedGatV2,
        (heads, dropout): (usize, Option<Dropout>),
        [xl, xr, att]: [&[f64]; 3],
        ee: Option<&[f64]>,
        c: usize,
    ) -> Vec<f64> {
        let g = &gat.graph.by_dst;
        let factor = |v: usize, u: usize, k: usize| {
            dropout.map_or(1.0, |d| d.factor(v as u64, (u * heads + k) as u64))
        };
        let width = heads * c;
        let mut out = vec![0.0; g.num_nodes() * width];
        for v in 0..g.num_nodes() {
            let nb = g.in_neighbors(v);
            for k in 0..heads {
                let s: Vec<f64> = nb
                    .iter()
                    .enumerate()
                    .map(|(p, &u)| {
                        let e = g.row_ptr[v] as usize + p;
                        (0..c)
                            .map(|j| {
                                let i = k * c + j;
                                let edge = ee.map_or(0.0, |ee| ee[e * width + i]);
                                let x = xl[u as usize * width + i] + xr[v * width + i] + edge;
                                att[i] * if x > 0.0 { x } else { gat.negative_slope * x }
                            })
                            .sum()
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                for (&u, &sc) in nb.iter().zip(&s) {
                    let a = (sc - m).exp() / z * factor(v, u as usize, k);
                    for j in 0..c {
                        out[v * width + k * c + j] += a * xl[u as usize * width + k * c + j];
                    }
                }
            }
        }
        out
    }

    /// The attention dropout of the tests that draw one.
    fn dropout(on: bool) -> Option<Dropout> {
        on.then(|| Dropout {
            p: 0.3,
            key: RngKey::new(5, 1, 2),
        })
    }

    /// The kernel over an awkward graph of 25 nodes (built on the calling thread's pool, so
    /// its row ranges are that pool's) and inputs for 3 heads of 4.
    fn setup() -> (FusedGatV2, [Tensor; 3]) {
        let g = awkward_graph(25, 50, 11);
        (
            FusedGatV2::new(Arc::new(GraphView::new(&g, true))),
            [
                rand_tensor(&[25, 3 * 4], 1),
                rand_tensor(&[25, 3 * 4], 2),
                rand_tensor(&[3 * 4], 3),
            ],
        )
    }

    #[test]
    fn fused_gatv2_matches_naive_attention() {
        for on in [false, true] {
            let (gat, [xl, xr, att]) = setup();
            let mut tape = Tape::no_grad();
            let out = gat
                .apply(
                    &mut tape,
                    &Var::constant(xl.clone()),
                    &Var::constant(xr.clone()),
                    &Var::constant(att.clone()),
                    3,
                    dropout(on),
                )
                .unwrap();
            let (l, r, a) = (xl.to_vec_f64(), xr.to_vec_f64(), att.to_vec_f64());
            let want = naive(&gat, (3, dropout(on)), [&l, &r, &a], None, 4);
            assert_close(
                &out.value().to_vec_f64(),
                &want,
                1e-12,
                "fused against naive",
            );
        }
    }

    #[test]
    fn fused_gatv2_gradients_match_finite_differences() {
        for on in [false, true] {
            let (gat, inputs) = setup();
            let f = |t: &mut Tape, v: &[Var]| {
                gat.apply(t, &v[0], &v[1], &v[2], 3, dropout(on))
                    .map_err(|e| graphloom_tensor::Error::Autodiff(e.to_string()))
            };
            let err = max_gradient_error(&f, &inputs, &[true; 3], 1e-6).unwrap();
            assert!(err < 1e-6, "dropout {on}: {err}");
        }
    }

    #[test]
    fn edge_rows_enter_the_scores_as_naive_and_finite_differences_say() {
        let (gat, [xl, xr, att]) = setup();
        let ee = rand_tensor(&[gat.graph.by_dst.num_edges(), 3 * 4], 9);
        for on in [false, true] {
            let mut tape = Tape::no_grad();
            let out = gat
                .apply_with_edges(
                    &mut tape,
                    &Var::constant(xl.clone()),
                    &Var::constant(xr.clone()),
                    &Var::constant(att.clone()),
                    Some(&Var::constant(ee.clone())),
                    3,
                    dropout(on),
                )
                .unwrap();
            let (l, r, a, e) = (
                xl.to_vec_f64(),
                xr.to_vec_f64(),
                att.to_vec_f64(),
                ee.to_vec_f64(),
            );
            let want = naive(&gat, (3, dropout(on)), [&l, &r, &a], Some(&e), 4);
            assert_close(&out.value().to_vec_f64(), &want, 1e-12, "with edge rows");
            let f = |t: &mut Tape, v: &[Var]| {
                gat.apply_with_edges(t, &v[0], &v[1], &v[2], Some(&v[3]), 3, dropout(on))
                    .map_err(|e| graphloom_tensor::Error::Autodiff(e.to_string()))
            };
            let inputs = [xl.clone(), xr.clone(), att.clone(), ee.clone()];
            let err = max_gradient_error(&f, &inputs, &[true; 4], 1e-6).unwrap();
            assert!(err < 1e-6, "dropout {on}: {err}");
        }
    }

    #[test]
    fn fused_gatv2_results_do_not_depend_on_the_thread_count() {
        // The graph is built inside each pool, as a run builds it, so its row ranges are
        // that pool's.
        let run = |threads| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let (gat, inputs) = setup();
                let mut tape = Tape::new();
                let vars: Vec<Var> = inputs
                    .iter()
                    .map(|t| tape.leaf(t.cast(DType::F32).unwrap(), true))
                    .collect();
                let out = gat
                    .apply(&mut tape, &vars[0], &vars[1], &vars[2], 3, dropout(true))
                    .unwrap();
                let ones = Tensor::full(out.value().shape(), DType::F32, 1.0).unwrap();
                let grads = tape.backward_with(&out, ones).unwrap();
                vars.iter()
                    .map(|v| grads.get(v).unwrap().to_vec_f64())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(run(1), run(3));
    }

    #[test]
    fn mismatched_inputs_are_refused() {
        let (gat, [xl, _, att]) = setup();
        let xr = rand_tensor(&[25, 6], 4);
        let mut tape = Tape::no_grad();
        let err = gat
            .apply(
                &mut tape,
                &Var::constant(xl),
                &Var::constant(xr),
                &Var::constant(att),
                3,
                None,
            )
            .unwrap_err();
        assert!(err.to_string().contains("fused GATv2"), "{err}");
    }
}
