//! Time spent per op, forward and backward, when profiling is switched on.
//!
//! Off by default: a disabled profiler costs one relaxed atomic load per op. A checkpointed
//! block is timed as a whole and its inner ops once more, so their times overlap.
//!
//! A forward call whose output takes no part in a backward pass (grad off, as in evaluation,
//! or no input needing a gradient, such as an aggregation of the input features) is counted
//! apart, so that an op's forward time compares with its backward time over the same calls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

static ENABLED: AtomicBool = AtomicBool::new(false);
static TOTALS: Mutex<Option<HashMap<&'static str, OpTime>>> = Mutex::new(None);

/// Accumulated time of one op.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OpTime {
    /// Seconds in forward calls recorded on a tape for a backward pass.
    pub forward_seconds: f64,
    /// Seconds in backward passes.
    pub backward_seconds: f64,
    /// Number of forward calls recorded for a backward pass.
    pub calls: u64,
    /// Number of backward calls.
    pub backward_calls: u64,
    /// Seconds in forward calls without a backward (grad off, or no input needing one).
    pub no_grad_seconds: f64,
    /// Number of forward calls without a backward.
    pub no_grad_calls: u64,
}

/// Which part of an op a timed section is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// A forward call recorded for a backward pass.
    Forward,
    /// A forward call without a backward.
    ForwardNoGrad,
    /// A backward call.
    Backward,
}

/// Switches profiling on or off (process-wide).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// The start of a timed section, or `None` when profiling is off.
pub(crate) fn start() -> Option<Instant> {
    ENABLED.load(Ordering::Relaxed).then(Instant::now)
}

/// Adds the time since `started` to op `name`'s `pass`.
pub(crate) fn record(name: &'static str, started: Option<Instant>, pass: Pass) {
    let Some(t0) = started else { return };
    let dt = t0.elapsed().as_secs_f64();
    let mut totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    let entry = totals
        .get_or_insert_with(HashMap::new)
        .entry(name)
        .or_default();
    match pass {
        Pass::Forward => {
            entry.forward_seconds += dt;
            entry.calls += 1;
        }
        Pass::ForwardNoGrad => {
            entry.no_grad_seconds += dt;
            entry.no_grad_calls += 1;
        }
        Pass::Backward => {
            entry.backward_seconds += dt;
            entry.backward_calls += 1;
        }
    }
}

/// Takes the totals recorded so far, largest total first, and resets them.
pub fn take() -> Vec<(&'static str, OpTime)> {
    let mut totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    let mut v: Vec<_> = totals.take().unwrap_or_default().into_iter().collect();
    v.sort_by(|a, b| {
        let total = |t: &OpTime| t.forward_seconds + t.backward_seconds + t.no_grad_seconds;
        total(&b.1).total_cmp(&total(&a.1))
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::{BackwardCtx, Op, Tape};
    use crate::{DType, Result, Tensor};

    /// An op of its own name, so that other tests' ops do not count here.
    struct Double;

    impl Op for Double {
        fn name(&self) -> &'static str {
            "profile_test_double"
        }
        fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
            Tensor::from_f64(
                &inputs[0]
                    .to_vec_f64()
                    .iter()
                    .map(|v| 2.0 * v)
                    .collect::<Vec<_>>(),
                inputs[0].shape(),
                DType::F64,
            )
        }
        fn backward(&self, ctx: &BackwardCtx<'_>) -> Result<Vec<Option<Tensor>>> {
            Ok(vec![Some(Double.forward(&[ctx.grad])?)])
        }
    }

    #[test]
    fn forward_calls_without_a_backward_are_counted_apart() {
        set_enabled(true);
        let x = Tensor::from_f64(&[1.0, 2.0], &[2], DType::F64).unwrap();
        let mut tape = Tape::new();
        // Twice on the tape, with a backward each...
        let leaf = tape.leaf(x.clone(), true);
        let y = tape.apply(Double, &[&leaf]).unwrap();
        let y = tape.apply(Double, &[&y]).unwrap();
        // ... and three times without one: a constant input, and grad off.
        let c = tape.leaf(x.clone(), false);
        tape.apply(Double, &[&c]).unwrap();
        let mut no_grad = Tape::no_grad();
        let leaf2 = no_grad.leaf(x.clone(), true);
        no_grad.apply(Double, &[&leaf2]).unwrap();
        no_grad.apply(Double, &[&leaf2]).unwrap();
        tape.backward_with(&y, x).unwrap();
        set_enabled(false);
        let t = take()
            .into_iter()
            .find(|(name, _)| *name == "profile_test_double")
            .map(|(_, t)| t)
            .unwrap();
        assert_eq!((t.calls, t.backward_calls, t.no_grad_calls), (2, 2, 3));
    }
}
