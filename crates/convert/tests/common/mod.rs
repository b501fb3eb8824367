//! Helpers the converters' tests share.
#![allow(dead_code)] // each test binary uses its own share of them

use std::io::Write;
use std::path::PathBuf;

/// An empty scratch directory for test `name`, unique to this process.
pub(crate) fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("graphloom-conv-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes `text` gzip-compressed to `path`, making its directory.
pub(crate) fn gz(path: PathBuf, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut e = flate2::write::GzEncoder::new(
        std::fs::File::create(path).unwrap(),
        flate2::Compression::fast(),
    );
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap();
}
