//! What the benchmarks share: the benchmark graphs, generated on first use, and running the
//! DGL and PyG baseline scripts of `../shared/baselines` on the same dataset directory.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use graphloom_convert::synthetic::{generate, EdgeModel, SyntheticConfig};
use serde_json::Value;

/// The 100k-node / 2M-edge graph of the full-batch and sampling benchmarks: 128 features, 47
/// classes (the baselines' README measures the same graph).
pub(crate) fn bench_graph_100k() -> SyntheticConfig {
    SyntheticConfig {
        nodes: 100_000,
        avg_degree: 20,
        feat_dim: 128,
        classes: 47,
        seed: 0,
        ..Default::default()
    }
}

/// The 1M-node / 25M-edge power-law graph of the sampling benchmark (R-MAT; 16 features, so
/// that the graph, not the features, dominates).
pub(crate) fn bench_graph_rmat_1m() -> SyntheticConfig {
    SyntheticConfig {
        nodes: 1_000_000,
        avg_degree: 25,
        feat_dim: 16,
        classes: 47,
        seed: 0,
        edge_model: EdgeModel::Rmat,
        ..Default::default()
    }
}

/// Generates the synthetic dataset `cfg` into `dir` unless it is already there.
pub(crate) fn ensure_synthetic(dir: &Path, cfg: &SyntheticConfig) -> Result<()> {
    if dir.join("meta.json").exists() {
        return Ok(());
    }
    eprintln!(
        "generating {} ({} nodes, {} edges, {:?} edges, {} features, {} classes)",
        dir.display(),
        cfg.nodes,
        cfg.nodes * cfg.avg_degree,
        cfg.edge_model,
        cfg.feat_dim,
        cfg.classes
    );
    generate(cfg)?.save(dir)?;
    Ok(())
}

/// The folder of the baseline scripts: `--baselines`, else `$GRAPHLOOM_SHARED/baselines`, else
/// `../shared/baselines`.
pub(crate) fn baselines_dir(arg: &Option<PathBuf>) -> PathBuf {
    arg.clone().unwrap_or_else(|| {
        std::env::var_os("GRAPHLOOM_SHARED")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("../shared"))
            .join("baselines")
    })
}

/// The interpreter of a peer: `$DGL_PYTHON`/`$PYG_PYTHON`, else `.venv-dgl`/`.venv-pyg`.
fn python_for(system: &str) -> Option<PathBuf> {
    let env = python_env(system);
    let var = format!("{}_PYTHON", env.to_uppercase());
    let p = std::env::var_os(&var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!(".venv-{env}/bin/python")));
    p.exists().then_some(p)
}

/// The Python environment a peer runs in: GraphBolt, DGL's newer sampler, runs in DGL's.
fn python_env(system: &str) -> &str {
    if system == "graphbolt" {
        "dgl"
    } else {
        system
    }
}

/// Whether a peer of a bench run takes part, or why not.
enum PeerStatus {
    /// Its script runs with this interpreter.
    Ready(PathBuf),
    /// Left out, for this reason.
    LeftOut(String),
}

