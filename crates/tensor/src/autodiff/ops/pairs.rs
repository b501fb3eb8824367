//! Operations over pairs of rows, for scoring the two ends of edges (link prediction):
//!
//! - [`pair_product`]: `z_i = h[src_i] * h[dst_i]` (element-wise, the Hadamard product of the
//!   two ends). Backward: `dh[src_i] += g_i * h[dst_i]`, `dh[dst_i] += g_i * h[src_i]`, added
//!   pair by pair in pair order, so the result does not depend on threads.
//! - [`row_sums`]: `s_i = sum_j x[i, j]`, `[p, d] -> [p, 1]`; a dot-product score is
//!   `row_sums(pair_product(h, src, dst))`. Backward: `dx[i, j] = g_i`.
//! - [`bce_with_logits`]: `sum_i (max(s_i, 0) - s_i y_i + ln(1 + e^{-|s_i|})) / normaliser`, the
//!   binary cross-entropy of scores `s` (logits) against labels `y` in `[0, 1]`, stable for
//!   any `s`. Backward: `ds_i = (sigmoid(s_i) - y_i) / normaliser`.

use std::sync::Arc;

use crate::autodiff::{BackwardCtx, Op, Tape, Var};
use crate::{with_float, Error, Float, Real, Result, Tensor};

struct PairProduct {
    src: Arc<[usize]>,
    dst: Arc<[usize]>,
}

