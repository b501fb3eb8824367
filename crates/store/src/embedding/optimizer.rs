//! Sparse optimizers: updates applied only to the rows a step touched, with the parameters and
//! defaults of WholeGraph's embedding optimizers.
//!
//! Every optimizer takes the summed gradient `g` of one row. Weight decay is L2: `g + wd * w`
//! (LazyAdam can decouple it instead, as AdamW does). LazyAdam keeps a step count per row, so
//! its bias correction counts the steps that touched that row, not the global step.

use crate::{Result, StoreError};

/// A sparse optimizer and its hyper-parameters (the learning rate is given per step).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SparseOptimizer {
    /// `w -= lr * (g + wd * w)`.
    Sgd {
        /// L2 weight decay.
        weight_decay: f32,
    },
    /// Adam over the touched rows only, with per-row bias correction.
    LazyAdam {
        /// Decay of the first moment.
        beta1: f32,
        /// Decay of the second moment.
        beta2: f32,
        /// Added to the root of the second moment.
        epsilon: f32,
        /// Weight decay.
        weight_decay: f32,
        /// Decoupled weight decay (`w -= lr * wd * w`, as AdamW) instead of L2.
        decoupled: bool,
    },
    /// `s += g^2; w -= lr * g / (sqrt(s) + eps)`.
    AdaGrad {
        /// Added to the root of the accumulated squares.
        epsilon: f32,
        /// L2 weight decay.
        weight_decay: f32,
    },
    /// `v = alpha * v + (1 - alpha) * g^2; w -= lr * g / (sqrt(v) + eps)`.
    RmsProp {
        /// Decay of the running mean of squares.
        alpha: f32,
        /// Added to the root of the mean of squares.
        epsilon: f32,
        /// L2 weight decay.
        weight_decay: f32,
    },
}

impl SparseOptimizer {
    /// SGD with WholeGraph's defaults (no weight decay).
    pub fn sgd() -> SparseOptimizer {
        SparseOptimizer::Sgd { weight_decay: 0.0 }
    }

    /// LazyAdam with WholeGraph's defaults: beta1 0.9, beta2 0.999, epsilon 1e-8, no weight
    /// decay.
    pub fn lazy_adam() -> SparseOptimizer {
        SparseOptimizer::LazyAdam {
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
        }
    }

    /// AdaGrad with WholeGraph's defaults: epsilon 1e-8, no weight decay.
    pub fn adagrad() -> SparseOptimizer {
        SparseOptimizer::AdaGrad {
            epsilon: 1e-8,
            weight_decay: 0.0,
        }
    }

    /// RMSProp with WholeGraph's defaults: alpha 0.99, epsilon 1e-8, no weight decay.
    pub fn rmsprop() -> SparseOptimizer {
        SparseOptimizer::RmsProp {
            alpha: 0.99,
            epsilon: 1e-8,
            weight_decay: 0.0,
        }
    }

    /// The optimizer named `sgd`, `lazy_adam`, `adagrad` or `rmsprop`, with its defaults.
    pub fn parse(name: &str) -> Result<SparseOptimizer> {
        Ok(match name {
            "sgd" => SparseOptimizer::sgd(),
            "lazy_adam" | "lazyadam" => SparseOptimizer::lazy_adam(),
            "adagrad" => SparseOptimizer::adagrad(),
            "rmsprop" => SparseOptimizer::rmsprop(),
            other => {
                return Err(StoreError::Invalid(format!(
                    "unknown sparse optimizer '{other}' (sgd, lazy_adam, adagrad, rmsprop)"
                )))
            }
        })
    }

    /// The same optimizer with weight decay `wd`.
    pub fn with_weight_decay(mut self, wd: f32) -> SparseOptimizer {
        match &mut self {
            SparseOptimizer::Sgd { weight_decay }
            | SparseOptimizer::LazyAdam { weight_decay, .. }
            | SparseOptimizer::AdaGrad { weight_decay, .. }
            | SparseOptimizer::RmsProp { weight_decay, .. } => *weight_decay = wd,
        }
        self
    }

    /// The same optimizer with its hyper-parameter `name` (WholeGraph's names: `weight_decay`
    /// for all; `beta1`, `beta2`, `epsilon` and `adam_w` (decoupled weight decay when above
    /// 0.5) for LazyAdam; `epsilon` for AdaGrad; `alpha` and `epsilon` for RMSProp) set to
    /// `value`.
    pub fn with_param(mut self, name: &str, value: f32) -> Result<SparseOptimizer> {
        let slot = match (&mut self, name) {
            (_, "weight_decay") => return Ok(self.with_weight_decay(value)),
            (SparseOptimizer::LazyAdam { beta1, .. }, "beta1") => beta1,
            (SparseOptimizer::LazyAdam { beta2, .. }, "beta2") => beta2,
            (SparseOptimizer::LazyAdam { decoupled, .. }, "adam_w") => {
                *decoupled = value > 0.5;
                return Ok(self);
            }
            (SparseOptimizer::LazyAdam { epsilon, .. }, "epsilon")
            | (SparseOptimizer::AdaGrad { epsilon, .. }, "epsilon")
            | (SparseOptimizer::RmsProp { epsilon, .. }, "epsilon") => epsilon,
            (SparseOptimizer::RmsProp { alpha, .. }, "alpha") => alpha,
            _ => {
                let known = match self {
                    SparseOptimizer::Sgd { .. } => "weight_decay",
                    SparseOptimizer::LazyAdam { .. } => {
                        "weight_decay, epsilon, beta1, beta2, adam_w"
                    }
                    SparseOptimizer::AdaGrad { .. } => "weight_decay, epsilon",
                    SparseOptimizer::RmsProp { .. } => "weight_decay, epsilon, alpha",
                };
                return Err(StoreError::Invalid(format!(
                    "'{name}' is not a parameter of {} ({known})",
                    self.name()
                )));
            }
        };
        if !value.is_finite() {
            return Err(StoreError::Invalid(format!(
                "{name} = {value} is not finite"
            )));
        }
        *slot = value;
        Ok(self)
    }

