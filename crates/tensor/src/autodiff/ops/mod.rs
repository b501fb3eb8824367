//! Dense differentiable operations, each with its backward beside its forward, and the
//! functions that put them on a tape.

mod activation;
mod block_linear;
mod combine;
mod dropout;
mod linear;
mod loss;
mod norm;
mod pairs;
mod row_targets;
mod shape;

pub use activation::{
    activate, bias_activation, bias_activation_dropout, elu, leaky_relu, relu, Activation,
    OutputDropout,
};
pub use block_linear::block_matmul;
pub use combine::{add_scaled_by, combine};
pub use dropout::{dropout, Dropout, Probability, RowFactors};
pub use linear::{add, add_assign_tensors, add_bias, add_matmul, add_tensors, matmul, matmul_pair};
pub use loss::{log_softmax, nll_loss, weighted_nll_loss};
pub use norm::{batch_norm, StatsSum};
pub use pairs::{bce_with_logits, pair_product, row_sums, sigmoid};
pub use row_targets::{row_target_loss, RowLoss};
pub use shape::{cast, leading_rows, reshape};
