//! The deadline of a wait, counted in the time this process ran.
//!
//! A rank that waits for a peer takes the peer to have failed when the deadline passes. A
//! process that was itself stopped (SIGSTOP, a suspended terminal job or virtual machine)
//! would otherwise find its deadline passed the moment it runs again and blame the peer that
//! was waiting for it all along. Waits poll in short slices, so a gap between two polls much
//! longer than a slice is time this process did not run: it is left out of the count, and the
//! peer, whose clock kept counting, names the stopped rank instead.

use std::time::{Duration, Instant};

/// A gap between two polls longer than this is taken for time this process did not run. Polls
/// come every few milliseconds; a busy machine delays one by far less than this.
const NOT_RUNNING: Duration = Duration::from_secs(1);

/// A wait's deadline: [`Deadline::passed`] once `limit` of the time this process ran has gone
/// by since [`Deadline::start`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline {
    limit: Duration,
    counted: Duration,
    last: Instant,
}

impl Deadline {
    /// A deadline `limit` from now.
    pub(crate) fn start(limit: Duration) -> Deadline {
        Deadline::start_at(limit, Instant::now())
    }

    fn start_at(limit: Duration, now: Instant) -> Deadline {
        Deadline {
            limit,
            counted: Duration::ZERO,
            last: now,
        }
    }

    /// Whether the deadline has passed. Call it on every poll of the wait.
    pub(crate) fn passed(&mut self) -> bool {
        self.passed_at(Instant::now())
    }

    fn passed_at(&mut self, now: Instant) -> bool {
        let step = now.saturating_duration_since(self.last);
        self.last = now;
        if step < NOT_RUNNING {
            self.counted += step;
        }
        self.counted >= self.limit
    }

    /// The time left before the deadline, as counted at the last poll.
    pub(crate) fn left(&self) -> Duration {
        self.limit.saturating_sub(self.counted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_this_process_did_not_run_is_not_counted() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Deadline::start_at(ms(100), t0);
        assert!(!d.passed_at(t0 + ms(60)));
        assert_eq!(d.left(), ms(40));
        // Stopped for ten seconds between two polls: not counted.
        assert!(!d.passed_at(t0 + ms(10_060)));
        assert!(!d.passed_at(t0 + ms(10_090)));
        assert!(d.passed_at(t0 + ms(10_110)));
        assert_eq!(d.left(), Duration::ZERO);
    }

    #[test]
    fn a_wait_polled_throughout_passes_on_time() {
        let start = Instant::now();
        let mut d = Deadline::start(Duration::from_millis(30));
        while !d.passed() {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(start.elapsed() >= Duration::from_millis(30));
    }
}
