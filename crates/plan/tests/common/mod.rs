//! What the plan's tests share: a scratch folder removed when its test ends.

use std::path::PathBuf;

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
