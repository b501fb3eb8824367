//! The link-split reader, [`LinkSplit::open`]: the files of `link_split/` (pairs `[2, E]`,
//! negative destinations `[E, K]`) checked against the graph they split, which stays as
//! written (a module of the graph crate's targets: its cases damage the split's files only).
//!
//! A split that opens must keep the reader's promises: every id a node of the graph, one row
//! of negative destinations per held-out positive.

use std::path::Path;
use std::sync::OnceLock;

use graphloom_convert::link_split::{write, LinkSplitConfig};
use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::link_split::LINK_SPLIT_DIR;
use graphloom_graph::{Dataset, LinkSet, LinkSplit};

use super::{files_under, workshop};
use crate::mutate::{plain, Files, Target};

/// The dataset of the split (the graph without its held-out edges) and the split's files,
/// made once: every case is read against that graph.
fn base() -> &'static (Dataset, Files) {
    static BASE: OnceLock<(Dataset, Files)> = OnceLock::new();
    BASE.get_or_init(|| {
        let dir = workshop("link-split");
        let input = dir.join("in");
        let out = dir.join("out");
        generate(&SyntheticConfig {
            nodes: 60,
            avg_degree: 6,
            feat_dim: 2,
            classes: 2,
            seed: 7,
            ..Default::default()
        })
        .expect("a synthetic dataset")
        .save(&input)
        .expect("save");
        let cfg = LinkSplitConfig {
            neg_dst: 3,
            ..Default::default()
        };
        write(&input, &cfg, &out, &|_, _, _| {}).expect("a link split");
        let graph = Dataset::load(&out).expect("the split's dataset");
        let files = files_under(&out)
            .into_iter()
            .filter(|(name, _)| name.starts_with(LINK_SPLIT_DIR))
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        (graph, files)
    })
}

/// The graph the split's files are read against (60 nodes).
pub(crate) fn graph() -> &'static Dataset {
    &base().0
}

/// `link_split/`: five sets of pairs and the negative destinations of both held-out sets (3
/// per positive).
pub(crate) fn target() -> Target {
    Target {
        name: "link_split",
        files: base().1.clone(),
        encode: plain,
        read,
        // Ids of one byte widen to eight, and a Fortran-ordered file is transposed in memory.
        alloc_factor: 24,
    }
}

/// Opens the split in `dir` against [`graph`], and walks what opened.
fn read(dir: &Path) -> Vec<String> {
    let data = graph().data();
    match LinkSplit::open(dir, data) {
        Ok(split) => {
            walk(&split, data.num_nodes());
            Vec::new()
        }
        Err(e) => vec![e.to_string()],
    }
}

/// What an opened split promises: every pair's ends and every negative destination are
/// nodes, and each held-out positive has its row of negative destinations.
fn walk(split: &LinkSplit, n: usize) {
    for set in LinkSet::ALL {
        let pairs = split.pairs(set);
        for i in 0..pairs.len() {
            let (u, v) = pairs.get(i);
            assert!((u as usize) < n && (v as usize) < n, "{set:?} pair {i}");
        }
    }
    for (test, set) in [(false, LinkSet::ValidPos), (true, LinkSet::TestPos)] {
        if let Some(neg) = split.neg_dst(test) {
            assert_eq!(neg.len(), split.pairs(set).len(), "rows of {set:?}");
            for i in 0..neg.len() {
                assert!(neg.of(i).iter().all(|&w| (0..n as i64).contains(&w)));
            }
        }
    }
}
