//! A rank's chunk of a store tensor handed to other frameworks as a DLPack tensor, without a
//! copy: the DLPack context holds the memory alive until the consumer releases it.

use dlpark::ffi::{DLDataType, DLDevice};
use dlpark::metadata::Dynamic;
use dlpark::DlpackFlags;
use graphloom_tensor::DType;

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

impl StoreTensor {
    /// This rank's rows as a CPU DLPack tensor of shape `[local rows]` or `[local rows,
    /// columns]`, sharing the store's memory (flagged read-only for a read-only file map).
    pub fn local_dlpack(&self) -> Result<dlpark::versioned::Dlpack> {
        let chunk = self.own_chunk();
        let mut shape: Vec<i64> = self.shape().iter().map(|&d| d as i64).collect();
        shape[0] = self.local_rows().len() as i64;
        let keep = Box::new(chunk.owner());
        let mut tensor = Dynamic::compact(shape)
            .initialize(keep)
            .map_err(|e| StoreError::Invalid(format!("DLPack: {e}")))?;
        tensor
            .set_data(chunk.ptr().cast())
            .set_device(DLDevice::CPU)
            .set_dtype(dl_dtype(self.dtype()));
        if !self.is_writable() {
            tensor
                .set_flags(DlpackFlags::READ_ONLY)
                .map_err(|e| StoreError::Invalid(format!("DLPack: {e}")))?;
        }
        // SAFETY: the data pointer is the chunk's memory, kept alive by the context (the
        // chunk's owner); shape and strides come from the safe compact builder; the read-only
        // flag is set whenever the memory may not be written.
        Ok(unsafe { tensor.finish() })
    }
}
