//! The store: one logical tensor (node features, embeddings, a graph's CSR arrays) spread over
//! the ranks of a job and over memory tiers, as WholeGraph's WholeMemory does on GPUs.
//!
//! - [`Layout`] (Continuous, Chunked, Distributed) says how rows are split and who addresses
//!   them; [`Location`] (Host, SharedHost, Mmap) which memory holds them; [`check_support`]
//!   which combinations a job can have.
//! - [`StoreTensor`]: gather, scatter, zero-copy local chunk (also as DLPack), load from file
//!   lists, save one file per rank.
//! - [`Embedding`]: a trainable or frozen table with a cache of remote rows and sparse
//!   optimizers.
//! - [`RowSource`]: what batches gather node rows from (a table, or one behind [`HotRows`]).
#![deny(missing_docs)]

mod copy;
mod dlpack;
mod embedding;

mod error;
mod files;
mod hot_rows;
mod layout;
mod memory;
mod routing;
mod row_source;
mod sieve;
mod tensor;

pub use dlpack::DlpackView;
pub use embedding::{
    cache::{Admission, CacheConfig, CacheStats},
    optimizer::SparseOptimizer,
    Embedding,
};
pub use error::{Result, StoreError};
pub use files::{npy_dtype, part_path, part_paths, RowFiles};
pub use graphloom_io::direct::ReadEngine;
pub use hot_rows::{HotRows, MissReads};
pub use layout::{check_support, Layout, Location, RowPartition, Topology};
pub use row_source::RowSource;
pub use sieve::{Access, Sieve};
pub use tensor::{GatherStats, StoreSpec, StoreTensor};
