//! The tape, its variables and the [`Op`] trait.

use std::collections::HashMap;

use crate::memory::{category_scope, Category};
use crate::{Error, Result, Tensor};

/// What a backward pass receives.
pub struct BackwardCtx<'a> {
    /// The forward inputs, in order.
    pub inputs: &'a [&'a Tensor],
    /// The forward output.
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

struct Node {
    op: Option<Box<dyn Op>>,
    inputs: Vec<(Option<usize>, Tensor)>,
    output: Tensor,
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
            output: value.clone(),
        });
        Var {
            node: Some(self.nodes.len() - 1),
            value,
        }
    }

    /// Runs `op` on `inputs` and records it when any input needs a gradient.
    pub fn apply(&mut self, mut op: impl Op + 'static, inputs: &[&Var]) -> Result<Var> {
        let values: Vec<&Tensor> = inputs.iter().map(|v| &v.value).collect();
        let started = super::profile::start();
        let output = op.forward(&values)?;
        super::profile::record(op.name(), started, false);
        if !self.grad_enabled || inputs.iter().all(|v| v.node.is_none()) {
            return Ok(Var::constant(output));
        }
        self.nodes.push(Node {
            op: Some(Box::new(op)),
            inputs: inputs.iter().map(|v| (v.node, v.value.clone())).collect(),
            output: output.clone(),
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
            let inputs: Vec<&Tensor> = node.inputs.iter().map(|(_, t)| t).collect();
            let needs_grad: Vec<bool> = node.inputs.iter().map(|(n, _)| n.is_some()).collect();
            let ctx = BackwardCtx {
                inputs: &inputs,
                output: &node.output,
                grad: &grad,
                needs_grad: &needs_grad,
            };
            let started = super::profile::start();
            let input_grads = op.backward(&ctx)?;
            super::profile::record(op.name(), started, true);
            if input_grads.len() != inputs.len() {
                return Err(Error::Autodiff(format!(
                    "{}: backward returned {} gradients for {} inputs",
                    op.name(),
                    input_grads.len(),
                    inputs.len()
                )));
            }
            for ((input, value), g) in node.inputs.iter().zip(input_grads) {
                let (Some(input), Some(g)) = (input, g) else {
                    continue;
                };
                value.check_same(&g, op.name())?;
                grads[*input] = Some(match grads[*input].take() {
                    None => g,
                    Some(acc) => crate::autodiff::ops::add_tensors(&acc, &g)?,
                });
            }
        }
        Ok(result)
    }
}
