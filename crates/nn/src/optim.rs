//! Dense optimizers: SGD (with momentum), Adam and AdamW, with weight decay, as PyTorch
//! defines them (Adam adds `weight_decay * p` to the gradient; AdamW decays `p` directly).

use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::{DType, Tensor};

use crate::{Error, Result};

/// Which update rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OptimizerKind {
    /// `v = momentum * v + g; p -= lr * v`.
    Sgd {
        /// Momentum (0 for plain SGD).
        momentum: f64,
    },
    /// Adam with L2 weight decay folded into the gradient.
    Adam,
    /// Adam with decoupled weight decay.
    AdamW,
}

/// An optimizer over a fixed list of parameter tensors (f32 or f64), with its state.
pub struct Optimizer {
    kind: OptimizerKind,
    lr: f64,
    weight_decay: f64,
    betas: (f64, f64),
    eps: f64,
    step: u64,
    first: Vec<Tensor>,
    second: Vec<Tensor>,
}

impl Optimizer {
    /// An optimizer for parameters shaped like `params`.
    pub fn new(kind: OptimizerKind, lr: f64, weight_decay: f64, params: &[Tensor]) -> Optimizer {
        let _g = category_scope(Category::Optimizer);
        let zeros = |on: bool| -> Vec<Tensor> {
            if on {
                params
                    .iter()
                    .map(|p| Tensor::zeros(p.shape(), p.dtype()))
                    .collect()
            } else {
                Vec::new()
            }
        };
        let adam = !matches!(kind, OptimizerKind::Sgd { .. });
        let momentum = matches!(kind, OptimizerKind::Sgd { momentum } if momentum > 0.0);
        Optimizer {
            kind,
            lr,
            weight_decay,
            betas: (0.9, 0.999),
            eps: 1e-8,
            step: 0,
            first: zeros(adam || momentum),
            second: zeros(adam),
        }
    }

    /// The state that a snapshot keeps: the step count and the moment tensors (first, then
    /// second; empty where the rule keeps none).
    pub fn state(&self) -> (u64, &[Tensor], &[Tensor]) {
        (self.step, &self.first, &self.second)
    }

    /// Restores a state taken by [`Optimizer::state`] from an optimizer of the same rule over
    /// parameters of the same shapes.
    pub fn restore(&mut self, step: u64, first: Vec<Tensor>, second: Vec<Tensor>) -> Result<()> {
        let shapes = |v: &[Tensor]| v.iter().map(|t| t.shape().to_vec()).collect::<Vec<_>>();
        if shapes(&first) != shapes(&self.first) || shapes(&second) != shapes(&self.second) {
            return Err(Error::Mismatch {
                what: "the optimizer state and the parameters",
                detail: "the state is of another model or update rule".into(),
            });
        }
        self.step = step;
        self.first = first;
        self.second = second;
        Ok(())
    }

    /// Applies one update to every parameter with its gradient.
    pub fn step(&mut self, params: &mut [Tensor], grads: &[Tensor]) -> Result<()> {
        if params.len() != grads.len() {
            return Err(Error::Mismatch {
                what: "parameters and gradients",
                detail: format!("{} parameters, {} gradients", params.len(), grads.len()),
            });
        }
        self.step += 1;
        for i in 0..params.len() {
            let g = grads[i].cast(params[i].dtype())?;
            match params[i].dtype() {
                DType::F32 => self.update::<f32>(i, &mut params[i], &g)?,
                DType::F64 => self.update::<f64>(i, &mut params[i], &g)?,
                other => {
                    return Err(Error::InvalidSetting {
                        setting: "parameter dtype",
                        reason: format!("must be f32 or f64, not {other}"),
                    })
                }
            }
        }
        Ok(())
    }

