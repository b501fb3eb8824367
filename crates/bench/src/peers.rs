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
pub(crate) fn python_for(system: &str) -> Option<PathBuf> {
    let env = python_env(system);
    let var = format!("{}_PYTHON", env.to_uppercase());
    let p = std::env::var_os(&var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!(".venv-{env}/bin/python")));
    p.exists().then_some(p)
}

/// The Python environment a peer runs in: GraphBolt, DGL's newer sampler, runs in DGL's.
pub(crate) fn python_env(system: &str) -> &str {
    if system == "graphbolt" {
        "dgl"
    } else {
        system
    }
}

/// Says on stderr that `system` is skipped because its Python environment is missing.
pub(crate) fn say_not_installed(system: &str) {
    let env = python_env(system);
    eprintln!(
        "{system}: not installed (set {}_PYTHON or create .venv-{env}); skipped",
        env.to_uppercase()
    );
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

/// Runs `{system}_{task}.py` with `args` and returns its last JSON line; `None` when the peer
/// is not installed.
pub(crate) fn run_script(
    baselines: &Option<PathBuf>,
    system: &str,
    task: &str,
    args: &[String],
) -> Result<Option<Value>> {
    let Some(python) = python_for(system) else {
        return Ok(None);
    };
    let script = baselines_dir(baselines).join(format!("{system}_{task}.py"));
    let out = Command::new(python)
        .arg(&script)
        .args(args)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        // A peer installed without a library its script needs (PyG's samplers need pyg-lib or
        // torch-sparse) is left out, as one not installed is, with the reason; any other
        // failure fails the bench.
        let last = stderr.trim_end().lines().last().unwrap_or_default();
        if last.starts_with("ImportError") || last.starts_with("ModuleNotFoundError") {
            eprintln!("{system}: left out ({last})");
            return Ok(None);
        }
        bail!("{system} baseline failed: {stderr}");
    }
    Ok(Some(last_json_line(&out.stdout)?))
}

/// Runs `graphloom train --quiet` with `args` (and `--threads`) in its own process, so its
/// peak RSS is its own, and returns its summary JSON.
pub(crate) fn run_graphloom_train(args: &[String], threads: Option<usize>) -> Result<Value> {
    run_train_command(Command::new(std::env::current_exe()?), args, threads)
}

/// [`run_graphloom_train`] as an `mpirun` job of `processes` processes (`args` should hold
/// `--comm mpi`); rank 0 writes the summary.
pub(crate) fn run_graphloom_train_mpi(
    processes: usize,
    args: &[String],
    threads: Option<usize>,
) -> Result<Value> {
    let mut cmd = graphloom_comm::launch::mpirun(processes);
    cmd.arg(std::env::current_exe()?);
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
