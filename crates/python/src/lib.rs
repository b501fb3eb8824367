//! `graphloom._graphloom`: the compiled half of the `graphloom` Python package.
//!
//! Each Python-facing type is a thin handle on a crate's type: [`job`] (the job and its
//! communicators; [`torch_comm`] carries a torchrun job's messages over torch.distributed),
//! [`table`] (store tables: gather, scatter, views, trainable rows),
//! [`dataset`] (a mapped dataset directory), [`convert`] (one written from arrays),
//! [`hetero_dataset`] (a heterogeneous one, read and written), the loaders ([`loader`], whose
//! batches are [`node_loader`]'s seeds or [`link_loader`]'s pairs with the sampled
//! [`neighbourhood`] of their nodes, made on the [`epochs`] of a producer thread;
//! [`hetero_loader`]'s are seeds of one type over a heterogeneous graph;
//! [`subgraph_loader`]'s batches are Cluster-GCN's and GraphSAINT's subgraphs),
//! [`metrics`] (link prediction's),
//! [`model`] (model files and inference through the plan) and [`view`] (DLPack
//! exports); [`process`] keeps each handle to the process that made it and lets signals
//! through loops run without the interpreter; [`errors`] maps the crates' errors to Python's
//! exceptions; [`graph_ops`] draws WholeGraph's neighbour samples; [`cli`] runs the `graphloom` command line for the package's console command.
//! The pure-Python half (`python/graphloom`) turns torch and numpy arguments into
//! buffers and results into tensors; every call that samples, gathers or communicates here
//! releases the interpreter lock.
#![deny(missing_docs)]

mod buffers;
mod cli;
mod convert;
mod dataset;
mod epochs;
mod errors;
mod graph_ops;
mod hetero_dataset;
mod hetero_loader;
mod job;
mod link_loader;
mod loader;
mod metrics;
mod model;
mod neighbourhood;
mod node_loader;
mod process;
mod subgraph_loader;
mod table;
mod torch_comm;
mod view;

use pyo3::prelude::*;

/// The compiled module.
#[pymodule]
fn _graphloom(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("GraphLoomError", py.get_type::<errors::GraphLoomError>())?;
    m.add("mpi_available", cfg!(feature = "mpi"))?;
    // The loaders' default, defined once beside the trainer's.
    m.add(
        "DEFAULT_QUEUE_DEPTH",
        graphloom_nn::batches::DEFAULT_QUEUE_DEPTH,
    )?;
    // The workspace's version: the command line's `--version` and the package's metadata
    // are the same one.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<job::Comm>()?;
    m.add_function(wrap_pyfunction!(job::init, m)?)?;
    m.add_function(wrap_pyfunction!(job::finalize, m)?)?;
    m.add_function(wrap_pyfunction!(job::is_initialized, m)?)?;
    m.add_class::<table::Table>()?;
    m.add_class::<view::View>()?;
    m.add_class::<dataset::Dataset>()?;
    m.add_function(wrap_pyfunction!(convert::write_arrays, m)?)?;
    m.add_function(wrap_pyfunction!(convert::remove_abandoned, m)?)?;
    m.add_class::<hetero_dataset::HeteroDataset>()?;
    m.add_function(wrap_pyfunction!(hetero_dataset::write_hetero_arrays, m)?)?;
    m.add_function(wrap_pyfunction!(hetero_loader::hetero_neighbor_loader, m)?)?;
    m.add_class::<hetero_loader::HeteroBatch>()?;
    m.add_class::<loader::Loader>()?;
    m.add_function(wrap_pyfunction!(node_loader::neighbor_loader, m)?)?;
    m.add_class::<node_loader::Batch>()?;
    m.add_function(wrap_pyfunction!(link_loader::link_neighbor_loader, m)?)?;
    m.add_class::<link_loader::LinkBatch>()?;
    m.add_class::<neighbourhood::Neighbourhood>()?;
    m.add_function(wrap_pyfunction!(metrics::auc, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::hits_at_k, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::mrr, m)?)?;
    m.add_class::<subgraph_loader::Clusters>()?;
    m.add_class::<subgraph_loader::SubgraphBatch>()?;
    m.add_function(wrap_pyfunction!(subgraph_loader::subgraph_loader, m)?)?;
    m.add_function(wrap_pyfunction!(model::read_model_file, m)?)?;
    m.add_function(wrap_pyfunction!(model::write_model_file, m)?)?;
    m.add_function(wrap_pyfunction!(model::predict, m)?)?;
    m.add_function(wrap_pyfunction!(cli::run_cli, m)?)?;
    m.add_function(wrap_pyfunction!(graph_ops::sample_ranges, m)?)?;
    Ok(())
}
