//! Element-wise activations: ReLU, ELU and LeakyReLU.

use crate::autodiff::{BackwardCtx, Op, Tape, Var};
use crate::kernels::elementwise::{map_vec, zip_map_vec};
use crate::{with_float, Float, Real, Result, Tensor};

/// Which activation, with its parameter.
#[derive(Clone, Copy)]
enum Kind {
    Relu,
    /// `x` for `x > 0`, else `alpha * (e^x - 1)`.
    Elu(f64),
    /// `x` for `x > 0`, else `slope * x`.
    LeakyRelu(f64),
}

impl Kind {
    #[inline(always)]
    fn value<R: Real>(self, x: R) -> R {
        if x > R::ZERO {
            return x;
        }
        match self {
            Kind::Relu => R::ZERO,
            Kind::Elu(alpha) => R::from_f64(alpha) * (x.exp() - R::ONE),
            Kind::LeakyRelu(slope) => R::from_f64(slope) * x,
        }
    }
    #[inline(always)]
    fn derivative<R: Real>(self, x: R) -> R {
        if x > R::ZERO {
            return R::ONE;
        }
        match self {
            Kind::Relu => R::ZERO,
            Kind::Elu(alpha) => R::from_f64(alpha) * x.exp(),
            Kind::LeakyRelu(slope) => R::from_f64(slope),
        }
    }
}

struct Activation(Kind);

impl Op for Activation {
    fn name(&self) -> &'static str {
        match self.0 {
            Kind::Relu => "relu",
            Kind::Elu(_) => "elu",
            Kind::LeakyRelu(_) => "leaky_relu",
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
}

/// `max(x, 0)`.
pub fn relu(tape: &mut Tape, x: &Var) -> Result<Var> {
    tape.apply(Activation(Kind::Relu), &[x])
}

/// `x` for `x > 0`, else `alpha * (exp(x) - 1)` (PyTorch's default `alpha` is 1).
pub fn elu(tape: &mut Tape, x: &Var, alpha: f64) -> Result<Var> {
    tape.apply(Activation(Kind::Elu(alpha)), &[x])
}

/// `x` for `x > 0`, else `slope * x`.
pub fn leaky_relu(tape: &mut Tape, x: &Var, slope: f64) -> Result<Var> {
    tape.apply(Activation(Kind::LeakyRelu(slope)), &[x])
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
