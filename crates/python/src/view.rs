//! [`View`]: store memory (or a tensor the store made) as a Python object that speaks the
//! DLPack protocol, so `torch.from_dlpack(view)` and `numpy.from_dlpack(view)` share its memory.

use dlpark::ffi::{DLDevice, DLManagedTensor, DLManagedTensorVersioned};
use dlpark::python::{export_dlpack, DlpackExporter, ExportRequest};
use dlpark::{DlpackFlags, Managed};
use graphloom_store::DlpackView;
use pyo3::prelude::*;

use crate::errors;

/// Memory exported through DLPack, any number of times; each export keeps it alive until the
/// consumer's tensor is freed.
#[pyclass(module = "graphloom._graphloom", frozen)]
pub(crate) struct View {
    inner: DlpackView,
}

impl View {
    pub(crate) fn new(inner: DlpackView) -> View {
        View { inner }
    }
}

impl DlpackExporter for View {
    fn device(&self) -> DLDevice {
        DLDevice::CPU
    }

    fn flags(&self) -> DlpackFlags {
        if self.inner.is_writable() {
            DlpackFlags::empty()
        } else {
            DlpackFlags::READ_ONLY
        }
    }

    fn prepare_export(&self, _py: Python<'_>, _request: &ExportRequest<'_>) -> PyResult<()> {
        Ok(())
    }

    fn export_legacy(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensor>> {
        self.inner.export().map_err(errors::raise)
    }

    fn export_versioned(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensorVersioned>> {
        self.inner.export().map_err(errors::raise)
    }
}

#[pymethods]
impl View {
    /// The DLPack protocol: a capsule over the memory, without a copy.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(u32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let request = ExportRequest::parse(stream, max_version, dl_device, copy)?;
        export_dlpack(self, py, request)
    }

    /// The DLPack protocol: CPU, device 0.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }

    /// The shape.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.inner.shape().to_vec()
    }

    /// The element type: f32, f64, bf16, i32 or i64.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.inner.dtype().name()
    }

    /// Whether the memory may be written.
    #[getter]
    fn writable(&self) -> bool {
        self.inner.is_writable()
    }

    /// The address of the first element.
    #[getter]
    fn address(&self) -> usize {
        self.inner.address()
    }
}

impl View {
    /// Another handle on the same memory.
    pub(crate) fn clone_view(&self) -> View {
        View::new(self.inner.clone())
    }
}
