//! CPU kernels on raw slices, generic over the element type. The autodiff ops and the GNN
//! kernels of other crates are built from these.

pub mod elementwise;
pub mod matmul;
pub mod reduce;
pub mod simd;

/// Rows per parallel task for row-wise kernels: large enough to amortise scheduling, small
/// enough to balance two to a few dozen threads.
pub const ROW_BLOCK: usize = 256;
