//! [`Tensor`]: a contiguous, row-major, reference-counted n-dimensional array.

use std::sync::Arc;

use half::bf16;

use crate::memory::{Category, Charge};
use crate::{DType, Element, Error, Float, Real, Result};

/// The typed vector behind a tensor.
#[derive(Debug)]
pub enum Buffer {
    /// f32 elements.
    F32(Vec<f32>),
    /// f64 elements.
    F64(Vec<f64>),
    /// bf16 elements.
    BF16(Vec<bf16>),
    /// i32 elements.
    I32(Vec<i32>),
    /// i64 elements.
    I64(Vec<i64>),
}

impl Buffer {
    fn dtype(&self) -> DType {
        match self {
            Buffer::F32(_) => DType::F32,
            Buffer::F64(_) => DType::F64,
            Buffer::BF16(_) => DType::BF16,
            Buffer::I32(_) => DType::I32,
            Buffer::I64(_) => DType::I64,
        }
    }
    fn len(&self) -> usize {
        match self {
            Buffer::F32(v) => v.len(),
            Buffer::F64(v) => v.len(),
            Buffer::BF16(v) => v.len(),
            Buffer::I32(v) => v.len(),
            Buffer::I64(v) => v.len(),
        }
    }
}

struct Storage {
    buffer: Buffer,
    charge: Charge,
}

impl Drop for Storage {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.buffer, Buffer::F32(Vec::new())) {
            Buffer::F32(v) => crate::alloc::recycle(v),
            Buffer::F64(v) => crate::alloc::recycle(v),
            Buffer::BF16(v) => crate::alloc::recycle(v),
            Buffer::I32(v) => crate::alloc::recycle(v),
            Buffer::I64(v) => crate::alloc::recycle(v),
        }
    }
}

/// A contiguous row-major array with a shape and a dtype.
///
/// Cloning is cheap: the storage is shared through an `Arc`. [`Tensor::rows`] and
/// [`Tensor::reshape`] are views that share it too. The bytes are charged to the memory tracker
/// and category of the thread that created the storage (see [`crate::memory`]).
#[derive(Clone)]
pub struct Tensor {
    storage: Arc<Storage>,
    offset: usize,
    shape: Vec<usize>,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({}, {:?})", self.dtype(), self.shape)
    }
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

