//! The edge-list and .npz converters and the synthetic generators on small files written here
//! (OGB's layouts: `ogb.rs`).

use std::io::Write;
use std::path::PathBuf;

use graphloom_convert::{edgelist, npz};
use graphloom_graph::npy;

mod common;
use common::scratch;

/// Writes the edge list `edges` (with optional features and labels) to `out` with a buffer of
/// `buffer` bytes, and loads the result.
fn edge_list(
    edges: &std::path::Path,
    features: Option<&std::path::Path>,
    labels: Option<&std::path::Path>,
    num_nodes: Option<usize>,
    undirected: bool,
    out: &std::path::Path,
    buffer: usize,
) -> graphloom_graph::Result<graphloom_graph::Dataset> {
    let input = edgelist::EdgeListInput {
        edges,
        features,
        labels,
        num_nodes,
        undirected,
        seed: 0,
        split: None,
    };
    edgelist::write(&input, out, buffer, &|_, _, _| {})?;
    graphloom_graph::Dataset::load(out)
}

#[test]
fn edgelist_text_with_features_and_labels() {
    let d = scratch("edgelist");
    std::fs::write(d.join("e.txt"), "# comment\n0 1\n1,2\n2\t3\n3 3\n").unwrap();
    npy::write(
        &d.join("x.npy"),
        &[1f32, 2., 3., 4., 5., 6., 7., 8.],
        &[4, 2],
    )
    .unwrap();
    npy::write(&d.join("y.npy"), &[0i64, 1, 0, 1], &[4]).unwrap();
    let out = d.join("ds");
    let ds = edge_list(
        &d.join("e.txt"),
        Some(&d.join("x.npy")),
        Some(&d.join("y.npy")),
        None,
        true,
        &out,
        1 << 20,
    )
    .unwrap();
    assert_eq!(
        (ds.meta.num_nodes, ds.meta.num_edges, ds.meta.num_classes),
        (4, 6, 2)
    );
    assert_eq!(ds.graph.in_neighbors(1), &[0, 2]);
    assert_eq!(ds.features.as_slice::<f32>().unwrap()[7], 8.0);
    std::fs::write(d.join("bad.txt"), "0 1\n1 x\n").unwrap();
    let err = edge_list(&d.join("bad.txt"), None, None, None, true, &out, 1 << 20)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("bad.txt") && err.contains("line 2"), "{err}");
    let err = edge_list(&d.join("e.txt"), None, None, Some(3), true, &out, 1 << 20)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("outside 0..3"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// Edge lists streamed through a small buffer (many passes) give the graph built in memory:
/// directed with duplicates and self-loops kept, or undirected and simple; from `.npy` arrays
/// of either layout and from text.
#[test]
fn streamed_edge_lists_equal_the_graph_built_in_memory() {
    use graphloom_graph::Csr;
    let d = scratch("edgelist-stream");
    let n = 300u32;
    let key = graphloom_tensor::rng::RngKey::new(9, 0, 1);
    let (src, dst): (Vec<u32>, Vec<u32>) = (0..4000u64)
        .map(|e| {
            (
                (key.bits(e, 0) % 40) as u32 * 7 % n,
                (key.bits(e, 1) % n as u64) as u32,
            )
        })
        .unzip();
    let directed = Csr::from_edges(n as usize, &src, &dst);
    let undirected = directed.to_undirected_simple();
    let pairs: Vec<i64> = src
        .iter()
        .zip(&dst)
        .flat_map(|(&s, &t)| [s as i64, t as i64])
        .collect();
    npy::write(&d.join("rows.npy"), &pairs, &[src.len(), 2]).unwrap();
    let columns: Vec<i32> = src.iter().chain(&dst).map(|&v| v as i32).collect();
    npy::write(&d.join("cols.npy"), &columns, &[2, src.len()]).unwrap();
    let text: String = src
        .iter()
        .zip(&dst)
        .map(|(s, t)| format!("{s} {t}\n"))
        .collect();
    std::fs::write(d.join("e.txt"), text).unwrap();
    for file in ["rows.npy", "cols.npy", "e.txt"] {
        for (simple, expect) in [(false, &directed), (true, &undirected)] {
            let ds = edge_list(
                &d.join(file),
                None,
                None,
                Some(n as usize),
                simple,
                &d.join("ds"),
                512,
            )
            .unwrap();
            assert_eq!(&ds.graph, expect, "{file}, undirected {simple}");
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// Writes `g.npz` in `d`: a 3-node graph in the GNN-benchmark layout whose `adj_indices` are
/// written by `indices`.
fn benchmark_npz(d: &std::path::Path, indices: &dyn Fn(&std::path::Path)) -> PathBuf {
    let entry = |name: &str, f: &dyn Fn(&std::path::Path)| {
        let p = d.join(name);
        f(&p);
        std::fs::read(&p).unwrap()
    };
    let files = [
        (
            "adj_indptr.npy",
            entry("a.npy", &|p| npy::write(p, &[0i32, 1, 2, 3], &[4]).unwrap()),
        ),
        ("adj_indices.npy", entry("b.npy", indices)),
        (
            "adj_data.npy",
            entry("c.npy", &|p| npy::write(p, &[1f32, 1., 1.], &[3]).unwrap()),
        ),
        (
            "attr_matrix.npy",
            entry("d.npy", &|p| {
                npy::write(p, &[1f32, 0., 0., 1., 1., 1.], &[3, 2]).unwrap()
            }),
        ),
        (
            "labels.npy",
            entry("e.npy", &|p| npy::write(p, &[0i64, 1, 1], &[3]).unwrap()),
        ),
    ];
    let path = d.join("g.npz");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    for (name, bytes) in files {
        zip.start_file(name, zip::write::SimpleFileOptions::default())
            .unwrap();
        zip.write_all(&bytes).unwrap();
    }
    zip.finish().unwrap();
    path
}

#[test]
fn npz_gnn_benchmark_layout() {
    let d = scratch("npz");
    // Node ids are integers: floats (1.5 would be node 1) are refused.
    benchmark_npz(&d, &|p| npy::write(p, &[1.5f64, 2.0, 0.0], &[3]).unwrap());
    let err = npz::convert(&d.join("g.npz"), true, 1)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("adj_indices") && err.contains("expected an integer dtype"),
        "{err}"
    );
    benchmark_npz(&d, &|p| npy::write(p, &[1i32, 2, 0], &[3]).unwrap());
    let ds = npz::convert(&d.join("g.npz"), true, 1).unwrap();
    assert_eq!(
        (
            ds.meta.num_nodes,
            ds.meta.num_edges,
            ds.meta.feat_dim,
            ds.meta.num_classes
        ),
        (3, 6, 2, 2)
    );
    assert_eq!(
        ds.train_idx.len() + ds.valid_idx.len() + ds.test_idx.len(),
        3
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn rmat_graphs_have_power_law_hubs_and_sbm_graphs_do_not() {
    use graphloom_convert::synthetic::{generate, EdgeModel, SyntheticConfig};
    let max_over_mean = |edge_model| {
        let ds = generate(&SyntheticConfig {
            nodes: 1 << 13,
            avg_degree: 16,
            feat_dim: 2,
            edge_model,
            ..Default::default()
        })
        .unwrap();
        ds.graph.check().unwrap();
        assert_eq!(ds.graph.num_edges(), (1 << 13) * 16);
        let (src, dst) = ds.graph.edges();
        assert!(src.iter().zip(&dst).all(|(s, d)| s != d), "a self-loop");
        let degrees = ds.graph.in_degrees();
        *degrees.iter().max().unwrap() as f64 / 16.0
    };
    // Poisson(16) stays below 3x its mean among 8k nodes; R-MAT's hubs are far above.
    assert!(max_over_mean(EdgeModel::Sbm) < 3.0);
    assert!(max_over_mean(EdgeModel::Rmat) > 20.0);
}

/// The share of the expected degree mass held by the top 1% of ranks of the power-law model,
/// from the continuous distribution in f64 (an independent reference of the generator's
/// inverse-transform draws), and the expected share of isolated nodes.
fn power_law_expectations(n: usize, avg_degree: f64) -> (f64, f64) {
    let alpha = 1.0 / 1.2;
    let offset = (n as f64 * 1e-3).max(1.0);
    let cdf = |x: f64| (x + offset).powf(1.0 - alpha);
    let total = cdf(n as f64) - cdf(0.0);
    let top = (n as f64 / 100.0).ceil();
    let share = (cdf(top) - cdf(0.0)) / total;
    let isolated = (0..n)
        .map(|r| {
            let p = (cdf(r as f64 + 1.0) - cdf(r as f64)) / total;
            (-(avg_degree * n as f64) * p).exp()
        })
        .sum::<f64>()
        / n as f64;
    (share, isolated)
}

#[test]
fn power_law_graphs_have_the_shape_of_a_citation_graph() {
    use graphloom_convert::synthetic::{generate, EdgeModel, SyntheticConfig};
    let (n, avg) = (100_000, 29);
    let ds = generate(&SyntheticConfig {
        nodes: n,
        avg_degree: avg,
        feat_dim: 1,
        classes: 10,
        homophily: 0.5,
        edge_model: EdgeModel::PowerLaw,
        ..Default::default()
    })
    .unwrap();
    ds.graph.check().unwrap();
    let (src, dst) = ds.graph.edges();
    assert!(src.iter().zip(&dst).all(|(s, d)| s != d), "a self-loop");
    let mut degrees = ds.graph.in_degrees();
    // Undirected: every pair is stored both ways, so in-degrees are degrees.
    let mut reversed: Vec<(u32, u32)> = dst.iter().zip(&src).map(|(&a, &b)| (a, b)).collect();
    let mut forward: Vec<(u32, u32)> = src.iter().zip(&dst).map(|(&a, &b)| (a, b)).collect();
    reversed.sort_unstable();
    forward.sort_unstable();
    assert_eq!(reversed, forward, "every edge is stored in both directions");
    // Hubs are spread over the ids, not clustered at the low ones.
    let mut by_degree: Vec<usize> = (0..n).collect();
    by_degree.sort_by_key(|&v| std::cmp::Reverse(degrees[v]));
    let hubs = &by_degree[..n / 100];
    let mean_id = hubs.iter().sum::<usize>() as f64 / hubs.len() as f64;
    assert!(
        (mean_id / n as f64 - 0.5).abs() < 0.1,
        "hubs at mean id {mean_id}"
    );
    degrees.sort_unstable_by(|a, b| b.cmp(a));
    let edges = degrees.iter().map(|&d| d as u64).sum::<u64>() as f64;
    let share = degrees[..n / 100].iter().map(|&d| d as u64).sum::<u64>() as f64 / edges;
    let isolated = degrees.iter().filter(|&&d| d == 0).count() as f64 / n as f64;
    let (drawn_share, expected_isolated) = power_law_expectations(n, avg as f64);
    // Homophily moves a pair's source to a node near it in id, which is a node drawn at
    // random in rank: a share `moved` of the sources leave their drawn node, and each edge is
    // one source and one destination of the undirected pairs.
    let moved = 0.5 * (1.0 - 1.0 / 10.0);
    let expected_share = drawn_share * (1.0 - moved / 2.0) + 0.01 * moved / 2.0;
    assert!((0.10..=0.30).contains(&share), "top 1% share {share}");
    assert!(isolated <= 0.05, "isolated share {isolated}");
    // The sampled top share is the expected one up to the draws' noise and the hubs' order.
    assert!(
        (share - expected_share).abs() < 0.03,
        "{share} vs {expected_share}"
    );
    assert!(
        isolated <= expected_isolated + 0.01,
        "{isolated} vs {expected_isolated}"
    );
    // Homophily: about half the pairs are moved into one class, a tenth of the rest join one.
    let same = src
        .iter()
        .zip(&dst)
        .filter(|(s, d)| *s % 10 == *d % 10)
        .count() as f64;
    let same = same / src.len() as f64;
    assert!((same - 0.55).abs() < 0.02, "same-class share {same}");
}

#[test]
fn ordered_power_law_graphs_put_the_hubs_at_the_low_ids() {
    use graphloom_convert::synthetic::{generate, EdgeModel, SyntheticConfig};
    let (n, avg) = (50_000, 10);
    let of = |edge_model| {
        generate(&SyntheticConfig {
            nodes: n,
            avg_degree: avg,
            feat_dim: 1,
            classes: 10,
            // Homophily moves a source to an id near it, which would keep hubs' edges near
            // the hubs in one model only: none, so the two models' degrees compare.
            homophily: 0.0,
            edge_model,
            ..Default::default()
        })
        .unwrap()
    };
    let (ordered, spread) = (of(EdgeModel::PowerLawOrdered), of(EdgeModel::PowerLaw));
    ordered.graph.check().unwrap();
    let mut degrees = ordered.graph.in_degrees();
    // The first 1% of ids hold the hubs: far above their 1% share of the edges, and the top
    // 1% by degree lie in the first tenth of the ids.
    let edges = ordered.graph.num_edges() as f64;
    let first = degrees[..n / 100].iter().map(|&d| d as f64).sum::<f64>() / edges;
    assert!(first > 0.1, "the first 1% of ids hold {first} of the edges");
    let mut by_degree: Vec<usize> = (0..n).collect();
    by_degree.sort_by_key(|&v| std::cmp::Reverse(degrees[v]));
    let mean_id = by_degree[..n / 100].iter().sum::<usize>() as f64 / (n / 100) as f64;
    assert!(mean_id < 0.1 * n as f64, "hubs at mean id {mean_id}");
    // Degree falls with the id: each tenth of the ids holds fewer edges than the one before.
    let tenths: Vec<u64> = degrees
        .chunks(n / 10)
        .map(|c| c.iter().map(|&d| d as u64).sum())
        .collect();
    assert!(tenths.windows(2).all(|w| w[0] > w[1]), "{tenths:?}");
    // The same degree distribution as the spread model's, only numbered otherwise.
    let top_share = |d: &mut Vec<usize>| {
        d.sort_unstable_by(|a, b| b.cmp(a));
        d[..n / 100].iter().map(|&x| x as f64).sum::<f64>() / edges
    };
    let (a, b) = (
        top_share(&mut degrees),
        top_share(&mut spread.graph.in_degrees()),
    );
    assert!(
        (a - b).abs() < 0.03,
        "top 1% share {a} ordered against {b} spread"
    );
}

#[test]
fn the_summary_counts_the_top_percent_of_in_degrees() {
    use graphloom_convert::synthetic::{write, EdgeModel, SyntheticConfig};
    use graphloom_graph::{Dataset, DatasetSummary};
    let dir = std::env::temp_dir().join(format!("graphloom-summary-top-{}", std::process::id()));
    let cfg = SyntheticConfig {
        nodes: 5000,
        avg_degree: 12,
        feat_dim: 1,
        edge_model: EdgeModel::PowerLaw,
        ..Default::default()
    };
    write(&cfg, &dir, 1 << 20, &|_, _, _| ()).unwrap();
    let stats = DatasetSummary::read(&dir).unwrap().degrees.unwrap();
    let ds = Dataset::load(&dir).unwrap();
    let mut degrees = ds.graph.in_degrees();
    degrees.sort_unstable_by(|a, b| b.cmp(a));
    let top: u64 = degrees[..50].iter().map(|&d| d as u64).sum();
    let naive = top as f64 / ds.graph.num_edges() as f64;
    assert!((stats.top_percent_share - naive).abs() < 1e-12);
    assert_eq!(
        stats.isolated as usize,
        degrees.iter().filter(|&&d| d == 0).count()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn streamed_synthetic_datasets_equal_the_ones_generated_in_memory() {
    use graphloom_convert::synthetic::{generate, write, EdgeModel, SplitSizes, SyntheticConfig};
    use graphloom_graph::{Dataset, MappedDataset};
    use graphloom_tensor::DType;
    let root = std::env::temp_dir().join(format!("graphloom-stream-{}", std::process::id()));
    let configs = [
        SyntheticConfig {
            nodes: 3000,
            avg_degree: 9,
            feat_dim: 5,
            ..Default::default()
        },
        SyntheticConfig {
            nodes: 5000,
            edges: Some(40_000),
            edge_model: EdgeModel::Rmat,
            classes: 7,
            feat_dim: 3,
            feat_dtype: DType::BF16,
            split: SplitSizes::Counts(300, 50, 70),
            seed: 5,
            ..Default::default()
        },
    ];
    for (k, cfg) in configs.iter().enumerate() {
        let dir = root.join(format!("d{k}"));
        let phases = std::sync::Mutex::new(Vec::new());
        // A buffer of 4 KiB: many passes over the edges, each placing a few rows.
        write(cfg, &dir, 4096, &|phase, _, _| {
            let mut p = phases.lock().unwrap();
            if p.last() != Some(&phase) {
                p.push(phase);
            }
        })
        .unwrap();
        assert_eq!(phases.into_inner().unwrap().len(), 4);
        let streamed = Dataset::load(&dir).unwrap();
        let memory = generate(cfg).unwrap();
        assert_eq!(streamed.meta, memory.meta);
        assert_eq!(streamed.graph, memory.graph);
        assert_eq!(streamed.labels, memory.labels);
        assert_eq!(
            (&streamed.train_idx, &streamed.valid_idx, &streamed.test_idx),
            (&memory.train_idx, &memory.valid_idx, &memory.test_idx)
        );
        assert_eq!(streamed.features.dtype(), memory.features.dtype());
        assert_eq!(streamed.features.as_bytes(), memory.features.as_bytes());
        let mapped = MappedDataset::open(&dir).unwrap();
        let (a, b) = (mapped.data(), memory.data());
        assert_eq!(
            (a.row_ptr, a.col_idx, a.labels),
            (b.row_ptr, b.col_idx, b.labels)
        );
        assert_eq!(a.train_idx, b.train_idx);
    }
    // Split counts leave the other nodes unlabelled, and R-MAT's edges carry the classes.
    let ds = generate(&configs[1]).unwrap();
    let labelled = ds.labels.iter().filter(|&&l| l >= 0).count();
    assert_eq!(labelled, 420);
    let (src, dst) = ds.graph.edges();
    let same = src
        .iter()
        .zip(&dst)
        .filter(|(s, d)| *s % 7 == *d % 7)
        .count() as f64;
    let share = same / src.len() as f64;
    // homophily 0.5 plus 1/7 of the rest by chance: about 0.57.
    assert!((share - (0.5 + 0.5 / 7.0)).abs() < 0.02, "{share}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn mapped_datasets_check_their_files_once_and_again_when_they_change() {
    use graphloom_convert::synthetic::{generate, SplitSizes, SyntheticConfig};
    use graphloom_graph::{npy, MappedDataset};
    let dir = std::env::temp_dir().join(format!("graphloom-mapped-{}", std::process::id()));
    let ds = generate(&SyntheticConfig {
        nodes: 500,
        split: SplitSizes::Counts(100, 50, 50),
        ..Default::default()
    })
    .unwrap();
    ds.save(&dir).unwrap();
    MappedDataset::open(&dir).unwrap();
    let records = std::fs::read_to_string(dir.join(".graphloom-checks.json")).unwrap();
    for name in [
        "csr_row_ptr.npy",
        "csr_col_idx.npy",
        "node_label.npy",
        "node_feat.npy",
    ] {
        assert!(records.contains(name), "{records}");
    }
    // A lowered num_classes in meta.json is checked against the labels again, although the
    // label file did not change.
    let meta_path = dir.join("meta.json");
    let meta_text = std::fs::read_to_string(&meta_path).unwrap();
    let classes = format!("\"num_classes\": {}", ds.meta.num_classes);
    assert!(meta_text.contains(&classes), "{meta_text}");
    std::fs::write(
        &meta_path,
        meta_text.replace(&classes, "\"num_classes\": 2"),
    )
    .unwrap();
    let err = MappedDataset::open(&dir).err().unwrap().to_string();
    assert!(
        err.contains("node_label.npy") && err.contains("outside 0..2"),
        "{err}"
    );
    std::fs::write(&meta_path, &meta_text).unwrap();
    MappedDataset::open(&dir).unwrap();
    // A label out of range written after the check is found: the file changed.
    let mut labels = ds.labels.clone();
    labels[3] = 99;
    npy::write(&dir.join("node_label.npy"), &labels, &[labels.len()]).unwrap();
    let err = MappedDataset::open(&dir).err().unwrap().to_string();
    assert!(
        err.contains("node_label.npy") && err.contains("node 3"),
        "{err}"
    );
    // A split node without a label.
    let mut labels = ds.labels.clone();
    labels[ds.valid_idx[0]] = -1;
    npy::write(&dir.join("node_label.npy"), &labels, &[labels.len()]).unwrap();
    let err = MappedDataset::open(&dir).err().unwrap().to_string();
    assert!(
        err.contains("valid_idx.npy") && err.contains("has no label"),
        "{err}"
    );
    npy::write(&dir.join("node_label.npy"), &ds.labels, &[labels.len()]).unwrap();
    // A truncated column file is named before anything is mapped.
    let col = dir.join("csr_col_idx.npy");
    let bytes = std::fs::read(&col).unwrap();
    std::fs::write(&col, &bytes[..bytes.len() - 4]).unwrap();
    let err = MappedDataset::open(&dir).err().unwrap().to_string();
    assert!(
        err.contains("csr_col_idx.npy") && err.contains("truncated"),
        "{err}"
    );
    std::fs::write(&col, &bytes).unwrap();
    // A NaN in the features left on disk.
    let mut f = ds.features.as_slice::<f32>().unwrap().to_vec();
    f[7] = f32::NAN;
    npy::write(&dir.join("node_feat.npy"), &f, ds.features.shape()).unwrap();
    let err = MappedDataset::open(&dir).err().unwrap().to_string();
    assert!(
        err.contains("node_feat.npy") && err.contains("non-finite"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