impl Op for PairProduct {
    fn name(&self) -> &'static str {
        "pair_product"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let h = inputs[0];
        let (n, d) = h.dims2();
        if let Some(&bad) = self.src.iter().chain(self.dst.iter()).find(|&&v| v >= n) {
            return Err(Error::IndexOutOfRange {
                op: "pair_product",
                index: bad as i64,
                bound: n,
            });
        }
        with_float!(h.dtype(), "pair_product", T => {
            let hs = h.as_slice::<T>()?;
            let mut out = crate::alloc::with_capacity(self.src.len() * d);
            for (&u, &v) in self.src.iter().zip(self.dst.iter()) {
                let (a, b) = (&hs[u * d..(u + 1) * d], &hs[v * d..(v + 1) * d]);
                out.extend(a.iter().zip(b).map(|(x, y)| T::from_acc(x.to_acc() * y.to_acc())));
            }
            Tensor::from_vec(out, &[self.src.len(), d])
        })
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let (h, g) = (ctx.inputs[0], ctx.grad);
        let (n, d) = h.dims2();
        let dh = with_float!(h.dtype(), "pair_product", T => {
            let (hs, gs) = (h.as_slice::<T>()?, g.as_slice::<T>()?);
            let mut acc = vec![<<T as Float>::Acc as Real>::ZERO; n * d];
            for (i, (&u, &v)) in self.src.iter().zip(self.dst.iter()).enumerate() {
                let gi = &gs[i * d..(i + 1) * d];
                for j in 0..d {
                    let gij = gi[j].to_acc();
                    acc[u * d + j] += gij * hs[v * d + j].to_acc();
                    acc[v * d + j] += gij * hs[u * d + j].to_acc();
                }
            }
            let mut out = crate::alloc::with_capacity(n * d);
            out.extend(acc.into_iter().map(T::from_acc));
            Tensor::from_vec(out, &[n, d])
        })?;
        Ok(vec![Some(dh)])
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// The Hadamard products `h[src_i] * h[dst_i]` of the pairs `(src_i, dst_i)` of rows of
/// `h: [n, d]`, as `[pairs, d]`.
pub fn pair_product(tape: &mut Tape, h: &Var, src: Arc<[usize]>, dst: Arc<[usize]>) -> Result<Var> {
    if src.len() != dst.len() {
        return Err(Error::ShapeMismatch {
            op: "pair_product",
            lhs: vec![src.len()],
            rhs: vec![dst.len()],
        });
    }
    tape.apply(PairProduct { src, dst }, &[h])
}

struct RowSums;

impl Op for RowSums {
    fn name(&self) -> &'static str {
        "row_sums"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let x = inputs[0];
        let (p, d) = x.dims2();
        with_float!(x.dtype(), "row_sums", T => {
            let xs = x.as_slice::<T>()?;
            let sums: Vec<T> = (0..p)
                .map(|i| {
                    let row = &xs[i * d..(i + 1) * d];
                    T::from_acc(row.iter().fold(<<T as Float>::Acc as Real>::ZERO, |s, v| s + v.to_acc()))
                })
                .collect();
            Tensor::from_vec(sums, &[p, 1])
        })
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let (x, g) = (ctx.inputs[0], ctx.grad);
        let (p, d) = x.dims2();
        let dx = with_float!(g.dtype(), "row_sums", T => {
            let gs = g.as_slice::<T>()?;
            let out: Vec<T> = (0..p * d).map(|k| gs[k / d.max(1)]).collect();
            Tensor::from_vec(out, &[p, d])
        })?;
        Ok(vec![Some(dx)])
    }
    fn reads_input(&self, _index: usize, _needs_grad: &[bool]) -> bool {
        // Only its shape, which the gradient's rows and the op's own shape give: kept for it.
        true
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// The sum of each row of `x: [p, d]`, as `[p, 1]`.
pub fn row_sums(tape: &mut Tape, x: &Var) -> Result<Var> {
    tape.apply(RowSums, &[x])
}

struct BceWithLogits {
    labels: Arc<[f64]>,
    normaliser: f64,
}

impl Op for BceWithLogits {
    fn name(&self) -> &'static str {
        "bce_with_logits"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let s = inputs[0];
        if s.numel() != self.labels.len() {
            return Err(Error::ShapeMismatch {
                op: "bce_with_logits",
                lhs: s.shape().to_vec(),
                rhs: vec![self.labels.len()],
            });
        }
        let scores = s.to_vec_f64();
        // In pair order: a fixed order, so the loss does not depend on threads.
        let total: f64 = scores
            .iter()
            .zip(self.labels.iter())
            .map(|(&x, &y)| x.max(0.0) - x * y + (-x.abs()).exp().ln_1p())
            .sum();
        with_float!(s.dtype(), "bce_with_logits", T => {
            Tensor::from_vec(vec![T::from_acc(<<T as Float>::Acc as Real>::from_f64(total / self.normaliser))], &[1])
        })
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let s = ctx.inputs[0];
        let g = ctx.grad.scalar_f64()? / self.normaliser;
        let ds: Vec<f64> = s
            .to_vec_f64()
            .iter()
            .zip(self.labels.iter())
            .map(|(&x, &y)| (sigmoid(x) - y) * g)
            .collect();
        Ok(vec![Some(Tensor::from_f64(&ds, s.shape(), s.dtype())?)])
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// The logistic function, without overflow for large `|x|`.
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// The binary cross-entropy of scores `s` (logits, any shape of `labels.len()` elements)
/// against `labels` in `[0, 1]`, summed and divided by `normaliser`: the mean when it is the
/// number of scores. A distributed job passes the global count, so each worker's share adds
/// up to the loss of the whole.
pub fn bce_with_logits(
    tape: &mut Tape,
    s: &Var,
    labels: Arc<[f64]>,
    normaliser: f64,
) -> Result<Var> {
    tape.apply(BceWithLogits { labels, normaliser }, &[s])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::gradcheck::{max_gradient_error, uniform_f64};

    #[test]
    fn a_dot_product_score_and_its_loss_match_finite_differences_and_f64() {
        let h = uniform_f64(&[6, 4], 3);
        // Repeated rows and a self-pair: their gradient terms add up.
        let src: Arc<[usize]> = vec![0, 2, 2, 5, 3].into();
        let dst: Arc<[usize]> = vec![1, 4, 2, 0, 3].into();
        let labels: Arc<[f64]> = vec![1.0, 0.0, 1.0, 0.0, 0.3].into();
        let (s2, d2, l2) = (src.clone(), dst.clone(), labels.clone());
        let f = move |t: &mut Tape, v: &[Var]| {
            let z = pair_product(t, &v[0], s2.clone(), d2.clone())?;
            let s = row_sums(t, &z)?;
            bce_with_logits(t, &s, l2.clone(), 5.0)
        };
        let err = max_gradient_error(&f, std::slice::from_ref(&h), &[true], 1e-6).unwrap();
        assert!(err < 1e-8, "{err}");
        let mut t = Tape::no_grad();
        let loss = f(&mut t, &[Var::constant(h.clone())])
            .unwrap()
            .value()
            .scalar_f64()
            .unwrap();
        let hv = h.to_vec_f64();
        let mut want = 0.0;
        for i in 0..5 {
            let s: f64 = (0..4)
                .map(|j| hv[src[i] * 4 + j] * hv[dst[i] * 4 + j])
                .sum();
            let p = 1.0 / (1.0 + (-s).exp());
            want -= labels[i] * p.ln() + (1.0 - labels[i]) * (1.0 - p).ln();
        }
        assert!(
            (loss - want / 5.0).abs() < 1e-12,
            "{loss} vs {}",
            want / 5.0
        );
    }

    #[test]
    fn large_scores_keep_the_loss_finite() {
        let s = Tensor::from_f64(&[800.0, -800.0], &[2, 1], crate::DType::F32).unwrap();
        let mut t = Tape::new();
        let sv = t.leaf(s, true);
        let loss = bce_with_logits(&mut t, &sv, vec![0.0, 1.0].into(), 2.0).unwrap();
        assert!((loss.value().scalar_f64().unwrap() - 800.0).abs() < 1e-3);
        let g = t.backward(&loss).unwrap();
        assert_eq!(g.get(&sv).unwrap().to_vec_f64(), vec![0.5, -0.5]);
    }

    #[test]
    fn pairs_out_of_range_are_errors() {
        let mut t = Tape::new();
        let h = t.leaf(uniform_f64(&[3, 2], 1), true);
        assert!(pair_product(&mut t, &h, vec![0].into(), vec![3].into()).is_err());
        assert!(pair_product(&mut t, &h, vec![0, 1].into(), vec![1].into()).is_err());
    }
}
