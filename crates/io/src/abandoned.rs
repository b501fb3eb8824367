//! Removing what killed runs left behind. A run names its temporary files and folders after
//! its process id (`.NAME.tmp-PID`, `.graphloom-inference-PID-N.bin`) and removes them itself
//! when it ends; one killed on the way cannot, so the next run that writes beside them removes
//! those whose process is gone.

use std::path::Path;

/// Removes the entries of `dir` named `{prefix}{pid}` or `{prefix}{pid}-{rest}` (files, or
/// folders with everything in them) whose process `pid` no longer runs. Best effort: an entry
/// that cannot be removed is left, and so is one whose process still runs (or whose process id
/// a new process took since).
pub fn remove_abandoned(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if process_runs(pid) {
            continue;
        }
        let path = entry.path();
        // Not followed: a link is removed, never what it points at.
        let _ = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(e) => Err(e),
        };
    }
}

/// Whether a process of id `pid` exists (signal 0 checks without sending anything; a process
/// of another user answers EPERM, which still means it exists).
fn process_runs(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        // 0 and negative ids name process groups, not a process: never guess.
        return true;
    }
    // SAFETY: kill with signal 0 sends nothing and has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process id that is not running: a child that has exited and been reaped.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn only_entries_of_dead_processes_go() {
        let dir = std::env::temp_dir().join(format!("graphloom-abandoned-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let dead = dead_pid();
        let me = std::process::id();
        let names = [
            format!(".a.npy.tmp-{dead}"),
            format!(".a.npy.tmp-{me}"),
            format!(".graphloom-inference-{dead}-3.bin"),
            format!(".graphloom-inference-{me}-0.bin"),
            format!(".b.npy.tmp-{dead}"),
            "a.npy".to_string(),
        ];
        for n in &names {
            std::fs::write(dir.join(n), b"x").unwrap();
        }
        std::fs::create_dir_all(dir.join(format!(".ds.tmp-{dead}/inner"))).unwrap();
        remove_abandoned(&dir, ".a.npy.tmp-");
        remove_abandoned(&dir, ".graphloom-inference-");
        remove_abandoned(&dir, ".ds.tmp-");
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut expected = vec![
            names[1].clone(),
            names[3].clone(),
            names[4].clone(),
            names[5].clone(),
        ];
        expected.sort();
        assert_eq!(left, expected);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
