//! Time spent per op, forward and backward, when profiling is switched on.
//!
//! Off by default: a disabled profiler costs one relaxed atomic load per op. A checkpointed
//! block is timed as a whole and its inner ops once more, so their times overlap.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

static ENABLED: AtomicBool = AtomicBool::new(false);
static TOTALS: Mutex<Option<HashMap<&'static str, OpTime>>> = Mutex::new(None);

/// Accumulated time of one op.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OpTime {
    /// Seconds in forward passes.
    pub forward_seconds: f64,
    /// Seconds in backward passes.
    pub backward_seconds: f64,
    /// Number of forward calls.
    pub calls: u64,
}

/// Switches profiling on or off (process-wide).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// The start of a timed section, or `None` when profiling is off.
pub(crate) fn start() -> Option<Instant> {
    ENABLED.load(Ordering::Relaxed).then(Instant::now)
}

/// Adds the time since `started` to op `name`.
pub(crate) fn record(name: &'static str, started: Option<Instant>, backward: bool) {
    let Some(t0) = started else { return };
    let dt = t0.elapsed().as_secs_f64();
    let mut totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    let entry = totals
        .get_or_insert_with(HashMap::new)
        .entry(name)
        .or_default();
    if backward {
        entry.backward_seconds += dt;
    } else {
        entry.forward_seconds += dt;
        entry.calls += 1;
    }
}

/// Takes the totals recorded so far, largest total first, and resets them.
pub fn take() -> Vec<(&'static str, OpTime)> {
    let mut totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    let mut v: Vec<_> = totals.take().unwrap_or_default().into_iter().collect();
    v.sort_by(|a, b| {
        (b.1.forward_seconds + b.1.backward_seconds)
            .total_cmp(&(a.1.forward_seconds + a.1.backward_seconds))
    });
    v
}
