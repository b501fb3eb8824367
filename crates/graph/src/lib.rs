//! Graphs and datasets: the CSR structure, the dataset directory format, and the graph
//! algorithms of training (neighbour sampling, subgraph batches, METIS partitions).
//!
//! Converters from the formats datasets are published in, and the synthetic generator, are the
//! crate `graphloom-convert`, above this one.
//!
//! # Overview
//!
//! - [`Csr`]: a graph stored by destination (each node's in-neighbours), the layout every
//!   aggregation kernel reads.
//! - [`Dataset`] and [`Meta`]: a dataset directory (`meta.json` plus `.npy` arrays) in memory,
//!   loaded with every consistency check and saved atomically.
//! - [`MappedDataset`]: the same directory mapped in place, for graphs larger than memory;
//!   [`GraphData`] is what sampled training reads of either.
//! - [`format`]: the dataset directory format in one place: `meta.json`, the arrays and their
//!   checks, partitioned directories, the link split, and where a writer may write.
//! - [`subgraph`]: Cluster-GCN's clusters and GraphSAINT's samplers, and the subgraphs
//!   their batches induce.
//! - [`npy`]: numpy's `.npy` format.
//!
//! ```
//! use graphloom_graph::Csr;
//!
//! let g = Csr::from_edges(3, &[0, 1, 2], &[1, 2, 0]);
//! assert_eq!(g.num_edges(), 3);
//! assert!(g.check().is_ok());
//! ```
#![deny(missing_docs)]

mod csr;
mod error;
mod feature_table;
pub mod format;
pub mod partition;
pub mod sample;
mod store_graph;
pub mod subgraph;
#[cfg(test)]
mod testing;

pub use format::{disk, link_split, parts};

pub use csr::{Csr, NodeId};
pub use error::{Error, Result};
pub use feature_table::FeaturesLocation;
pub use format::dataset::{random_split, Dataset, UNLABELLED};
pub use format::hetero::{FeatureFile, HeteroDataset, HeteroGraph, HeteroMeta, TypedRelation};
pub use format::link_split::{LinkSet, LinkSplit};
pub use format::mapped::{GraphData, MappedDataset};
pub use format::meta::Meta;
pub use format::output_dir::{check_output_dir, check_output_file, OutputKind};
pub use format::summary::{split_sizes, DatasetSummary, DegreeStats};
pub use format::targets::{NodeTargets, TargetKind};
pub use graphloom_io::{format_bytes, npy, write_atomic, MappedNpy};
pub use store_graph::StoreGraph;
