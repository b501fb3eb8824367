//! Per-head operations of multi-head attention layers: attention scores and the mean of heads.

use graphloom_tensor::kernels::elementwise::for_each_row_mut;
use graphloom_tensor::{with_float, BackwardCtx, Error, Float, Op, Real, Tape, Tensor, Var};
use rayon::prelude::*;

/// Rows per partial sum of the attention-vector gradient: fixed, so the sum does not depend on
/// the thread count.
const ROW_CHUNK: usize = 512;

struct HeadScores {
    heads: usize,
}

impl Op for HeadScores {
    fn name(&self) -> &'static str {
        "head_scores"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> graphloom_tensor::Result<Tensor> {
        let (h, att) = (inputs[0], inputs[1]);
        let (n, width) = h.dims2();
        if att.numel() != width || width % self.heads != 0 || h.dtype() != att.dtype() {
            return Err(Error::ShapeMismatch {
                op: "head_scores",
                lhs: h.shape().to_vec(),
                rhs: att.shape().to_vec(),
            });
        }
        let (heads, c) = (self.heads, width / self.heads);
        with_float!(h.dtype(), "head_scores", T => {
            let (hs, a) = (h.as_slice::<T>()?, att.as_slice::<T>()?);
            let mut out = graphloom_tensor::alloc::zeros::<T>(n * heads);
            for_each_row_mut(&mut out, heads, #[inline(always)] |v, row| {
                for (k, o) in row.iter_mut().enumerate() {
                    let mut s = <<T as Float>::Acc as Real>::ZERO;
                    for j in 0..c {
                        s += hs[v * width + k * c + j].to_acc() * a[k * c + j].to_acc();
                    }
                    *o = T::from_acc(s);
                }
            });
            Tensor::from_vec(out, &[n, heads])
        })
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> graphloom_tensor::Result<Vec<Option<Tensor>>> {
        let (h, att, g) = (ctx.inputs[0], ctx.inputs[1], ctx.grad);
        let (n, width) = h.dims2();
        let (heads, c) = (self.heads, width / self.heads);
        with_float!(h.dtype(), "head_scores", T => {
            let (hs, a, gs) = (h.as_slice::<T>()?, att.as_slice::<T>()?, g.as_slice::<T>()?);
            let dh = if ctx.needs_grad[0] {
                let mut dh = graphloom_tensor::alloc::zeros::<T>(n * width);
                // Head by head, so the head of an entry is a loop counter, not a division.
                for_each_row_mut(&mut dh, width, #[inline(always)] |v, row| {
                    for ((d, ak), g) in row.chunks_mut(c).zip(a.chunks(c)).zip(&gs[v * heads..(v + 1) * heads]) {
                        let g = g.to_acc();
                        for (d, &ai) in d.iter_mut().zip(ak) {
                            *d = T::from_acc(g * ai.to_acc());
                        }
                    }
                });
                Some(Tensor::from_vec(dh, h.shape())?)
            } else {
                None
            };
            let partials: Vec<Vec<<T as Float>::Acc>> = (0..n.div_ceil(ROW_CHUNK))
                .into_par_iter()
                .map(|b| {
                    let mut s = vec![<<T as Float>::Acc as Real>::ZERO; width];
                    for v in b * ROW_CHUNK..((b + 1) * ROW_CHUNK).min(n) {
                        let h_row = hs[v * width..(v + 1) * width].chunks(c);
                        for ((sk, hk), g) in s.chunks_mut(c).zip(h_row).zip(&gs[v * heads..(v + 1) * heads]) {
                            let g = g.to_acc();
                            for (si, &hi) in sk.iter_mut().zip(hk) {
                                *si += g * hi.to_acc();
                            }
                        }
                    }
                    s
                })
                .collect();
            let mut da = vec![<<T as Float>::Acc as Real>::ZERO; width];
            for p in partials {
                for (d, x) in da.iter_mut().zip(p) {
                    *d += x;
                }
            }
            let da = Tensor::from_vec(da.into_iter().map(T::from_acc).collect::<Vec<T>>(), att.shape())?;
            Ok(vec![dh, Some(da)])
        })
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// `s[v, k] = sum_j h[v, k, j] * att[k, j]` for `h: [n, heads * c]` and `att: [heads * c]`.
pub fn head_scores(
    tape: &mut Tape,
    h: &Var,
    att: &Var,
    heads: usize,
) -> graphloom_tensor::Result<Var> {
    tape.apply(HeadScores { heads }, &[h, att])
}

struct MeanHeads {
    heads: usize,
}

impl Op for MeanHeads {
    fn name(&self) -> &'static str {
        "mean_heads"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> graphloom_tensor::Result<Tensor> {
        let x = inputs[0];
        let (n, width) = x.dims2();
        let (heads, c) = (self.heads, width / self.heads);
        with_float!(x.dtype(), "mean_heads", T => {
            let xs = x.as_slice::<T>()?;
            let inv = <<T as Float>::Acc as Real>::from_f64(1.0 / heads as f64);
            let mut out = graphloom_tensor::alloc::zeros::<T>(n * c);
            for_each_row_mut(&mut out, c, #[inline(always)] |v, row| {
                for (j, o) in row.iter_mut().enumerate() {
                    let mut s = <<T as Float>::Acc as Real>::ZERO;
                    for k in 0..heads {
                        s += xs[v * width + k * c + j].to_acc();
                    }
                    *o = T::from_acc(s * inv);
                }
            });
            Tensor::from_vec(out, &[n, c])
        })
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> graphloom_tensor::Result<Vec<Option<Tensor>>> {
        let (x, g) = (ctx.inputs[0], ctx.grad);
        let (n, width) = x.dims2();
        let (heads, c) = (self.heads, width / self.heads);
        with_float!(x.dtype(), "mean_heads", T => {
            let gs = g.as_slice::<T>()?;
            let inv = <<T as Float>::Acc as Real>::from_f64(1.0 / heads as f64);
            let mut dx = graphloom_tensor::alloc::zeros::<T>(n * width);
            for_each_row_mut(&mut dx, width, #[inline(always)] |v, row| {
                let g_row = &gs[v * c..(v + 1) * c];
                for dk in row.chunks_mut(c) {
                    for (d, &gj) in dk.iter_mut().zip(g_row) {
                        *d = T::from_acc(gj.to_acc() * inv);
                    }
                }
            });
            Ok(vec![Some(Tensor::from_vec(dx, x.shape())?)])
        })
    }
}

