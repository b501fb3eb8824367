//! Tensors, element types, CPU kernels, reverse-mode autodiff and memory accounting: the base
//! every other GraphLoom crate computes with.
//!
//! # Overview
//!
//! - [`Tensor`]: a contiguous row-major array of f32, f64, bf16, i32 or i64, shared by `Arc`.
//!   bf16 is storage only: kernels widen it to f32, compute, and round once.
//! - [`Tape`] and [`Var`]: a Wengert list of [`Op`]s, each with its backward beside its
//!   forward; [`Tape::checkpoint`] recomputes a block in the backward pass instead of keeping it.
//! - [`kernels`]: matmul (the one call into `gemm`), parallel maps and reductions whose result
//!   does not depend on the thread count.
//! - [`memory`]: current and peak bytes per [`Category`], per worker, and the process RSS.
//! - [`prefetch`]: cache hints for loops that gather scattered rows.
//! - [`rng::RngKey`]: counter-based random draws keyed by (seed, step, purpose, id, column).
//!
//! ```
//! use graphloom_tensor::{autodiff::ops, DType, Tape, Tensor};
//!
//! let mut tape = Tape::new();
//! let x = tape.leaf(Tensor::from_f64(&[1.0, -2.0, 3.0, 4.0], &[2, 2], DType::F64)?, false);
//! let w = tape.leaf(Tensor::from_f64(&[0.5, 0.0, 0.0, 0.5], &[2, 2], DType::F64)?, true);
//! let y = ops::matmul(&mut tape, &x, &w)?;
//! let y = ops::relu(&mut tape, &y)?;
//! let grads = tape.backward_with(&y, Tensor::full(&[2, 2], DType::F64, 1.0)?)?;
//! assert_eq!(grads.get(&w).unwrap().to_vec_f64(), vec![4.0, 3.0, 2.0, 4.0]);
//! # Ok::<(), graphloom_tensor::Error>(())
//! ```
#![deny(missing_docs)]

pub mod alloc;
pub mod autodiff;
mod dtype;
mod error;
pub mod kernels;
pub mod memory;
pub mod prefetch;
pub mod rng;
mod tensor;
pub mod threads;

pub use autodiff::{BackwardCtx, Gradients, Op, Tape, Var};
pub use dtype::{DType, Element, Float, Real};
pub use error::{Error, Result};
pub use half::bf16;
pub use memory::{Category, MemoryReport, MemoryTracker, RssPeaks, RssReport};
pub use tensor::{Buffer, Tensor};
