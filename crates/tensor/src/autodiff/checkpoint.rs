//! Activation checkpointing: a block that keeps its inputs only and recomputes its internals in
//! the backward pass.

use std::sync::Arc;

use super::{BackwardCtx, Op, Tape, Var};
use crate::memory::{category_scope, Category};
use crate::{Result, Tensor};

// A block function: builds its output on the given tape from the given input variables.
type BlockFn = dyn Fn(&mut Tape, &[Var]) -> Result<Var> + Send + Sync;

struct Checkpoint {
    block: Arc<BlockFn>,
}

impl Op for Checkpoint {
    fn name(&self) -> &'static str {
        "checkpoint"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        // No records: every internal value is freed as soon as the block moves past it.
        let mut inner = Tape::no_grad();
        let vars: Vec<Var> = inputs.iter().map(|t| Var::constant((*t).clone())).collect();
        Ok((self.block)(&mut inner, &vars)?.value().clone())
    }

    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
        let mut inner = Tape::new();
        let vars: Vec<Var> = {
            let _scope = category_scope(Category::Activations);
            ctx.inputs
                .iter()
                .zip(ctx.needs_grad)
                .map(|(t, &needs)| inner.leaf((*t).clone(), needs))
                .collect()
        };
        let output = {
            let _scope = category_scope(Category::Activations);
            (self.block)(&mut inner, &vars)?
        };
        let mut grads = inner.backward_with(&output, ctx.grad.clone())?;
        Ok(vars.iter().map(|v| grads.take(v)).collect())
    }

    fn reads_output(&self) -> bool {
        false
    }
}

impl Tape {
    /// Applies `block` to `inputs` as one op whose backward recomputes the block.
    ///
    /// The result and the gradients are those of calling `block` directly, as long as the
    /// block is a pure function of its inputs (randomness keyed by ids, see [`crate::rng`]);
    /// only the block's inputs and output are kept between the passes.
    pub fn checkpoint(
        &mut self,
        inputs: &[&Var],
        block: impl Fn(&mut Tape, &[Var]) -> Result<Var> + Send + Sync + 'static,
    ) -> Result<Var> {
        if !self.grad_enabled() {
            let vars: Vec<Var> = inputs.iter().map(|v| (*v).clone()).collect();
            return block(self, &vars);
        }
        self.apply(
            Checkpoint {
                block: Arc::new(block),
            },
            inputs,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::{self, Dropout};
    use crate::memory::{set_thread_tracker, MemoryTracker};
    use crate::rng::RngKey;
    use crate::DType;

    fn block(t: &mut Tape, v: &[Var]) -> Result<Var> {
        let mut h = v[0].clone();
        for i in 0..4 {
            h = ops::matmul(t, &h, &v[1])?;
            h = ops::elu(t, &h, 1.0)?;
            h = ops::dropout(
                t,
                &h,
                Dropout {
                    p: 0.25,
                    key: RngKey::new(3, 0, i),
                },
                None,
            )?;
        }
        Ok(h)
    }

    /// Runs forward and backward, with or without checkpointing, on a fresh tracker; returns
    /// the output, the weight gradient and the peak activation bytes.
    fn run(checkpointed: bool) -> (Vec<f64>, Vec<f64>, usize) {
        std::thread::spawn(move || {
            let tracker = MemoryTracker::new();
            set_thread_tracker(tracker.clone());
            let x: Vec<f64> = (0..64 * 32)
                .map(|i| ((i * 13) % 17) as f64 / 17.0 - 0.5)
                .collect();
            let w: Vec<f64> = (0..32 * 32)
                .map(|i| ((i * 7) % 19) as f64 / 60.0 - 0.15)
                .collect();
            let mut t = Tape::new();
            let xv = t.leaf(Tensor::from_f64(&x, &[64, 32], DType::F64).unwrap(), false);
            let wv = t.leaf(Tensor::from_f64(&w, &[32, 32], DType::F64).unwrap(), true);
            let y = if checkpointed {
                t.checkpoint(&[&xv, &wv], block).unwrap()
            } else {
                block(&mut t, &[xv, wv.clone()]).unwrap()
            };
            let peak = tracker.report().peak_of(Category::Activations);
            let out = y.value().to_vec_f64();
            let seed = Tensor::full(y.value().shape(), DType::F64, 1.0).unwrap();
            let g = t.backward_with(&y, seed).unwrap();
            (out, g.get(&wv).unwrap().to_vec_f64(), peak)
        })
        .join()
        .unwrap()
    }

    #[test]
    fn checkpointing_gives_the_same_result_with_fewer_activation_bytes() {
        let (y1, g1, peak1) = run(false);
        let (y2, g2, peak2) = run(true);
        assert_eq!(y1, y2);
        for (a, b) in g1.iter().zip(&g2) {
            assert!((a - b).abs() <= 1e-12 * (1.0 + a.abs()));
        }
        assert!(peak2 * 2 < peak1, "checkpointed peak {peak2} vs {peak1}");
    }
}
