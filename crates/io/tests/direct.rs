//! `DirectFile` against the file's bytes read plainly: every engine, on a file system that
//! takes `O_DIRECT` and on tmpfs, with unaligned, overlapping and
//! end-of-file ranges.

use std::ops::Range;
use std::path::{Path, PathBuf};

use graphloom_io::direct::{DirectFile, ReadEngine};

/// A file of `len` pseudo-random bytes under `dir`, removed on drop.
struct Scratch {
    path: PathBuf,
    bytes: Vec<u8>,
}

impl Scratch {
    fn new(dir: &Path, name: &str, len: usize) -> Scratch {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let path = dir.join(format!("graphloom-direct-{}-{name}", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        Scratch { path, bytes }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Ranges of every kind: unaligned, crossing blocks, repeated, overlapping, the last byte,
/// far apart (more reads than the queue holds), a long run (read in pieces), empty.
fn ranges(len: u64) -> Vec<Range<u64>> {
    let mut r = vec![
        0..1,
        4095..4097,
        100..612,
        100..612,
        300..900,
        len - 1..len,
        len - 700..len,
        5000..5000,
        8192..8192 + 600_000,
    ];
    let mut x = 12345u64;
    for _ in 0..300 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let start = (x >> 20) % (len - 513);
        r.push(start..start + 1 + (x >> 50) % 512);
    }
    r
}

fn check(dir: &Path, name: &str, engine: ReadEngine) -> DirectFile {
    // Not a multiple of the block size, so the last block is partly past the end.
    let file = Scratch::new(dir, name, 3 * 1024 * 1024 + 1234);
    let reader = DirectFile::open(&file.path, Some(engine)).unwrap();
    let ranges = ranges(file.bytes.len() as u64);
    let want: Vec<u8> = ranges
        .iter()
        .flat_map(|r| file.bytes[r.start as usize..r.end as usize].iter().copied())
        .collect();
    let mut got = vec![0u8; want.len()];
    let reads = reader.read_ranges(&ranges, &mut got).unwrap();
    assert!(got == want, "{name}: bytes differ from the file's");
    // Repeats and overlaps are read once: fewer reads than ranges.
    assert!(reads > 0 && reads < ranges.len(), "{reads} reads");

    let past = file.bytes.len() as u64;
    let err = reader
        .read_ranges(std::slice::from_ref(&(past - 10..past + 1)), &mut [0u8; 11])
        .unwrap_err()
        .to_string();
    assert!(err.contains("holds") && err.contains(name), "{err}");
    reader
}

fn io_uring_available() -> bool {
    io_uring_probe().is_ok()
}

fn io_uring_probe() -> std::io::Result<()> {
    let dir = std::env::temp_dir();
    let f = Scratch::new(&dir, "probe", 10);
    DirectFile::open(&f.path, Some(ReadEngine::IoUring))
        .map(|_| ())
        .map_err(std::io::Error::other)
}

#[test]
fn pread_pool_reads_what_the_file_holds() {
    let reader = check(&std::env::temp_dir(), "pread", ReadEngine::PreadPool);
    assert_eq!(reader.engine(), ReadEngine::PreadPool);
}

#[test]
fn io_uring_reads_what_the_file_holds() {
    if !io_uring_available() {
        eprintln!("skipped: this kernel gives no io_uring");
        return;
    }
    let reader = check(&std::env::temp_dir(), "uring", ReadEngine::IoUring);
    assert_eq!(reader.engine(), ReadEngine::IoUring);
}

/// tmpfs refused O_DIRECT before Linux 6.6 (the reader then goes through the cache); either
/// way the bytes must be the file's.
#[test]
fn a_file_on_tmpfs_reads_the_same() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("skipped: no /dev/shm");
        return;
    }
    for engine in [ReadEngine::PreadPool, ReadEngine::IoUring] {
        if engine == ReadEngine::IoUring && !io_uring_available() {
            continue;
        }
        check(shm, engine.name(), engine);
    }
}

#[test]
fn a_missing_file_is_named() {
    let path = std::env::temp_dir().join("graphloom-direct-no-such-file");
    let err = DirectFile::open(&path, None).err().unwrap().to_string();
    assert!(err.contains("graphloom-direct-no-such-file"), "{err}");
}
