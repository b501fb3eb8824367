//! Where GraphLoom writes: the checks that no output replaces anything of the user's, and the
//! atomic write of a directory (`prepare`'s dataset, `partition`'s parts).
//!
//! A directory is written whole into a temporary directory beside it, then renamed into place,
//! replacing what was there. So before anything is written [`check_output_dir`] refuses an
//! output that holds anything but a previous output of the same kind (a dataset directory for
//! a dataset, a partitioned directory for a partition), and one that is, holds or lies in an
//! input. [`check_output_file`] refuses a file output that is, or lies in, an input (a
//! prediction written over the model file).

use std::path::{Component, Path, PathBuf};

use super::meta::{Meta, PartitionMeta, CLUSTERS_DIR, LINK_SPLIT_DIR};
use crate::{Error, Result};

/// What kind of directory a writer makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputKind {
    /// A dataset directory: `meta.json` and the `.npy` arrays (`prepare`).
    Dataset,
    /// A partitioned dataset: `partition.json` and `part_{p}` folders (`partition`).
    Partitioned,
}

impl OutputKind {
    fn name(self) -> &'static str {
        match self {
            OutputKind::Dataset => "a dataset directory",
            OutputKind::Partitioned => "a partitioned dataset directory",
        }
    }

    /// Whether `dir` is a directory of this kind as GraphLoom writes it.
    fn is_written_in(self, dir: &Path) -> bool {
        match self {
            OutputKind::Dataset => Meta::read(dir).is_ok() || super::meta::is_hetero(dir),
            OutputKind::Partitioned => PartitionMeta::load(dir).is_ok(),
        }
    }

    /// Whether an entry named `name` of a directory of this kind is one GraphLoom writes.
    fn owns(self, name: &str) -> bool {
        // Check records, locks, and temporaries `.NAME.tmp-PID` are GraphLoom's in any kind.
        let ours = name.starts_with(".graphloom")
            || name
                .rsplit_once(".tmp-")
                .is_some_and(|(head, pid)| head.starts_with('.') && is_number(pid));
        ours || match self {
            OutputKind::Dataset => DATASET_FILES.contains(&name),
            OutputKind::Partitioned => {
                name == "partition.json" || name.strip_prefix("part_").is_some_and(is_number)
            }
        }
    }
}

/// The entries of a dataset directory (`link_split` is the folder of a link-prediction split,
/// `clusters` that of the METIS clusters subgraph batches keep; `nodes` and `edges` hold a
/// heterogeneous dataset's node types and relations; `propagation.json` records a propagated
/// dataset's hops).
const DATASET_FILES: [&str; 15] = [
    "meta.json",
    "csr_row_ptr.npy",
    "csr_col_idx.npy",
    "node_feat.npy",
    "node_label.npy",
    "train_idx.npy",
    "valid_idx.npy",
    "test_idx.npy",
    "edge_weight.npy",
    super::edge_features::EDGE_FEATURES_FILE,
    LINK_SPLIT_DIR,
    CLUSTERS_DIR,
    "nodes",
    "edges",
    "propagation.json",
];

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Fails unless the directory `out` may be written as a directory of `kind` from `inputs`
/// (files or folders the run reads): `out` must not exist, be empty, or be a directory of
/// `kind` holding only what GraphLoom writes there; and it must neither be nor lie inside an
/// input, nor hold one. Every writer of a directory calls it; front ends call it too before
/// any long work.
pub fn check_output_dir(out: &Path, kind: OutputKind, inputs: &[&Path]) -> Result<()> {
    check_not_input(out, inputs)?;
    let Ok(metadata) = std::fs::symlink_metadata(out) else {
        return Ok(());
    };
    let refuse = |why: String| {
        Err(Error::path(
            out,
            format!(
                "{why}: writing {} there would replace it, so give a new or empty folder",
                kind.name()
            ),
        ))
    };
    if metadata.file_type().is_symlink() {
        return refuse("is a symbolic link (give the folder it points to)".into());
    }
    if !metadata.is_dir() {
        return refuse("exists and is not a folder".into());
    }
    let entries = std::fs::read_dir(out).map_err(|e| Error::io(out, e))?;
    let names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    if !kind.is_written_in(out) {
        let other = [OutputKind::Dataset, OutputKind::Partitioned]
            .into_iter()
            .find(|k| *k != kind && k.is_written_in(out));
        return match other {
            Some(other) => refuse(format!("is {}, not {}", other.name(), kind.name())),
            None => refuse(format!("holds files and is not {}", kind.name())),
        };
    }
    let mut foreign: Vec<&String> = names.iter().filter(|n| !kind.owns(n)).collect();
    foreign.sort();
    match foreign.first() {
        Some(name) => refuse(format!(
            "holds {name}, which GraphLoom did not write ({} such entries)",
            foreign.len()
        )),
        None => Ok(()),
    }
}

