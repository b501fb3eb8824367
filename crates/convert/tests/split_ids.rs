//! A dataset's split files hold node ids: int8 ones are signed (-1 is out of range, not node
//! 255) and a bool one, a mask, is refused, whether the dataset is loaded or mapped.

use std::path::Path;

use graphloom_convert::synthetic::{generate, SplitSizes, SyntheticConfig};
use graphloom_graph::{npy, Dataset, MappedDataset};

/// Writes the one-byte `values` as `path`, with the dtype `descr` (`|i1` or `|b1`) in its
/// header.
fn write_one_byte(path: &Path, descr: &str, values: &[u8]) {
    npy::write(path, values, &[values.len()]).unwrap();
    let mut file = std::fs::read(path).unwrap();
    let at = file.windows(5).position(|w| w == b"'|u1'").unwrap();
    file[at + 1..at + 4].copy_from_slice(descr.as_bytes());
    std::fs::write(path, file).unwrap();
}

/// Why the dataset `dir` cannot be loaded nor mapped (the two messages must agree).
fn refusal(dir: &Path) -> String {
    let loaded = Dataset::load(dir).err().unwrap().to_string();
    let mapped = MappedDataset::open(dir).err().unwrap().to_string();
    assert_eq!(loaded, mapped);
    loaded
}

#[test]
fn int8_split_ids_are_signed_and_a_bool_split_is_refused() {
    let dir = std::env::temp_dir().join(format!("graphloom-split-ids-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    generate(&SyntheticConfig {
        nodes: 300,
        split: SplitSizes::Counts(100, 50, 50),
        ..Default::default()
    })
    .unwrap()
    .save(&dir)
    .unwrap();
    let train = dir.join("train_idx.npy");
    // np.array([0, -1, 5], dtype=np.int8).
    write_one_byte(&train, "|i1", &[0, 0xff, 5]);
    let err = refusal(&dir);
    assert!(
        err.contains("train_idx.npy") && err.contains("node id -1 out of range 0..300"),
        "{err}"
    );
    write_one_byte(&train, "|b1", &[1, 0, 1]);
    let err = refusal(&dir);
    assert!(
        err.contains("train_idx.npy") && err.contains("a bool array is a mask, not ids"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
