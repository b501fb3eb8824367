//! The `graphloom` command inside the extension: the package's console command
//! (`graphloom._cli`) runs it, so that a wheel installed with pip has the command line without
//! a second build.

use std::ffi::OsString;

use pyo3::prelude::*;

/// Runs the `graphloom` command line `args` (the program's name first) in this process and
/// returns its exit status, without the interpreter's lock meanwhile. It starts the kernels'
/// thread pool and sets SIGPIPE to its default, as the binary does: a process runs it once,
/// as its only work.
#[pyfunction]
pub(crate) fn run_cli(py: Python<'_>, args: Vec<OsString>) -> i32 {
    py.detach(|| graphloom_cli::run(args))
}
