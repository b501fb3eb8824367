//! What the plan's tests share: a scratch folder removed when its test ends, and a dataset
//! directory beside the same graph in parts.

use std::path::PathBuf;

use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::partition::metis;

/// In a scratch folder (see [`scratch`]): the synthetic dataset of `config` saved as a
/// dataset directory, and the same graph partitioned by METIS into `parts` parts; returns the
/// folder's guard and both directories.
pub(crate) fn dataset_and_parts(
    prefix: &str,
    name: &str,
    config: &SyntheticConfig,
    parts: usize,
) -> (Scratch, PathBuf, PathBuf) {
    let root = scratch(prefix, name);
    let ds = generate(config).unwrap();
    let plain = root.join("ds");
    ds.save(&plain).unwrap();
    let dir = root.join("parts");
    let assignment = metis(&ds.graph, &ds.train_idx, parts, 0).unwrap();
    ds.write_parts(&assignment, &dir).unwrap();
    (root, plain, dir)
}

/// An empty folder `graphloom-{prefix}-{name}-{pid}` in the temporary folder, removed with
/// everything in it when the returned guard drops (the test ends, passed or failed).
pub(crate) fn scratch(prefix: &str, name: &str) -> Scratch {
    let dir =
        std::env::temp_dir().join(format!("graphloom-{prefix}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// A test's scratch folder ([`scratch`]): its path, removed on drop.
pub(crate) struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = PathBuf;

    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
