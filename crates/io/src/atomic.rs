//! Writing files so that no reader sees half of one.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The temporary name under which `path` (a file or a folder) is filled before it is renamed
/// into place: `.NAME.tmp-PID` beside it. Those a killed run left beside it are removed first
/// ([`crate::remove_abandoned`]).
pub fn temporary_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!(".{name}.tmp-");
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    crate::remove_abandoned(parent, &prefix);
    path.with_file_name(format!("{prefix}{}", std::process::id()))
}

/// Writes `path` by filling a temporary file beside it and renaming it into place.
pub fn write_atomic(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<()> {
    let tmp = temporary_path(path);
    let result = (|| {
        let mut w = BufWriter::new(File::create(&tmp)?);
        fill(&mut w)?;
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_writers_temporary_file_is_removed_by_the_next_write() {
        let dir = std::env::temp_dir().join(format!("graphloom-atomic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let left = dir.join(format!(".model.safetensors.tmp-{dead}"));
        std::fs::write(&left, vec![0u8; 4096]).unwrap();
        write_atomic(&dir.join("model.safetensors"), |w| {
            std::io::Write::write_all(w, b"new")
        })
        .unwrap();
        assert!(!left.exists());
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("model.safetensors")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
