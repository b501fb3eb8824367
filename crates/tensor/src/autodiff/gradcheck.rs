//! Checks an op's backward against central finite differences, in f64.

use super::{Tape, Var};
use crate::rng::RngKey;
use crate::{DType, Error, Result, Tensor};

/// The largest relative error between analytic and numeric gradients of
/// `L = sum_i w_i * f(inputs)_i` (with fixed random weights `w`) over every element of the
/// inputs marked in `wrt`.
///
/// The inputs must be f64. The error of one element is `|a - n| / max(1, |a|, |n|)`.
pub fn max_gradient_error(
    f: &dyn Fn(&mut Tape, &[Var]) -> Result<Var>,
    inputs: &[Tensor],
    wrt: &[bool],
    eps: f64,
) -> Result<f64> {
    if inputs.iter().any(|t| t.dtype() != DType::F64) {
        return Err(Error::Autodiff("gradcheck needs f64 inputs".into()));
    }
    let key = RngKey::new(0x5eed, 0, 0);
    let weighted = |inputs: &[Tensor]| -> Result<(f64, Tensor)> {
        let mut tape = Tape::no_grad();
        let vars: Vec<Var> = inputs.iter().map(|t| Var::constant(t.clone())).collect();
        let out = f(&mut tape, &vars)?.value().clone();
        let w: Vec<f64> = (0..out.numel())
            .map(|i| key.uniform(i as u64, 0) * 2.0 - 1.0)
            .collect();
        let l = out.to_vec_f64().iter().zip(&w).map(|(a, b)| a * b).sum();
        Ok((l, Tensor::from_f64(&w, out.shape(), DType::F64)?))
    };
    let (_, seed) = weighted(inputs)?;
    let mut tape = Tape::new();
    let vars: Vec<Var> = inputs
        .iter()
        .zip(wrt)
        .map(|(t, &w)| tape.leaf(t.clone(), w))
        .collect();
    let out = f(&mut tape, &vars)?;
    let mut grads = tape.backward_with(&out, seed)?;
    let mut worst = 0.0f64;
    for (i, input) in inputs.iter().enumerate() {
        if !wrt[i] {
            continue;
        }
        let analytic = grads
            .take(&vars[i])
            .map(|g| g.to_vec_f64())
            .unwrap_or_else(|| vec![0.0; input.numel()]);
        let base = input.to_vec_f64();
        for j in 0..base.len() {
            let mut probe = inputs.to_vec();
            let mut plus = base.clone();
            plus[j] += eps;
            probe[i] = Tensor::from_f64(&plus, input.shape(), DType::F64)?;
            let (lp, _) = weighted(&probe)?;
            let mut minus = base.clone();
            minus[j] -= eps;
            probe[i] = Tensor::from_f64(&minus, input.shape(), DType::F64)?;
            let (lm, _) = weighted(&probe)?;
            let numeric = (lp - lm) / (2.0 * eps);
            let a = analytic[j];
            let err = (a - numeric).abs() / 1f64.max(a.abs()).max(numeric.abs());
            worst = worst.max(err);
        }
    }
    Ok(worst)
}

/// A tensor of uniform values in [-1, 1) drawn from `salt`, for the ops' gradient checks.
#[cfg(test)]
pub(crate) fn uniform_f64(shape: &[usize], salt: u64) -> Tensor {
    let key = RngKey::new(salt, 0, 0);
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| key.uniform(i as u64, 0) * 2.0 - 1.0)
        .collect();
    Tensor::from_f64(&v, shape, DType::F64).expect("values fill the shape")
}
