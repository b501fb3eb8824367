//! Snapshots of the training loop: everything [`crate::train::fit`] carries between epochs
//! (parameters, optimizer state, step and epoch counts, model selection, the records so far)
//! and the workload's own state (a learnt input table with its sparse optimizer state), so a
//! run resumed from one gives the bits of an uninterrupted run. Every random draw is keyed by
//! (seed, step or epoch, id), so the counters are the random streams' positions.
//!
//! A snapshot is the folder `DIR/snapshot`: `state.safetensors` (written by rank 0) and the
//! workload's files (one per worker). It is written as `DIR/.snapshot.tmp` and renamed into
//! place, the previous one kept as `DIR/snapshot.old` until the new one is in place, so a run
//! killed at any moment leaves a whole snapshot. The folder must be one that every worker
//! sees (a shared file system across machines), and serves one run at a time: rank 0 holds
//! an `flock` on `DIR/.graphloom.lock` for the whole run ([`lock`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use graphloom_comm::CommunicatorExt;
use graphloom_tensor::Tensor;

use super::state::{Best, LoopState};
use super::{EpochRecord, Workload};
use crate::tensor_file::{self, TensorFile};
use crate::{Error, Result};

/// Where and how often the loop writes snapshots, and whether it starts from the last one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotConfig {
    /// The folder that holds the snapshot.
    pub dir: PathBuf,
    /// Write one after every this many epochs (and at the end of the run).
    pub every: usize,
    /// Continue from the snapshot in `dir`.
    pub resume: bool,
}

/// Locks the snapshot folder for this run until the returned lock is dropped, so two runs given
/// one folder cannot overwrite each other's snapshots: the second fails naming the folder.
/// Rank 0, which renames snapshots into place, holds the lock; every worker learns whether it
/// got it. Collective over the workload's workers.
pub(crate) fn lock(
    cfg: &SnapshotConfig,
    workload: &dyn Workload,
) -> Result<Option<graphloom_io::DirLock>> {
    let comm = workload.gradient_comm();
    let rank = comm.as_ref().map_or(0, |c| c.rank());
    let lock = if rank == 0 {
        std::fs::create_dir_all(&cfg.dir)
            .map_err(|e| Error::from(graphloom_graph::Error::io(&cfg.dir, e)))
            .and_then(|()| {
                graphloom_io::lock_dir(&cfg.dir, "the snapshot folder")
                    .map_err(|e| Error::from(graphloom_graph::Error::from(e)))
            })
            .map(Some)
    } else {
        Ok(None)
    };
    match (&comm, lock) {
        (Some(c), Ok(held)) => c.agree(Ok(())).map(|()| held),
        (Some(c), Err(e)) => c.agree(Err(e)).map(|()| None),
        (None, lock) => lock,
    }
}

const FORMAT: &str = "graphloom-snapshot";
const VERSION: &str = "2";

/// The largest epoch, step or other count a snapshot may hold.
const MAX_COUNT: u64 = i32::MAX as u64;

/// Writes the loop's state and the workload's. Collective over the workload's workers.
pub(crate) fn save(
    cfg: &SnapshotConfig,
    settings: &str,
    names: &[String],
    workload: &mut dyn Workload,
    state: &LoopState,
) -> Result<()> {
    let comm = workload.gradient_comm();
    let (rank, workers) = comm.as_ref().map_or((0, 1), |c| (c.rank(), c.size()));
    // Each step ends with every worker learning whether every other one succeeded, so a
    // failure on one (a full disk, say) stops all of them at once instead of leaving them
    // waiting at the next collective.
    let agree = |result: Result<()>| -> Result<()> {
        match &comm {
            Some(c) => c.agree(result),
            None => result,
        }
    };
    let io = |path: &Path, e| -> Error { graphloom_graph::Error::io(path, e).into() };
    let tmp = cfg.dir.join(".snapshot.tmp");
    agree(if rank == 0 {
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(|e| io(&tmp, e))
    } else {
        Ok(())
    })?;
    agree(workload.save_state(&tmp))?;
    agree(if rank == 0 {
        write_state(
            &tmp.join("state.safetensors"),
            settings,
            names,
            workers,
            state,
        )
    } else {
        Ok(())
    })?;
    agree(if rank == 0 {
        let current = cfg.dir.join("snapshot");
        let old = cfg.dir.join("snapshot.old");
        (|| {
            // Without `snapshot`, `snapshot.old` is the last whole one (a run was killed
            // between the two renames): it stays until the new one is in place.
            if current.exists() {
                let _ = std::fs::remove_dir_all(&old);
                std::fs::rename(&current, &old).map_err(|e| io(&current, e))?;
            }
            std::fs::rename(&tmp, &current).map_err(|e| io(&current, e))?;
            let _ = std::fs::remove_dir_all(&old);
            Ok(())
        })()
    } else {
        Ok(())
    })
}

