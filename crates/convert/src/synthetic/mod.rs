//! A synthetic node-classification graph of any size whose labels are learnable: a stochastic
//! block model or R-MAT, with class-dependent Gaussian features; or a heterogeneous graph of
//! ogbn-mag's shape ([`write_mag`]).
//!
//! Every edge, feature and split draw is a pure function of the seed and an index, so the
//! same dataset comes out of [`generate`] (in memory) and [`write()`] (streamed to a dataset
//! directory in bounded memory, for graphs larger than memory), whatever the thread count.

mod draws;
mod edge_features;
mod hetero;
mod targets;
mod write;

pub use crate::stream_csr::Phase;
pub use draws::{generate, EdgeModel, SplitSizes, SyntheticConfig, MAX_ENTRIES};
pub use edge_features::{plant_edge_features, PlantedEdgeFeatures};
pub use hetero::{write_mag, MagConfig, MAX_SCALE};
pub use targets::{plant, PlantedTargets};
pub use write::{write, write_with_targets};
