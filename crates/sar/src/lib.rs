//! Full-batch GNN training over N workers with sequential aggregation and rematerialization
//! (SAR, Mostafa 2021): each worker holds one part of the graph, and a layer aggregates the
//! other parts' rows one part at a time, in ring rounds, freeing each halo after use.
//!
//! - [`PartGraph`]: a worker's in-edges by source part and the rows each part needs.
//! - [`Exchange`] and [`SarMode`]: how halos travel. In `sar` and `sa` mode, N ring rounds
//!   with the next round's messages in flight on a communication thread while the current
//!   one is aggregated; in `osa` mode, one all-to-all.
//! - [`RingAggregation`]: sum, mean and GCN's normalisation. Its backward pass sends each
//!   part the gradient of the rows it sent, computed from the output gradient, without
//!   fetching any halo again.
//! - [`RingAttention`]: GAT's attention with an online softmax; its backward pass fetches
//!   each halo again (`sar`) to recompute the attention of its edges.
//! - [`Sar`]: the SAR workload of the one training loop (`graphloom_nn::train::fit`);
//!   [`train_sar`] runs it.
//!
//! Given to a model as its graph ([`sar_graph`], a [`graphloom_nn::NodeGraph`]), N workers compute the loss
//! and gradients of one worker on the whole graph, up to the order of additions.
#![deny(missing_docs)]

mod attention;
mod error;
mod exchange;
mod graph;
mod linear;
mod train;

pub use attention::RingAttention;
pub use error::{Error, Result};
pub use exchange::{Exchange, SarMode};
pub use graph::PartGraph;
pub use linear::{Normalisation, RingAggregation};
pub use train::{sar_graph, train_sar, Sar};

use graphloom_tensor::Real;

/// A buffer of accumulators for one pass: zeroed ([`scratch`]) or filled row by row by the
/// pass itself ([`empty_scratch`]), on huge pages when large, charged to the worker's
/// activations while it lives, and handed back to the buffer cache when dropped, so the next
/// pass of the same size reuses its pages instead of faulting in fresh ones.
pub(crate) struct Scratch<A: Real> {
    values: Vec<A>,
    _charge: graphloom_tensor::memory::Charge,
}

impl<A: Real> Scratch<A> {
    /// The values, taken out of the buffer (to become a tensor's storage, say).
    fn into_vec(mut self) -> Vec<A> {
        std::mem::take(&mut self.values)
    }
}

impl<A: Real> std::ops::Deref for Scratch<A> {
    type Target = [A];
    fn deref(&self) -> &[A] {
        &self.values
    }
}

impl<A: Real> std::ops::DerefMut for Scratch<A> {
    fn deref_mut(&mut self) -> &mut [A] {
        &mut self.values
    }
}

impl<A: Real> Drop for Scratch<A> {
    fn drop(&mut self) {
        graphloom_tensor::alloc::recycle(std::mem::take(&mut self.values));
    }
}

/// A [`Scratch`] of `n` zeros.
fn scratch<A: Real>(n: usize) -> Scratch<A> {
    use rayon::prelude::*;
    let mut s = empty_scratch(n);
    s.values.par_extend(rayon::iter::repeat_n(A::ZERO, n));
    s
}

/// A [`Scratch`] with room for `n` values and none in it yet, charged for all `n`: for a pass
/// that writes every value itself (see `graph::fill_every_row`).
fn empty_scratch<A: Real>(n: usize) -> Scratch<A> {
    let _g = graphloom_tensor::memory::category_scope(graphloom_tensor::Category::Activations);
    let charge = graphloom_tensor::memory::Charge::new(n * std::mem::size_of::<A>());
    Scratch {
        values: graphloom_tensor::alloc::with_capacity(n),
        _charge: charge,
    }
}

/// Errors of the exchanges, as the tape reports them.
fn comm_error(e: graphloom_comm::CommError) -> graphloom_tensor::Error {
    graphloom_tensor::Error::Op {
        op: "SAR exchange",
        source: Box::new(e),
    }
}
