//! [`Inputs`]: where a model's first layer reads its input rows: node features from a table,
//! or a trainable embedding table for graphs without features.

use graphloom_store::{Embedding, RowSource};
use graphloom_tensor::{DType, Tensor};

use crate::Result;

/// Where the first layer's input rows come from.
pub enum Inputs<'a> {
    /// Node features (a store table in any layout and location, e.g. a memory-mapped file,
    /// possibly behind a row cache), gathered ahead by the producer.
    Features(&'a dyn RowSource),
    /// A trainable node-embedding table, for graphs without features: its rows are gathered by
    /// the compute thread at every step, and their gradients go to its sparse optimizer (the
    /// rows' owners apply them) with learning rate `lr`.
    Embedding {
        /// The table: one row per node, as wide as the model's input.
        table: &'a mut Embedding,
        /// The sparse optimizer's learning rate.
        lr: f32,
    },
}

impl<'a> Inputs<'a> {
    pub(crate) fn rows(&self) -> usize {
        match self {
            Inputs::Features(f) => f.rows(),
            Inputs::Embedding { table, .. } => table.table().rows(),
        }
    }

    /// The feature table the producer gathers from (none for an embedding table).
    pub(crate) fn features(&self) -> Option<&'a dyn RowSource> {
        match self {
            Inputs::Features(f) => Some(*f),
            Inputs::Embedding { .. } => None,
        }
    }

    /// A batch's input rows `ids`: those the producer gathered, or the embedding table's
    /// (gathered now, since they change every step), in `dtype`.
    pub(crate) fn batch_rows(
        &mut self,
        gathered: Option<Tensor>,
        ids: &[i64],
        dtype: DType,
    ) -> Result<Tensor> {
        match (gathered, self) {
            (Some(x), _) => Ok(x),
            (None, Inputs::Embedding { table, .. }) => Ok(table.gather(ids)?.cast(dtype)?),
            (None, Inputs::Features(f)) => Ok(f.gather(ids)?.cast(dtype)?),
        }
    }

    /// Every node's input row, in `dtype`. Collective for an embedding table.
    pub(crate) fn all_rows(&mut self, dtype: DType) -> Result<Tensor> {
        let all: Vec<i64> = (0..self.rows() as i64).collect();
        self.batch_rows(None, &all, dtype)
    }
}
