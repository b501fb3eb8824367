//! Converters from the formats datasets are published in to the dataset directory.

pub mod planetoid;
mod pickle;
pub mod synthetic;
