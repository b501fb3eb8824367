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
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} [{elapsed}<{eta}]")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_prefix(what.to_string());
    pb
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

/// Whether stderr is a terminal, where a progress bar can redraw itself.
fn stderr_is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// The per-epoch log of a training run on stderr: a progress bar with the lines above it on a
/// terminal; plain lines, one per epoch, in a log file, a pipe or under mpirun (where a bar
/// would be hidden and its lines dropped).
pub(crate) struct EpochLog {
    bar: Option<ProgressBar>,
    quiet: bool,
}

impl EpochLog {
    /// A log over `epochs` epochs of `what`; `quiet` prints nothing.
    pub(crate) fn new(epochs: u64, what: &str, quiet: bool) -> EpochLog {
        let bar = (!quiet && stderr_is_terminal()).then(|| bar(epochs, what));
        EpochLog { bar, quiet }
    }

    /// Logs one epoch's `line`.
    pub(crate) fn epoch(&self, r: &graphloom_nn::train::EpochRecord, line: &str) {
        match &self.bar {
            Some(pb) => {
                pb.inc(1);
                let val = r
                    .accuracy
                    .map_or(String::new(), |a| format!(" val {:.4}", a.val));
                pb.set_message(format!("loss {:.4}{val}", r.loss));
                pb.println(line);
            }
            None if !self.quiet => eprintln!("{line}"),
            None => {}
        }
    }

    /// Removes the bar.
    pub(crate) fn finish(&self) {
        if let Some(pb) = &self.bar {
            pb.finish_and_clear();
        }
    }
}
