//! Output of the subcommands: the helpers shared with the benches (`graphloom_bench::output`)
//! and the training run's own, its JSON summary file and per-epoch log.

use std::path::Path;

use anyhow::{Context, Result};
use indicatif::ProgressBar;

use graphloom_bench::output::styled;
pub(crate) use graphloom_bench::output::{
    check_writable, choice, plan_error, print_json, spinner, with_stdout_on_stderr, PhaseProgress,
};

/// Writes a JSON value to `path` atomically.
pub(crate) fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)? + "\n";
    graphloom_graph::write_atomic(path, |w| std::io::Write::write_all(w, text.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))
}

/// Whether stderr is a terminal, where a progress bar can redraw itself.
fn stderr_is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// The per-epoch log of a training run on stderr: on a terminal, a bar over the epochs (and
/// one over the batches of a mini-batch epoch) with the lines above them; in a log file, a
/// pipe or under mpirun, plain lines, one per epoch (a hidden bar would drop them).
pub(crate) struct EpochLog {
    bars: Option<(indicatif::MultiProgress, ProgressBar)>,
    /// The bar over batches, added below the epochs' on the first batch.
    batches: std::sync::OnceLock<ProgressBar>,
    quiet: bool,
}

impl EpochLog {
    /// A log over `epochs` epochs of `what`; `quiet` prints nothing.
    pub(crate) fn new(epochs: u64, what: &str, quiet: bool) -> EpochLog {
        let bars = (!quiet && stderr_is_terminal()).then(|| {
            let multi = indicatif::MultiProgress::new();
            let epochs = styled(multi.add(ProgressBar::new(epochs)), what);
            (multi, epochs)
        });
        EpochLog {
            bars,
            batches: std::sync::OnceLock::new(),
            quiet,
        }
    }

    /// Logs one epoch's `line`.
    pub(crate) fn epoch(&self, r: &graphloom_nn::train::EpochRecord, line: &str) {
        match &self.bars {
            Some((multi, epochs)) => {
                if let Some(batches) = self.batches.get() {
                    batches.reset();
                }
                epochs.inc(1);
                let val = r
                    .evaluation
                    .map_or(String::new(), |e| format!(" val {:.4}", e.validation()));
                epochs.set_message(format!("loss {:.4}{val}", r.loss));
                let _ = multi.println(line);
            }
            None if !self.quiet => eprintln!("{line}"),
            None => {}
        }
    }

    /// Shows the progress of a mini-batch epoch: `done` of `total` steps.
    pub(crate) fn batch(&self, done: usize, total: usize) {
        if let Some((multi, _)) = &self.bars {
            let batches = self
                .batches
                .get_or_init(|| styled(multi.add(ProgressBar::new(total as u64)), "  batches"));
            batches.set_length(total as u64);
            batches.set_position(done as u64);
        }
    }

    /// Removes the bars.
    pub(crate) fn finish(&self) {
        if let Some((multi, epochs)) = &self.bars {
            if let Some(batches) = self.batches.get() {
                batches.finish_and_clear();
            }
            epochs.finish_and_clear();
            let _ = multi.clear();
        }
    }
}
