//! Losses of rows against several targets each, some missing: multi-label classification's
//! binary cross-entropy and regression's squared or absolute error.
//!
//! [`row_target_loss`] sums, over the rows `rows[i]` of `x` (`[n, T]`) and every column `j`
//! whose target `y[i, j]` is present (not NaN), `w_i * l(x[rows[i], j], y[i, j])`, over
//! `normaliser`:
//!
//! - [`RowLoss::Bce`]: `max(x, 0) - x y + ln(1 + e^{-|x|})`, `dl/dx = sigmoid(x) - y`;
//! - [`RowLoss::Mse`]: `(x - y)^2`, `dl/dx = 2 (x - y)`;
//! - [`RowLoss::L1`]: `|x - y|`, `dl/dx = sign(x - y)` (0 at 0, as PyTorch's).
//!
//! The sum runs in row order in f64, so the loss does not depend on threads.

use std::sync::Arc;

use super::sigmoid;
use crate::autodiff::{BackwardCtx, Op, Tape, Var};
use crate::{Error, Result, Tensor};

/// The loss of one output against one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowLoss {
    /// Binary cross-entropy of a logit against a 0/1 label.
    Bce,
    /// Squared error.
    Mse,
    /// Absolute error.
    L1,
}

impl RowLoss {
    fn value(self, x: f64, y: f64) -> f64 {
        match self {
            RowLoss::Bce => x.max(0.0) - x * y + (-x.abs()).exp().ln_1p(),
            RowLoss::Mse => (x - y) * (x - y),
            RowLoss::L1 => (x - y).abs(),
        }
    }

    fn derivative(self, x: f64, y: f64) -> f64 {
        match self {
            RowLoss::Bce => sigmoid(x) - y,
            RowLoss::Mse => 2.0 * (x - y),
            RowLoss::L1 if x == y => 0.0,
            RowLoss::L1 => (x - y).signum(),
        }
    }
}

struct RowTargetLoss {
    rows: Arc<[usize]>,
    targets: Arc<[f32]>,
    weights: Option<Arc<[f64]>>,
    loss: RowLoss,
    normaliser: f64,
}

impl RowTargetLoss {
    /// Calls `f(i, flat index into x, x value, target)` for every present target, in order.
    fn for_each_term(&self, x: &[f64], width: usize, mut f: impl FnMut(usize, usize, f64, f64)) {
        for (i, &r) in self.rows.iter().enumerate() {
            let targets = &self.targets[i * width..(i + 1) * width];
            for (j, &y) in targets.iter().enumerate() {
                if !y.is_nan() {
                    let at = r * width + j;
                    f(i, at, x[at], f64::from(y));
                }
            }
        }
    }

    fn weight(&self, i: usize) -> f64 {
        self.weights.as_ref().map_or(1.0, |w| w[i])
    }
}

