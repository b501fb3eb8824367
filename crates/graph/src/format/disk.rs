//! Free disk space, checked before writing large files so that a full disk is a clear error
//! before any work, not a failed write an hour in.

use std::path::Path;

use crate::{Error, Result};

/// Bytes available to this user on the file system holding `path` (or its nearest existing
/// ancestor).
pub fn free_bytes(path: &Path) -> Result<u64> {
    let at = existing_ancestor(path);
    let c_path = std::ffi::CString::new(at.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::invalid(at, "the path holds a NUL byte"))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: c_path is a valid C string and stat is written by the call before it is read.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(Error::io(at, std::io::Error::last_os_error()));
    }
    // SAFETY: statvfs succeeded, so it filled stat.
    let stat = unsafe { stat.assume_init() };
    // The field types differ between platforms.
    #[allow(clippy::unnecessary_cast)]
    Ok(stat.f_bavail as u64 * stat.f_frsize as u64)
}

/// `path`, or its nearest ancestor that exists (the current folder at worst): where a file
/// about to be written will live.
fn existing_ancestor(path: &Path) -> &Path {
    let mut at = path;
    while !at.exists() {
        match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => at = p,
            _ => return Path::new("."),
        }
    }
    at
}

/// Whether `a` and what is written at `b` (or its nearest existing ancestor) lie on one file
/// system, so that a file of `a` can be hard-linked at `b` rather than copied.
pub fn same_file_system(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (
        std::fs::metadata(a),
        std::fs::metadata(existing_ancestor(b)),
    ) {
        (Ok(a), Ok(b)) => a.dev() == b.dev(),
        _ => false,
    }
}

/// Fails unless the file system of `path` has `needed` bytes free for `what`.
pub fn check_free_space(path: &Path, needed: u64, what: &str) -> Result<()> {
    let free = free_bytes(path)?;
    if free < needed {
        return Err(Error::invalid(
            path,
            format!(
                "{what} needs about {} of disk, and only {} is free there",
                graphloom_io::format_bytes(needed),
                graphloom_io::format_bytes(free)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_is_read_and_a_shortfall_is_a_clear_error() {
        let tmp = std::env::temp_dir();
        assert!(free_bytes(&tmp).unwrap() > 0);
        // A path that does not exist yet is measured on its nearest existing folder.
        assert!(free_bytes(&tmp.join("no/such/folder")).unwrap() > 0);
        check_free_space(&tmp, 1, "a byte").unwrap();
        let err = check_free_space(&tmp.join("x"), u64::MAX, "the dataset")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("the dataset needs about 16.0 EiB") && err.contains("is free there"),
            "{err}"
        );
    }
}
