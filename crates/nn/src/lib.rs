//! Graph neural networks: message-passing kernels, layers, models, optimizers and the training
//! loop.
//!
//! # Overview
//!
//! - [`GraphView`]: a graph prepared for message passing (with its transpose and work split
//!   by edge count).
//! - [`kernels`]: aggregation (sum, mean, GCN-normalised, edge-weighted) and the fused GAT and
//!   GATv2 attentions, each a differentiable op with its backward beside its forward.
//! - [`Model`]: GCN, GraphSAGE, GAT, GATv2, GIN, SGC or APPNP, from a [`ModelConfig`]: parameters and layer kinds,
//!   run over a [`GraphInput`] given with each forward pass (the whole graph or a worker's
//!   part as a [`NodeGraph`], or sampled blocks as [`LayerGraph`]s).
//! - [`hetero`]: R-GCN and R-SAGE over node and edge types, trained full batch or sampled.
//! - [`batches`]: the one batch stream (a producer ahead of the consumer into a bounded queue)
//!   that every batched workload and loader uses.
//! - [`Optimizer`]: SGD, Adam, AdamW.
//! - [`train::fit`]: the one training loop (optimizer, evaluation, model selection, snapshots)
//!   over a [`train::Workload`]: [`train::FullBatch`], [`minibatch::MiniBatch`], or SAR's
//!   workload in the `graphloom-sar` crate.
//! - [`model_file::ModelFile`]: the versioned model file.
//!
//! ```
//! use graphloom_convert::synthetic::{generate, SyntheticConfig};
//! use graphloom_nn::{train, ModelConfig};
//!
//! let ds = generate(&SyntheticConfig { nodes: 200, classes: 4, feat_dim: 16, ..Default::default() })?;
//! let cfg = ModelConfig { in_dim: 16, out_dim: 4, ..Default::default() };
//! let tc = train::TrainConfig { epochs: 30, ..Default::default() };
//! let report = train::train_full_batch(&ds, cfg, &tc, |_| {})?;
//! assert!(report.best_val_score > 0.5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod batches;
mod error;
mod graph;
pub mod hetero;
pub mod inference;
mod inputs;
pub mod kernels;
pub mod layers;
pub mod link;
pub mod minibatch;
mod model;
pub mod model_file;
mod optim;
pub mod task;
mod tensor_file;
#[cfg(test)]
mod testutil;
pub mod train;
pub mod values;

pub use error::{Error, Result};
pub use graph::{balanced_chunks, split_rows, GraphView};
pub use model::{
    ArchDefaults, Architecture, Decoder, GraphInput, Head, LayerGraph, Mode, Model, ModelConfig,
    NodeGraph, Param, APPNP_HOPS, APPNP_TELEPORT, BATCH_NORM_EPS, MAX_HOPS, MAX_LAYERS,
    MAX_PARAMETERS,
};
pub use optim::{Optimizer, OptimizerKind};
