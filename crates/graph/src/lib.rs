//! Graphs and datasets: the CSR structure, the dataset directory format, converters from the
//! formats datasets are published in, and a synthetic generator.
//!
//! # Overview
//!
//! - [`Csr`]: a graph stored by destination (each node's in-neighbours), the layout every
//!   aggregation kernel reads.
//! - [`Dataset`] and [`Meta`]: a dataset directory (`meta.json` plus `.npy` arrays) in memory,
//!   loaded with every consistency check and saved atomically.
//! - [`MappedDataset`]: the same directory mapped in place, for graphs larger than memory;
//!   [`GraphData`] is what sampled training reads of either.
//! - [`convert`]: Planetoid raw files, and a synthetic graph with learnable labels.
//! - [`subgraph`]: Cluster-GCN's clusters and GraphSAINT's samplers, and the subgraphs
//!   their batches induce.
//! - [`npy`]: numpy's `.npy` format.
//!
//! ```
//! use graphloom_graph::convert::synthetic::{generate, SyntheticConfig};
//!
//! let ds = generate(&SyntheticConfig { nodes: 100, avg_degree: 4, ..Default::default() })?;
//! assert_eq!(ds.graph.num_edges(), 400);
//! assert!(ds.graph.check().is_ok());
//! # Ok::<(), graphloom_graph::Error>(())
//! ```
#![deny(missing_docs)]

pub mod convert;
mod csr;
mod dataset;
pub mod disk;
mod error;
mod feature_table;
pub mod link_split;
mod mapped;
mod output_dir;
pub mod partition;
pub mod parts;
pub mod sample;
mod store_graph;
pub mod subgraph;
mod summary;
mod swap;

pub use csr::{Csr, NodeId};
pub use dataset::{random_split, Dataset, Meta, UNLABELLED};
pub use error::{Error, Result};
pub use feature_table::FeaturesLocation;
pub use graphloom_io::{format_bytes, npy, write_atomic, MappedNpy};
pub use link_split::{LinkSet, LinkSplit};
pub use mapped::{GraphData, MappedDataset};
pub use output_dir::{check_output_dir, check_output_file, OutputKind};
pub use store_graph::StoreGraph;
pub use summary::{split_sizes, DatasetSummary, DegreeStats};
