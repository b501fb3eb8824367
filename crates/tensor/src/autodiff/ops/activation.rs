//! Element-wise activations: ReLU, ELU and LeakyReLU.

use std::sync::Arc;

use super::dropout::FACTOR_BLOCK;
use super::Dropout;
use crate::autodiff::{BackwardCtx, Op, Tape, Var};
use crate::kernels::elementwise::{map_vec, rows_from_fn, zip_map_vec};
use crate::kernels::reduce::rows_with_column_sums;
use crate::kernels::simd::with_simd;
use crate::{with_float, Error, Float, Real, Result, Tensor};

/// Binds `$value` and `$slope` to closures computing the activation of `$act` and its
/// derivative from the output, one pair of closure types per activation, so that the match is
/// resolved once, outside the element loop, and the loop body is branch-free where possible.
/// `$R` is the arithmetic type.
macro_rules! with_activation {
    ($act:expr, $R:ty, $value:ident, $slope:ident => $body:expr) => {
        match $act {
            Activation::Identity => {
                let $value = |x: $R| x;
                let $slope = |_: $R| <$R as Real>::ONE;
                $body
            }
            Activation::Relu => {
                let $value = |x: $R| x.max(<$R as Real>::ZERO);
                let $slope = |y: $R| {
                    if y > <$R as Real>::ZERO {
                        <$R as Real>::ONE
                    } else {
                        <$R as Real>::ZERO
                    }
                };
                $body
            }
            Activation::Elu(alpha) => {
                let a = <$R as Real>::from_f64(alpha);
                // Both sides computed, then one chosen: no branch on the sign, which is random,
                // and a loop that vectorizes.
                let $value = move |x: $R| {
                    let negative = a * (x.exp_branchless() - <$R as Real>::ONE);
                    if x > <$R as Real>::ZERO {
                        x
                    } else {
                        negative
                    }
                };
                let $slope = move |y: $R| {
                    if y > <$R as Real>::ZERO {
                        <$R as Real>::ONE
                    } else {
                        y + a
                    }
                };
                $body
            }
            Activation::LeakyRelu(slope) => {
                let s = <$R as Real>::from_f64(slope);
                let $value = move |x: $R| {
                    x * if x > <$R as Real>::ZERO {
                        <$R as Real>::ONE
                    } else {
                        s
                    }
                };
                let $slope = move |y: $R| {
                    if y > <$R as Real>::ZERO {
                        <$R as Real>::ONE
                    } else {
                        s
                    }
                };
                $body
            }
        }
    };
}

/// Which activation, with its parameter. For LeakyReLU fused with a bias the slope must be
/// positive, so that the sign of the output tells the sign of the input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    /// No activation.
    Identity,
    /// `max(x, 0)`.
    Relu,
    /// `x` for `x > 0`, else `alpha * (e^x - 1)`.
    Elu(f64),
    /// `x` for `x > 0`, else `slope * x`.
    LeakyRelu(f64),
}

impl Activation {
    #[inline(always)]
    fn value<R: Real>(self, x: R) -> R {
        if x > R::ZERO {
            return x;
        }
        match self {
            Activation::Identity => x,
            Activation::Relu => R::ZERO,
            Activation::Elu(alpha) => R::from_f64(alpha) * (x.exp() - R::ONE),
            Activation::LeakyRelu(slope) => R::from_f64(slope) * x,
        }
    }
    #[inline(always)]
    fn derivative<R: Real>(self, x: R) -> R {
        if x > R::ZERO {
            return R::ONE;
        }
        match self {
            Activation::Identity => R::ONE,
            Activation::Relu => R::ZERO,
            Activation::Elu(alpha) => R::from_f64(alpha) * x.exp(),
            Activation::LeakyRelu(slope) => R::from_f64(slope),
        }
    }
}

/// The dropout applied after a bias and an activation, with the ids of the rows it keys.
#[derive(Clone)]
pub struct OutputDropout {
    /// The dropout rule.
    pub rule: Dropout,
    /// Row `r` is keyed by `row_ids[r]`, or by `r` when there are none.
    pub row_ids: Option<Arc<[i64]>>,
}

