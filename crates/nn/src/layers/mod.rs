//! GNN layers: parameters, initialisation and forward passes of GCNConv, SAGEConv and GATConv.

pub mod init;
mod conv;

pub use conv::{ConvKind, ConvLayer, LayerInput};
