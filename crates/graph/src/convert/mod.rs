//! Converters from the formats datasets are published in to the dataset directory, and the
//! link-prediction split of a dataset directory.

pub mod arrays;
mod assemble;
pub mod edgelist;
mod features;
pub(crate) mod layouts;
pub mod link_split;
pub mod npz;
pub mod ogb;
mod pickle;
pub mod planetoid;
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
