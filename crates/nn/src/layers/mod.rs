//! GNN layers: parameters, initialisation and forward passes of GCNConv, SAGEConv, GATConv,
//! GATv2Conv, GINConv, GINEConv, SGC's hops, APPNP's propagation and SIGN's block linears
//! (`conv`), and what each kind of layer is and reads of the graph (`kinds`).

mod conv;
pub mod init;
mod kinds;

pub use conv::{ConvLayer, LayerInput, LayerOperators, GAT_NEGATIVE_SLOPE};
pub use kinds::{Aggregation, ConvKind};
