//! The memory this process may use: the machine's, unless its address-space limit
//! (`RLIMIT_AS`, `ulimit -v`) or its control group (a container's limit) allows less. A size
//! checked against the machine alone passes under a tighter limit and the allocation then
//! aborts the process; checked against this, it is an error.

use std::path::{Path, PathBuf};

/// Which figure of memory a size is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryMeasure {
    /// All of it (`MemTotal`, the cgroup's limit): for what a whole run will hold.
    Total,
    /// What is free now (`MemAvailable`, the cgroup's limit less its usage): for a buffer
    /// sized to what is left.
    Available,
}

/// Limits at or above this many bytes mean "no limit" (cgroup v1 writes 2^63 rounded down to
/// a page).
const UNLIMITED: u64 = 1 << 60;

/// The memory this process may use, in bytes, by `measure`: the least of the machine's
/// (`/proc/meminfo`'s `MemTotal` or `MemAvailable`), the address space `RLIMIT_AS` leaves it
/// (the limit less its current `VmSize`), and its control group's limit (cgroup v2
/// `memory.max`, v1 `memory.limit_in_bytes`, of its group and every group above; less their
/// usage for [`MemoryMeasure::Available`]). `None` where none of them can be read.
pub fn usable_memory_bytes(measure: MemoryMeasure) -> Option<u64> {
    let key = match measure {
        MemoryMeasure::Total => "MemTotal:",
        MemoryMeasure::Available => "MemAvailable:",
    };
    [
        super::system_memory_bytes(key),
        address_space_left(),
        cgroup_limit(measure),
    ]
    .into_iter()
    .flatten()
    .min()
}

/// What the address-space limit (`RLIMIT_AS`, `ulimit -v`) leaves this process: the limit
/// less its current `VmSize`; `None` without a limit. Unlike memory, it is spent by what is
/// reserved and never touched too: a thread's whole stack, an allocator arena.
pub fn address_space_left() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given and has no other preconditions.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0 {
        return None;
    }
    let limit = limit.rlim_cur;
    if limit == libc::RLIM_INFINITY || limit >= UNLIMITED {
        return None;
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let used = super::kib_field(&status, "VmSize:").unwrap_or(0);
    Some(limit.saturating_sub(used))
}

/// The least limit of this process's control group and those above it, less their usage for
/// [`MemoryMeasure::Available`].
fn cgroup_limit(measure: MemoryMeasure) -> Option<u64> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    group_limit(&groups, Path::new("/sys/fs/cgroup"), measure)
}

/// [`cgroup_limit`] for the `/proc/self/cgroup` text `groups` and the hierarchy mounted at
/// `root`.
fn group_limit(groups: &str, root: &Path, measure: MemoryMeasure) -> Option<u64> {
    // (folder of the hierarchy, the group's path in it, limit file, usage file)
    let mut places: Vec<(PathBuf, &str, &str, &str)> = Vec::new();
    for line in groups.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            // cgroup v2, mounted alone or (hybrid) under `unified`.
            for mount in [root.to_path_buf(), root.join("unified")] {
                places.push((mount, path, "memory.max", "memory.current"));
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            places.push((
                root.join("memory"),
                path,
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            ));
        }
    }
    let read = |p: PathBuf| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    let mut least: Option<u64> = None;
    for (mount, path, limit_file, usage_file) in places {
        // The group and every group above it, up to the hierarchy's root (which a container
        // sees as its own group when the path above it is hidden).
        let mut group = mount.join(path.trim_start_matches('/'));
        loop {
            if let Some(limit) = read(group.join(limit_file)).filter(|&l| l < UNLIMITED) {
                let room = match measure {
                    MemoryMeasure::Total => limit,
                    MemoryMeasure::Available => {
                        limit.saturating_sub(read(group.join(usage_file)).unwrap_or(0))
                    }
                };
                least = Some(least.map_or(room, |l| l.min(room)));
            }
            if group == mount || !group.pop() {
                break;
            }
        }
    }
    least
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_limits_of_v1_and_v2_are_read_up_the_tree() {
        let root = std::env::temp_dir().join(format!("graphloom-cgroup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let write = |rel: &str, text: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        // v2: the group has no limit, its parent 3 GiB with 1 GiB in use.
        write("job/task/memory.max", "max\n");
        write("job/memory.max", "3221225472\n");
        write("job/memory.current", "1073741824\n");
        let v2 = "0::/job/task\n";
        assert_eq!(group_limit(v2, &root, MemoryMeasure::Total), Some(3 << 30));
        assert_eq!(
            group_limit(v2, &root, MemoryMeasure::Available),
            Some(2 << 30)
        );
        // v1: "no limit" is 2^63 rounded down to a page.
        write("memory/a/memory.limit_in_bytes", "9223372036854771712\n");
        let v1 = "4:memory:/a\n1:cpu:/\n";
        assert_eq!(group_limit(v1, &root, MemoryMeasure::Total), None);
        write("memory/memory.limit_in_bytes", "536870912\n");
        assert_eq!(
            group_limit(v1, &root, MemoryMeasure::Total),
            Some(512 << 20)
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_address_space_limit_bounds_the_usable_memory() {
        // A child process, so the limit does not bind the test runner.
        let exe = std::env::current_exe().unwrap();
        if std::env::var_os("GRAPHLOOM_RLIMIT_CHILD").is_some() {
            let limit = libc::rlimit {
                rlim_cur: 8 << 30,
                rlim_max: libc::RLIM_INFINITY,
            };
            // SAFETY: setrlimit reads the struct it is given.
            assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
            let usable = usable_memory_bytes(MemoryMeasure::Total).unwrap();
            assert!(usable < 8 << 30, "{usable}");
            let left = address_space_left().unwrap();
            assert!(left < 8 << 30, "{left}");
            return;
        }
        let status = std::process::Command::new(exe)
            .args([
                "--exact",
                "memory::limit::tests::the_address_space_limit_bounds_the_usable_memory",
                "--nocapture",
            ])
            .env("GRAPHLOOM_RLIMIT_CHILD", "1")
            .status()
            .unwrap();
        assert!(status.success());
    }
}
