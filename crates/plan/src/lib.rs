//! The training plan: turns typed [`TrainSettings`] into a run. It decides the mode (full
//! batch, sampled mini-batches, or SAR over a partitioned dataset), fills in per-model
//! defaults, refuses settings that do not apply, checks sizes before allocating, launches the
//! workers (threads of this process or the ranks of an MPI job), lays out the features in the
//! store and runs the workload under `graphloom_nn::train::fit`. Front ends (the command line,
//! the Python package) parse into it and print what it returns; they hold no training
//! decisions.
//!
//! # Overview
//!
//! - [`TrainSettings`]: what a user asks, one definition per setting (the command line derives
//!   its options from it with the `cli` feature).
//! - [`Plan`]: one of [`FullBatchPlan`], [`MiniBatchPlan`], [`SarPlan`], each with its own
//!   run and outcome ([`RunOutcome`]).
//! - [`infer`]: a saved model over a dataset, in one pass or layer by layer.
//! - [`PlanError`]: settings named neutrally, spelt by each front end ([`PlanError::render`]).
//!
//! ```
//! use graphloom_plan::{Plan, TrainSettings};
//!
//! let settings = TrainSettings { epochs: 3, ..Default::default() };
//! let plan = Plan::new(settings)?;
//! let outcome = plan.run(|_| {})?;
//! assert_eq!(outcome.report().epochs.len(), 3);
//! # Ok::<(), graphloom_plan::PlanError>(())
//! ```
#![deny(missing_docs)]

mod budget;
mod checks;
mod data;
mod error;
mod full_batch;
mod help;
mod hetero;
mod hetero_infer;
mod infer;
mod launch;
mod link;
mod mini_batch;
mod plan;
mod sar;
mod settings;
mod subgraph;
mod suggest;
mod values;

pub use budget::{gib_bytes, MemoryPart, MemoryPlan};
pub use checks::{threads_beyond_address_space, MAX_NEG_RATIO, MAX_QUEUE_DEPTH, MAX_WORKERS};
pub use error::{render_settings, PlanError, Result};
pub use full_batch::FullBatchPlan;
pub use graphloom_nn::task::TaskKind;
pub use help::help_defaults;
pub use hetero::HeteroPlan;
pub use hetero_infer::{hetero_embeddings, hetero_log_probabilities};
pub use infer::{infer, labels_of, layerwise_config, score_links, InferSettings};
pub use launch::{run_job, WorkerFigures};
pub use link::{check_step_pairs, METRIC as LINK_METRIC, NEG_RATIO, PAIR_BYTES};
pub use mini_batch::{MiniBatchOutcome, MiniBatchPlan, RowCacheReport};
pub use plan::{Common, Plan, RunOutcome, TrainMode};
pub use sar::{SarOutcome, SarPlan};
#[cfg(feature = "cli")]
pub use settings::choice_parser;
pub use settings::{
    flag_of, Backend, Choice, ComputeDType, FeatureReads, FeaturesLocation, ModelName,
    OptimizerName, StorageDType, TrainSettings,
};
pub use subgraph::{Batching, SubgraphSettings};
#[cfg(feature = "cli")]
pub use suggest::ChoiceParser;
pub use suggest::{suggest, suggest_choice};
