//! Batch normalisation over the rows of a matrix, with the statistics optionally summed over
//! the workers of a job, so that N workers holding parts of the rows normalise exactly as one
//! worker holding all of them.

use std::sync::Arc;

use crate::autodiff::{BackwardCtx, Op, Tape, Var};
use crate::{with_float, Error, Float, Real, Result, Tensor};

/// Sums per-column statistics over the workers of a job, in place (the same call on every
/// worker, in the same order). One worker needs none.
pub type StatsSum = Arc<dyn Fn(&mut [f64]) -> Result<()> + Send + Sync>;

/// `gamma * (x - mean) / sqrt(var + eps) + beta` per column of `x: [n, m]`, with the mean and
/// the biased variance over every row of every worker (`sum` adds the workers' partial sums;
/// two passes, so the variance does not lose digits to cancellation). The backward pass sums
/// the output gradient's column statistics the same way; the gradients of `gamma` and `beta`
/// are this worker's share (sum them over workers like any parameter gradient).
pub fn batch_norm(
    tape: &mut Tape,
    x: &Var,
    gamma: &Var,
    beta: &Var,
    eps: f64,
    sum: Option<StatsSum>,
) -> Result<Var> {
    tape.apply(
        BatchNorm {
            eps,
            sum,
            count: 0.0,
            mean: Vec::new(),
            inv_std: Vec::new(),
        },
        &[x, gamma, beta],
    )
}

struct BatchNorm {
    eps: f64,
    sum: Option<StatsSum>,
    /// Rows over all workers.
    count: f64,
    mean: Vec<f64>,
    inv_std: Vec<f64>,
}

impl BatchNorm {
    fn all_sum(&self, values: &mut [f64]) -> Result<()> {
        match &self.sum {
            Some(sum) => sum(values),
            None => Ok(()),
        }
    }
}

fn check(x: &Tensor, gamma: &Tensor, beta: &Tensor) -> Result<(usize, usize)> {
    let (n, m) = x.dims2();
    if gamma.numel() != m || beta.numel() != m {
        return Err(Error::Autodiff(format!(
            "batch_norm: x {:?} with gamma {:?} and beta {:?}",
            x.shape(),
            gamma.shape(),
            beta.shape()
        )));
    }
    Ok((n, m))
}

