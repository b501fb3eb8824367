//! Reshape and dtype conversion.

use crate::autodiff::{BackwardCtx, Op, Tape, Var};
use crate::{DType, Result, Tensor};

struct Reshape(Vec<usize>);

impl Op for Reshape {
    fn name(&self) -> &'static str {
        "reshape"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].reshape(&self.0)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![Some(ctx.grad.reshape(ctx.inputs[0].shape())?)])
    }
}

/// The same elements under another shape (no copy).
pub fn reshape(tape: &mut Tape, x: &Var, shape: &[usize]) -> Result<Var> {
    tape.apply(Reshape(shape.to_vec()), &[x])
}

struct Cast(DType);

impl Op for Cast {
    fn name(&self) -> &'static str {
        "cast"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].cast(self.0)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![Some(ctx.grad.cast(ctx.inputs[0].dtype())?)])
    }
}

/// Converts to another float dtype; the gradient is converted back. Parameters are kept in f32
/// and cast to the compute dtype where they are used, so optimizer state never loses precision.
pub fn cast(tape: &mut Tape, x: &Var, dtype: DType) -> Result<Var> {
    if x.value().dtype() == dtype {
        return Ok(x.clone());
    }
    tape.apply(Cast(dtype), &[x])
}

struct LeadingRows(usize);

impl Op for LeadingRows {
    fn name(&self) -> &'static str {
        "leading_rows"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].rows(0, self.0)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let input = ctx.inputs[0];
        let mut grad = Tensor::zeros(input.shape(), ctx.grad.dtype());
        let kept = ctx.grad.as_bytes().len();
        grad.as_mut_bytes()[..kept].copy_from_slice(ctx.grad.as_bytes());
        Ok(vec![Some(grad)])
    }
}

/// The first `n` rows (a view, no copy); the gradient of the other rows is zero. A sampled
/// block keeps the outputs of its destination nodes, which come first.
pub fn leading_rows(tape: &mut Tape, x: &Var, n: usize) -> Result<Var> {
    if n == x.value().shape()[0] {
        return Ok(x.clone());
    }
    tape.apply(LeadingRows(n), &[x])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::gradcheck::max_gradient_error;

    fn rand(shape: &[usize], salt: u64) -> Tensor {
        crate::autodiff::gradcheck::uniform_f64(shape, salt)
    }

    #[test]
    fn reshape_and_leading_rows_gradients_match_finite_differences() {
        let f = |t: &mut Tape, v: &[Var]| {
            let y = reshape(t, &v[0], &[6, 2])?;
            leading_rows(t, &y, 4)
        };
        let err = max_gradient_error(&f, &[rand(&[3, 4], 1)], &[true], 1e-6).unwrap();
        assert!(err < 1e-8, "{err}");
    }

    /// A round trip through f32 is the identity up to f32 rounding: the steps of the finite
    /// differences are wide enough that rounding stays far below the tolerance.
    #[test]
    fn cast_gradients_match_finite_differences() {
        let f = |t: &mut Tape, v: &[Var]| {
            let y = cast(t, &v[0], DType::F32)?;
            cast(t, &y, DType::F64)
        };
        let err = max_gradient_error(&f, &[rand(&[4, 3], 2)], &[true], 1e-2).unwrap();
        assert!(err < 1e-4, "{err}");
    }

    #[test]
    fn leading_rows_keeps_the_first_rows_and_zeroes_the_rest_of_the_gradient() {
        let mut tape = Tape::new();
        let x = tape.leaf(
            Tensor::from_f64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2], DType::F64).unwrap(),
            true,
        );
        let y = leading_rows(&mut tape, &x, 2).unwrap();
        assert_eq!(y.value().to_vec_f64(), vec![1.0, 2.0, 3.0, 4.0]);
        let grads = tape
            .backward_with(&y, Tensor::full(&[2, 2], DType::F64, 1.5).unwrap())
            .unwrap();
        assert_eq!(
            grads.get(&x).unwrap().to_vec_f64(),
            vec![1.5, 1.5, 1.5, 1.5, 0.0, 0.0]
        );
    }
}
