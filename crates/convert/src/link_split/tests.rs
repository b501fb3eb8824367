use std::collections::{BTreeMap, HashSet};

use graphloom_tensor::{DType, Tensor};

use std::path::PathBuf;

use graphloom_graph::link_split::NEG_DST_FILES;
use graphloom_graph::{npy, Csr, Dataset, LinkSplit};

use super::*;
use crate::synthetic::{generate, SyntheticConfig};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("graphloom-link-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The weight the test datasets give the edge `s -> d`, so a weight shows which edge it is on.
fn weight_of(s: NodeId, d: NodeId) -> f32 {
    (s * 1000 + d + 1) as f32
}

/// A featureless dataset of the graph `graph`, weighted by [`weight_of`] when `weighted`.
fn dataset(graph: Csr, directed: bool, weighted: bool) -> Dataset {
    let n = graph.num_nodes();
    let edge_weight = weighted.then(|| {
        (0..n)
            .flat_map(|v| {
                graph
                    .in_neighbors(v)
                    .iter()
                    .map(move |&s| weight_of(s, v as NodeId))
            })
            .collect()
    });
    Dataset {
        meta: Meta {
            name: "g".into(),
            num_nodes: n,
            num_edges: graph.num_edges(),
            feat_dim: 0,
            feat_dtype: "f32".into(),
            num_classes: 1,
            directed,
        },
        graph,
        features: Tensor::zeros(&[n, 0], DType::F32),
        labels: vec![0; n],
        targets: None,
        edge_features: None,
        train_idx: vec![0],
        valid_idx: vec![1],
        test_idx: vec![2],
        edge_weight,
    }
}

/// A directed graph of `n` nodes and about `4n` random edges, a fifth of them with their
/// reverse, plus a self-loop and a repeated edge; its rows are left unsorted.
fn directed_graph(n: u32) -> Csr {
    let key = RngKey::new(7, 0, 0);
    let (mut src, mut dst) = (vec![0, 3], vec![0, 4]);
    for i in 0..4 * u64::from(n) {
        let (s, d) = (key.bits(i, 0) as u32 % n, key.bits(i, 1) as u32 % n);
        src.push(s);
        dst.push(d);
        if i % 5 == 0 {
            src.push(d);
            dst.push(s);
        }
    }
    let mut g = Csr::from_edges(n as usize, &src, &dst);
    for v in 0..n as usize {
        let (a, b) = (g.row_ptr[v] as usize, g.row_ptr[v + 1] as usize);
        g.col_idx[a..b].reverse();
    }
    g
}

fn run(input: &Path, cfg: &LinkSplitConfig, out: &Path) -> Result<LinkSplitSummary> {
    write(input, cfg, out, &|_, _, _| {})
}

fn pairs(dir: &Path, set: LinkSet) -> Vec<(NodeId, NodeId)> {
    let a = npy::read::<i64>(&dir.join(LINK_SPLIT_DIR).join(set.file_name())).unwrap();
    assert_eq!(a.shape.len(), 2);
    let e = a.shape[1];
    (0..e)
        .map(|i| (a.data[i] as NodeId, a.data[e + i] as NodeId))
        .collect()
}

/// The edges `s -> d` of a graph with their weights (1 without), self-loops left out.
fn entries(ds: &Dataset) -> Vec<(NodeId, NodeId, f32)> {
    let g = &ds.graph;
    let mut out = Vec::new();
    for v in 0..g.num_nodes() {
        for (k, &s) in g.in_neighbors(v).iter().enumerate() {
            let w = ds
                .edge_weight
                .as_ref()
                .map_or(1.0, |w| w[g.row_ptr[v] as usize + k]);
            out.push((s, v as NodeId, w));
        }
    }
    out
}

fn unordered(s: NodeId, d: NodeId) -> (NodeId, NodeId) {
    (s.min(d), s.max(d))
}

/// Checks every promise of a split of `input` into `out` under `cfg`.
fn check_split(input: &Path, out: &Path, cfg: &LinkSplitConfig, summary: &LinkSplitSummary) {
    let before = Dataset::load(input).unwrap();
    let after = Dataset::load(out).unwrap();
    let mapped = MappedDataset::open(out).unwrap();
    let split = LinkSplit::open(out, mapped.data()).unwrap();
    let directed = before.meta.directed;
    assert_eq!(after.meta.directed, directed);
    assert_eq!(after.meta.num_edges, after.graph.num_edges());
    assert_eq!(summary.meta, after.meta);
    let old: Vec<_> = entries(&before);
    let new: Vec<_> = entries(&after);
    let old_set: HashSet<(NodeId, NodeId)> = old.iter().map(|&(s, d, _)| (s, d)).collect();
    let new_set: HashSet<(NodeId, NodeId)> = new.iter().map(|&(s, d, _)| (s, d)).collect();
    // Candidates: pairs of distinct nodes joined in either direction.
    let candidates: HashSet<(NodeId, NodeId)> = old
        .iter()
        .filter(|e| e.0 != e.1)
        .map(|&(s, d, _)| unordered(s, d))
        .collect();
    let count = |share: f64| (share * candidates.len() as f64).round() as usize;
    let (train, valid, test) = (
        pairs(out, LinkSet::TrainPos),
        pairs(out, LinkSet::ValidPos),
        pairs(out, LinkSet::TestPos),
    );
    assert_eq!(summary.candidates, candidates.len() as u64);
    assert_eq!(valid.len(), count(cfg.valid));
    assert_eq!(test.len(), count(cfg.test));
    assert_eq!(
        [summary.train, summary.valid, summary.test],
        [train.len(), valid.len(), test.len()].map(|c| c as u64)
    );
    // Held-out positives: edges of the original graph, in no direction left, each pair once.
    let held: HashSet<(NodeId, NodeId)> = valid
        .iter()
        .chain(&test)
        .map(|&(s, d)| unordered(s, d))
        .collect();
    assert_eq!(held.len(), valid.len() + test.len());
    for &(s, d) in valid.iter().chain(&test) {
        assert!(old_set.contains(&(s, d)), "{s} -> {d} was no edge");
        assert!(!new_set.contains(&(s, d)) && !new_set.contains(&(d, s)));
    }
    // The graph: the original's edges less the held-out pairs', weights with their edges.
    let mut kept: BTreeMap<(NodeId, NodeId, u32), usize> = BTreeMap::new();
    for &(s, d, w) in &old {
        if s == d || !held.contains(&unordered(s, d)) {
            *kept.entry((s, d, w.to_bits())).or_default() += 1;
        }
    }
    let mut got: BTreeMap<(NodeId, NodeId, u32), usize> = BTreeMap::new();
    for &(s, d, w) in &new {
        *got.entry((s, d, w.to_bits())).or_default() += 1;
    }
    assert_eq!(kept, got);
    assert_eq!(summary.removed_edges as usize, old.len() - new.len());
    if let Some(w) = &after.edge_weight {
        assert!(new.iter().all(|&(s, d, x)| x == weight_of(s, d)));
        assert_eq!(w.len(), new.len());
    }
    // Supervision: every distinct edge left (one direction per undirected pair, u < v).
    let train_set: HashSet<(NodeId, NodeId)> = train.iter().copied().collect();
    assert_eq!(train_set.len(), train.len(), "a supervision edge repeats");
    let expected: HashSet<(NodeId, NodeId)> = new_set
        .iter()
        .copied()
        .filter(|&(s, d)| s != d && (directed || s < d))
        .collect();
    assert_eq!(train_set, expected);
    // Every candidate is held out or supervises.
    let covered: HashSet<(NodeId, NodeId)> = train_set
        .iter()
        .map(|&(s, d)| unordered(s, d))
        .chain(held.iter().copied())
        .collect();
    assert_eq!(covered, candidates);
    // Negatives: non-edges of the whole graph, not loops, one per positive.
    let joined = |u: NodeId, w: NodeId| old_set.contains(&(u, w)) || old_set.contains(&(w, u));
    for (positives, set, file) in [
        (&valid, LinkSet::ValidNeg, NEG_DST_FILES[0]),
        (&test, LinkSet::TestNeg, NEG_DST_FILES[1]),
    ] {
        let negatives = pairs(out, set);
        assert_eq!(negatives.len(), positives.len());
        assert!(negatives.iter().all(|&(u, w)| u != w && !joined(u, w)));
        let path = out.join(LINK_SPLIT_DIR).join(file);
        if cfg.neg_dst == 0 {
            assert!(!path.exists());
            continue;
        }
        let dst = npy::read::<i64>(&path).unwrap();
        assert_eq!(dst.shape, [positives.len(), cfg.neg_dst]);
        for (i, &(u, _)) in positives.iter().enumerate() {
            let row = &dst.data[i * cfg.neg_dst..(i + 1) * cfg.neg_dst];
            assert!(row
                .iter()
                .all(|&w| w as NodeId != u && !joined(u, w as NodeId)));
        }
    }
    assert_eq!(split.neg_dst(true).is_some(), cfg.neg_dst > 0);
    // The rest of the dataset is copied.
    assert_eq!(after.labels, before.labels);
    assert_eq!(after.train_idx, before.train_idx);
    assert_eq!(after.meta.feat_dim, before.meta.feat_dim);
    assert_eq!(
        after
            .features
            .cast(DType::F32)
            .unwrap()
            .as_slice::<f32>()
            .unwrap(),
        before
            .features
            .cast(DType::F32)
            .unwrap()
            .as_slice::<f32>()
            .unwrap()
    );
}

#[test]
fn an_undirected_split_has_exact_counts_and_no_held_out_edge_left() {
    let root = scratch("undirected");
    let input = root.join("in");
    generate(&SyntheticConfig {
        nodes: 400,
        avg_degree: 8,
        feat_dim: 4,
        ..Default::default()
    })
    .unwrap()
    .save(&input)
    .unwrap();
    let cfg = LinkSplitConfig {
        valid: 0.05,
        test: 0.1,
        seed: 3,
        neg_dst: 20,
    };
    let out = root.join("out");
    let summary = run(&input, &cfg, &out).unwrap();
    // Both directions of each held-out pair left (repeated edges more).
    assert!(summary.removed_edges >= 2 * (summary.valid + summary.test));
    check_split(&input, &out, &cfg, &summary);
    // The features are shared, not copied, on one file system.
    use std::os::unix::fs::MetadataExt;
    let inode = |dir: &Path| std::fs::metadata(dir.join("node_feat.npy")).unwrap().ino();
    assert_eq!(inode(&input), inode(&out));
    // The output may be written again (its link_split folder is the writer's own).
    run(&input, &cfg, &out).unwrap();
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_directed_split_with_reciprocal_edges_unsorted_rows_and_weights_keeps_them_paired() {
    let root = scratch("directed");
    let input = root.join("in");
    dataset(directed_graph(300), true, true)
        .save(&input)
        .unwrap();
    let cfg = LinkSplitConfig {
        valid: 0.1,
        test: 0.2,
        seed: 5,
        neg_dst: 7,
    };
    let out = root.join("out");
    let summary = run(&input, &cfg, &out).unwrap();
    check_split(&input, &out, &cfg, &summary);
    // Some held-out pair had both directions, and both left the graph.
    assert!(summary.removed_edges > summary.valid + summary.test);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn the_split_is_a_function_of_the_seed() {
    let root = scratch("seed");
    let input = root.join("in");
    generate(&SyntheticConfig {
        nodes: 200,
        avg_degree: 6,
        ..Default::default()
    })
    .unwrap()
    .save(&input)
    .unwrap();
    let files = |dir: &Path| -> Vec<(String, Vec<u8>)> {
        let mut all = Vec::new();
        for sub in [dir.to_path_buf(), dir.join(LINK_SPLIT_DIR)] {
            for e in std::fs::read_dir(&sub).unwrap().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if e.path().is_file() && name.ends_with(".npy") {
                    all.push((name, std::fs::read(e.path()).unwrap()));
                }
            }
        }
        all.sort();
        all
    };
    let mut cfg = LinkSplitConfig::default();
    let (a, b, c) = (root.join("a"), root.join("b"), root.join("c"));
    run(&input, &cfg, &a).unwrap();
    run(&input, &cfg, &b).unwrap();
    assert_eq!(files(&a), files(&b));
    cfg.seed = 1;
    run(&input, &cfg, &c).unwrap();
    assert_ne!(
        pairs(&a, LinkSet::TestPos),
        pairs(&c, LinkSet::TestPos),
        "another seed holds out other edges"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn no_neg_dst_writes_no_neg_dst_files() {
    let root = scratch("no-neg-dst");
    let input = root.join("in");
    dataset(directed_graph(100), true, false)
        .save(&input)
        .unwrap();
    let cfg = LinkSplitConfig {
        neg_dst: 0,
        ..Default::default()
    };
    let out = root.join("out");
    let summary = run(&input, &cfg, &out).unwrap();
    check_split(&input, &out, &cfg, &summary);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn shares_outside_the_unit_interval_or_holding_out_everything_are_refused() {
    let root = scratch("shares");
    let input = root.join("in");
    dataset(directed_graph(50), true, false)
        .save(&input)
        .unwrap();
    for (valid, test, name) in [
        (-0.1, 0.1, "--valid"),
        (0.1, 1.0, "--test"),
        (f64::NAN, 0.1, "--valid"),
        (0.5, 0.5, "--valid"),
    ] {
        let cfg = LinkSplitConfig {
            valid,
            test,
            ..Default::default()
        };
        let err = run(&input, &cfg, &root.join("out"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(name), "{err}");
        assert!(!root.join("out").exists());
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_graph_without_edges_or_with_too_few_is_a_clear_error() {
    let root = scratch("few");
    let cases: [(&str, Csr, &str); 3] = [
        (
            "none",
            Csr::from_edges(5, &[], &[]),
            "holds no edge between two",
        ),
        (
            "loops",
            Csr::from_edges(5, &[1, 2], &[1, 2]),
            "holds no edge between two",
        ),
        (
            "few",
            Csr::from_edges(5, &[0, 1, 2], &[1, 2, 3]),
            "too few to hold out",
        ),
    ];
    for (name, graph, why) in cases {
        let input = root.join(name);
        dataset(graph, true, false).save(&input).unwrap();
        let err = run(&input, &LinkSplitConfig::default(), &root.join("out"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("csr_col_idx.npy") && err.contains(why),
            "{err}"
        );
        assert!(!root.join("out").exists());
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_graph_too_dense_for_negatives_is_a_clear_error() {
    let root = scratch("dense");
    let input = root.join("in");
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for u in 0..6 {
        for v in 0..6 {
            if u != v {
                src.push(u);
                dst.push(v);
            }
        }
    }
    dataset(Csr::from_edges(6, &src, &dst), false, false)
        .save(&input)
        .unwrap();
    let cfg = LinkSplitConfig {
        valid: 0.1,
        test: 0.1,
        neg_dst: 3,
        ..Default::default()
    };
    let err = run(&input, &cfg, &root.join("out"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("too dense"), "{err}");
    // More negative destinations than nodes are refused before any pass.
    let cfg = LinkSplitConfig { neg_dst: 6, ..cfg };
    let err = run(&input, &cfg, &root.join("out"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("fewer than the nodes"), "{err}");
    assert!(!root.join("out").exists());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn an_undirected_graph_whose_edges_lack_their_reverse_is_refused() {
    let root = scratch("asymmetric");
    let input = root.join("in");
    dataset(directed_graph(50), false, false)
        .save(&input)
        .unwrap();
    let err = run(&input, &LinkSplitConfig::default(), &root.join("out"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"directed\": true"), "{err}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn an_output_in_the_dataset_is_refused_and_the_dataset_kept() {
    let root = scratch("inside");
    let input = root.join("in");
    dataset(directed_graph(50), true, false)
        .save(&input)
        .unwrap();
    let before = std::fs::read(input.join("csr_col_idx.npy")).unwrap();
    for out in [input.clone(), input.join("split")] {
        let err = run(&input, &LinkSplitConfig::default(), &out)
            .unwrap_err()
            .to_string();
        assert!(err.contains("input"), "{err}");
    }
    assert_eq!(
        std::fs::read(input.join("csr_col_idx.npy")).unwrap(),
        before
    );
    assert!(!input.join(LINK_SPLIT_DIR).exists());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn features_that_cannot_be_linked_are_copied_in_chunks() {
    let root = scratch("copy");
    let bytes: Vec<u8> = (0..(3 << 22) + 5).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("a"), &bytes).unwrap();
    let last = std::sync::Mutex::new((0, 0));
    copy_in_chunks(&root.join("a"), &root.join("b"), &|done, total| {
        *last.lock().unwrap() = (done, total)
    })
    .unwrap();
    assert_eq!(std::fs::read(root.join("b")).unwrap(), bytes);
    let n = bytes.len() as u64;
    assert_eq!(*last.lock().unwrap(), (n, n));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_split_whose_sets_leak_into_one_another_is_refused_naming_the_file() {
    let root = scratch("leaks");
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
    run(&input, &cfg, &out).unwrap();
    let dir = out.join(LINK_SPLIT_DIR);
    let read = |name: &str| npy::read::<i64>(&dir.join(name)).unwrap().data;
    let write = |name: &str, flat: &[i64]| {
        npy::write(&dir.join(name), flat, &[2, flat.len() / 2]).unwrap();
    };
    let open_error = || {
        let ds = Dataset::load(&out).unwrap();
        match LinkSplit::open(&out, ds.data()) {
            Ok(_) => String::from("opened"),
            Err(e) => e.to_string(),
        }
    };
    assert_eq!(open_error(), "opened");
    let (train, valid, valid_neg) = (
        read("train_pos.npy"),
        read("valid_pos.npy"),
        read("valid_neg.npy"),
    );
    // Pairs as [2, E]: sources, then destinations.
    let with_pair = |flat: &[i64], (u, v): (i64, i64)| {
        let e = flat.len() / 2;
        let mut out = flat[..e].to_vec();
        out.push(u);
        out.extend_from_slice(&flat[e..]);
        out.push(v);
        out
    };
    let first = |flat: &[i64]| (flat[0], flat[flat.len() / 2]);
    let cases: [(&str, Vec<i64>, &str); 3] = [
        // A validation edge, reversed, among the supervision pairs.
        (
            "train_pos.npy",
            with_pair(&train, (first(&valid).1, first(&valid).0)),
            "leaks into training",
        ),
        ("train_pos.npy", with_pair(&train, (7, 7)), "self-loop"),
        // A supervision edge (an edge of the graph) as a validation negative.
        (
            "valid_neg.npy",
            {
                let mut flat = valid_neg.clone();
                let e = flat.len() / 2;
                (flat[0], flat[e]) = first(&train);
                flat
            },
            "is an edge of the graph",
        ),
    ];
    for (file, flat, expect) in cases {
        let original = read(file);
        write(file, &flat);
        let err = open_error();
        assert!(err.contains(file) && err.contains(expect), "{err}");
        write(file, &original);
    }
    std::fs::remove_file(dir.join("test_neg_dst.npy")).unwrap();
    let err = open_error();
    assert!(
        err.contains("test_neg_dst.npy") && err.contains("is missing"),
        "{err}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}
