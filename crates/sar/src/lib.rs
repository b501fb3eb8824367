//! Full-batch GNN training over N workers with sequential aggregation and rematerialization
//! (SAR, Mostafa 2021): each worker holds one part of the graph, and a layer aggregates the
//! other parts' rows one part at a time, in ring rounds, freeing each halo after use.
//!
//! This crate has the linear aggregations (sum, mean and GCN's symmetric normalisation) as a
//! tape op,
//! [`RingAggregation`]: its forward pass receives one halo per round; its backward pass sends
//! each part the gradient of the rows it sent, computed from the stored output gradient,
//! without fetching any halo again. Plugged into a GraphSAGE or GCN model
//! ([`graphloom_nn::Model::with_aggregation`]), N workers compute the loss and gradients of one
//! worker on the whole graph, up to the order of additions.
#![deny(missing_docs)]

mod ring;
mod train;

pub use ring::{Normalisation, PartGraph, RingAggregation};
pub use train::train_sar;
