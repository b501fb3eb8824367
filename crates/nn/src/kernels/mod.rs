//! Message-passing kernels over a [`GraphView`](crate::GraphView), each a differentiable op
//! with its backward in the same file, and each checked against a naive implementation.

pub mod aggregate;
pub mod edge;
pub mod gat;
pub mod heads;
pub mod sparse;