impl OutputDropout {
    fn row_id(&self, r: usize) -> u64 {
        super::dropout::row_key(self.row_ids.as_deref(), r)
    }
}

struct BiasActivation {
    activation: Activation,
    dropout: Option<OutputDropout>,
}

impl Op for BiasActivation {
    fn name(&self) -> &'static str {
        "bias_activation"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (x, b, act) = (inputs[0], inputs[1], self.activation);
        let (rows, cols) = x.dims2();
        if b.numel() != cols || x.dtype() != b.dtype() {
            return Err(Error::ShapeMismatch {
                op: "bias_activation",
                lhs: x.shape().to_vec(),
                rhs: b.shape().to_vec(),
            });
        }
        if matches!(act, Activation::LeakyRelu(s) if s <= 0.0) {
            return Err(Error::Autodiff(
                "bias_activation needs a positive LeakyReLU slope".into(),
            ));
        }
        if let Some(ids) = self.dropout.as_ref().and_then(|d| d.row_ids.as_ref()) {
            if ids.len() != rows {
                return Err(Error::ShapeMismatch {
                    op: "bias_activation dropout",
                    lhs: x.shape().to_vec(),
                    rhs: vec![ids.len()],
                });
            }
        }
        let dropout = self.dropout.as_ref();
        with_float!(x.dtype(), "bias_activation", T => {
            let (xs, bias) = (x.as_slice::<T>()?, b.as_slice::<T>()?);
            let out = with_activation!(act, <T as Float>::Acc, f, _df => {
                match dropout {
                    // SAFETY: every element of every row is written (the bias has `cols`
                    // entries).
                    None => unsafe { rows_from_fn::<T>(xs.len(), cols, #[inline(always)] |r, row| {
                        for ((o, &v), &bv) in row.iter_mut().zip(&xs[r * cols..(r + 1) * cols]).zip(bias) {
                            o.write(T::from_acc(f(v.to_acc() + bv.to_acc())));
                        }
                    }) },
                    // SAFETY: as above, a block of columns at a time.
                    Some(d) => unsafe { rows_from_fn::<T>(xs.len(), cols, #[inline(always)] |r, row| {
                        let xr = &xs[r * cols..(r + 1) * cols];
                        let factors = d.rule.row_factors::<<T as Float>::Acc>(d.row_id(r));
                        let mut block = [<<T as Float>::Acc as Real>::ZERO; FACTOR_BLOCK];
                        for first in (0..cols).step_by(FACTOR_BLOCK) {
                            factors.fill(first, &mut block);
                            let terms = xr[first..].iter().zip(&bias[first..]);
                            // The activation rounded to the storage type, then dropped, as the
                            // two ops one after the other round.
                            for ((o, (&v, &bv)), &k) in row[first..].iter_mut().zip(terms).zip(&block) {
                                let y = T::from_acc(f(v.to_acc() + bv.to_acc()));
                                o.write(T::from_acc(y.to_acc() * k));
                            }
                        }
                    }) },
                }
            });
            Tensor::from_vec(out, x.shape())
        })
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let (y, g, act) = (ctx.output, ctx.grad, self.activation);
        let (_, cols) = y.dims2();
        with_float!(y.dtype(), "bias_activation", T => {
            let (ys, gs) = (y.as_slice::<T>()?, g.as_slice::<T>()?);
            // A kept output is the activation times 1 / (1 - p): the derivative reads the
            // activation back (exactly for the activations whose derivative depends only on the
            // sign); a dropped one passes no gradient.
            let dropout = self.dropout.as_ref().map(|d| {
                let keep = <<T as Float>::Acc as Real>::from_f64(1.0 - d.rule.p);
                (d, keep)
            });
            let (dx, sums) = with_activation!(act, <T as Float>::Acc, _f, df => {
                // Compiled for the vector instructions here, not only in the helpers below: a
                // closure that two of them share is called, not inlined, from their vector
                // copies (and a closure bound by `let` cannot be marked `#[inline(always)]`).
                let write_row = |r: usize, row: &mut [std::mem::MaybeUninit<T>]| with_simd(#[inline(always)] || {
                    let (yr, gr) = (&ys[r * cols..(r + 1) * cols], &gs[r * cols..(r + 1) * cols]);
                    match &dropout {
                        None => {
                            for ((o, &a), &b) in row.iter_mut().zip(yr).zip(gr) {
                                o.write(T::from_acc(df(a.to_acc()) * b.to_acc()));
                            }
                        }
                        Some((d, keep)) => {
                            let keep = *keep;
                            let factors = d.rule.row_factors::<<T as Float>::Acc>(d.row_id(r));
                            let mut block = [<<T as Float>::Acc as Real>::ZERO; FACTOR_BLOCK];
                            for first in (0..cols).step_by(FACTOR_BLOCK) {
                                factors.fill(first, &mut block);
                                let terms = yr[first..].iter().zip(&gr[first..]);
                                for ((o, (&y, &g)), &k) in row[first..].iter_mut().zip(terms).zip(&block) {
                                    let g = T::from_acc(g.to_acc() * k);
                                    o.write(T::from_acc(df(y.to_acc() * keep) * g.to_acc()));
                                }
                            }
                        }
                    }
                });
                // The bias's gradient, the column sums, in the same pass while each chunk
                // of rows is in the core's cache.
                if ctx.needs_grad[1] {
                    // SAFETY: every column of every row is written.
                    let (dx, sums) = unsafe { rows_with_column_sums::<T>(ys.len(), cols, write_row) };
                    (dx, Some(sums))
                } else {
                    // SAFETY: as above.
                    (unsafe { rows_from_fn::<T>(ys.len(), cols, write_row) }, None)
                }
            });
            let dx = Tensor::from_vec(dx, y.shape())?;
            let db = match sums {
                Some(sums) => Some(Tensor::from_vec(sums.into_iter().map(T::from_acc).collect::<Vec<T>>(), ctx.inputs[1].shape())?),
                None => None,
            };
            Ok(vec![Some(dx), db])
        })
    }
    fn reads_input(&self, index: usize, _needs_grad: &[bool]) -> bool {
        // The bias, for its gradient's shape; the output stands for the input.
        index == 1
    }
}