/// The baseline peers of one bench run (DGL, PyG, GraphBolt), each ready to run its script of
/// the bench's task or left out with the reason: said on stderr when the bench starts and when
/// a peer drops out, and given in every JSON record as `baselines` (`{"dgl": "runs", "pyg":
/// "left out: ..."}`), so that a table without a peer's rows says why.
pub(crate) struct Peers {
    folder: PathBuf,
    task: &'static str,
    status: Vec<(&'static str, PeerStatus)>,
}

impl Peers {
    /// The peers `systems` of the bench `task`, their scripts in `--baselines` (`baselines`:
    /// an error when it is not a folder) or the default folder (every peer left out, saying
    /// where it looked, when that is missing).
    pub(crate) fn find(
        baselines: &Option<PathBuf>,
        task: &'static str,
        systems: &[&'static str],
    ) -> Result<Peers> {
        let folder = baselines_dir(baselines);
        if baselines.is_some() && !folder.is_dir() {
            bail!(
                "--baselines {}: not a folder; give the folder of the DGL and PyG scripts \
                 (dgl_{task}.py, ...), as ../shared/baselines holds them",
                folder.display()
            );
        }
        let status = systems
            .iter()
            .map(|&system| {
                let script = folder.join(format!("{system}_{task}.py"));
                let status = if !folder.is_dir() {
                    PeerStatus::LeftOut(format!(
                        "no baseline scripts at {} (give --baselines DIR, or set \
                         GRAPHLOOM_SHARED to the folder holding baselines/)",
                        folder.display()
                    ))
                } else if !script.is_file() {
                    PeerStatus::LeftOut(format!("{} is missing", script.display()))
                } else if let Some(python) = python_for(system) {
                    PeerStatus::Ready(python)
                } else {
                    let env = python_env(system);
                    PeerStatus::LeftOut(format!(
                        "not installed (set {}_PYTHON or create .venv-{env}; {} says how)",
                        env.to_uppercase(),
                        folder.join("README.md").display()
                    ))
                };
                (system, status)
            })
            .collect();
        let peers = Peers {
            folder,
            task,
            status,
        };
        for (system, status) in &peers.status {
            match status {
                PeerStatus::Ready(python) => {
                    eprintln!("{system}: runs ({})", python.display())
                }
                PeerStatus::LeftOut(why) => eprintln!("{system}: left out: {why}"),
            }
        }
        Ok(peers)
    }

    /// Each peer's part in the run, for the JSON records: `"runs"` or `"left out: why"`.
    pub(crate) fn json(&self) -> Value {
        let map = self
            .status
            .iter()
            .map(|(system, status)| {
                let said = match status {
                    PeerStatus::Ready(_) => "runs".to_string(),
                    PeerStatus::LeftOut(why) => format!("left out: {why}"),
                };
                (system.to_string(), Value::String(said))
            })
            .collect();
        Value::Object(map)
    }

    /// Runs `system`'s script of the task with `args` and returns its last JSON line; `None`
    /// when the peer is left out. A peer installed without a library its script needs (PyG's
    /// samplers need pyg-lib or torch-sparse) is left out from then on, with the reason; any
    /// other failure fails the bench.
    pub(crate) fn run(&mut self, system: &str, args: &[String]) -> Result<Option<Value>> {
        let script = self.folder.join(format!("{system}_{}.py", self.task));
        let Some((name, status)) = self.status.iter_mut().find(|(s, _)| *s == system) else {
            bail!("{system} is not a peer of bench {}", self.task);
        };
        let PeerStatus::Ready(python) = status else {
            return Ok(None);
        };
        let out = Command::new(&*python)
            .arg(&script)
            .args(args)
            .output()
            .with_context(|| format!("running {}", script.display()))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last = stderr.trim_end().lines().last().unwrap_or_default();
            if last.starts_with("ImportError") || last.starts_with("ModuleNotFoundError") {
                eprintln!("{name}: left out: {last}");
                *status = PeerStatus::LeftOut(last.to_string());
                return Ok(None);
            }
            bail!("{system} baseline failed: {stderr}");
        }
        Ok(Some(last_json_line(&out.stdout)?))
    }
}

fn last_json_line(stdout: &[u8]) -> Result<Value> {
    let text = String::from_utf8_lossy(stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("no JSON line in the output")?;
    Ok(serde_json::from_str(line)?)
}

/// The program that runs the `graphloom` command line, for the runs a bench starts in
/// processes of their own: `$GRAPHLOOM_SELF` when set (the Python package's console command
/// sets it to itself: there this process is the interpreter), else this executable.
pub(crate) fn graphloom_program() -> Result<PathBuf> {
    match std::env::var_os("GRAPHLOOM_SELF") {
        Some(program) => Ok(PathBuf::from(program)),
        None => std::env::current_exe().context("finding this program"),
    }
}

/// Runs `graphloom train --quiet` with `args` (and `--threads`) in its own process, so its
/// peak RSS is its own, and returns its summary JSON.
pub(crate) fn run_graphloom_train(args: &[String], threads: Option<usize>) -> Result<Value> {
    run_train_command(Command::new(graphloom_program()?), args, threads)
}

/// [`run_graphloom_train`] as an `mpirun` job of `processes` processes (`args` should hold
/// `--comm mpi`); rank 0 writes the summary.
pub(crate) fn run_graphloom_train_mpi(
    processes: usize,
    args: &[String],
    threads: Option<usize>,
) -> Result<Value> {
    let mut cmd = graphloom_comm::launch::mpirun(processes);
    cmd.arg(graphloom_program()?);
    run_train_command(cmd, args, threads)
}

/// Runs `cmd train --quiet args --threads T --summary-json F` and returns the summary.
fn run_train_command(mut cmd: Command, args: &[String], threads: Option<usize>) -> Result<Value> {
    let summary = std::env::temp_dir().join(format!(
        "graphloom-bench-{}-{}.json",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    cmd.args(["train", "--quiet"]).args(args);
    cmd.arg("--summary-json").arg(&summary);
    if let Some(t) = threads {
        cmd.args(["--threads", &t.to_string()]);
    }
    let out = cmd.output()?;
    if !out.status.success() {
        bail!(
            "graphloom train failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let value: Value = serde_json::from_str(&std::fs::read_to_string(&summary)?)?;
    let _ = std::fs::remove_file(&summary);
    Ok(value)
}