/// The mean over heads: `[n, heads * c] -> [n, c]`.
pub fn mean_heads(tape: &mut Tape, x: &Var, heads: usize) -> graphloom_tensor::Result<Var> {
    if heads == 1 {
        return Ok(x.clone());
    }
    tape.apply(MeanHeads { heads }, &[x])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::rand_tensor;
    use graphloom_tensor::autodiff::gradcheck::max_gradient_error;

    #[test]
    fn head_ops_match_finite_differences() {
        let f = |t: &mut Tape, v: &[Var]| {
            let s = head_scores(t, &v[0], &v[1], 3)?;
            let m = mean_heads(t, &v[0], 3)?;
            let m = graphloom_tensor::autodiff::ops::reshape(t, &m, &[14])?;
            let s = graphloom_tensor::autodiff::ops::reshape(t, &s, &[21])?;
            let s = graphloom_tensor::autodiff::ops::reshape(t, &s, &[21, 1])?;
            let m = graphloom_tensor::autodiff::ops::reshape(t, &m, &[1, 14])?;
            graphloom_tensor::autodiff::ops::matmul(t, &s, &m)
        };
        let err = max_gradient_error(
            &f,
            &[rand_tensor(&[7, 6], 1), rand_tensor(&[6], 2)],
            &[true, true],
            1e-6,
        )
        .unwrap();
        assert!(err < 1e-7, "{err}");
    }
}