/// Fails when the file `out` would be written over an input of the run (`inputs`: files or
/// folders it reads), or into an input folder.
pub fn check_output_file(out: &Path, inputs: &[&Path]) -> Result<()> {
    check_not_input(out, inputs)
}

/// Fails when `out` is an input, lies inside an input folder, or holds an input.
fn check_not_input(out: &Path, inputs: &[&Path]) -> Result<()> {
    let target = resolved(out);
    for input in inputs {
        let source = resolved(input);
        let why = if source == target {
            "is an input of this run"
        } else if target.starts_with(&source) {
            "lies inside an input folder of this run"
        } else if source.starts_with(&target) {
            "holds an input of this run"
        } else {
            continue;
        };
        // The input is named unless it is spelt as the output is.
        let named = if input == &out {
            String::new()
        } else {
            format!(" ({})", input.display())
        };
        return Err(Error::path(
            out,
            format!(
                "{why}{named}: writing there would replace what the run reads, so write elsewhere"
            ),
        ));
    }
    Ok(())
}

/// `path` made absolute with every link of its existing part resolved and `.`/`..` applied,
/// so two spellings of one place compare equal.
fn resolved(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut at = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                at.pop();
            }
            other => {
                at.push(other);
                if let Ok(real) = at.canonicalize() {
                    at = real;
                }
            }
        }
    }
    at
}

/// Writes the directory `dir` of `kind` by filling a temporary directory beside it and renaming
/// it into place, so no reader ever sees half of it; first [`check_output_dir`] with `inputs`.
pub fn write_dir_atomic(
    dir: &Path,
    kind: OutputKind,
    inputs: &[&Path],
    fill: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    check_output_dir(dir, kind, inputs)?;
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    let tmp = graphloom_io::temporary_path(dir);
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    // The new directory takes the old one's place in one step, so a run killed at any
    // moment leaves the old directory or the new one whole.
    let result = fill(&tmp).and_then(|()| super::swap::replace_dir(&tmp, dir));
    // On success the temporary name holds the previous directory, if there was one.
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::random_dataset;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("graphloom-out-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn small() -> crate::Dataset {
        random_dataset(50, 4, 0)
    }

    #[test]
    fn a_folder_of_the_users_is_never_replaced() {
        let root = scratch("users");
        let mine = root.join("mine");
        std::fs::create_dir_all(&mine).unwrap();
        std::fs::write(mine.join("notes.txt"), b"keep").unwrap();
        let err = small().save(&mine).unwrap_err().to_string();
        assert!(err.contains("is not a dataset directory"), "{err}");
        assert_eq!(std::fs::read(mine.join("notes.txt")).unwrap(), b"keep");
        // A file is not replaced either.
        let file = root.join("file");
        std::fs::write(&file, b"keep").unwrap();
        assert!(small().save(&file).is_err());
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
        // A dataset (written again) and an empty folder may be.
        let ds = root.join("ds");
        small().save(&ds).unwrap();
        small().save(&ds).unwrap();
        let empty = root.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        small().save(&empty).unwrap();
        // A dataset holding a file of the user's is not.
        std::fs::write(ds.join("predictions.npy"), b"keep").unwrap();
        let err = small().save(&ds).unwrap_err().to_string();
        assert!(err.contains("holds predictions.npy"), "{err}");
        // Nor is a dataset replaced by a partition, or the other way round.
        std::fs::remove_file(ds.join("predictions.npy")).unwrap();
        let err = check_output_dir(&ds, OutputKind::Partitioned, &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is a dataset directory, not a partitioned"),
            "{err}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn an_output_that_is_holds_or_lies_in_an_input_is_refused() {
        let root = scratch("inputs");
        let raw = root.join("raw");
        std::fs::create_dir_all(&raw).unwrap();
        let model = raw.join("model.safetensors");
        std::fs::write(&model, b"m").unwrap();
        let same = raw.join("..").join("raw");
        for (out, input, why) in [
            (&same, &raw, "is an input"),
            (&raw.join("ds"), &raw, "lies inside an input folder"),
            (&root, &raw, "holds an input"),
            (&model, &model, "is an input"),
        ] {
            let err = check_output_dir(out, OutputKind::Dataset, &[input])
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{err}");
        }
        let err = check_output_file(&raw.join(".").join("model.safetensors"), &[&model])
            .unwrap_err()
            .to_string();
        assert!(err.contains("is an input"), "{err}");
        check_output_file(&root.join("pred.npy"), &[&model, &raw.join("nodes.npy")]).unwrap();
        check_output_dir(&root.join("ds"), OutputKind::Dataset, &[&raw]).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
    }
}