    /// The name [`SparseOptimizer::parse`] reads.
    pub fn name(&self) -> &'static str {
        match self {
            SparseOptimizer::Sgd { .. } => "sgd",
            SparseOptimizer::LazyAdam { .. } => "lazy_adam",
            SparseOptimizer::AdaGrad { .. } => "adagrad",
            SparseOptimizer::RmsProp { .. } => "rmsprop",
        }
    }

    /// Per-element state tensors the optimizer keeps (each as wide as the table).
    pub fn states(&self) -> usize {
        match self {
            SparseOptimizer::Sgd { .. } => 0,
            SparseOptimizer::LazyAdam { .. } => 2,
            SparseOptimizer::AdaGrad { .. } | SparseOptimizer::RmsProp { .. } => 1,
        }
    }

    /// Whether the optimizer counts the steps of each row.
    pub fn counts_steps(&self) -> bool {
        matches!(self, SparseOptimizer::LazyAdam { .. })
    }

    /// Updates one row `w` with its summed gradient `g`, its state rows and its step count
    /// (already incremented for this step).
    pub(crate) fn update_row(
        &self,
        w: &mut [f32],
        g: &[f32],
        states: &mut [&mut [f32]],
        step: i64,
        lr: f32,
    ) {
        match *self {
            SparseOptimizer::Sgd { weight_decay } => {
                for (w, &g) in w.iter_mut().zip(g) {
                    *w -= lr * (g + weight_decay * *w);
                }
            }
            SparseOptimizer::LazyAdam {
                beta1,
                beta2,
                epsilon,
                weight_decay,
                decoupled,
            } => {
                let [m, v] = states else {
                    unreachable!("LazyAdam keeps two states")
                };
                let correction1 = 1.0 - beta1.powi(step as i32);
                let correction2 = 1.0 - beta2.powi(step as i32);
                for i in 0..w.len() {
                    let mut grad = g[i];
                    if decoupled {
                        w[i] -= lr * weight_decay * w[i];
                    } else {
                        grad += weight_decay * w[i];
                    }
                    m[i] = beta1 * m[i] + (1.0 - beta1) * grad;
                    v[i] = beta2 * v[i] + (1.0 - beta2) * grad * grad;
                    let m_hat = m[i] / correction1;
                    let v_hat = v[i] / correction2;
                    w[i] -= lr * m_hat / (v_hat.sqrt() + epsilon);
                }
            }
            SparseOptimizer::AdaGrad {
                epsilon,
                weight_decay,
            } => {
                let [sum] = states else {
                    unreachable!("AdaGrad keeps one state")
                };
                for i in 0..w.len() {
                    let grad = g[i] + weight_decay * w[i];
                    sum[i] += grad * grad;
                    w[i] -= lr * grad / (sum[i].sqrt() + epsilon);
                }
            }
            SparseOptimizer::RmsProp {
                alpha,
                epsilon,
                weight_decay,
            } => {
                let [mean_square] = states else {
                    unreachable!("RMSProp keeps one state")
                };
                for i in 0..w.len() {
                    let grad = g[i] + weight_decay * w[i];
                    mean_square[i] = alpha * mean_square[i] + (1.0 - alpha) * grad * grad;
                    w[i] -= lr * grad / (mean_square[i].sqrt() + epsilon);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wholegraph_parameters_set_their_fields_and_others_are_refused() {
        let adam = SparseOptimizer::lazy_adam()
            .with_param("beta1", 0.8)
            .and_then(|o| o.with_param("adam_w", 1.0))
            .and_then(|o| o.with_param("weight_decay", 0.1))
            .unwrap();
        assert_eq!(
            adam,
            SparseOptimizer::LazyAdam {
                beta1: 0.8,
                beta2: 0.999,
                epsilon: 1e-8,
                weight_decay: 0.1,
                decoupled: true,
            }
        );
        let rms = SparseOptimizer::rmsprop().with_param("alpha", 0.9).unwrap();
        assert!(matches!(rms, SparseOptimizer::RmsProp { alpha, .. } if alpha == 0.9));
        let err = SparseOptimizer::sgd().with_param("beta1", 0.9).unwrap_err();
        assert!(
            err.to_string()
                .contains("'beta1' is not a parameter of sgd"),
            "{err}"
        );
        assert!(SparseOptimizer::adagrad()
            .with_param("epsilon", f32::NAN)
            .is_err());
    }
}
