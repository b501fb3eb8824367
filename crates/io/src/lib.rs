//! File formats GraphLoom reads and writes, shared by the store and the dataset directory:
//! numpy `.npy` arrays, writes that never leave half a file behind, and batched reads of
//! scattered ranges past the page cache ([`direct`]); and what keeps runs
//! from harming each other's files: folder locks, disk space claimed before mapping, the
//! removal of what killed runs left, and a one-line error instead of a SIGBUS when a mapped
//! file shrinks under a run ([`FaultName`]).
#![deny(missing_docs)]

mod abandoned;
mod atomic;
mod bytes;
pub mod direct;
mod error;
mod lock;
pub mod npy;
mod npy_stream;
pub mod pages;
mod reserve;
mod sigbus;

pub use abandoned::remove_abandoned;
pub use atomic::{temporary_path, write_atomic};
pub use bytes::format_bytes;
pub use error::{Error, Result};
pub use lock::{lock_dir, DirLock, LOCK_FILE};
pub use npy_stream::{MappedNpy, NpyWriter};
pub use reserve::reserve;
pub use sigbus::{FaultName, FAULT_EXIT_CODE};