impl Tensor {
    /// Wraps a vector; fails when its length is not the product of `shape`.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        if data.len() != numel(shape) {
            return Err(Error::BadLength {
                len: data.len(),
                shape: shape.to_vec(),
            });
        }
        let charge = Charge::new(data.len() * T::DTYPE.size_in_bytes());
        Ok(Tensor {
            storage: Arc::new(Storage {
                buffer: T::into_buffer(data),
                charge,
            }),
            offset: 0,
            shape: shape.to_vec(),
        })
    }

    /// A tensor whose bytes `fill` writes into fresh memory: a large buffer comes from the reuse
    /// cache without a zeroing pass, for outputs that are overwritten whole anyway (a gather).
    ///
    /// # Safety
    /// `fill` must initialise every byte of the slice it is given before returning `Ok`.
    pub unsafe fn from_fill<E>(
        shape: &[usize],
        dtype: DType,
        fill: impl FnOnce(&mut [std::mem::MaybeUninit<u8>]) -> std::result::Result<(), E>,
    ) -> std::result::Result<Tensor, E>
    where
        E: From<Error>,
    {
        /// Fills `n` elements of `T`.
        ///
        /// # Safety
        /// As for `from_fill`.
        unsafe fn filled<T: Element, E: From<Error>>(
            shape: &[usize],
            fill: impl FnOnce(&mut [std::mem::MaybeUninit<u8>]) -> std::result::Result<(), E>,
        ) -> std::result::Result<Tensor, E> {
            let n = numel(shape);
            let mut v = crate::alloc::with_capacity::<T>(n);
            let spare = &mut v.spare_capacity_mut()[..n];
            // SAFETY: MaybeUninit<T> is n * size_of::<T>() possibly-uninitialised bytes.
            let bytes = unsafe {
                std::slice::from_raw_parts_mut(
                    spare.as_mut_ptr().cast::<std::mem::MaybeUninit<u8>>(),
                    std::mem::size_of_val(spare),
                )
            };
            fill(bytes)?;
            // SAFETY: the caller's `fill` initialised every byte, and any bytes are a valid
            // element of these plain types.
            unsafe { v.set_len(n) };
            Ok(Tensor::from_vec(v, shape)?)
        }
        // SAFETY: forwarded to the caller.
        unsafe {
            match dtype {
                DType::F32 => filled::<f32, E>(shape, fill),
                DType::F64 => filled::<f64, E>(shape, fill),
                DType::BF16 => filled::<bf16, E>(shape, fill),
                DType::I32 => filled::<i32, E>(shape, fill),
                DType::I64 => filled::<i64, E>(shape, fill),
            }
        }
    }

    /// A tensor of zeros.
    pub fn zeros(shape: &[usize], dtype: DType) -> Tensor {
        let n = numel(shape);
        let t = match dtype {
            DType::F32 => Tensor::from_vec(crate::alloc::zeros::<f32>(n), shape),
            DType::F64 => Tensor::from_vec(crate::alloc::zeros::<f64>(n), shape),
            DType::BF16 => Tensor::from_vec(crate::alloc::zeros::<bf16>(n), shape),
            DType::I32 => Tensor::from_vec(vec![0i32; n], shape),
            DType::I64 => Tensor::from_vec(vec![0i64; n], shape),
        };
        t.expect("length equals the shape's product by construction")
    }

    /// A float tensor of the given dtype with every element `value`.
    pub fn full(shape: &[usize], dtype: DType, value: f64) -> Result<Tensor> {
        let n = numel(shape);
        crate::with_float!(dtype, "full", T => {
            Tensor::from_vec(vec![T::from_acc(<<T as Float>::Acc as Real>::from_f64(value)); n], shape)
        })
    }

    /// A float tensor of the given dtype from f64 values (rounded for f32 and bf16).
    pub fn from_f64(values: &[f64], shape: &[usize], dtype: DType) -> Result<Tensor> {
        crate::with_float!(dtype, "from_f64", T => {
            let v: Vec<T> = values.iter().map(|&x| T::from_acc(<<T as Float>::Acc as Real>::from_f64(x))).collect();
            Tensor::from_vec(v, shape)
        })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.storage.buffer.dtype()
    }

    /// The dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// Bytes of this view's elements.
    pub fn bytes(&self) -> usize {
        self.numel() * self.dtype().size_in_bytes()
    }

    /// The category the storage was charged to.
    pub fn category(&self) -> Category {
        self.storage.charge.category()
    }

    /// The shape as `(rows, cols)`: a 2-D tensor as it is, a 1-D tensor as one column, and a
    /// tensor of more dimensions as its first dimension by the product of the rest.
    pub fn dims2(&self) -> (usize, usize) {
        match self.shape.len() {
            0 => (1, 1),
            1 => (self.shape[0], 1),
            _ => (self.shape[0], numel(&self.shape[1..])),
        }
    }

    /// Borrows the elements; fails when `T` is not the tensor's dtype.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        let all = T::from_buffer(&self.storage.buffer).ok_or(Error::DTypeMismatch {
            op: "as_slice",
            lhs: self.dtype(),
            rhs: T::DTYPE,
        })?;
        Ok(&all[self.offset..self.offset + self.numel()])
    }

    /// Mutably borrows the elements, copying the storage first when it is shared with another
    /// tensor (copy on write), so no other tensor sees the change.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T]> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch {
                op: "as_mut_slice",
                lhs: self.dtype(),
                rhs: T::DTYPE,
            });
        }
        let whole = self.offset == 0 && self.numel() == self.storage.buffer.len();
        if Arc::get_mut(&mut self.storage).is_none() || !whole {
            let copy = crate::alloc::copy_of(self.as_slice::<T>()?);
            *self = Tensor::from_vec(copy, &self.shape)?;
        }
        let storage = Arc::get_mut(&mut self.storage).expect("unique after copy");
        Ok(T::from_buffer_mut(&mut storage.buffer).expect("dtype checked above"))
    }

    /// The elements as raw native-endian bytes, without a copy.
    pub fn as_bytes(&self) -> &[u8] {
        fn bytes<T>(v: &[T]) -> &[u8] {
            // SAFETY: every element type is plain old data without padding; the byte view
            // covers exactly the elements.
            unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
        }
        let range = self.offset..self.offset + self.numel();
        match &self.storage.buffer {
            Buffer::F32(v) => bytes(&v[range]),
            Buffer::F64(v) => bytes(&v[range]),
            Buffer::BF16(v) => bytes(&v[range]),
            Buffer::I32(v) => bytes(&v[range]),
            Buffer::I64(v) => bytes(&v[range]),
        }
    }

    /// The elements as mutable raw bytes, copying shared storage first (see
    /// [`Tensor::as_mut_slice`]).
    pub fn as_mut_bytes(&mut self) -> &mut [u8] {
        fn bytes<T>(v: &mut [T]) -> &mut [u8] {
            // SAFETY: as in `as_bytes`; any bit pattern is a valid element.
            unsafe {
                std::slice::from_raw_parts_mut(
                    v.as_mut_ptr().cast::<u8>(),
                    std::mem::size_of_val(v),
                )
            }
        }
        let dtype_checked = "the slice type follows the dtype";
        match self.dtype() {
            DType::F32 => bytes(self.as_mut_slice::<f32>().expect(dtype_checked)),
            DType::F64 => bytes(self.as_mut_slice::<f64>().expect(dtype_checked)),
            DType::BF16 => bytes(self.as_mut_slice::<bf16>().expect(dtype_checked)),
            DType::I32 => bytes(self.as_mut_slice::<i32>().expect(dtype_checked)),
            DType::I64 => bytes(self.as_mut_slice::<i64>().expect(dtype_checked)),
        }
    }

    /// Copies the elements out as f64 (floats and integers alike), for tests and reports.
    pub fn to_vec_f64(&self) -> Vec<f64> {
        match self.dtype() {
            DType::I32 => self
                .as_slice::<i32>()
                .unwrap()
                .iter()
                .map(|&v| v as f64)
                .collect(),
            DType::I64 => self
                .as_slice::<i64>()
                .unwrap()
                .iter()
                .map(|&v| v as f64)
                .collect(),
            dtype => crate::with_float!(dtype, "to_vec_f64", T => Ok::<_, Error>(
                self.as_slice::<T>().unwrap().iter().map(|v| v.to_acc().to_f64()).collect()
            ))
            .expect("float dtype"),
        }
    }

    /// The value of a one-element tensor as f64.
    pub fn scalar_f64(&self) -> Result<f64> {
        if self.numel() != 1 {
            return Err(Error::ShapeMismatch {
                op: "scalar",
                lhs: self.shape.clone(),
                rhs: vec![],
            });
        }
        Ok(self.to_vec_f64()[0])
    }

    /// A view of rows `start..end` of the first dimension, sharing storage.
    pub fn rows(&self, start: usize, end: usize) -> Result<Tensor> {
        let (n, cols) = self.dims2();
        if start > end || end > n {
            return Err(Error::IndexOutOfRange {
                op: "rows",
                index: end as i64,
                bound: n + 1,
            });
        }
        let mut shape = self.shape.clone();
        if shape.is_empty() {
            shape.push(1);
        }
        shape[0] = end - start;
        Ok(Tensor {
            storage: self.storage.clone(),
            offset: self.offset + start * cols,
            shape,
        })
    }

    /// The same elements under another shape with as many elements, sharing storage.
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        if numel(shape) != self.numel() {
            return Err(Error::ShapeMismatch {
                op: "reshape",
                lhs: self.shape.clone(),
                rhs: shape.to_vec(),
            });
        }
        Ok(Tensor {
            storage: self.storage.clone(),
            offset: self.offset,
            shape: shape.to_vec(),
        })
    }

    /// Converts a float tensor to another float dtype (a cheap clone when it already has it).
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        crate::with_float!(self.dtype(), "cast", S => {
            let src = self.as_slice::<S>()?;
            crate::with_float!(dtype, "cast", D => {
                Tensor::from_vec(crate::kernels::elementwise::map_vec(src, |x: S| {
                    D::from_acc(<<D as Float>::Acc as Real>::from_f64(x.to_acc().to_f64()))
                }), &self.shape)
            })
        })
    }

    /// Whether `other` is the same view of the same storage (not merely equal values).
    pub fn is_same_view(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
            && self.offset == other.offset
            && self.shape == other.shape
    }

    /// Checks that `other` has this tensor's dtype and shape, naming `op` otherwise.
    pub fn check_same(&self, other: &Tensor, op: &'static str) -> Result<()> {
        if self.dtype() != other.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                lhs: self.dtype(),
                rhs: other.dtype(),
            });
        }
        if self.shape != other.shape {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape.clone(),
                rhs: other.shape.clone(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_share_storage_and_writes_copy_on_write() {
        let t = Tensor::from_vec((0..12).map(|i| i as f32).collect(), &[4, 3]).unwrap();
        let v = t.rows(1, 3).unwrap();
        assert_eq!(v.shape(), &[2, 3]);
        assert_eq!(v.as_slice::<f32>().unwrap(), &[3., 4., 5., 6., 7., 8.]);
        let mut w = v.clone();
        w.as_mut_slice::<f32>().unwrap()[0] = 100.0;
        assert_eq!(v.as_slice::<f32>().unwrap()[0], 3.0);
        assert_eq!(t.as_slice::<f32>().unwrap()[3], 3.0);
        assert!(t.as_slice::<f64>().is_err());
        assert!(Tensor::from_vec(vec![1f32; 5], &[2, 3]).is_err());
    }

    #[test]
    fn cast_rounds_through_bf16() {
        let t = Tensor::from_f64(&[1.0, 1.0 + 1e-3, -3.5], &[3], DType::F64).unwrap();
        let b = t.cast(DType::BF16).unwrap();
        assert_eq!(b.bytes(), 6);
        assert_eq!(b.to_vec_f64(), vec![1.0, 1.0, -3.5]);
    }
}
