//! Disk space claimed before a file is mapped for writing. A store to a mapped page the file
//! system cannot back kills the process with SIGBUS; claiming every block first turns a full
//! disk into an error while the file can still be removed.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::{Error, Result};

/// Makes `file` (at `path`, named in errors) `len` bytes long with every block allocated, so
/// writing through a map of it cannot fail for want of space. A full file system is
/// [`Error::NoSpace`]; a file system that cannot allocate ahead gets the length only.
pub fn reserve(file: &File, path: &Path, len: u64) -> Result<()> {
    let Ok(signed) = libc::off_t::try_from(len) else {
        return Err(Error::format(
            path,
            format!("{len} bytes exceed a file's size"),
        ));
    };
    if signed == 0 {
        return file.set_len(0).map_err(|e| Error::io(path, e));
    }
    // SAFETY: posix_fallocate on a descriptor this caller owns has no memory-safety
    // preconditions. It returns the error number rather than setting errno.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, signed) };
    match rc {
        0 => Ok(()),
        libc::ENOSPC | libc::EFBIG => Err(Error::NoSpace {
            path: path.to_path_buf(),
            bytes: len,
        }),
        libc::EINVAL | libc::EOPNOTSUPP => file.set_len(len).map_err(|e| Error::io(path, e)),
        other => Err(Error::io(path, std::io::Error::from_raw_os_error(other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_is_claimed_and_too_much_is_a_clear_error() {
        let path = std::env::temp_dir().join(format!("graphloom-reserve-{}", std::process::id()));
        let file = File::create(&path).unwrap();
        reserve(&file, &path, 1 << 20).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
        // More than any file system here holds.
        let err = reserve(&file, &path, 1 << 62).unwrap_err().to_string();
        assert!(
            err.contains(path.to_str().unwrap()) && err.contains("no room"),
            "{err}"
        );
        drop(file);
        std::fs::remove_file(&path).unwrap();
    }
}
