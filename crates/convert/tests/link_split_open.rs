//! `LinkSplit::open` (graphloom-graph) on splits this crate writes, damaged in each way it
//! must refuse.

use std::path::{Path, PathBuf};

use graphloom_convert::link_split::{write, LinkSplitConfig};
use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::link_split::{LINK_SPLIT_DIR, NEG_DST_FILES};
use graphloom_graph::{npy, Dataset, LinkSet, LinkSplit};

/// A synthetic graph of 300 nodes split for link prediction with 5 negative destinations per
/// held-out positive, in a scratch folder named after `name`; returns the split dataset.
fn split_dataset(name: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("graphloom-open-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let input = root.join("in");
    generate(&SyntheticConfig {
        nodes: 300,
        avg_degree: 8,
        feat_dim: 2,
        ..Default::default()
    })
    .unwrap()
    .save(&input)
    .unwrap();
    let out = root.join("out");
    let cfg = LinkSplitConfig {
        neg_dst: 5,
        ..Default::default()
    };
    write(&input, &cfg, &out, &|_, _, _| {}).unwrap();
    out
}

/// Why `LinkSplit::open` refuses the dataset `dir`, or "opened".
fn open_error(dir: &Path) -> String {
    let ds = Dataset::load(dir).unwrap();
    match LinkSplit::open(dir, ds.data()) {
        Ok(_) => String::from("opened"),
        Err(e) => e.to_string(),
    }
}

/// The int64 array of `name` in the split folder of `dir`.
fn read(dir: &Path, name: &str) -> npy::NpyArray<i64> {
    npy::read::<i64>(&dir.join(LINK_SPLIT_DIR).join(name)).unwrap()
}

/// Writes `data` of `shape` as `name` in the split folder of `dir`, one byte an element, with
/// the dtype `descr` (`|i1` or `|b1`) in its header.
fn write_one_byte(dir: &Path, name: &str, descr: &str, data: &[i64], shape: &[usize]) {
    let path = dir.join(LINK_SPLIT_DIR).join(name);
    let bytes: Vec<u8> = data.iter().map(|&v| v as u8).collect();
    npy::write(&path, &bytes, shape).unwrap();
    let mut file = std::fs::read(&path).unwrap();
    let at = file.windows(5).position(|w| w == b"'|u1'").unwrap();
    file[at + 1..at + 4].copy_from_slice(descr.as_bytes());
    std::fs::write(&path, file).unwrap();
}

#[test]
fn int8_and_bool_pairs_are_read_as_signed_ids_or_refused() {
    let dir = split_dataset("one-byte");
    let train = read(&dir, "train_pos.npy");
    let e = train.shape[1];
    // Supervision pairs of nodes below 128 (int8's range), and one from node -1.
    let small: Vec<(i64, i64)> = (0..e)
        .map(|i| (train.data[i], train.data[e + i]))
        .filter(|&(u, v)| u < 128 && v < 128)
        .take(4)
        .chain([(-1, 3)])
        .collect();
    let flat: Vec<i64> = small
        .iter()
        .map(|p| p.0)
        .chain(small.iter().map(|p| p.1))
        .collect();
    write_one_byte(&dir, "train_pos.npy", "|i1", &flat, &[2, small.len()]);
    let err = open_error(&dir);
    assert!(
        err.contains("train_pos.npy") && err.contains("holds node -1, outside 0..300"),
        "{err}"
    );
    // A bool array is a mask, whatever its shape: [[True], [False]] is no pair (1, 0).
    write_one_byte(&dir, "train_pos.npy", "|b1", &[1, 0], &[2, 1]);
    let err = open_error(&dir);
    assert!(
        err.contains("train_pos.npy") && err.contains("a bool array is a mask, not ids"),
        "{err}"
    );
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn self_pairs_in_held_out_positives_and_negatives_are_refused() {
    let dir = split_dataset("self-pairs");
    assert_eq!(open_error(&dir), "opened");
    for (set, expect) in [
        (LinkSet::ValidPos, "self-loop"),
        (LinkSet::TestPos, "self-loop"),
        (LinkSet::ValidNeg, "self-pair"),
        (LinkSet::TestNeg, "self-pair"),
    ] {
        let original = read(&dir, set.file_name());
        let mut pairs = original.clone();
        let e = pairs.shape[1];
        // Pair 1 becomes (7, 7).
        pairs.data[1] = 7;
        pairs.data[e + 1] = 7;
        let path = dir.join(LINK_SPLIT_DIR).join(set.file_name());
        npy::write(&path, &pairs.data, &pairs.shape).unwrap();
        let err = open_error(&dir);
        assert!(
            err.contains(set.file_name()) && err.contains("pair 1 (7, 7)") && err.contains(expect),
            "{err}"
        );
        npy::write(&path, &original.data, &original.shape).unwrap();
    }
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn negative_destinations_that_leak_or_are_missing_are_refused_naming_the_row() {
    let dir = split_dataset("neg-dst");
    let ds = Dataset::load(&dir).unwrap();
    let (valid, neg_dst) = (read(&dir, "valid_pos.npy"), read(&dir, NEG_DST_FILES[0]));
    let (e, k) = (valid.shape[1], neg_dst.shape[1]);
    // A positive whose source has a neighbour in the graph.
    let neighbour_of = |u: i64| {
        let others = ds.graph.in_neighbors(u as usize).iter();
        others.map(|&s| i64::from(s)).find(|&s| s != u)
    };
    let row = (0..e)
        .find(|&i| neighbour_of(valid.data[i]).is_some())
        .unwrap();
    let (u, v) = (valid.data[row], valid.data[e + row]);
    let neighbour = neighbour_of(u).unwrap();
    let path = dir.join(LINK_SPLIT_DIR).join(NEG_DST_FILES[0]);
    for (w, expect) in [
        (v, "the positive's own destination"),
        (neighbour, "an edge of the graph"),
        (u, "self-pair"),
    ] {
        let mut changed = neg_dst.data.clone();
        changed[row * k + 2] = w;
        npy::write(&path, &changed, &neg_dst.shape).unwrap();
        let err = open_error(&dir);
        assert!(
            err.contains(NEG_DST_FILES[0])
                && err.contains(&format!("row {row} "))
                && err.contains(expect),
            "{w}: {err}"
        );
    }
    // No negative destination at all: an MRR of nothing would select the model.
    npy::write(&path, &[0i64; 0], &[e, 0]).unwrap();
    let err = open_error(&dir);
    assert!(
        err.contains(NEG_DST_FILES[0]) && err.contains("K = 0"),
        "{err}"
    );
    npy::write(&path, &neg_dst.data, &neg_dst.shape).unwrap();
    assert_eq!(open_error(&dir), "opened");
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}
