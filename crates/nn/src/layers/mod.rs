//! GNN layers: parameters, initialisation and forward passes of GCNConv, SAGEConv, GATConv,
//! GATv2Conv, GINConv, SGC's hops and APPNP's propagation.

mod conv;
pub mod init;

pub use conv::{Aggregation, ConvKind, ConvLayer, LayerInput, LayerOperators, GAT_NEGATIVE_SLOPE};
