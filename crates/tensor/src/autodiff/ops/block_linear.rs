//! [`block_matmul`]: a block-diagonal product, `B` independent linear maps side by side. `x`'s
//! columns are `B` blocks of `F` (SIGN's features and their propagated hops), `w: [B * F, H]`
//! holds one `[F, H]` map per block (its rows `b F..(b + 1) F`), and the output's columns are
//! the `B` products `x_b w_b`, `H` each: SIGN's per-hop linears in one op, without a dense
//! `[B F, B H]` weight that would mix the hops.

use crate::autodiff::{BackwardCtx, Op, Tape, Var};
use crate::kernels::matmul::matmul as matmul_kernel;
use crate::{with_float, Error, Result, Tensor};

/// Columns `from..from + width` of the 2-D `x`, as a tensor of their own.
fn columns(x: &Tensor, from: usize, width: usize) -> Result<Tensor> {
    let (n, c) = x.dims2();
    with_float!(x.dtype(), "block_matmul", T => {
        let xs = x.as_slice::<T>()?;
        let mut out = crate::alloc::with_capacity(n * width);
        for r in 0..n {
            out.extend_from_slice(&xs[r * c + from..r * c + from + width]);
        }
        Tensor::from_vec(out, &[n, width])
    })
}

/// Rows `from..from + count` of the 2-D `w`.
fn rows(w: &Tensor, from: usize, count: usize) -> Result<Tensor> {
    let (_, c) = w.dims2();
    with_float!(w.dtype(), "block_matmul", T => {
        Tensor::from_vec(crate::alloc::copy_of(&w.as_slice::<T>()?[from * c..(from + count) * c]), &[count, c])
    })
}

/// The tensors `parts` (each `[n, w_i]`) side by side: `[n, sum w_i]`.
fn side_by_side(parts: &[Tensor]) -> Result<Tensor> {
    let n = parts[0].dims2().0;
    let width: usize = parts.iter().map(|p| p.dims2().1).sum();
    with_float!(parts[0].dtype(), "block_matmul", T => {
        let slices = parts.iter().map(|p| p.as_slice::<T>()).collect::<Result<Vec<_>>>()?;
        let mut out = crate::alloc::with_capacity(n * width);
        for r in 0..n {
            for (s, p) in slices.iter().zip(parts) {
                let w = p.dims2().1;
                out.extend_from_slice(&s[r * w..(r + 1) * w]);
            }
        }
        Tensor::from_vec(out, &[n, width])
    })
}

/// The tensors `parts` (each `[r_i, c]`) stacked: `[sum r_i, c]`.
fn stacked(parts: &[Tensor]) -> Result<Tensor> {
    let c = parts[0].dims2().1;
    let rows: usize = parts.iter().map(|p| p.dims2().0).sum();
    with_float!(parts[0].dtype(), "block_matmul", T => {
        let mut out = crate::alloc::with_capacity(rows * c);
        for p in parts {
            out.extend_from_slice(p.as_slice::<T>()?);
        }
        Tensor::from_vec(out, &[rows, c])
    })
}

struct BlockMatMul {
    blocks: usize,
}

impl BlockMatMul {
    fn widths(&self, x: &Tensor, w: &Tensor) -> Result<(usize, usize)> {
        let ((_, cols), (rows, h)) = (x.dims2(), w.dims2());
        if self.blocks == 0 || cols != rows || !cols.is_multiple_of(self.blocks) {
            return Err(Error::ShapeMismatch {
                op: "block_matmul",
                lhs: x.shape().to_vec(),
                rhs: w.shape().to_vec(),
            });
        }
        Ok((cols / self.blocks, h))
    }
}

