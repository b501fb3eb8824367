//! Progress bars, the `--json` convention and the checks and errors of a command line, shared
//! by the benches and the `graphloom` command's other subcommands.

use std::path::Path;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

/// A spinner on stderr for work of unknown length (hidden when stderr is not a terminal).
pub fn spinner(msg: &str) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("valid template"),
    );
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

/// A progress bar on stderr over `len` steps.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    styled(ProgressBar::new(len), what)
}

/// `pb` with the bar style of every subcommand and `what` before it.
pub fn styled(pb: ProgressBar, what: &str) -> ProgressBar {
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
pub struct PhaseProgress {
    state: std::sync::Mutex<Option<(String, ProgressBar, u64)>>,
    terminal: bool,
}

impl PhaseProgress {
    /// Progress with no phase started yet.
    pub fn new() -> PhaseProgress {
        PhaseProgress {
            state: std::sync::Mutex::new(None),
            terminal: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        }
    }

    /// `done` of `total` units of phase `name`; a new name ends the previous phase.
    pub fn update(&self, name: &str, done: u64, total: u64) {
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

    /// Ends the current phase's bar.
    pub fn finish(&self) {
        if let Some((_, pb, _)) = self.state.lock().unwrap_or_else(|e| e.into_inner()).take() {
            pb.finish();
        }
    }
}

impl Default for PhaseProgress {
    fn default() -> PhaseProgress {
        PhaseProgress::new()
    }
}

/// A command-line parser of a choice (its values listed by `--help`), the plan's.
pub use graphloom_plan::choice_parser as choice;

/// A plan's error as the command line spells it: every setting as its option (`--batch-size`),
/// and what a link predictor gives instead of classes as the subcommands that take it.
pub fn plan_error(e: graphloom_plan::PlanError) -> anyhow::Error {
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
pub fn print_json(value: &serde_json::Value) {
    println!("{value}");
}

/// Fails now, before any long work, when `path` could not be written at the end: its folder
/// is made when missing (as `mkdir -p`: an output goes where the user asked) and must take a
/// new file.
pub fn check_writable(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if path.is_dir() {
        anyhow::bail!("{} is a directory, not a file to write", path.display());
    }
    std::fs::create_dir_all(dir).with_context(|| {
        format!(
            "{} cannot be written: its folder {} cannot be made",
            path.display(),
            dir.display()
        )
    })?;
    let probe = dir.join(format!(".graphloom-write-check-{}", std::process::id()));
    std::fs::File::create(&probe)
        .and_then(|_| std::fs::remove_file(&probe))
        .with_context(|| format!("{} cannot be written", path.display()))
}

/// Runs `f` with the process's standard output pointing at standard error: C libraries that
/// print progress to stdout (METIS does) then leave stdout to the `--json` objects.
pub fn with_stdout_on_stderr<T>(f: impl FnOnce() -> T) -> T {
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
