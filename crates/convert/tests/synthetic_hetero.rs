//! `prepare synthetic --hetero mag`: ogbn-mag's shape streamed to a heterogeneous dataset
//! directory, drawn the same for a seed, each relation's reverse its transpose, and the
//! planted signal where the homophily puts it.

use std::path::{Path, PathBuf};

use graphloom_convert::synthetic::{write_mag, MagConfig};
use graphloom_graph::{npy, HeteroDataset};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("graphloom-synmag-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A small MAG shape (736 papers, 1,135 authors, 9 institutions, 60 fields) of 7 classes.
fn config(homophily: f64, seed: u64) -> MagConfig {
    MagConfig {
        scale: 0.001,
        classes: 7,
        feat_dim: 8,
        homophily,
        seed,
        ..Default::default()
    }
}

/// The `(src, dst)` pairs of the relation `name` of the dataset in `dir`, sorted.
fn pairs(dir: &Path, name: &str) -> Vec<(i64, i64)> {
    let rel = dir.join("edges").join(name);
    let row_ptr = npy::read_ints(&rel.join("csr_row_ptr.npy")).unwrap().data;
    let col = npy::read_ints(&rel.join("csr_col_idx.npy")).unwrap().data;
    let mut out: Vec<(i64, i64)> = (0..row_ptr.len() - 1)
        .flat_map(|d| (row_ptr[d]..row_ptr[d + 1]).map(move |e| (e, d as i64)))
        .map(|(e, d)| (col[e as usize], d))
        .collect();
    out.sort_unstable();
    out
}

fn write(cfg: &MagConfig, dir: &Path) {
    write_mag(cfg, dir, 1 << 20, &|_, _, _| {}).unwrap();
}

#[test]
fn the_mag_shape_is_drawn_alike_for_a_seed_and_opens() {
    let (a, b) = (scratch("a"), scratch("b"));
    write(&config(0.25, 3), &a);
    write(&config(0.25, 3), &b);
    let ds = HeteroDataset::open(&a).unwrap();
    assert_eq!(ds.meta.node_types["paper"].num_nodes, 736);
    assert_eq!(ds.meta.node_types["institution"].num_nodes, 9);
    assert_eq!(ds.relations.len(), 8);
    for r in &ds.relations {
        let name = r.relation.join("__");
        assert_eq!(pairs(&a, &name), pairs(&b, &name), "{name}");
    }
    // Each reverse is its relation turned around; cites drops self-loops.
    for (fwd, rev) in [
        ("author__writes__paper", "paper__rev_writes__author"),
        ("paper__cites__paper", "paper__rev_cites__paper"),
    ] {
        let mut turned: Vec<(i64, i64)> = pairs(&a, fwd).iter().map(|&(s, d)| (d, s)).collect();
        turned.sort_unstable();
        assert_eq!(turned, pairs(&a, rev));
    }
    assert!(pairs(&a, "paper__cites__paper").iter().all(|(s, d)| s != d));
    let labels = npy::read_ints(&a.join("nodes/paper/node_label.npy"))
        .unwrap()
        .data;
    assert!(labels.iter().enumerate().all(|(v, &l)| l == (v % 7) as i64));
    let features = npy::read::<f32>(&a.join("nodes/paper/node_feat.npy")).unwrap();
    assert_eq!(features.shape, [736, 8]);
    // Another seed, other edges.
    let c = scratch("c");
    write(&config(0.25, 4), &c);
    assert_ne!(
        pairs(&a, "author__writes__paper"),
        pairs(&c, "author__writes__paper")
    );
    for d in [a, b, c] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// The share of an anchored relation's edges whose ends share a class is the homophily plus
/// the chance a uniform end lands in the class: `h + (1 - h) / C`, within 5 standard errors.
#[test]
fn the_homophily_decides_how_many_edges_join_a_class() {
    for h in [0.0, 0.5, 1.0] {
        let dir = scratch(&format!("h{h}"));
        write(&config(h, 1), &dir);
        for name in ["author__writes__paper", "paper__has_topic__field_of_study"] {
            let edges = pairs(&dir, name);
            let same = edges.iter().filter(|(s, d)| s % 7 == d % 7).count() as f64;
            let n = edges.len() as f64;
            let p = h + (1.0 - h) / 7.0;
            let tolerance = 5.0 * (p * (1.0 - p) / n).sqrt() + 1e-9;
            assert!(
                (same / n - p).abs() <= tolerance,
                "{name} at homophily {h}: {} of {n} edges within a class, expected {p}",
                same
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
