//! Progress bars, JSON and PNG output shared by the subcommands.

use std::path::Path;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

/// A spinner on stderr for work of unknown length (hidden when stderr is not a terminal).
pub(crate) fn spinner(msg: &str) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("valid template"),
    );
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

/// A progress bar on stderr over `len` steps.
pub(crate) fn bar(len: u64, what: &str) -> ProgressBar {
    styled(ProgressBar::new(len), what)
}

/// `pb` with the bar style of every subcommand and `what` before it.
fn styled(pb: ProgressBar, what: &str) -> ProgressBar {
    pb.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} [{elapsed}<{eta}]")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_prefix(what.to_string());
    pb
}

/// Progress of work in named phases: a bar per phase on a terminal, else a plain line per
/// phase at every tenth of it (for logs).
pub(crate) struct PhaseProgress {
    state: std::sync::Mutex<Option<(String, ProgressBar, u64)>>,
    terminal: bool,
}

impl PhaseProgress {
    pub(crate) fn new() -> PhaseProgress {
        PhaseProgress {
            state: std::sync::Mutex::new(None),
            terminal: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        }
    }

    /// `done` of `total` units of phase `name`; a new name ends the previous phase.
    pub(crate) fn update(&self, name: &str, done: u64, total: u64) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.as_ref().is_none_or(|(n, _, _)| n != name) {
            if let Some((_, pb, _)) = state.take() {
                pb.finish();
            }
            let pb = if self.terminal {
                bar(total, name)
            } else {
                ProgressBar::hidden()
            };
            *state = Some((name.to_string(), pb, 0));
        }
        let (_, pb, tenths) = state.as_mut().expect("set above");
        pb.set_position(done);
        let now = (done * 10).checked_div(total).unwrap_or(10);
        if !self.terminal && now > *tenths {
            *tenths = now;
            eprintln!("{name}: {done}/{total}");
        }
    }

    pub(crate) fn finish(&self) {
        if let Some((_, pb, _)) = self.state.lock().unwrap_or_else(|e| e.into_inner()).take() {
            pb.finish();
        }
    }
}

/// A command-line parser of a choice (its values listed by `--help`), the plan's.
pub(crate) use graphloom_plan::choice_parser as choice;

/// A plan's error as the command line spells it: every setting as its option (`--batch-size`),
/// and what a link predictor gives instead of classes as the subcommands that take it.
pub(crate) fn plan_error(e: graphloom_plan::PlanError) -> anyhow::Error {
    let hint = match e {
        graphloom_plan::PlanError::NoClasses => {
            "; score pairs of nodes with graphloom predict --task link --pairs FILE, or take \
             its node embeddings with graphloom embed"
        }
        _ => "",
    };
    anyhow::anyhow!("{}{hint}", e.render(&graphloom_plan::flag_of))
}

/// Prints `value` as one line of JSON on stdout: the output convention of `--json` in every
/// subcommand (one object per measurement, one per line, nothing else on stdout).
pub(crate) fn print_json(value: &serde_json::Value) {
    println!("{value}");
}

/// Writes a JSON value to `path` atomically.
pub(crate) fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)? + "\n";
    graphloom_graph::write_atomic(path, |w| std::io::Write::write_all(w, text.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))
}

/// Fails now, before any long work, when `path` could not be written at the end: its folder
/// must exist and take a new file.
pub(crate) fn check_writable(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if path.is_dir() {
        anyhow::bail!("{} is a directory, not a file to write", path.display());
    }
    let probe = dir.join(format!(".graphloom-write-check-{}", std::process::id()));
    std::fs::File::create(&probe)
        .and_then(|_| std::fs::remove_file(&probe))
        .with_context(|| format!("{} cannot be written", path.display()))
}

/// Runs `f` with the process's standard output pointing at standard error: C libraries that
/// print progress to stdout (METIS does) then leave stdout to the `--json` objects.
pub(crate) fn with_stdout_on_stderr<T>(f: impl FnOnce() -> T) -> T {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // SAFETY: dup and dup2 on the standard descriptors have no memory-safety preconditions;
    // the saved descriptor is restored and closed below.
    let saved = unsafe { libc::dup(libc::STDOUT_FILENO) };
    if saved < 0 {
        return f();
    }
    // SAFETY: as above.
    unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) };
    let out = f();
    // SAFETY: as above; `saved` is a descriptor this function opened.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::dup2(saved, libc::STDOUT_FILENO);
        libc::close(saved);
    }
    out
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
