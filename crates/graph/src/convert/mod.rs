//! Converters from the formats datasets are published in to the dataset directory, and the
//! link-prediction split of a dataset directory.

mod assemble;
pub mod edgelist;
mod features;
pub mod link_split;
pub mod npz;
pub mod ogb;
mod pickle;
pub mod planetoid;
mod stream_csr;
pub mod synthetic;

pub use stream_csr::{Phase, Progress};
