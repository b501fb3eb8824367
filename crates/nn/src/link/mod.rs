//! Link prediction: scoring pairs of nodes with the encoder's outputs, the negatives drawn
//! for training, and the metrics of evaluation.

pub mod metrics;