/// `f(x + b)`: the bias `b: [m]` added to every row of `x: [n, m]` and the activation applied,
/// in one pass; the backward needs only the output, so the sum before the activation is never
/// stored.
pub fn bias_activation(tape: &mut Tape, x: &Var, b: &Var, activation: Activation) -> Result<Var> {
    bias_activation_dropout(tape, x, b, activation, None)
}

/// `dropout(f(x + b))` in one pass: [`bias_activation`] followed by the dropout, which draws
/// the same mask as [`super::dropout`] with the same rule and row ids and is recomputed, not
/// stored, in the backward pass. With ReLU, LeakyReLU or no activation the result and the
/// gradients are those of the two ops one after the other, bit for bit; with ELU the
/// derivative reads the activation back from the scaled output, within a rounding.
pub fn bias_activation_dropout(
    tape: &mut Tape,
    x: &Var,
    b: &Var,
    activation: Activation,
    dropout: Option<OutputDropout>,
) -> Result<Var> {
    if let Some(d) = &dropout {
        if !(0.0..1.0).contains(&d.rule.p) {
            return Err(Error::Autodiff(format!(
                "dropout probability {} is not in [0, 1)",
                d.rule.p
            )));
        }
    }
    let dropout = dropout.filter(|d| d.rule.p > 0.0);
    tape.apply(
        BiasActivation {
            activation,
            dropout,
        },
        &[x, b],
    )
}

struct ActivationOp(Activation);

