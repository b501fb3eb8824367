//! Converters from the formats datasets are published in to the dataset directory.

mod pickle;
pub mod planetoid;
pub mod synthetic;
