//! Putting a finished output directory in the place of a previous one without a moment at
//! which neither is whole: a process killed at any point leaves the old one or the new one.

use std::path::Path;

use crate::{Error, Result};

/// Puts the directory `new` in the place of `dir` in one step, so that a process killed at
/// any moment leaves `dir` whole, old or new: the two are exchanged (the previous directory
/// is then at `new`, for the caller to remove), or `new` is renamed when `dir` does not exist.
/// Where the file system cannot exchange, the previous directory is moved aside first, and a
/// kill between the two renames leaves it at `new`'s name with `.old` appended.
pub fn replace_dir(new: &Path, dir: &Path) -> Result<()> {
    if !dir.exists() {
        return std::fs::rename(new, dir).map_err(|e| Error::io(dir, e));
    }
    match exchange(new, dir) {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {
            let mut aside = new.as_os_str().to_owned();
            aside.push(".old");
            std::fs::rename(dir, &aside).map_err(|e| Error::io(dir, e))?;
            std::fs::rename(new, dir).map_err(|e| Error::io(dir, e))?;
            std::fs::rename(&aside, new).map_err(|e| Error::io(dir, e))
        }
        Err(e) => Err(Error::io(dir, e)),
    }
}

/// Exchanges the entries `a` and `b` atomically (`renameat2` with `RENAME_EXCHANGE`).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
    };
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: both are valid C strings; the call reads them only.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Exchanges the entries `a` and `b`: not offered here, so the caller moves them one by one.
#[cfg(not(target_os = "linux"))]
fn exchange(_a: &Path, _b: &Path) -> std::io::Result<()> {
    Err(std::io::Error::from_raw_os_error(libc::ENOSYS))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::replace_dir;

    /// Rewriting a directory many times while another thread reads it: the reader finds a
    /// whole directory, old or new, every time (removing the old one before renaming the new
    /// one into place left moments with none, or with half of it).
    #[test]
    fn a_directory_being_replaced_is_always_whole() {
        let root = std::env::temp_dir().join(format!("graphloom-swap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("out");
        // What the directory writers do: fill a temporary directory beside the target, swap
        // it into place, and drop what the temporary name then holds. Here that previous
        // directory is only moved away and removed at the end: a reader that looked `out` up
        // just before a swap may still be reading in it, and its files vanishing under that
        // reader is not the swap's doing.
        let write = |i: usize| {
            let tmp = root.join(".out.tmp");
            std::fs::create_dir_all(&tmp).unwrap();
            for name in ["a", "b", "c", "d"] {
                std::fs::write(tmp.join(name), i.to_string()).unwrap();
            }
            replace_dir(&tmp, &dir).unwrap();
            if tmp.exists() {
                std::fs::rename(&tmp, root.join(format!(".old-{i}"))).unwrap();
            }
        };
        write(0);
        let (done, seen, broken) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let reader = {
            let (dir, done, seen, broken) =
                (dir.clone(), done.clone(), seen.clone(), broken.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    let whole = ["a", "b", "c", "d"].iter().all(|n| dir.join(n).exists());
                    seen.fetch_add(1, Ordering::Relaxed);
                    if !whole {
                        broken.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        for i in 1..300 {
            write(i);
        }
        done.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        for i in 1..300 {
            std::fs::remove_dir_all(root.join(format!(".old-{i}"))).unwrap();
        }
        assert!(seen.load(Ordering::Relaxed) > 0);
        assert_eq!(
            broken.load(Ordering::Relaxed),
            0,
            "reads that found the directory not whole"
        );
        assert_eq!(
            std::fs::read_dir(&root).unwrap().count(),
            1,
            "left beside it"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
