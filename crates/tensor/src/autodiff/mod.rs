//! Reverse-mode automatic differentiation on a tape (a Wengert list).
//!
//! Every operation implements [`Op`]: a `forward` that computes the output from the inputs and
//! a `backward`, written beside it, that maps the output's gradient to the inputs' gradients.
//! [`Tape::apply`] runs an op and records it when an input needs a gradient; [`Tape::backward`]
//! walks the records in reverse, freeing each as soon as it is done. [`Tape::checkpoint`] keeps
//! only a block's inputs and recomputes its internals in the backward pass.

mod checkpoint;
pub mod gradcheck;
pub mod ops;
pub mod profile;
mod tape;

pub use tape::{BackwardCtx, Gradients, Op, Tape, Var};
