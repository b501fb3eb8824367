//! A mapped file cut short under a reader: a read past its new end in a named map ends the
//! process with a one-line error naming the file and exit status `FAULT_EXIT_CODE`; one in an
//! unnamed map still ends it by SIGBUS. Each fault happens in a child: this test binary run
//! again on the test `child`, which does nothing unless `CHILD_MODE` says what to map.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use graphloom_io::{npy, MappedNpy, FAULT_EXIT_CODE};

/// The environment variable that turns `child` on: `named` or `unnamed`.
const CHILD_MODE: &str = "GRAPHLOOM_SIGBUS_TEST_MODE";
/// The environment variable holding the `.npy` file the child maps.
const CHILD_FILE: &str = "GRAPHLOOM_SIGBUS_TEST_FILE";

/// An f32 `.npy` file of a million elements (several pages), removed on drop.
struct Array(PathBuf);

impl Array {
    fn new(name: &str) -> Array {
        let path = std::env::temp_dir().join(format!(
            "graphloom-sigbus-{}-{name}.npy",
            std::process::id()
        ));
        let data: Vec<f32> = (0..1 << 20).map(|i| i as f32).collect();
        npy::write(&path, &data, &[data.len()]).unwrap();
        Array(path)
    }
}

impl Drop for Array {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs `child` in a new process of this binary, mapping `file` as `mode` says.
fn run_child(mode: &str, file: &Path) -> Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD_MODE, mode)
        .env(CHILD_FILE, file)
        .output()
        .unwrap()
}

/// Cuts the file at `path` to nothing.
fn cut(path: &Path) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(0)
        .unwrap();
}

/// Maps the file (by `MappedNpy`, named, or by a bare map beside a named one that installs the
/// handler), cuts it to nothing and reads past the new end, which faults.
#[test]
fn child() {
    let Ok(mode) = std::env::var(CHILD_MODE) else {
        return;
    };
    let path = PathBuf::from(std::env::var_os(CHILD_FILE).unwrap());
    let named = MappedNpy::<f32>::open(&path).unwrap();
    let bare = match mode.as_str() {
        "named" => None,
        _ => {
            let file = std::fs::File::open(&path).unwrap();
            // SAFETY: the map is read once, below, after the file is cut: the fault is the test.
            Some(unsafe { memmap2::Mmap::map(&file) }.unwrap())
        }
    };
    cut(&path);
    let last: *const u8 = match &bare {
        None => named.as_bytes().last().unwrap(),
        Some(bare) => bare.last().unwrap(),
    };
    // SAFETY: `last` points into a live map; reading it is the fault under test.
    let value = unsafe { std::ptr::read_volatile(last) };
    println!("read {value} past the end without a fault");
}

#[test]
fn a_read_past_a_named_map_cut_short_is_an_error_naming_the_file() {
    let array = Array::new("named");
    let out = run_child("named", &array.0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), None, "{stderr}");
    assert_eq!(out.status.code(), Some(FAULT_EXIT_CODE), "{stderr}");
    let line = format!("error: {} changed while in use", array.0.display());
    assert!(stderr.contains(&line), "{line:?} not in: {stderr}");
}

#[test]
fn a_read_past_an_unnamed_map_cut_short_still_ends_by_sigbus() {
    let array = Array::new("unnamed");
    let out = run_child("unnamed", &array.0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGBUS), "{stderr}");
    assert!(!stderr.contains("changed while in use"), "{stderr}");
}
