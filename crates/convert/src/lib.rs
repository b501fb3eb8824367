//! Converters from the formats datasets are published in to GraphLoom's dataset directory
//! (Planetoid, OGB, `.npz`, PyG pickles, edge lists, arrays), the synthetic generator, the
//! link-prediction split of a dataset directory, and the streaming CSR writer they share.
//!
//! The directory format itself (what a dataset directory holds, its checks, where a writer may
//! write) lives in [`graphloom_graph::format`]: this crate only writes it, so it depends on
//! `graphloom-graph` and nothing below it depends on this crate.
//!
//! ```
//! use graphloom_convert::synthetic::{generate, SyntheticConfig};
//!
//! let ds = generate(&SyntheticConfig { nodes: 100, avg_degree: 4, ..Default::default() })?;
//! assert_eq!(ds.graph.num_edges(), 400);
//! assert!(ds.graph.check().is_ok());
//! # Ok::<(), graphloom_graph::Error>(())
//! ```
#![deny(missing_docs)]

pub mod arrays;
pub mod arrays_hetero;
mod assemble;
pub mod edgelist;
mod features;
pub mod link_split;
pub mod npz;
pub mod ogb;
mod ogb_edges;
pub mod ogb_hetero;
mod pickle;
pub mod planetoid;
pub mod propagate;
pub mod split;
mod stream_csr;
pub mod synthetic;

pub use stream_csr::{Phase, Progress};

/// The edge buffer of the streaming writers: a quarter of the memory this process may use now,
/// between 64 MiB and 2 GiB (more passes over the edges with less).
pub fn default_buffer_bytes() -> usize {
    use graphloom_tensor::memory::{usable_memory_bytes, MemoryMeasure};
    let available = usable_memory_bytes(MemoryMeasure::Available).map_or(1 << 30, |b| b as usize);
    (available / 4).clamp(64 << 20, 2 << 30)
}