impl Op for BatchNorm {
    fn name(&self) -> &'static str {
        "batch_norm"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (x, gamma, beta) = (inputs[0], inputs[1], inputs[2]);
        let (n, m) = check(x, gamma, beta)?;
        with_float!(x.dtype(), "batch_norm", T => {
            let xs = x.as_slice::<T>()?;
            // Pass 1: the count and the column sums, then the mean.
            let mut sums = vec![0f64; m + 1];
            sums[m] = n as f64;
            for row in xs.chunks_exact(m.max(1)) {
                for (s, &v) in sums.iter_mut().zip(row) {
                    *s += v.to_acc().to_f64();
                }
            }
            self.all_sum(&mut sums)?;
            self.count = sums[m];
            if self.count == 0.0 {
                return Err(Error::Autodiff("batch_norm over zero rows".into()));
            }
            self.mean = sums[..m].iter().map(|s| s / self.count).collect();
            // Pass 2: the sum of squared deviations, then the variance.
            let mut squares = vec![0f64; m];
            for row in xs.chunks_exact(m.max(1)) {
                for ((s, &v), &mu) in squares.iter_mut().zip(row).zip(&self.mean) {
                    let d = v.to_acc().to_f64() - mu;
                    *s += d * d;
                }
            }
            self.all_sum(&mut squares)?;
            self.inv_std = squares.iter().map(|s| 1.0 / (s / self.count + self.eps).sqrt()).collect();
            let (g, b) = (gamma.as_slice::<T>()?, beta.as_slice::<T>()?);
            let mut out = crate::alloc::with_capacity::<T>(n * m);
            for row in xs.chunks_exact(m.max(1)) {
                for j in 0..m {
                    let xhat = (row[j].to_acc().to_f64() - self.mean[j]) * self.inv_std[j];
                    let y = g[j].to_acc().to_f64() * xhat + b[j].to_acc().to_f64();
                    out.push(T::from_acc(<<T as Float>::Acc as Real>::from_f64(y)));
                }
            }
            Tensor::from_vec(out, x.shape())
        })
    }

    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let (x, gamma, beta) = (ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]);
        let (n, m) = check(x, gamma, beta)?;
        with_float!(x.dtype(), "batch_norm", T => {
            let (xs, gs, gam) = (x.as_slice::<T>()?, ctx.grad.as_slice::<T>()?, gamma.as_slice::<T>()?);
            let xhat = |v: T, j: usize| (v.to_acc().to_f64() - self.mean[j]) * self.inv_std[j];
            // This worker's sums of g and g * xhat per column: the gradients of beta and gamma.
            let mut local = vec![0f64; 2 * m];
            for (row, grow) in xs.chunks_exact(m.max(1)).zip(gs.chunks_exact(m.max(1))) {
                for j in 0..m {
                    let g = grow[j].to_acc().to_f64();
                    local[j] += g;
                    local[m + j] += g * xhat(row[j], j);
                }
            }
            let mut global = local.clone();
            self.all_sum(&mut global)?;
            let mut dx = crate::alloc::with_capacity::<T>(n * m);
            for (row, grow) in xs.chunks_exact(m.max(1)).zip(gs.chunks_exact(m.max(1))) {
                for j in 0..m {
                    let g = grow[j].to_acc().to_f64();
                    let scale = gam[j].to_acc().to_f64() * self.inv_std[j] / self.count;
                    let d = scale * (self.count * g - global[j] - xhat(row[j], j) * global[m + j]);
                    dx.push(T::from_acc(<<T as Float>::Acc as Real>::from_f64(d)));
                }
            }
            let param = |v: &[f64]| -> Result<Tensor> {
                let t: Vec<T> = v.iter().map(|&s| T::from_acc(<<T as Float>::Acc as Real>::from_f64(s))).collect();
                Tensor::from_vec(t, gamma.shape())
            };
            Ok(vec![
                Some(Tensor::from_vec(dx, x.shape())?),
                Some(param(&local[m..])?),
                Some(param(&local[..m])?),
            ])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::gradcheck::max_gradient_error;
    use crate::DType;

    fn tensor(values: &[f64], shape: &[usize]) -> Tensor {
        Tensor::from_f64(values, shape, DType::F64).unwrap()
    }

    #[test]
    fn normalises_columns_and_matches_finite_differences() {
        let xs: Vec<f64> = (0..15)
            .map(|i| ((i * 7 % 11) as f64).sin() * 3.0 + i as f64)
            .collect();
        let x = tensor(&xs, &[5, 3]);
        let (gamma, beta) = (
            tensor(&[1.5, -0.5, 2.0], &[3]),
            tensor(&[0.1, 0.2, -0.3], &[3]),
        );
        let mut t = Tape::no_grad();
        let y = batch_norm(
            &mut t,
            &Var::constant(x.clone()),
            &Var::constant(gamma.clone()),
            &Var::constant(beta.clone()),
            1e-5,
            None,
        )
        .unwrap()
        .value()
        .to_vec_f64();
        // Naive reference, column by column.
        for j in 0..3 {
            let col: Vec<f64> = (0..5).map(|i| xs[i * 3 + j]).collect();
            let mean = col.iter().sum::<f64>() / 5.0;
            let var = col.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 5.0;
            let (g, b) = ([1.5, -0.5, 2.0][j], [0.1, 0.2, -0.3][j]);
            for i in 0..5 {
                let want = g * (col[i] - mean) / (var + 1e-5).sqrt() + b;
                assert!(
                    (y[i * 3 + j] - want).abs() < 1e-12,
                    "{} vs {want}",
                    y[i * 3 + j]
                );
            }
        }
        let f = |t: &mut Tape, v: &[Var]| batch_norm(t, &v[0], &v[1], &v[2], 1e-5, None);
        let err = max_gradient_error(&f, &[x, gamma, beta], &[true, true, true], 1e-6).unwrap();
        assert!(err < 1e-7, "gradient error {err}");
    }
}
