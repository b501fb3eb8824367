//! GNN layers: parameters, initialisation and forward passes of GCNConv, SAGEConv and GATConv.

mod conv;
pub mod init;

pub use conv::{ConvKind, ConvLayer, LayerInput, LayerOperators, GAT_NEGATIVE_SLOPE};
