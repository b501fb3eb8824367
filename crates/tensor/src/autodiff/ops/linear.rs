//! Matrix product, sums and bias.

use crate::autodiff::{BackwardCtx, Op, Tape, Var};
use crate::kernels::elementwise::{for_each_row_mut, zip_map_vec};
use crate::kernels::matmul::{
    matmul as matmul_kernel, matmul_add, matmul_pair as matmul_pair_kernel,
    matmul_pair_weight_grads,
};
use crate::kernels::reduce::column_sums;
use crate::{with_float, Error, Float, Result, Tensor};

struct MatMul;

impl Op for MatMul {
    fn name(&self) -> &'static str {
        "matmul"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        matmul_kernel(inputs[0], inputs[1], false, false)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let (a, b, g) = (ctx.inputs[0], ctx.inputs[1], ctx.grad);
        let da = if ctx.needs_grad[0] {
            Some(matmul_kernel(g, b, false, true)?)
        } else {
            None
        };
        let db = if ctx.needs_grad[1] {
            Some(matmul_kernel(a, g, true, false)?)
        } else {
            None
        };
        Ok(vec![da, db])
    }
    fn reads_input(&self, index: usize, needs_grad: &[bool]) -> bool {
        // a for b's gradient, b for a's.
        needs_grad[1 - index]
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// `a * b` for 2-D `a: [n, k]`, `b: [k, m]`.
pub fn matmul(tape: &mut Tape, a: &Var, b: &Var) -> Result<Var> {
    tape.apply(MatMul, &[a, b])
}

struct AddMatMul;

impl Op for AddMatMul {
    fn name(&self) -> &'static str {
        "add_matmul"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        matmul_add(Some(inputs[0]), inputs[1], inputs[2], false, false)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let (b, w, g) = (ctx.inputs[1], ctx.inputs[2], ctx.grad);
        let db = if ctx.needs_grad[1] {
            Some(matmul_kernel(g, w, false, true)?)
        } else {
            None
        };
        let dw = if ctx.needs_grad[2] {
            Some(matmul_kernel(b, g, true, false)?)
        } else {
            None
        };
        Ok(vec![Some(g.clone()), db, dw])
    }
    fn reads_input(&self, index: usize, needs_grad: &[bool]) -> bool {
        // b for w's gradient, w for b's; never the accumulator.
        index > 0 && needs_grad[3 - index]
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// `acc + b * w` for `acc: [n, m]`, `b: [n, k]`, `w: [k, m]`, in one pass of the gemm kernel.
pub fn add_matmul(tape: &mut Tape, acc: &Var, b: &Var, w: &Var) -> Result<Var> {
    tape.apply(AddMatMul, &[acc, b, w])
}

struct MatMulPair;

impl Op for MatMulPair {
    fn name(&self) -> &'static str {
        "matmul_pair"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        matmul_pair_kernel(inputs[0], inputs[1], inputs[2], inputs[3])
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let g = ctx.grad;
        // Both weights' gradients in one product when both are needed.
        let mut weights = [None, None];
        if ctx.needs_grad[1] && ctx.needs_grad[3] {
            let (w1, w2) = matmul_pair_weight_grads(ctx.inputs[0], ctx.inputs[2], g)?;
            weights = [Some(w1), Some(w2)];
        }
        // Otherwise each product's gradients, as MatMul's: the left operand's from the
        // weight, the weight's from the left operand.
        let mut grads = Vec::with_capacity(4);
        for (pair, weight) in [0, 2].into_iter().zip(weights) {
            let (a, w) = (ctx.inputs[pair], ctx.inputs[pair + 1]);
            grads.push(if ctx.needs_grad[pair] {
                Some(matmul_kernel(g, w, false, true)?)
            } else {
                None
            });
            grads.push(match weight {
                Some(dw) => Some(dw),
                None if ctx.needs_grad[pair + 1] => Some(matmul_kernel(a, g, true, false)?),
                None => None,
            });
        }
        Ok(grads)
    }
    fn reads_input(&self, index: usize, needs_grad: &[bool]) -> bool {
        // Within each pair, a for w's gradient and w for a's.
        needs_grad[index ^ 1]
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// `a1 * w1 + a2 * w2` for 2-D `a1: [n, k1]`, `w1: [k1, m]`, `a2: [n, k2]`, `w2: [k2, m]`:
/// one product of the operands side by side (see the kernel's
/// [`matmul_pair`](crate::kernels::matmul::matmul_pair)), and the weights' gradients one
/// product too. The values and gradients are those of [`matmul`] then [`add_matmul`] up to the
/// order of the sums.
pub fn matmul_pair(tape: &mut Tape, a1: &Var, w1: &Var, a2: &Var, w2: &Var) -> Result<Var> {
    tape.apply(MatMulPair, &[a1, w1, a2, w2])
}

/// The element-wise sum of two tensors of one shape and dtype (no tape).
pub fn add_tensors(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.check_same(b, "add")?;
    with_float!(a.dtype(), "add", T => {
        let v = zip_map_vec(a.as_slice::<T>()?, b.as_slice::<T>()?, |x: T, y: T| T::from_acc(x.to_acc() + y.to_acc()));
        Tensor::from_vec(v, a.shape())
    })
}

/// `acc += b` element-wise, for tensors of one shape and dtype (no tape). The sum is written in
/// place when `acc` owns its storage alone, and into a copy otherwise.
pub fn add_assign_tensors(acc: &mut Tensor, b: &Tensor) -> Result<()> {
    acc.check_same(b, "add")?;
    with_float!(acc.dtype(), "add", T => {
        let bs = b.as_slice::<T>()?;
        let cols = acc.shape().last().copied().unwrap_or(1).max(1);
        for_each_row_mut(acc.as_mut_slice::<T>()?, cols, #[inline(always)] |r, row| {
            for (a, &y) in row.iter_mut().zip(&bs[r * cols..]) {
                *a = T::from_acc(a.to_acc() + y.to_acc());
            }
        });
        Ok(())
    })
}

struct Add;

impl Op for Add {
    fn name(&self) -> &'static str {
        "add"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        add_tensors(inputs[0], inputs[1])
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![Some(ctx.grad.clone()), Some(ctx.grad.clone())])
    }
    fn reads_input(&self, _index: usize, _needs_grad: &[bool]) -> bool {
        false
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// `a + b` element-wise, for tensors of one shape.
pub fn add(tape: &mut Tape, a: &Var, b: &Var) -> Result<Var> {
    tape.apply(Add, &[a, b])
}

struct AddBias;

impl Op for AddBias {
    fn name(&self) -> &'static str {
        "add_bias"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (x, b) = (inputs[0], inputs[1]);
        let (_, cols) = x.dims2();
        if b.numel() != cols || x.dtype() != b.dtype() {
            return Err(Error::ShapeMismatch {
                op: "add_bias",
                lhs: x.shape().to_vec(),
                rhs: b.shape().to_vec(),
            });
        }
        with_float!(x.dtype(), "add_bias", T => {
            let bias = b.as_slice::<T>()?;
            let mut out = crate::alloc::copy_of(x.as_slice::<T>()?);
            for_each_row_mut(&mut out, cols, #[inline(always)] |_, row| {
                for (o, &bv) in row.iter_mut().zip(bias) {
                    *o = T::from_acc(o.to_acc() + bv.to_acc());
                }
            });
            Tensor::from_vec(out, x.shape())
        })
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let g = ctx.grad;
        let db = if ctx.needs_grad[1] {
            let (_, cols) = g.dims2();
            Some(with_float!(g.dtype(), "add_bias", T => {
                let sums = column_sums(g.as_slice::<T>()?, cols);
                Tensor::from_vec(sums.into_iter().map(T::from_acc).collect(), ctx.inputs[1].shape())
            })?)
        } else {
            None
        };
        Ok(vec![Some(g.clone()), db])
    }
    fn reads_input(&self, index: usize, _needs_grad: &[bool]) -> bool {
        // The bias, for its gradient's shape.
        index == 1
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// `x + b` with the bias `b: [m]` added to every row of `x: [n, m]`.
pub fn add_bias(tape: &mut Tape, x: &Var, b: &Var) -> Result<Var> {
    tape.apply(AddBias, &[x, b])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::gradcheck::max_gradient_error;
    use crate::DType;

    fn rand(shape: &[usize], salt: u64) -> Tensor {
        crate::autodiff::gradcheck::uniform_f64(shape, salt)
    }

    #[test]
    fn add_matmul_gradients_match_finite_differences() {
        let f = |t: &mut Tape, v: &[Var]| add_matmul(t, &v[0], &v[1], &v[2]);
        let inputs = [rand(&[5, 3], 5), rand(&[5, 4], 6), rand(&[4, 3], 7)];
        let err = max_gradient_error(&f, &inputs, &[true; 3], 1e-6).unwrap();
        assert!(err < 1e-7, "{err}");
    }

    #[test]
    fn matmul_pair_matches_matmul_then_add_matmul() {
        let f = |t: &mut Tape, v: &[Var]| matmul_pair(t, &v[0], &v[1], &v[2], &v[3]);
        let inputs = [
            rand(&[6, 3], 11),
            rand(&[3, 4], 12),
            rand(&[6, 5], 13),
            rand(&[5, 4], 14),
        ];
        let err = max_gradient_error(&f, &inputs, &[true; 4], 1e-6).unwrap();
        assert!(err < 1e-7, "{err}");
        // Against the two ops, in every dtype, for outputs and every gradient; sizes past the
        // gemm's blocking, the bf16 row block and a split reduction.
        for dtype in [DType::F32, DType::F64, DType::BF16] {
            let shapes = [[2000, 70], [70, 33], [2000, 90], [90, 33]];
            let run = |fused: bool| {
                let mut t = Tape::new();
                let v: Vec<Var> = shapes
                    .iter()
                    .enumerate()
                    .map(|(i, s)| t.leaf(rand(s, 20 + i as u64).cast(dtype).unwrap(), true))
                    .collect();
                let y = if fused {
                    matmul_pair(&mut t, &v[0], &v[1], &v[2], &v[3]).unwrap()
                } else {
                    let first = matmul(&mut t, &v[0], &v[1]).unwrap();
                    add_matmul(&mut t, &first, &v[2], &v[3]).unwrap()
                };
                let seed = rand(&[2000, 33], 30).cast(dtype).unwrap();
                let mut grads = t.backward_with(&y, seed).unwrap();
                let mut out = vec![y.value().to_vec_f64()];
                out.extend(v.iter().map(|x| grads.take(x).unwrap().to_vec_f64()));
                out
            };
            // One longer reduction sums in another order than two (f32, f64); bf16 keeps
            // the two products, bit for bit.
            let tolerance = match dtype {
                DType::F64 => 1e-12,
                DType::F32 => 1e-4,
                _ => 0.0,
            };
            for (fused, apart) in run(true).iter().zip(run(false)) {
                for (x, y) in fused.iter().zip(apart) {
                    let scale = y.abs().max(1.0);
                    assert!(
                        (x - y).abs() <= tolerance * scale,
                        "{dtype:?}: {x} against {y}"
                    );
                }
            }
        }
    }

    #[test]
    fn matmul_bias_add_gradients_match_finite_differences() {
        let f = |t: &mut Tape, v: &[Var]| {
            let y = matmul(t, &v[0], &v[1])?;
            let y = add_bias(t, &y, &v[2])?;
            add(t, &y, &v[3])
        };
        let inputs = [
            rand(&[5, 4], 1),
            rand(&[4, 3], 2),
            rand(&[3], 3),
            rand(&[5, 3], 4),
        ];
        let err = max_gradient_error(&f, &inputs, &[true; 4], 1e-6).unwrap();
        assert!(err < 1e-7, "{err}");
    }
}
