//! Store memory handed to other frameworks as DLPack tensors, without a copy: a [`DlpackView`]
//! is a pointer, a shape, a dtype and the handle that keeps the memory alive; each export makes
//! a fresh DLPack header whose context holds that handle until the consumer releases it.

use std::sync::Arc;

use dlpark::ffi::{DLDataType, DLDevice};
use dlpark::metadata::Dynamic;
use dlpark::{DlpackFlags, Managed, ManagedTensorBase};
use graphloom_comm::Handle;
use graphloom_tensor::{DType, Tensor};

use crate::layout::Layout;
use crate::{Result, StoreError, StoreTensor};

fn dl_dtype(dtype: DType) -> DLDataType {
    match dtype {
        DType::F32 => DLDataType::F32,
        DType::F64 => DLDataType::F64,
        DType::BF16 => DLDataType::BF16,
        DType::I32 => DLDataType::I32,
        DType::I64 => DLDataType::I64,
    }
}

/// Memory that can be exported as a CPU DLPack tensor any number of times: the store's own
/// rows (a rank's chunk, the whole continuous table) or a tensor the store made (a gather).
#[derive(Clone)]
pub struct DlpackView {
    ptr: *mut u8,
    shape: Vec<usize>,
    dtype: DType,
    writable: bool,
    keep: Handle,
}

impl std::fmt::Debug for DlpackView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DlpackView({}, {:?}, {})",
            self.dtype,
            self.shape,
            if self.writable {
                "writable"
            } else {
                "read-only"
            }
        )
    }
}

// SAFETY: the view is a pointer into memory owned by `keep` (Send + Sync); writes through it are
// the consumer's, under the same rules as the store's own local views.
unsafe impl Send for DlpackView {}
// SAFETY: as above.
unsafe impl Sync for DlpackView {}

impl DlpackView {
    /// A view of a tensor the caller hands over: nothing else writes it, so it is writable.
    pub fn of_tensor(tensor: Tensor) -> DlpackView {
        DlpackView {
            ptr: tensor.as_bytes().as_ptr().cast_mut(),
            shape: tensor.shape().to_vec(),
            dtype: tensor.dtype(),
            writable: true,
            keep: Arc::new(tensor),
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Whether a consumer may write through the view.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The address of the first element, to check that two views share memory.
    pub fn address(&self) -> usize {
        self.ptr as usize
    }

    /// A fresh DLPack tensor of either ABI (`dlpark::versioned::Dlpack` or
    /// `dlpark::legacy::Dlpack`) over the view's memory, flagged read-only when it may not be
    /// written (the legacy ABI has no flags: export read-only memory as versioned).
    pub fn export<M: ManagedTensorBase>(&self) -> Result<Managed<M>> {
        let shape: Vec<i64> = self.shape.iter().map(|&d| d as i64).collect();
        let mut tensor = Dynamic::compact(shape)
            .initialize_as::<M>(Box::new(self.keep.clone()))
            .map_err(|e| StoreError::Invalid(format!("DLPack: {e}")))?;
        tensor
            .set_data(self.ptr.cast())
            .set_device(DLDevice::CPU)
            .set_dtype(dl_dtype(self.dtype));
        if !self.writable {
            tensor
                .set_flags(DlpackFlags::READ_ONLY)
                .map_err(|e| StoreError::Invalid(format!("DLPack: {e}")))?;
        }
        // SAFETY: the data pointer is memory kept alive by the context (`keep`); shape and
        // strides come from the safe compact builder; the read-only flag is set whenever the
        // memory may not be written.
        Ok(unsafe { tensor.finish() })
    }
}

impl StoreTensor {
    /// This rank's rows, `[local rows]` or `[local rows, columns]`, sharing the store's memory
    /// (read-only for a read-only file map).
    pub fn local_view(&self) -> DlpackView {
        let chunk = self.own_chunk();
        let mut shape = self.shape().to_vec();
        shape[0] = self.local_rows().len();
        DlpackView {
            ptr: chunk.ptr(),
            shape,
            dtype: self.dtype(),
            writable: self.is_writable(),
            keep: chunk.owner(),
        }
    }

    /// Rank `rank`'s rows as a view, where this process maps them: its own always, every
    /// rank's in the Continuous and Chunked layouts (shared memory or one process); a
    /// Distributed table's other rows live in their owners' memory only.
    pub fn chunk_view(&self, rank: usize) -> Result<DlpackView> {
        let chunk = self.chunk(rank).ok_or_else(|| {
            StoreError::Invalid(format!(
                "rank {rank}'s rows are not mapped by this process ({} layout, {} ranks): \
                 gather them",
                self.spec().layout,
                self.partition().ranks()
            ))
        })?;
        let mut shape = self.shape().to_vec();
        shape[0] = self.partition().range(rank).len();
        Ok(DlpackView {
            ptr: chunk.ptr(),
            shape,
            dtype: self.dtype(),
            writable: self.is_writable(),
            keep: chunk.owner(),
        })
    }

    /// The whole table as one view, for the Continuous layout (every rank maps every row).
    pub fn global_view(&self) -> Result<DlpackView> {
        let whole = match (self.spec().layout, &self.whole) {
            (Layout::Continuous, Some(whole)) => whole,
            (layout, _) => {
                return Err(StoreError::Invalid(format!(
                    "only the continuous layout maps the whole table as one range; this \
                     table is {layout}: use the local tensor or gather"
                )))
            }
        };
        Ok(DlpackView {
            ptr: whole.ptr(),
            shape: self.shape().to_vec(),
            dtype: self.dtype(),
            writable: self.is_writable(),
            keep: whole.owner(),
        })
    }

    /// This rank's rows as a CPU DLPack tensor ([`StoreTensor::local_view`] exported).
    pub fn local_dlpack(&self) -> Result<dlpark::versioned::Dlpack> {
        self.local_view().export()
    }
}
