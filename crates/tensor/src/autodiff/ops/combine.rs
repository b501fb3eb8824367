//! Sums of two tensors with scalar coefficients: fixed ones (APPNP's teleport) and a learnt
//! one (GIN's `1 + eps`).
//!
//! Backward: a fixed coefficient scales the output gradient `g` for its operand; the learnt
//! `eps` of `a + (1 + eps) b` gets `sum(b * g)`, summed in chunks fixed by the size (as every
//! reduction), so it does not depend on the thread count.

use crate::autodiff::{BackwardCtx, Op, Tape, Var};
use crate::kernels::elementwise::{map_vec, zip_map_vec};
use crate::kernels::reduce::dot;
use crate::{with_float, Error, Float, Real, Result, Tensor};

/// `ca * a + cb * b` element-wise, for tensors of one shape and dtype.
fn combine_tensors(a: &Tensor, ca: f64, b: &Tensor, cb: f64) -> Result<Tensor> {
    a.check_same(b, "combine")?;
    with_float!(a.dtype(), "combine", T => {
        let (ca, cb) = (<T as Float>::Acc::from_f64(ca), <T as Float>::Acc::from_f64(cb));
        let v = zip_map_vec(
            a.as_slice::<T>()?,
            b.as_slice::<T>()?,
            #[inline(always)]
            move |x: T, y: T| T::from_acc(ca * x.to_acc() + cb * y.to_acc()),
        );
        Tensor::from_vec(v, a.shape())
    })
}

/// `c * x` element-wise.
fn scale_tensor(x: &Tensor, c: f64) -> Result<Tensor> {
    with_float!(x.dtype(), "scale", T => {
        let c = <T as Float>::Acc::from_f64(c);
        let v = map_vec(x.as_slice::<T>()?, #[inline(always)] move |v: T| T::from_acc(c * v.to_acc()));
        Tensor::from_vec(v, x.shape())
    })
}

struct Combine {
    ca: f64,
    cb: f64,
}

impl Op for Combine {
    fn name(&self) -> &'static str {
        "combine"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        combine_tensors(inputs[0], self.ca, inputs[1], self.cb)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let g = ctx.grad;
        let of = |needed: bool, c: f64| needed.then(|| scale_tensor(g, c)).transpose();
        Ok(vec![
            of(ctx.needs_grad[0], self.ca)?,
            of(ctx.needs_grad[1], self.cb)?,
        ])
    }
    fn reads_input(&self, _index: usize, _needs_grad: &[bool]) -> bool {
        false
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// `ca * a + cb * b` for tensors of one shape, with fixed coefficients.
pub fn combine(tape: &mut Tape, a: &Var, ca: f64, b: &Var, cb: f64) -> Result<Var> {
    tape.apply(Combine { ca, cb }, &[a, b])
}

struct AddScaledBy;

impl Op for AddScaledBy {
    fn name(&self) -> &'static str {
        "add_scaled_by"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (a, b, eps) = (inputs[0], inputs[1], inputs[2]);
        if eps.numel() != 1 {
            return Err(Error::ShapeMismatch {
                op: "add_scaled_by",
                lhs: a.shape().to_vec(),
                rhs: eps.shape().to_vec(),
            });
        }
        if eps.dtype() != a.dtype() {
            return Err(Error::DTypeMismatch {
                op: "add_scaled_by",
                lhs: a.dtype(),
                rhs: eps.dtype(),
            });
        }
        combine_tensors(a, 1.0, b, 1.0 + eps.scalar_f64()?)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let (b, eps, g) = (ctx.inputs[1], ctx.inputs[2], ctx.grad);
        let db = if ctx.needs_grad[1] {
            Some(scale_tensor(g, 1.0 + eps.scalar_f64()?)?)
        } else {
            None
        };
        let deps = if ctx.needs_grad[2] {
            let total = with_float!(g.dtype(), "add_scaled_by", T => {
                Ok::<_, Error>(dot(b.as_slice::<T>()?, g.as_slice::<T>()?).to_f64())
            })?;
            Some(Tensor::from_f64(&[total], eps.shape(), eps.dtype())?)
        } else {
            None
        };
        Ok(vec![ctx.needs_grad[0].then(|| g.clone()), db, deps])
    }
    fn reads_input(&self, index: usize, needs_grad: &[bool]) -> bool {
        // b for eps's gradient; eps for b's gradient and its own shape.
        match index {
            1 => needs_grad[2],
            2 => true,
            _ => false,
        }
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// `a + (1 + eps) * b` for tensors `a`, `b` of one shape and a learnt scalar `eps` (`[1]`, in
/// their dtype): GIN's sum of the neighbours and the node itself.
pub fn add_scaled_by(tape: &mut Tape, a: &Var, b: &Var, eps: &Var) -> Result<Var> {
    tape.apply(AddScaledBy, &[a, b, eps])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::gradcheck::{max_gradient_error, uniform_f64};

    #[test]
    fn combine_gradients_match_finite_differences() {
        let f = |t: &mut Tape, v: &[Var]| combine(t, &v[0], 0.9, &v[1], 0.1);
        let inputs = [uniform_f64(&[5, 3], 1), uniform_f64(&[5, 3], 2)];
        let err = max_gradient_error(&f, &inputs, &[true; 2], 1e-6).unwrap();
        assert!(err < 1e-7, "{err}");
    }

    #[test]
    fn add_scaled_by_gradients_match_finite_differences() {
        let f = |t: &mut Tape, v: &[Var]| add_scaled_by(t, &v[0], &v[1], &v[2]);
        let inputs = [
            uniform_f64(&[6, 4], 3),
            uniform_f64(&[6, 4], 4),
            uniform_f64(&[1], 5),
        ];
        let err = max_gradient_error(&f, &inputs, &[true; 3], 1e-6).unwrap();
        assert!(err < 1e-7, "{err}");
    }

    #[test]
    fn add_scaled_by_computes_a_plus_one_plus_eps_times_b() {
        let a = Tensor::from_f64(&[1.0, 2.0], &[1, 2], crate::DType::F64).unwrap();
        let b = Tensor::from_f64(&[3.0, -1.0], &[1, 2], crate::DType::F64).unwrap();
        let eps = Tensor::from_f64(&[0.5], &[1], crate::DType::F64).unwrap();
        let mut tape = Tape::no_grad();
        let out = add_scaled_by(
            &mut tape,
            &Var::constant(a),
            &Var::constant(b),
            &Var::constant(eps),
        )
        .unwrap();
        assert_eq!(out.value().to_vec_f64(), vec![5.5, 0.5]);
    }

    #[test]
    fn add_scaled_by_refuses_an_eps_that_is_not_one_value() {
        let a = Var::constant(uniform_f64(&[2, 2], 1));
        let eps = Var::constant(uniform_f64(&[2], 2));
        let mut tape = Tape::no_grad();
        assert!(add_scaled_by(&mut tape, &a, &a, &eps).is_err());
    }
}
