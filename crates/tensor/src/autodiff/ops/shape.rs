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