    fn update<T: graphloom_tensor::Float + Into<f64>>(
        &mut self,
        i: usize,
        p: &mut Tensor,
        g: &Tensor,
    ) -> Result<()> {
        let (lr, wd, (b1, b2), eps, t) = (
            self.lr,
            self.weight_decay,
            self.betas,
            self.eps,
            self.step as i32,
        );
        let from = |v: f64| T::from_acc(<T::Acc as graphloom_tensor::Real>::from_f64(v));
        let gs = g.as_slice::<T>()?;
        let ps = p.as_mut_slice::<T>()?;
        match self.kind {
            OptimizerKind::Sgd { momentum } => {
                let mut buf = if momentum > 0.0 {
                    Some(self.first[i].as_mut_slice::<T>()?)
                } else {
                    None
                };
                for j in 0..ps.len() {
                    let pv: f64 = ps[j].into();
                    let mut d = gs[j].into() + wd * pv;
                    if let Some(b) = buf.as_mut() {
                        d += momentum * b[j].into();
                        b[j] = from(d);
                    }
                    ps[j] = from(pv - lr * d);
                }
            }
            OptimizerKind::Adam | OptimizerKind::AdamW => {
                let decoupled = self.kind == OptimizerKind::AdamW;
                let (bc1, bc2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
                let m = self.first[i].as_mut_slice::<T>()?;
                let v = self.second[i].as_mut_slice::<T>()?;
                for j in 0..ps.len() {
                    let mut pv: f64 = ps[j].into();
                    let mut gv: f64 = gs[j].into();
                    if decoupled {
                        pv *= 1.0 - lr * wd;
                    } else {
                        gv += wd * pv;
                    }
                    let mj = b1 * m[j].into() + (1.0 - b1) * gv;
                    let vj = b2 * v[j].into() + (1.0 - b2) * gv * gv;
                    m[j] = from(mj);
                    v[j] = from(vj);
                    ps[j] = from(pv - lr * (mj / bc1) / ((vj / bc2).sqrt() + eps));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adam on f(p) = sum (p - 3)^2 / 2 against a scalar f64 transcription of torch.optim.Adam.
    #[test]
    fn adam_matches_reference_and_converges() {
        let p0 = [0.0f64, 1.0, -2.0];
        let mut p = vec![Tensor::from_f64(&p0, &[3], DType::F64).unwrap()];
        let mut opt = Optimizer::new(OptimizerKind::Adam, 0.1, 0.01, &p);
        let mut r = p0.to_vec();
        let (mut m, mut v) = (vec![0.0; 3], vec![0.0; 3]);
        for t in 1..=200 {
            let g: Vec<f64> = p[0].to_vec_f64().iter().map(|x| x - 3.0).collect();
            opt.step(&mut p, &[Tensor::from_f64(&g, &[3], DType::F64).unwrap()])
                .unwrap();
            for j in 0..3 {
                let gj = (r[j] - 3.0) + 0.01 * r[j];
                m[j] = 0.9 * m[j] + 0.1 * gj;
                v[j] = 0.999 * v[j] + 0.001 * gj * gj;
                let mh = m[j] / (1.0 - 0.9f64.powi(t));
                let vh = v[j] / (1.0 - 0.999f64.powi(t));
                r[j] -= 0.1 * mh / (vh.sqrt() + 1e-8);
            }
        }
        let got = p[0].to_vec_f64();
        for j in 0..3 {
            assert!((got[j] - r[j]).abs() < 1e-12);
            assert!((got[j] - 3.0 / 1.01).abs() < 0.05, "{}", got[j]);
        }
    }

    #[test]
    fn sgd_with_momentum_and_adamw_decay() {
        let mut p = vec![Tensor::from_f64(&[1.0], &[1], DType::F32).unwrap()];
        let mut opt = Optimizer::new(OptimizerKind::Sgd { momentum: 0.5 }, 0.1, 0.0, &p);
        let g = Tensor::from_f64(&[1.0], &[1], DType::F32).unwrap();
        opt.step(&mut p, std::slice::from_ref(&g)).unwrap();
        opt.step(&mut p, std::slice::from_ref(&g)).unwrap();
        // v1 = 1, p = 0.9; v2 = 1.5, p = 0.75.
        assert!((p[0].to_vec_f64()[0] - 0.75).abs() < 1e-6);
        let mut p = vec![Tensor::from_f64(&[2.0], &[1], DType::F64).unwrap()];
        let mut opt = Optimizer::new(OptimizerKind::AdamW, 0.1, 0.5, &p);
        opt.step(
            &mut p,
            &[Tensor::from_f64(&[0.0], &[1], DType::F64).unwrap()],
        )
        .unwrap();
        // Zero gradient: only the decoupled decay acts, p *= 1 - lr * wd.
        assert!((p[0].to_vec_f64()[0] - 1.9).abs() < 1e-12);
    }
}
