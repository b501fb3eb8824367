//! Heterogeneous graphs: node and edge types. [`HeteroModel`] (R-GCN, R-SAGE) runs over one
//! [`HeteroLayerGraph`] per layer (the whole graph, or a sampled block of every relation), and
//! [`HeteroTraining`] trains it full batch or on sampled batches of the target type's nodes,
//! through the one training loop ([`crate::train::fit`]).

mod graph;
mod inference;
mod model;
mod model_file;
mod workload;

pub use graph::HeteroLayerGraph;
pub use inference::{layer_embeddings, log_probabilities, CHUNK_NODES};
pub use model::{HeteroModel, HeteroModelConfig, RelationSpec, RelationalKind};
pub use model_file::{is_hetero_model, HeteroModelFile};
pub use workload::{relation_specs, sample_blocks, HeteroBatching, HeteroTraining, TypeInput};

#[cfg(test)]
mod tests;