impl Op for BlockMatMul {
    fn name(&self) -> &'static str {
        "block_matmul"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (x, w) = (inputs[0], inputs[1]);
        let (f, _) = self.widths(x, w)?;
        let parts = (0..self.blocks)
            .map(|b| matmul_kernel(&columns(x, b * f, f)?, &rows(w, b * f, f)?, false, false))
            .collect::<Result<Vec<_>>>()?;
        side_by_side(&parts)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let (x, w, g) = (ctx.inputs[0], ctx.inputs[1], ctx.grad);
        let (f, h) = self.widths(x, w)?;
        let (mut dx, mut dw) = (Vec::new(), Vec::new());
        for b in 0..self.blocks {
            let gb = columns(g, b * h, h)?;
            if ctx.needs_grad[0] {
                dx.push(matmul_kernel(&gb, &rows(w, b * f, f)?, false, true)?);
            }
            if ctx.needs_grad[1] {
                dw.push(matmul_kernel(&columns(x, b * f, f)?, &gb, true, false)?);
            }
        }
        Ok(vec![
            ctx.needs_grad[0].then(|| side_by_side(&dx)).transpose()?,
            ctx.needs_grad[1].then(|| stacked(&dw)).transpose()?,
        ])
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// The block-diagonal product of `x: [n, blocks * F]` and `w: [blocks * F, H]`: `[n, blocks *
/// H]`, block `b` of the output `x_b w_b` (see the module's documentation).
pub fn block_matmul(tape: &mut Tape, x: &Var, w: &Var, blocks: usize) -> Result<Var> {
    tape.apply(BlockMatMul { blocks }, &[x, w])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::gradcheck::max_gradient_error;
    use crate::DType;

    #[test]
    fn block_matmul_is_the_dense_product_of_the_block_diagonal_and_its_gradients_match() {
        let (n, blocks, f, h) = (4, 3, 2, 5);
        let xv: Vec<f64> = (0..n * blocks * f)
            .map(|i| ((i * 7) % 11) as f64 * 0.3 - 1.4)
            .collect();
        let wv: Vec<f64> = (0..blocks * f * h)
            .map(|i| ((i * 5) % 13) as f64 * 0.2 - 1.1)
            .collect();
        let x = Tensor::from_f64(&xv, &[n, blocks * f], DType::F64).unwrap();
        let w = Tensor::from_f64(&wv, &[blocks * f, h], DType::F64).unwrap();
        let mut tape = Tape::no_grad();
        let got = block_matmul(
            &mut tape,
            &Var::constant(x.clone()),
            &Var::constant(w.clone()),
            blocks,
        )
        .unwrap()
        .value()
        .to_vec_f64();
        // The dense reference: x times the [B F, B H] block-diagonal weight.
        for r in 0..n {
            for b in 0..blocks {
                for j in 0..h {
                    let want: f64 = (0..f)
                        .map(|k| xv[r * blocks * f + b * f + k] * wv[(b * f + k) * h + j])
                        .sum();
                    let g = got[r * blocks * h + b * h + j];
                    assert!((g - want).abs() < 1e-12, "{g} vs {want}");
                }
            }
        }
        let product = |t: &mut Tape, v: &[Var]| {
            let y = block_matmul(t, &v[0], &v[1], blocks)?;
            // A weighted sum so that every output element has its own gradient.
            let weights: Vec<f64> = (0..n * blocks * h).map(|i| (i % 7) as f64 - 3.0).collect();
            let c = Var::constant(Tensor::from_f64(
                &weights,
                &[n * blocks * h, 1],
                DType::F64,
            )?);
            let flat = crate::autodiff::ops::reshape(t, &y, &[1, n * blocks * h])?;
            crate::autodiff::ops::matmul(t, &flat, &c)
        };
        let err = max_gradient_error(&product, &[x, w], &[true, true], 1e-6).unwrap();
        assert!(err < 1e-7, "gradient error {err}");
        let mut tape = Tape::no_grad();
        let bad = Var::constant(Tensor::zeros(&[4, 5], DType::F64));
        assert!(block_matmul(
            &mut tape,
            &bad,
            &Var::constant(Tensor::zeros(&[6, 2], DType::F64)),
            3
        )
        .is_err());
    }
}
