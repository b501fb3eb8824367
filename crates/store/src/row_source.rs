//! [`RowSource`]: what a table of node rows must do for batches to gather from it: a store
//! table in any layout and location, the same table behind a cache of its hot rows
//! ([`HotRows`]), or a stand-in (a table folded onto fewer rows, a table behind a lock).

use graphloom_tensor::Tensor;

use crate::{HotRows, Layout, Result, StoreTensor};

/// A table of node rows that batches gather from.
pub trait RowSource: Sync {
    /// Rows (nodes).
    fn rows(&self) -> usize;
    /// Rows `ids` as a `[ids.len(), columns]` tensor; collective when
    /// [`RowSource::collective`].
    fn gather(&self, ids: &[i64]) -> Result<Tensor>;
    /// Whether every worker of the table takes part in every gather (the store's Distributed
    /// layout over several ranks), so that a worker with no ids must still call it.
    fn collective(&self) -> bool;
}

impl RowSource for StoreTensor {
    fn rows(&self) -> usize {
        StoreTensor::rows(self)
    }
    fn gather(&self, ids: &[i64]) -> Result<Tensor> {
        StoreTensor::gather(self, ids)
    }
    fn collective(&self) -> bool {
        self.spec().layout == Layout::Distributed && self.comm().size() > 1
    }
}

impl RowSource for HotRows {
    fn rows(&self) -> usize {
        self.table().rows()
    }
    fn gather(&self, ids: &[i64]) -> Result<Tensor> {
        HotRows::gather(self, ids)
    }
    fn collective(&self) -> bool {
        false
    }
}
