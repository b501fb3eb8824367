//! Log-softmax over rows and the negative log-likelihood loss.

use std::sync::Arc;

use crate::autodiff::{BackwardCtx, Op, Tape, Var};
use crate::kernels::elementwise::for_each_row_mut;
use crate::{with_float, Error, Float, Real, Result, Tensor};

/// Independent accumulators of a row reduction.
const LANES: usize = 8;

/// Folds `row` with `step(accumulator, element)` into `LANES` accumulators at a time, then
/// combines them with `combine`, in a fixed order: a single accumulator makes every element
/// wait for the previous one, and a fixed order keeps the result independent of threads.
#[inline(always)]
fn lane_fold<T: Float>(
    row: &[T],
    init: T::Acc,
    step: impl Fn(T::Acc, T::Acc) -> T::Acc,
    combine: impl Fn(T::Acc, T::Acc) -> T::Acc,
) -> T::Acc {
    let mut lanes = [init; LANES];
    for block in row.chunks(LANES) {
        for (lane, v) in lanes.iter_mut().zip(block) {
            *lane = step(*lane, v.to_acc());
        }
    }
    lanes.into_iter().fold(init, combine)
}

struct LogSoftmax;

impl Op for LogSoftmax {
    fn name(&self) -> &'static str {
        "log_softmax"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let x = inputs[0];
        let (_, cols) = x.dims2();
        with_float!(x.dtype(), "log_softmax", T => {
            let mut out = crate::alloc::copy_of(x.as_slice::<T>()?);
            for_each_row_mut(&mut out, cols, #[inline(always)] |_, row| {
                type Acc<T> = <T as Float>::Acc;
                let max = lane_fold(row, <Acc<T> as Real>::NEG_INFINITY, Real::max, Real::max);
                let sum = lane_fold(row, <Acc<T> as Real>::ZERO, |s, v| s + (v - max).exp_branchless(), |a, b| a + b);
                let log_z = max + sum.ln();
                for v in row.iter_mut() {
                    *v = T::from_acc(v.to_acc() - log_z);
                }
            });
            Tensor::from_vec(out, x.shape())
        })
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        // dx = g - softmax(x) * sum(g), per row; softmax(x) = exp(output).
        let (y, g) = (ctx.output, ctx.grad);
        let (_, cols) = y.dims2();
        let dx = with_float!(y.dtype(), "log_softmax", T => {
            let ys = y.as_slice::<T>()?;
            let mut out = crate::alloc::copy_of(g.as_slice::<T>()?);
            for_each_row_mut(&mut out, cols, #[inline(always)] |r, row| {
                let yr = &ys[r * cols..(r + 1) * cols];
                let add = |a, b| a + b;
                let s = lane_fold(row, <<T as Float>::Acc as Real>::ZERO, add, add);
                for (v, &yv) in row.iter_mut().zip(yr) {
                    *v = T::from_acc(v.to_acc() - yv.to_acc().exp_branchless() * s);
                }
            });
            Tensor::from_vec(out, y.shape())
        })?;
        Ok(vec![Some(dx)])
    }
    fn reads_input(&self, _index: usize, _needs_grad: &[bool]) -> bool {
        false
    }
}

/// Log-softmax of each row of `x: [n, c]`.
pub fn log_softmax(tape: &mut Tape, x: &Var) -> Result<Var> {
    tape.apply(LogSoftmax, &[x])
}

struct NllLoss {
    rows: Arc<[usize]>,
    labels: Arc<[i64]>,
    /// A weight per row (`None`: 1 each).
    weights: Option<Arc<[f64]>>,
    normaliser: f64,
}

impl NllLoss {
    /// The weight of the `i`-th row.
    fn weight(&self, i: usize) -> f64 {
        self.weights.as_ref().map_or(1.0, |w| w[i])
    }
}

impl Op for NllLoss {
    fn name(&self) -> &'static str {
        "nll_loss"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let logp = inputs[0];
        let (n, c) = logp.dims2();
        for &r in self.rows.iter() {
            if r >= n {
                return Err(Error::IndexOutOfRange {
                    op: "nll_loss",
                    index: r as i64,
                    bound: n,
                });
            }
        }
        for &y in self.labels.iter() {
            if y < 0 || y as usize >= c {
                return Err(Error::IndexOutOfRange {
                    op: "nll_loss label",
                    index: y,
                    bound: c,
                });
            }
        }
        with_float!(logp.dtype(), "nll_loss", T => {
            let lp = logp.as_slice::<T>()?;
            // Sequential in row order: a fixed order, so the loss does not depend on threads.
            let mut total = 0f64;
            for (i, (&r, &y)) in self.rows.iter().zip(self.labels.iter()).enumerate() {
                total -= self.weight(i) * lp[r * c + y as usize].to_acc().to_f64();
            }
            Tensor::from_vec(vec![T::from_acc(<<T as Float>::Acc as Real>::from_f64(total / self.normaliser))], &[1])
        })
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let logp = ctx.inputs[0];
        let (_, c) = logp.dims2();
        let g = ctx.grad.scalar_f64()?;
        let dx = with_float!(logp.dtype(), "nll_loss", T => {
            let mut out = crate::alloc::zeros::<T>(logp.numel());
            for (i, (&r, &y)) in self.rows.iter().zip(self.labels.iter()).enumerate() {
                let cell = &mut out[r * c + y as usize];
                let d = g * self.weight(i) / self.normaliser;
                *cell = T::from_acc(<<T as Float>::Acc as Real>::from_f64(cell.to_acc().to_f64() - d));
            }
            Tensor::from_vec(out, logp.shape())
        })?;
        Ok(vec![Some(dx)])
    }
}