impl Op for RowTargetLoss {
    fn name(&self) -> &'static str {
        "row_target_loss"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let x = inputs[0];
        let (n, width) = x.dims2();
        if let Some(&r) = self.rows.iter().find(|&&r| r >= n) {
            return Err(Error::IndexOutOfRange {
                op: "row_target_loss",
                index: r as i64,
                bound: n,
            });
        }
        let mut total = 0.0;
        self.for_each_term(&x.to_vec_f64(), width, |i, _, x, y| {
            total += self.weight(i) * self.loss.value(x, y);
        });
        Tensor::from_f64(&[total / self.normaliser], &[1], x.dtype())
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let x = ctx.inputs[0];
        let (_, width) = x.dims2();
        let g = ctx.grad.scalar_f64()? / self.normaliser;
        let mut dx = vec![0.0; x.numel()];
        self.for_each_term(&x.to_vec_f64(), width, |i, at, x, y| {
            dx[at] += g * self.weight(i) * self.loss.derivative(x, y);
        });
        Ok(vec![Some(Tensor::from_f64(&dx, x.shape(), x.dtype())?)])
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// The loss `loss` of the rows `rows` of `x` (`[n, T]`) against `targets` (`[rows, T]`
/// row-major, NaN for a missing one), each row's terms weighted by `weights` (`None`: 1),
/// summed over `normaliser` (the global batch's count of present targets, so that the workers'
/// shares add up to the loss of the whole).
pub fn row_target_loss(
    tape: &mut Tape,
    x: &Var,
    rows: Arc<[usize]>,
    targets: Arc<[f32]>,
    weights: Option<Arc<[f64]>>,
    loss: RowLoss,
    normaliser: f64,
) -> Result<Var> {
    let width = x.value().shape().get(1).copied().unwrap_or(0);
    let weighted = weights.as_ref().map_or(rows.len(), |w| w.len());
    if targets.len() != rows.len() * width || weighted != rows.len() {
        return Err(Error::ShapeMismatch {
            op: "row_target_loss",
            lhs: vec![rows.len(), width],
            rhs: vec![targets.len(), weighted],
        });
    }
    tape.apply(
        RowTargetLoss {
            rows,
            targets,
            weights,
            loss,
            normaliser,
        },
        &[x],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::gradcheck::max_gradient_error;
    use crate::DType;

    /// The loss summed naively, term by term, in f64.
    fn naive(loss: RowLoss, x: &[f64], rows: &[usize], y: &[f32], w: &[f64], width: usize) -> f64 {
        let mut total = 0.0;
        for (i, &r) in rows.iter().enumerate() {
            for j in 0..width {
                let t = y[i * width + j];
                if t.is_nan() {
                    continue;
                }
                let (a, b) = (x[r * width + j], f64::from(t));
                total += w[i]
                    * match loss {
                        RowLoss::Bce => {
                            -(b * (1.0 / (1.0 + (-a).exp())).ln()
                                + (1.0 - b) * (1.0 - 1.0 / (1.0 + (-a).exp())).ln())
                        }
                        RowLoss::Mse => (a - b).powi(2),
                        RowLoss::L1 => (a - b).abs(),
                    };
            }
        }
        total
    }

    #[test]
    fn each_loss_matches_a_naive_sum_and_finite_differences() {
        let v: Vec<f64> = (0..15)
            .map(|i| ((i * 7) % 11) as f64 * 0.37 - 1.6)
            .collect();
        let x = Tensor::from_f64(&v, &[5, 3], DType::F64).unwrap();
        let rows: Arc<[usize]> = vec![0, 2, 4, 2].into();
        let weights: Arc<[f64]> = vec![1.0, 0.5, 2.0, 1.5].into();
        for loss in [RowLoss::Bce, RowLoss::Mse, RowLoss::L1] {
            let y: Vec<f32> = match loss {
                RowLoss::Bce => vec![
                    1.,
                    0.,
                    f32::NAN,
                    0.,
                    1.,
                    1.,
                    f32::NAN,
                    f32::NAN,
                    0.,
                    1.,
                    0.,
                    0.,
                ],
                _ => vec![
                    0.3,
                    -1.2,
                    f32::NAN,
                    2.0,
                    0.1,
                    0.5,
                    f32::NAN,
                    f32::NAN,
                    -0.7,
                    1.1,
                    0.9,
                    0.,
                ],
            };
            let targets: Arc<[f32]> = y.clone().into();
            for weighted in [false, true] {
                let w = weighted.then(|| weights.clone());
                let (r, t) = (rows.clone(), targets.clone());
                let f = move |tape: &mut Tape, v: &[Var]| {
                    row_target_loss(tape, &v[0], r.clone(), t.clone(), w.clone(), loss, 3.0)
                };
                let err = max_gradient_error(&f, std::slice::from_ref(&x), &[true], 1e-6).unwrap();
                assert!(err < 1e-7, "{loss:?}: gradient error {err}");
                let mut tape = Tape::no_grad();
                let got = f(&mut tape, &[Var::constant(x.clone())]).unwrap();
                let ones = vec![1.0; rows.len()];
                let w = if weighted { &weights[..] } else { &ones[..] };
                let want = naive(loss, &v, &rows, &y, w, 3) / 3.0;
                let got = got.value().scalar_f64().unwrap();
                assert!((got - want).abs() < 1e-12, "{loss:?}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn targets_of_the_wrong_length_are_refused() {
        let x = Var::constant(Tensor::zeros(&[3, 2], DType::F64));
        let mut tape = Tape::no_grad();
        let e = row_target_loss(
            &mut tape,
            &x,
            vec![0, 1].into(),
            vec![0.0; 3].into(),
            None,
            RowLoss::Mse,
            1.0,
        );
        assert!(e.is_err());
    }
}
