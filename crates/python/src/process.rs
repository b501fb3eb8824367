//! The process boundary of the handles: `fork` and signals.
//!
//! A handle (the job and its communicators, a table, a loader) owns threads that `fork` does
//! not copy: a loader's producer, the peers of a communicator, and the thread pool that
//! gathers, samples and checks files in parallel. In a forked child they would be waited for
//! forever, and locks held at the moment of the fork stay held. So each handle records the
//! process that made it ([`Owner`]) and refuses work in any other, before it takes a lock;
//! releasing one there does nothing (what it holds is the parent's). Entry points that start
//! new work (a job, opening a dataset, a model file) refuse in a child of a process that ran
//! the pool ([`check_pool`]). The parent goes on as before.
//!
//! Loops that run with the interpreter lock released (a loader's `drain`) call
//! [`check_signals`] between steps, so Ctrl-C stops them.

use std::sync::OnceLock;

use pyo3::prelude::*;

use crate::errors::failure;

/// The process that made a handle.
#[derive(Clone, Copy)]
pub(crate) struct Owner(u32);

impl Owner {
    /// This process.
    pub(crate) fn here() -> Owner {
        Owner(std::process::id())
    }

    /// Whether this process made the handle (false in a forked child).
    pub(crate) fn is_here(self) -> bool {
        self.0 == std::process::id()
    }

    /// Fails, naming `what` and saying what to do instead, in a process forked from the one
    /// that made the handle.
    pub(crate) fn check(self, what: &str) -> PyResult<()> {
        if self.is_here() {
            return Ok(());
        }
        Err(failure(format!(
            "{what} belongs to process {}, and this process ({}) is a fork of it: GraphLoom's \
             loaders, tables, communicators and thread pool cannot be used across fork (their \
             threads stay in the parent). Iterate the loader in the process that made it (with torch's \
             DataLoader, num_workers=0: the loader already prepares batches ahead on threads of \
             its own), or make GraphLoom's objects in worker processes started with the \
             'spawn' method",
            self.0,
            std::process::id()
        )))
    }
}

/// The process whose thread pool GraphLoom's parallel code runs on: the first to start work.
static POOL: OnceLock<Owner> = OnceLock::new();

/// Before work that may run on the thread pool: fails in a process forked from one that
/// started GraphLoom's work (the pool's threads are not in this process, and a task sent to
/// them would wait forever), else records this process as the pool's.
pub(crate) fn check_pool() -> PyResult<()> {
    POOL.get_or_init(Owner::here)
        .check("GraphLoom's thread pool")
}

/// Runs the interpreter's signal handlers from code that runs with the interpreter lock
/// released: Ctrl-C raises `KeyboardInterrupt` here.
pub(crate) fn check_signals() -> PyResult<()> {
    Python::attach(|py| py.check_signals())
}
