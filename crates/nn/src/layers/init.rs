//! Seeded parameter initialisation as PyTorch Geometric does it per layer.

use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{DType, Tensor};

use crate::Result;

/// Glorot (Xavier) uniform: `U(-a, a)` with `a = sqrt(6 / (fan_in + fan_out))`.
pub fn glorot(
    shape: &[usize],
    fan_in: usize,
    fan_out: usize,
    key: RngKey,
    dtype: DType,
) -> Result<Tensor> {
    let a = (6.0 / (fan_in + fan_out) as f64).sqrt();
    uniform(shape, a, key, dtype)
}

/// PyTorch's default for `Linear` (Kaiming uniform with `a = sqrt(5)`): `U(-b, b)` with
/// `b = 1 / sqrt(fan_in)`; also its bias initialisation.
pub fn kaiming_uniform(
    shape: &[usize],
    fan_in: usize,
    key: RngKey,
    dtype: DType,
) -> Result<Tensor> {
    uniform(shape, 1.0 / (fan_in.max(1) as f64).sqrt(), key, dtype)
}

/// `U(-bound, bound)`, element `i` drawn from `key` at `(i, 0)`.
pub fn uniform(shape: &[usize], bound: f64, key: RngKey, dtype: DType) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| (key.uniform(i as u64, 0) * 2.0 - 1.0) * bound)
        .collect();
    Ok(Tensor::from_f64(&v, shape, dtype)?)
}