/// `-sum_i logp[rows[i], labels[i]] / normaliser`: the mean negative log-likelihood when
/// `normaliser` is the number of rows. A distributed job passes the global count, so each
/// worker's share adds up to the loss of the whole.
pub fn nll_loss(
    tape: &mut Tape,
    logp: &Var,
    rows: Arc<[usize]>,
    labels: Arc<[i64]>,
    normaliser: f64,
) -> Result<Var> {
    if rows.len() != labels.len() {
        return Err(Error::ShapeMismatch {
            op: "nll_loss",
            lhs: vec![rows.len()],
            rhs: vec![labels.len()],
        });
    }
    tape.apply(
        NllLoss {
            rows,
            labels,
            weights: None,
            normaliser,
        },
        &[logp],
    )
}

/// `-sum_i weights[i] * logp[rows[i], labels[i]] / normaliser`: each row's loss weighted (as
/// GraphSAINT weighs a sampled node's loss by its normalisation).
pub fn weighted_nll_loss(
    tape: &mut Tape,
    logp: &Var,
    rows: Arc<[usize]>,
    labels: Arc<[i64]>,
    weights: Arc<[f64]>,
    normaliser: f64,
) -> Result<Var> {
    if rows.len() != labels.len() || rows.len() != weights.len() {
        return Err(Error::ShapeMismatch {
            op: "weighted_nll_loss",
            lhs: vec![rows.len(), labels.len()],
            rhs: vec![weights.len()],
        });
    }
    tape.apply(
        NllLoss {
            rows,
            labels,
            weights: Some(weights),
            normaliser,
        },
        &[logp],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::gradcheck::max_gradient_error;
    use crate::DType;

    #[test]
    fn log_softmax_nll_matches_finite_differences_and_f64_reference() {
        let v: Vec<f64> = (0..20).map(|i| ((i * 7) % 11) as f64 * 0.3 - 1.0).collect();
        let x = Tensor::from_f64(&v, &[5, 4], DType::F64).unwrap();
        let rows: Arc<[usize]> = vec![0, 2, 3, 2].into();
        let labels: Arc<[i64]> = vec![1, 3, 0, 3].into();
        let (r2, l2) = (rows.clone(), labels.clone());
        let f = move |t: &mut Tape, v: &[Var]| {
            let lp = log_softmax(t, &v[0])?;
            nll_loss(t, &lp, r2.clone(), l2.clone(), 4.0)
        };
        assert!(max_gradient_error(&f, std::slice::from_ref(&x), &[true], 1e-6).unwrap() < 1e-8);
        let mut t = Tape::no_grad();
        let loss = f(&mut t, &[Var::constant(x)])
            .unwrap()
            .value()
            .scalar_f64()
            .unwrap();
        let mut want = 0.0;
        for (&r, &y) in rows.iter().zip(labels.iter()) {
            let row = &v[r * 4..r * 4 + 4];
            let lse = row.iter().map(|a| a.exp()).sum::<f64>().ln();
            want -= row[y as usize] - lse;
        }
        assert!((loss - want / 4.0).abs() < 1e-12);
    }

    #[test]
    fn weighted_nll_weighs_each_row_and_matches_finite_differences() {
        let v: Vec<f64> = (0..12).map(|i| ((i * 5) % 7) as f64 * 0.4 - 1.2).collect();
        let x = Tensor::from_f64(&v, &[4, 3], DType::F64).unwrap();
        let rows: Arc<[usize]> = vec![0, 1, 3].into();
        let labels: Arc<[i64]> = vec![2, 0, 1].into();
        let weights: Arc<[f64]> = vec![0.5, 2.0, 1.5].into();
        let (r, l, w) = (rows.clone(), labels.clone(), weights.clone());
        let f = move |t: &mut Tape, v: &[Var]| {
            let lp = log_softmax(t, &v[0])?;
            weighted_nll_loss(t, &lp, r.clone(), l.clone(), w.clone(), 2.0)
        };
        assert!(max_gradient_error(&f, std::slice::from_ref(&x), &[true], 1e-6).unwrap() < 1e-8);
        let mut t = Tape::no_grad();
        let loss = f(&mut t, &[Var::constant(x)])
            .unwrap()
            .value()
            .scalar_f64()
            .unwrap();
        let mut want = 0.0;
        for ((&r, &y), &w) in rows.iter().zip(labels.iter()).zip(weights.iter()) {
            let row = &v[r * 3..r * 3 + 3];
            let lse = row.iter().map(|a| a.exp()).sum::<f64>().ln();
            want -= w * (row[y as usize] - lse);
        }
        assert!((loss - want / 2.0).abs() < 1e-12);
    }

    #[test]
    fn labels_out_of_range_are_errors() {
        let x = Tensor::zeros(&[2, 3], DType::F32);
        let mut t = Tape::new();
        let xv = t.leaf(x, true);
        assert!(nll_loss(&mut t, &xv, vec![0].into(), vec![3].into(), 1.0).is_err());
        assert!(nll_loss(&mut t, &xv, vec![2].into(), vec![0].into(), 1.0).is_err());
    }
}
