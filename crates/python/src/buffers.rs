//! Arguments that arrive as Python buffers (numpy arrays; the Python half turns torch tensors
//! into them without a copy), read or written in place.

use pyo3::buffer::{Element, PyBuffer};
use pyo3::prelude::*;

use crate::errors::invalid;

/// A C-contiguous buffer of `T` held for the duration of a call: the buffer keeps the
/// exporter's memory alive, so its slice may be used with the interpreter lock released.
pub(crate) struct Held<T: Element> {
    buffer: PyBuffer<T>,
    ptr: usize,
    len: usize,
}

impl<T: Element + Copy> Held<T> {
    /// Takes `obj`'s buffer of `T` elements, which must be C-contiguous; `what` names the
    /// argument in errors.
    pub(crate) fn new(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Held<T>> {
        let buffer = PyBuffer::<T>::get(obj).map_err(|e| {
            invalid(format!(
                "{what}: expected a contiguous array of {}: {e}",
                std::any::type_name::<T>()
            ))
        })?;
        let slice = buffer
            .as_slice_ptr()
            .ok_or_else(|| invalid(format!("{what}: the array is not C-contiguous")))?;
        Ok(Held {
            ptr: slice.as_ptr().cast::<T>() as usize,
            len: buffer.item_count(),
            buffer,
        })
    }

    /// Like [`Held::new`], and the buffer must be writable.
    pub(crate) fn new_mut(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Held<T>> {
        let held = Held::new(obj, what)?;
        if held.buffer.readonly() {
            return Err(invalid(format!("{what}: the array is read-only")));
        }
        Ok(held)
    }

    /// The elements.
    pub(crate) fn slice(&self) -> &[T] {
        // SAFETY: the buffer, held by `self`, exposes `len` contiguous elements at `ptr`.
        unsafe { std::slice::from_raw_parts(self.ptr as *const T, self.len) }
    }

    /// The elements, writable (only for a buffer taken with [`Held::new_mut`]).
    pub(crate) fn slice_mut(&mut self) -> &mut [T] {
        debug_assert!(!self.buffer.readonly());
        // SAFETY: as in `slice`; the buffer is writable and `&mut self` is the only view here.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut T, self.len) }
    }

    /// Bytes of the elements.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the same memory as `slice`, read as bytes.
        unsafe {
            std::slice::from_raw_parts(self.ptr as *const u8, std::mem::size_of_val(self.slice()))
        }
    }
}

/// Row or node ids from a contiguous int64 buffer, copied out of it: ids index memory, and
/// another Python thread could change the buffer between their check and their use while the
/// interpreter lock is released.
pub(crate) fn ids(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<i64>> {
    let held = Held::<i64>::new(obj, what)?;
    Ok(graphloom_tensor::alloc::copy_of(held.slice()))
}
