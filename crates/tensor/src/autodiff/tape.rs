//! The tape, its variables and the [`Op`] trait.

use std::collections::HashMap;

use super::profile::Pass;
use crate::memory::{category_scope, Category};
use crate::{Error, Result, Tensor};

/// What a backward pass receives.
pub struct BackwardCtx<'a> {
    /// The forward inputs, in order. An input the op said it does not read
    /// ([`Op::reads_input`]) is an empty tensor here.
    pub inputs: &'a [&'a Tensor],
    /// The forward output (an empty tensor when the op said it does not read it,
    /// [`Op::reads_output`]).
    pub output: &'a Tensor,
    /// The gradient of the loss with respect to the output.
    pub grad: &'a Tensor,
    /// Which inputs need a gradient: an op may skip (return `None` for) the others.
    pub needs_grad: &'a [bool],
}

/// A differentiable operation: the forward computation and its backward, side by side.
///
/// `backward` may recompute anything it did not keep (a fused kernel that never stored its
/// intermediate, a checkpointed block) and returns one entry per input.
pub trait Op: Send + Sync {
    /// A short name for errors and profiles.
    fn name(&self) -> &'static str;
    /// Computes the output. It may keep what its backward needs in `self`.
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor>;
    /// Computes the gradient of every input that needs one.
    fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>>;
    /// Whether `backward` reads input `index` (its values or its shape), given which inputs
    /// need a gradient. The tape drops the others right after the forward pass, so that an
    /// intermediate nothing will read again is freed as soon as the next op has consumed it.
    fn reads_input(&self, index: usize, needs_grad: &[bool]) -> bool {
        let _ = (index, needs_grad);
        true
    }
    /// Whether `backward` reads the output; the tape drops it otherwise.
    fn reads_output(&self) -> bool {
        true
    }
}

/// A value on a tape: a tensor and, when it needs a gradient, the record that produced it.
#[derive(Clone, Debug)]
pub struct Var {
    node: Option<usize>,
    value: Tensor,
}

impl Var {
    /// The value.
    pub fn value(&self) -> &Tensor {
        &self.value
    }
    /// Whether a gradient flows back through this value.
    pub fn requires_grad(&self) -> bool {
        self.node.is_some()
    }
    /// A value that no gradient flows through (a constant, an input without gradient).
    pub fn constant(value: Tensor) -> Var {
        Var { node: None, value }
    }
}

/// One input of a recorded op: the node it came from, its value when the op's backward reads
/// it, and its shape and dtype, which its gradient must have.
struct Input {
    node: Option<usize>,
    value: Option<Tensor>,
    shape: Vec<usize>,
    dtype: crate::DType,
}

struct Node {
    op: Option<Box<dyn Op>>,
    inputs: Vec<Input>,
    output: Option<Tensor>,
}

/// The record of a forward pass.
///
/// A tape made with [`Tape::no_grad`] records nothing, so every intermediate value is freed as
/// soon as nothing refers to it: the mode for inference.
pub struct Tape {
    nodes: Vec<Node>,
    grad_enabled: bool,
}

impl Default for Tape {
    fn default() -> Self {
        Tape::new()
    }
}

/// Gradients of the leaves that asked for one, after [`Tape::backward`].
#[derive(Default)]
pub struct Gradients {
    by_node: HashMap<usize, Tensor>,
}

impl Gradients {
    /// The gradient of a leaf, or `None` when no path led from the loss to it.
    pub fn get(&self, var: &Var) -> Option<&Tensor> {
        var.node.and_then(|n| self.by_node.get(&n))
    }
    /// Takes the gradient of a leaf out.
    pub fn take(&mut self, var: &Var) -> Option<Tensor> {
        var.node.and_then(|n| self.by_node.remove(&n))
    }
}

impl Tape {
    /// A tape that records operations for a backward pass.
    pub fn new() -> Tape {
        Tape {
            nodes: Vec::new(),
            grad_enabled: true,
        }
    }

    /// A tape that records nothing (inference).
    pub fn no_grad() -> Tape {
        Tape {
            nodes: Vec::new(),
            grad_enabled: false,
        }
    }