fn write_state(
    path: &Path,
    settings: &str,
    names: &[String],
    workers: usize,
    state: &LoopState,
) -> Result<()> {
    let (opt_step, first, second) = state.opt.state();
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    for (name, v) in names.iter().zip(&state.values) {
        tensors.push((format!("param.{name}"), v.clone()));
    }
    for (i, t) in first.iter().enumerate() {
        tensors.push((format!("optimizer.first.{i}"), t.clone()));
    }
    for (i, t) in second.iter().enumerate() {
        tensors.push((format!("optimizer.second.{i}"), t.clone()));
    }
    let best = state.selection.best.as_ref();
    if let Some(b) = best {
        for (name, v) in names.iter().zip(&b.params) {
            tensors.push((format!("best.{name}"), v.clone()));
        }
        if let Some(e) = &b.input_embedding {
            tensors.push(("best.input_embedding".into(), e.clone()));
        }
    }
    let json = |v: serde_json::Value| v.to_string();
    let metadata: HashMap<String, String> = [
        ("format", FORMAT.to_string()),
        ("format_version", VERSION.to_string()),
        ("settings", settings.to_string()),
        ("workers", workers.to_string()),
        ("epoch", state.epoch.to_string()),
        ("step", state.step.to_string()),
        ("optimizer_step", opt_step.to_string()),
        ("optimizer_first", first.len().to_string()),
        ("optimizer_second", second.len().to_string()),
        ("stopped", state.stopped.to_string()),
        (
            "evaluations_since_best",
            state.selection.evaluations_since_best.to_string(),
        ),
        (
            "best",
            json(serde_json::json!(best.map(|b| (b.epoch, b.evaluation)))),
        ),
        (
            "records",
            serde_json::to_string(&state.records).expect("records serialise"),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    tensor_file::write(path, &tensors, metadata)
}

/// Tensor `name` of a snapshot, refused when it holds NaN or an infinity: a run resumed from
/// it would stop at a non-finite loss blaming its learning rate, while the snapshot's run
/// diverged or the file is damaged.
fn finite(file: &TensorFile, name: &str) -> Result<Tensor> {
    let t = file.tensor(name)?;
    if t.dtype().is_float() && t.to_vec_f64().iter().any(|v| !v.is_finite()) {
        return Err(file.error(format!(
            "tensor '{name}' holds NaN or an infinity: the run diverged, or the file is damaged"
        )));
    }
    Ok(t)
}

/// Reads the snapshot in `cfg.dir` into `state` and the workload. Collective.
pub(crate) fn restore(
    cfg: &SnapshotConfig,
    settings: &str,
    names: &[String],
    workload: &mut dyn Workload,
    state: &mut LoopState,
) -> Result<()> {
    let mut dir = cfg.dir.join("snapshot");
    if !dir.exists() && cfg.dir.join("snapshot.old").exists() {
        // Killed between the two renames: the previous snapshot is whole.
        dir = cfg.dir.join("snapshot.old");
    }
    if !dir.exists() {
        return Err(Error::NoSnapshot {
            dir: cfg.dir.clone(),
        });
    }
    let file = TensorFile::read(&dir.join("state.safetensors"))?;
    if file.meta("format")? != FORMAT || file.meta("format_version")? != VERSION {
        return Err(file.error("not a GraphLoom snapshot of this version"));
    }
    // Counters are bounded, so a damaged or hand-edited one is an error here rather than an
    // overflow when the run counts on from it (the optimizer's bias correction takes its step
    // as an i32 exponent).
    let count = |key: &str| -> Result<u64> {
        let text = file.meta(key)?;
        match text.parse::<u64>() {
            Ok(c) if c <= MAX_COUNT => Ok(c),
            Ok(c) => Err(file.error(format!(
                "metadata '{key}' is {c}, above {MAX_COUNT}, the most a run counts to"
            ))),
            Err(_) => Err(file.error(format!("metadata '{key}' is not a count"))),
        }
    };
    let taken = file.meta("settings")?;
    if taken != settings {
        let map = |s: &str| -> std::collections::BTreeMap<String, String> {
            serde_json::from_str(s).unwrap_or_default()
        };
        let (then, now) = (map(taken), map(settings));
        let differ: Vec<String> = now
            .iter()
            .filter(|(k, v)| then.get(*k) != Some(*v))
            .map(|(k, v)| {
                let was = then.get(k).map_or("(none)", String::as_str);
                format!("{k} {was} in the snapshot, {v} now")
            })
            .collect();
        return Err(Error::Mismatch {
            what: "the snapshot and this run",
            detail: format!(
                "{}: resume with the settings of the run that took the snapshot in {}",
                differ.join("; "),
                cfg.dir.display()
            ),
        });
    }
    let params = |prefix: &str| -> Result<Vec<Tensor>> {
        names
            .iter()
            .zip(&state.values)
            .map(|(name, like)| {
                let key = format!("{prefix}.{name}");
                if !file.has(&key) {
                    return Err(Error::Mismatch {
                        what: "the snapshot and this run",
                        detail: format!(
                            "{} is of another model: it has no parameter {name}",
                            file.path().display()
                        ),
                    });
                }
                let t = finite(&file, &key)?;
                if t.shape() != like.shape() || t.dtype() != like.dtype() {
                    return Err(file.error(format!(
                        "parameter '{name}' is {} {:?}, the model's is {} {:?}: the snapshot \
                         is of another model",
                        t.dtype(),
                        t.shape(),
                        like.dtype(),
                        like.shape()
                    )));
                }
                Ok(t)
            })
            .collect()
    };
    let values = params("param")?;
    let moments = |which: &str| -> Result<Vec<Tensor>> {
        (0..count(&format!("optimizer_{which}"))?)
            .map(|i| finite(&file, &format!("optimizer.{which}.{i}")))
            .collect()
    };
    state
        .opt
        .restore(
            count("optimizer_step")?,
            moments("first")?,
            moments("second")?,
        )
        .map_err(|e| file.error(e.to_string()))?;
    let best: Option<(usize, super::Evaluation)> =
        serde_json::from_str(file.meta("best")?).map_err(|e| file.error(e.to_string()))?;
    state.selection.best = match best {
        Some((epoch, evaluation)) => Some(Best {
            epoch,
            evaluation,
            params: params("best")?,
            input_embedding: if file.has("best.input_embedding") {
                Some(finite(&file, "best.input_embedding")?)
            } else {
                None
            },
        }),
        None => None,
    };
    state.selection.evaluations_since_best = count("evaluations_since_best")? as usize;
    state.records = serde_json::from_str::<Vec<EpochRecord>>(file.meta("records")?)
        .map_err(|e| file.error(e.to_string()))?;
    state.values = values;
    state.epoch = count("epoch")? as usize;
    state.step = count("step")?;
    state.stopped = file.meta("stopped")? == "true";
    // The records are one per epoch done, the best evaluation and the evaluations since it
    // among them.
    let best_epoch = state.selection.best.as_ref().map_or(0, |b| b.epoch);
    if state.records.len() != state.epoch
        || best_epoch > state.epoch
        || state.selection.evaluations_since_best > state.epoch
    {
        return Err(file.error(format!(
            "{} records, the best at epoch {best_epoch} and {} evaluations since, for {} \
             epochs: the counts disagree",
            state.records.len(),
            state.selection.evaluations_since_best,
            state.epoch
        )));
    }
    workload.restore_state(&dir, count("workers")? as usize)
}
