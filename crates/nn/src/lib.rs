//! Graph neural networks: message-passing kernels, layers, models, optimizers and full-batch
//! training.
//!
//! # Overview
//!
//! - [`GraphView`]: a graph prepared for message passing (with its transpose and work split
//!   by edge count).
//! - [`kernels`]: aggregation (sum, mean, GCN-normalised, max) and the fused GAT attention,
//!   each a differentiable op with its backward beside its forward.
//! - [`Model`]: GCN, GraphSAGE or GAT, from a [`ModelConfig`].
//! - [`Optimizer`]: SGD, Adam, AdamW.
//! - [`train::train_full_batch`]: full-batch training with model selection on validation.
//!
//! ```
//! use graphloom_graph::convert::synthetic::{generate, SyntheticConfig};
//! use graphloom_nn::{train, Architecture, ModelConfig, OptimizerKind};
//! use graphloom_tensor::DType;
//!
//! let ds = generate(&SyntheticConfig { nodes: 200, classes: 4, feat_dim: 16, ..Default::default() })?;
//! let cfg = ModelConfig {
//!     arch: Architecture::Gcn, in_dim: 16, hidden: 16, out_dim: 4, layers: 2, heads: 1,
//!     out_heads: 1, dropout: 0.5, input_dropout: 0.5, attention_dropout: 0.0, dtype: DType::F32, checkpoint: false,
//!     batch_norm: false,
//! };
//! let tc = train::TrainConfig {
//!     epochs: 30, lr: 0.01, weight_decay: 5e-4, optimizer: OptimizerKind::Adam, patience: None, seed: 0,
//!     eval_every: 1, snapshots: None,
//! };
//! let report = train::train_full_batch(&ds, cfg, &tc, |_| {})?;
//! assert!(report.best_val_acc > 0.5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod error;
mod graph;
pub mod kernels;
pub mod layers;
pub mod minibatch;
mod model;
pub mod model_file;
mod optim;
mod snapshot;
mod tensor_file;
#[cfg(test)]
mod testutil;
pub mod train;

pub use error::{Error, Result};
pub use graph::{balanced_chunks, GraphView};
pub use model::{Architecture, LayerGraph, Mode, Model, ModelConfig, Param, BATCH_NORM_EPS};
pub use optim::{Optimizer, OptimizerKind};