    /// Whether this tape records operations.
    pub fn grad_enabled(&self) -> bool {
        self.grad_enabled
    }

    /// Puts a tensor on the tape; with `requires_grad`, [`Tape::backward`] returns its gradient.
    pub fn leaf(&mut self, value: Tensor, requires_grad: bool) -> Var {
        if !(requires_grad && self.grad_enabled) {
            return Var::constant(value);
        }
        self.nodes.push(Node {
            op: None,
            inputs: Vec::new(),
            output: None,
        });
        Var {
            node: Some(self.nodes.len() - 1),
            value,
        }
    }

    /// Runs `op` on `inputs` and records it when any input needs a gradient.
    pub fn apply(&mut self, mut op: impl Op + 'static, inputs: &[&Var]) -> Result<Var> {
        let values: Vec<&Tensor> = inputs.iter().map(|v| &v.value).collect();
        let recorded = self.grad_enabled && inputs.iter().any(|v| v.node.is_some());
        let started = super::profile::start();
        let output = op.forward(&values)?;
        let pass = if recorded {
            Pass::Forward
        } else {
            Pass::ForwardNoGrad
        };
        super::profile::record(op.name(), started, pass);
        if !recorded {
            return Ok(Var::constant(output));
        }
        let needs_grad: Vec<bool> = inputs.iter().map(|v| v.node.is_some()).collect();
        let recorded = inputs
            .iter()
            .enumerate()
            .map(|(i, v)| Input {
                node: v.node,
                value: op.reads_input(i, &needs_grad).then(|| v.value.clone()),
                shape: v.value.shape().to_vec(),
                dtype: v.value.dtype(),
            })
            .collect();
        self.nodes.push(Node {
            inputs: recorded,
            output: op.reads_output().then(|| output.clone()),
            op: Some(Box::new(op)),
        });
        Ok(Var {
            node: Some(self.nodes.len() - 1),
            value: output,
        })
    }

    /// Back-propagates from a scalar `loss` (seed gradient 1) and empties the tape.
    pub fn backward(&mut self, loss: &Var) -> Result<Gradients> {
        let seed = Tensor::full(loss.value.shape(), loss.value.dtype(), 1.0)?;
        self.backward_with(loss, seed)
    }

