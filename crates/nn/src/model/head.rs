//! What a model's output is for (its [`Head`]): class scores of nodes, a logit per label or a
//! value per target of nodes, or node embeddings whose pairs a [`Decoder`] scores for link
//! prediction.
//!
//! Decoders score a pair `(u, v)` from the encoder's rows `h_u`, `h_v` (width `d`):
//!
//! - dot: `s = h_u . h_v` (PyG's and DGL's link examples);
//! - mlp: `s = w2 . relu(W1 (h_u * h_v) + b1) + b2` on the Hadamard product, `W1: [d, d]`,
//!   `w2: [d, 1]` (OGB's `LinkPredictor` with two layers), initialised as PyTorch's `Linear`.
//!
//! The score is a logit: training takes the binary cross-entropy of positives against
//! negatives.

use std::sync::Arc;

use graphloom_tensor::autodiff::ops::{self, Activation};
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{DType, Tape, Tensor, Var};

use crate::layers::init::kaiming_uniform;
use crate::Result;

/// What the model's last layer outputs, and what follows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Head {
    /// Node classification: the last layer outputs one score per class; the log-softmax
    /// gives log-probabilities.
    #[default]
    NodeClasses,
    /// Multi-label classification: the last layer outputs one logit per label.
    NodeLabels,
    /// Regression: the last layer outputs one value per target.
    NodeValues,
    /// Link prediction: the last layer outputs node embeddings, whose pairs the decoder
    /// scores.
    Link(Decoder),
}

/// How a pair of node embeddings is scored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoder {
    /// The dot product of the two embeddings.
    Dot,
    /// A two-layer perceptron on their element-wise product.
    Mlp,
}

impl Decoder {
    /// Every decoder, as front ends list them.
    pub const ALL: &'static [Decoder] = &[Decoder::Dot, Decoder::Mlp];

    /// The decoder's name.
    pub fn name(self) -> &'static str {
        match self {
            Decoder::Dot => "dot",
            Decoder::Mlp => "mlp",
        }
    }

    /// The decoder named `name`.
    pub fn parse(name: &str) -> Option<Decoder> {
        Decoder::ALL.iter().copied().find(|d| d.name() == name)
    }

    /// Names and shapes of the decoder's parameters over embeddings of `width`, in the order
    /// [`score_pairs`] takes them (`decoder.` prefixed in a model).
    pub fn param_shapes(self, width: usize) -> Vec<(&'static str, Vec<usize>)> {
        match self {
            Decoder::Dot => Vec::new(),
            Decoder::Mlp => vec![
                ("lin1.weight", vec![width, width]),
                ("lin1.bias", vec![width]),
                ("lin2.weight", vec![width, 1]),
                ("lin2.bias", vec![1]),
            ],
        }
    }

    /// The decoder's initial parameters, drawn from `key` as PyTorch's `Linear` draws them.
    pub fn init_params(self, width: usize, key: RngKey, dtype: DType) -> Result<Vec<Tensor>> {
        self.param_shapes(width)
            .into_iter()
            .enumerate()
            .map(|(k, (_, shape))| kaiming_uniform(&shape, width, key.derive(k as u64), dtype))
            .collect()
    }
}

/// The scores `[pairs, 1]` of the pairs `(src[i], dst[i])` of rows of `h`, by `decoder` with
/// its parameters `params` (already in `h`'s dtype).
pub(crate) fn score_pairs(
    tape: &mut Tape,
    decoder: Decoder,
    h: &Var,
    params: &[Var],
    src: Arc<[usize]>,
    dst: Arc<[usize]>,
) -> Result<Var> {
    let z = ops::pair_product(tape, h, src, dst)?;
    Ok(match decoder {
        Decoder::Dot => ops::row_sums(tape, &z)?,
        Decoder::Mlp => {
            let z = ops::matmul(tape, &z, &params[0])?;
            let z = ops::bias_activation_dropout(tape, &z, &params[1], Activation::Relu, None)?;
            let s = ops::matmul(tape, &z, &params[2])?;
            ops::add_bias(tape, &s, &params[3])?
        }
    })
}
