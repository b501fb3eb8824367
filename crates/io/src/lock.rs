//! A folder that one run at a time may write: an advisory `flock` on a file inside it. The
//! kernel drops the lock when the process ends however it ends, so a killed run never leaves
//! its folder locked.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The file in a locked folder that holds its lock.
pub const LOCK_FILE: &str = ".graphloom.lock";

/// A held lock on a folder, released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DirLock {
    // Closing the file releases the lock.
    _file: File,
}

/// Locks the folder `dir` (which must exist) for this process, or fails with
/// [`Error::Busy`] naming it when another process holds it. `user` says what the folder is
/// for, in that error ("the snapshot folder").
pub fn lock_dir(dir: &Path, user: &str) -> Result<DirLock> {
    let path: PathBuf = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    // SAFETY: flock on a descriptor this function owns has no memory-safety preconditions.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(Error::Busy {
                path: dir.to_path_buf(),
                msg: format!(
                    "{user} is in use by another run (it holds {LOCK_FILE} there): give each \
                     run its own folder, or wait for the other to end"
                ),
            });
        }
        return Err(Error::io(&path, e));
    }
    Ok(DirLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_fails_until_the_first_is_dropped() {
        let dir = std::env::temp_dir().join(format!("graphloom-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = lock_dir(&dir, "the snapshot folder").unwrap();
        // A second open file description conflicts even within one process, as another
        // process's would.
        let err = lock_dir(&dir, "the snapshot folder")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(dir.to_str().unwrap()) && err.contains("in use by another run"),
            "{err}"
        );
        drop(first);
        let again = lock_dir(&dir, "the snapshot folder").unwrap();
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