impl Op for ActivationOp {
    fn name(&self) -> &'static str {
        match self.0 {
            Activation::Identity => "identity",
            Activation::Relu => "relu",
            Activation::Elu(_) => "elu",
            Activation::LeakyRelu(_) => "leaky_relu",
        }
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (x, kind) = (inputs[0], self.0);
        with_float!(x.dtype(), "activation", T => {
            Tensor::from_vec(map_vec(x.as_slice::<T>()?, |v: T| T::from_acc(kind.value(v.to_acc()))), x.shape())
        })
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let (x, g, kind) = (ctx.inputs[0], ctx.grad, self.0);
        let dx = with_float!(x.dtype(), "activation", T => {
            let v = zip_map_vec(x.as_slice::<T>()?, g.as_slice::<T>()?, |a: T, b: T| {
                T::from_acc(kind.derivative(a.to_acc()) * b.to_acc())
            });
            Tensor::from_vec(v, x.shape())
        })?;
        Ok(vec![Some(dx)])
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// `activation(x)`; the identity puts nothing on the tape.
pub fn activate(tape: &mut Tape, x: &Var, activation: Activation) -> Result<Var> {
    match activation {
        Activation::Identity => Ok(x.clone()),
        other => tape.apply(ActivationOp(other), &[x]),
    }
}

/// `max(x, 0)`.
pub fn relu(tape: &mut Tape, x: &Var) -> Result<Var> {
    tape.apply(ActivationOp(Activation::Relu), &[x])
}

/// `x` for `x > 0`, else `alpha * (exp(x) - 1)` (PyTorch's default `alpha` is 1).
pub fn elu(tape: &mut Tape, x: &Var, alpha: f64) -> Result<Var> {
    tape.apply(ActivationOp(Activation::Elu(alpha)), &[x])
}

/// `x` for `x > 0`, else `slope * x`.
pub fn leaky_relu(tape: &mut Tape, x: &Var, slope: f64) -> Result<Var> {
    tape.apply(ActivationOp(Activation::LeakyRelu(slope)), &[x])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::gradcheck::max_gradient_error;
    use crate::DType;

    #[test]
    fn activation_gradients_match_finite_differences() {
        // Values kept away from the kink at 0, where finite differences are not defined.
        let v: Vec<f64> = (0..24).map(|i| (i as f64 - 11.5) * 0.21).collect();
        let x = Tensor::from_f64(&v, &[4, 6], DType::F64).unwrap();
        for f in [
            &(|t: &mut Tape, v: &[Var]| relu(t, &v[0]))
                as &dyn Fn(&mut Tape, &[Var]) -> Result<Var>,
            &|t, v| elu(t, &v[0], 1.0),
            &|t, v| leaky_relu(t, &v[0], 0.2),
        ] {
            let err = max_gradient_error(f, std::slice::from_ref(&x), &[true], 1e-6).unwrap();
            assert!(err < 1e-7, "{err}");
        }
    }

    #[test]
    fn bias_activation_matches_bias_then_activation() {
        let v: Vec<f64> = (0..24).map(|i| (i as f64 - 11.5) * 0.21).collect();
        let x = Tensor::from_f64(&v, &[4, 6], DType::F64).unwrap();
        let b = Tensor::from_f64(&[0.05, -0.1, 0.02, 0.3, -0.07, 0.0], &[6], DType::F64).unwrap();
        for act in [
            Activation::Identity,
            Activation::Relu,
            Activation::Elu(1.0),
            Activation::LeakyRelu(0.2),
        ] {
            let fused = move |t: &mut Tape, v: &[Var]| bias_activation(t, &v[0], &v[1], act);
            let err =
                max_gradient_error(&fused, &[x.clone(), b.clone()], &[true, true], 1e-6).unwrap();
            assert!(err < 1e-7, "{act:?}: {err}");
            let mut t = Tape::no_grad();
            let (xv, bv) = (Var::constant(x.clone()), Var::constant(b.clone()));
            let got = bias_activation(&mut t, &xv, &bv, act)
                .unwrap()
                .value()
                .to_vec_f64();
            let pre = crate::autodiff::ops::add_bias(&mut t, &xv, &bv)
                .unwrap()
                .value()
                .to_vec_f64();
            for (g, p) in got.iter().zip(pre) {
                assert!((g - act.value(p)).abs() < 1e-15);
            }
        }
    }

    #[test]
    fn bias_activation_dropout_is_the_two_ops_one_after_the_other() {
        use crate::autodiff::ops::dropout;
        use crate::rng::RngKey;
        let (rows, cols) = (37, 21);
        let key = RngKey::new(7, 3, 1);
        let values: Vec<f64> = (0..rows * cols)
            .map(|i| key.uniform(i as u64, 0) * 4.0 - 2.0)
            .collect();
        let bias: Vec<f64> = (0..cols).map(|c| key.uniform(c as u64, 1) - 0.5).collect();
        let seed: Vec<f64> = (0..rows * cols)
            .map(|i| key.uniform(i as u64, 2) - 0.5)
            .collect();
        let ids: Arc<[i64]> = (0..rows as i64).map(|r| 1000 + 3 * r).collect();
        let rule = Dropout {
            p: 0.4,
            key: RngKey::new(1, 2, 3),
        };
        for dtype in [DType::F32, DType::F64, DType::BF16] {
            for act in [
                Activation::Identity,
                Activation::Relu,
                Activation::LeakyRelu(0.2),
                Activation::Elu(1.0),
            ] {
                // The output and the gradients of x and b, from the fused op or the two ops.
                let run = |fused: bool| {
                    let mut t = Tape::new();
                    let x = t.leaf(
                        Tensor::from_f64(&values, &[rows, cols], dtype).unwrap(),
                        true,
                    );
                    let b = t.leaf(Tensor::from_f64(&bias, &[cols], dtype).unwrap(), true);
                    let y = if fused {
                        let d = OutputDropout {
                            rule,
                            row_ids: Some(ids.clone()),
                        };
                        bias_activation_dropout(&mut t, &x, &b, act, Some(d)).unwrap()
                    } else {
                        let h = bias_activation(&mut t, &x, &b, act).unwrap();
                        dropout(&mut t, &h, rule, Some(ids.clone())).unwrap()
                    };
                    let out = y.value().to_vec_f64();
                    let seed = Tensor::from_f64(&seed, &[rows, cols], dtype).unwrap();
                    let mut grads = t.backward_with(&y, seed).unwrap();
                    let dx = grads.take(&x).unwrap().to_vec_f64();
                    let db = grads.take(&b).unwrap().to_vec_f64();
                    (out, dx, db)
                };
                let (fused, apart) = (run(true), run(false));
                assert_eq!(fused.0, apart.0, "{dtype:?} {act:?}: outputs");
                if matches!(act, Activation::Elu(_)) {
                    // The derivative reads the activation back from the scaled output.
                    let tolerance = if dtype == DType::BF16 { 2e-2 } else { 1e-5 };
                    for (a, b) in fused
                        .1
                        .iter()
                        .zip(&apart.1)
                        .chain(fused.2.iter().zip(&apart.2))
                    {
                        assert!(
                            (a - b).abs() <= tolerance * (1.0 + b.abs()),
                            "{dtype:?}: {a} {b}"
                        );
                    }
                } else {
                    assert_eq!(
                        (&fused.1, &fused.2),
                        (&apart.1, &apart.2),
                        "{dtype:?} {act:?}"
                    );
                }
            }
        }
        // And against finite differences, in f64.
        let x = Tensor::from_f64(&values, &[rows, cols], DType::F64).unwrap();
        let b = Tensor::from_f64(&bias, &[cols], DType::F64).unwrap();
        let f = move |t: &mut Tape, v: &[Var]| {
            let d = OutputDropout {
                rule,
                row_ids: None,
            };
            bias_activation_dropout(t, &v[0], &v[1], Activation::Elu(1.0), Some(d))
        };
        let err = max_gradient_error(&f, &[x, b], &[true, true], 1e-6).unwrap();
        assert!(err < 1e-6, "{err}");
    }

    #[test]
    fn activation_values() {
        let x = Tensor::from_f64(&[-1.0, 0.0, 2.0], &[3], DType::F64).unwrap();
        let mut t = Tape::no_grad();
        let xv = Var::constant(x);
        assert_eq!(
            relu(&mut t, &xv).unwrap().value().to_vec_f64(),
            vec![0.0, 0.0, 2.0]
        );
        assert_eq!(
            leaky_relu(&mut t, &xv, 0.2).unwrap().value().to_vec_f64(),
            vec![-0.2, 0.0, 2.0]
        );
        let e = elu(&mut t, &xv, 1.0).unwrap().value().to_vec_f64();
        assert!((e[0] - ((-1f64).exp() - 1.0)).abs() < 1e-15 && e[2] == 2.0);
    }
}