    /// Back-propagates the gradient `seed` of `output` and empties the tape. Each record is
    /// dropped as soon as its backward has run, so memory falls as the pass proceeds.
    pub fn backward_with(&mut self, output: &Var, seed: Tensor) -> Result<Gradients> {
        let _scope = category_scope(Category::Gradients);
        let Some(start) = output.node else {
            return Err(Error::Autodiff(
                "backward from a value that does not depend on any leaf requiring a gradient"
                    .into(),
            ));
        };
        output.value.check_same(&seed, "backward seed")?;
        let mut nodes = std::mem::take(&mut self.nodes);
        nodes.truncate(start + 1);
        let mut grads: Vec<Option<Tensor>> = (0..nodes.len()).map(|_| None).collect();
        grads[start] = Some(seed);
        let mut result = Gradients::default();
        while let Some(node) = nodes.pop() {
            let id = nodes.len();
            let Some(grad) = grads[id].take() else {
                continue;
            };
            let Some(op) = node.op else {
                result.by_node.insert(id, grad);
                continue;
            };
            // What an op does not read is an empty tensor.
            let empty = Tensor::zeros(&[0], crate::DType::F32);
            let inputs: Vec<&Tensor> = node
                .inputs
                .iter()
                .map(|i| i.value.as_ref().unwrap_or(&empty))
                .collect();
            let needs_grad: Vec<bool> = node.inputs.iter().map(|i| i.node.is_some()).collect();
            let ctx = BackwardCtx {
                inputs: &inputs,
                output: node.output.as_ref().unwrap_or(&empty),
                grad: &grad,
                needs_grad: &needs_grad,
            };
            let started = super::profile::start();
            let input_grads = op.backward(&ctx)?;
            super::profile::record(op.name(), started, Pass::Backward);
            if input_grads.len() != inputs.len() {
                return Err(Error::Autodiff(format!(
                    "{}: backward returned {} gradients for {} inputs",
                    op.name(),
                    input_grads.len(),
                    inputs.len()
                )));
            }
            for (input, g) in node.inputs.iter().zip(input_grads) {
                let (Some(id), Some(g)) = (input.node, g) else {
                    continue;
                };
                if g.dtype() != input.dtype {
                    return Err(Error::DTypeMismatch {
                        op: op.name(),
                        lhs: input.dtype,
                        rhs: g.dtype(),
                    });
                }
                if g.shape() != input.shape.as_slice() {
                    return Err(Error::ShapeMismatch {
                        op: op.name(),
                        lhs: input.shape.clone(),
                        rhs: g.shape().to_vec(),
                    });
                }
                grads[id] = Some(match grads[id].take() {
                    None => g,
                    // In place: one buffer for the sum, not a third one beside the two terms.
                    Some(mut acc) => {
                        crate::autodiff::ops::add_assign_tensors(&mut acc, &g)?;
                        acc
                    }
                });
            }
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::{self, Activation};
    use crate::memory::{set_thread_tracker, Category, MemoryTracker};
    use crate::DType;

    const COLS: usize = 8;

    /// Deterministic values in [-0.4, 0.6).
    fn values(n: usize, seed: usize) -> Vec<f64> {
        (0..n)
            .map(|i| ((i * 37 + seed) % 23) as f64 / 23.0 - 0.4)
            .collect()
    }

    /// `relu(x w1 + x w2 + b)` for `x: [rows, COLS]` given as values; x needs a gradient.
    /// Returns x and the output.
    fn forward(tape: &mut Tape, xs: &[f64]) -> (Var, Var) {
        let t = |v: &[f64], shape: &[usize]| Tensor::from_f64(v, shape, DType::F64).unwrap();
        let x = tape.leaf(t(xs, &[xs.len() / COLS, COLS]), true);
        let w1 = tape.leaf(t(&values(COLS * COLS, 2), &[COLS, COLS]), true);
        let w2 = tape.leaf(t(&values(COLS * COLS, 3), &[COLS, COLS]), true);
        let b = tape.leaf(t(&values(COLS, 4), &[COLS]), true);
        let xw = ops::matmul(tape, &x, &w1).unwrap();
        let sum = ops::add_matmul(tape, &xw, &x, &w2).unwrap();
        let y = ops::bias_activation(tape, &sum, &b, Activation::Relu).unwrap();
        (x, y)
    }

    #[test]
    fn values_no_backward_reads_are_freed_after_the_forward_pass() {
        std::thread::spawn(|| {
            let tracker = MemoryTracker::new();
            set_thread_tracker(tracker.clone());
            let mut tape = Tape::new();
            let (x, y) = forward(&mut tape, &values(1000 * COLS, 1));
            // x w1 and the sum before the activation are read by no backward, and no
            // variable holds them: x, y and the small weights are all that is left.
            let live = tracker.report().current_of(Category::Activations);
            let big = x.value().bytes() + y.value().bytes();
            assert!(
                live >= big && live < big + 4096,
                "{live} bytes live, {big} expected"
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_gradient_summed_in_place_matches_finite_differences() {
        // x reaches the output along two paths (x w1 and x w2), so its gradient is a sum.
        let xs = values(5 * COLS, 1);
        let mut tape = Tape::new();
        let (x, y) = forward(&mut tape, &xs);
        let seed = Tensor::full(y.value().shape(), DType::F64, 1.0).unwrap();
        let gx = tape
            .backward_with(&y, seed)
            .unwrap()
            .get(&x)
            .unwrap()
            .to_vec_f64();
        let total = |i: usize, delta: f64| {
            let mut moved = xs.clone();
            moved[i] += delta;
            let (_, y) = forward(&mut Tape::no_grad(), &moved);
            y.value().to_vec_f64().iter().sum::<f64>()
        };
        for (i, &g) in gx.iter().enumerate() {
            let h = 1e-6;
            let numeric = (total(i, h) - total(i, -h)) / (2.0 * h);
            assert!((g - numeric).abs() < 1e-6, "x[{i}]: {g} vs {numeric}");
        }
    }
}
