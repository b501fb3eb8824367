//! Message-passing kernels over a [`GraphView`](crate::GraphView), each a differentiable op
//! with its backward in the same file, and each checked against a naive implementation.

pub mod aggregate;
/// The unfused GAT (SDDMM, edge softmax, per-edge weighted sums): the reference that the fused
/// kernel is tested against.
#[cfg(test)]
pub(crate) mod edge;
pub mod gat;
pub mod gatv2;
pub mod gine;
pub mod heads;
pub mod sparse;
