//! File formats GraphLoom reads and writes, shared by the store and the dataset directory:
//! numpy `.npy` arrays, and writes that never leave half a file behind.
#![deny(missing_docs)]

mod atomic;
mod error;
pub mod npy;
mod npy_stream;
pub mod pages;

pub use atomic::write_atomic;
pub use error::{Error, Result};
pub use npy_stream::{MappedNpy, NpyWriter};
