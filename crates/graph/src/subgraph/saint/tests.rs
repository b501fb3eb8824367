use super::*;
use crate::testing::random_dataset;

fn graph() -> crate::Dataset {
    random_dataset(200, 5, 5)
}

#[test]
fn samples_are_keyed_distinct_and_sorted() {
    let ds = graph();
    let data = ds.data();
    for sampler in [
        SaintSampler::Node { budget: 50 },
        SaintSampler::Edge { budget: 30 },
        SaintSampler::RandomWalk {
            roots: 20,
            length: 3,
        },
    ] {
        let saint = Saint::new(sampler, data).unwrap();
        let a = saint.sample(data, 1, 2, 3);
        assert!(!a.is_empty() && a.len() <= sampler.nodes_drawn());
        assert!(a.windows(2).all(|w| w[0] < w[1]), "{sampler:?}");
        assert_eq!(a, saint.sample(data, 1, 2, 3));
        assert_ne!(a, saint.sample(data, 1, 2, 4));
    }
    let zero = |s| Saint::new(s, data).unwrap_err().to_string();
    assert!(zero(SaintSampler::Node { budget: 0 }).contains("saint_budget"));
    let walk = SaintSampler::RandomWalk {
        roots: 3,
        length: 0,
    };
    assert!(zero(walk).contains("walk_length"));
}

#[test]
fn sizes_beyond_the_graph_or_memory_are_refused() {
    let ds = graph();
    let data = ds.data();
    let (n, e) = (data.num_nodes(), data.num_edges());
    let refused = |s| Saint::new(s, data).unwrap_err().to_string();
    let walk = |roots, length| SaintSampler::RandomWalk { roots, length };
    for (sampler, says) in [
        (
            SaintSampler::Node { budget: n + 1 },
            format!("saint_budget: {} is more than the graph's {n} nodes", n + 1),
        ),
        (
            SaintSampler::Edge { budget: e + 1 },
            format!("the graph's {e} edges"),
        ),
        (
            walk(4_294_967_296, 4_294_967_296),
            format!("the graph's {n} nodes: give at most {n}"),
        ),
        (
            walk(n, 1_000_000_000_000),
            format!("walk_length: 1000000000000 steps are more than the graph's {n}"),
        ),
    ] {
        let err = refused(sampler);
        assert!(err.contains(&says), "{err}");
    }
    Saint::new(SaintSampler::Node { budget: n }, data).unwrap();
    Saint::new(walk(n, n), data).unwrap();
    // A sample's size overflows: refused without allocating.
    let huge = walk(usize::MAX / 2, 3);
    assert!(check_sample_fits(huge)
        .unwrap_err()
        .to_string()
        .contains("more bytes than memory addresses"));
    assert!(check_steps(data, n).is_ok());
    for steps in [0, n + 1, 1 << 40] {
        let err = check_steps(data, steps).unwrap_err().to_string();
        assert!(
            err.contains("batches_per_epoch") && err.contains("give 1 to"),
            "{err}"
        );
    }
}

/// A directed graph without self-loops or reciprocal edges, so that a pair of nodes names
/// one edge: 12 nodes, each `v` with in-edges from `v+1 .. v+1+(v % 4)` (mod 12), skipping
/// pairs already joined the other way.
fn one_way_graph() -> (crate::Csr, crate::Meta) {
    let n = 12u32;
    let mut pairs: Vec<(u32, u32)> = Vec::new();
    for v in 0..n {
        for k in 1..=(v % 4) {
            let u = (v + k) % n;
            if !pairs.contains(&(v, u)) {
                pairs.push((u, v));
            }
        }
    }
    let (src, dst): (Vec<u32>, Vec<u32>) = pairs.into_iter().unzip();
    let g = crate::Csr::from_edges(n as usize, &src, &dst);
    let meta = crate::Meta {
        name: "one-way".into(),
        num_nodes: n as usize,
        num_edges: g.num_edges(),
        feat_dim: 0,
        feat_dtype: "f32".into(),
        num_classes: 0,
        directed: true,
    };
    (g, meta)
}

fn data_of<'a>(g: &'a crate::Csr, meta: &'a crate::Meta) -> GraphData<'a> {
    GraphData {
        meta,
        row_ptr: &g.row_ptr,
        col_idx: &g.col_idx,
        labels: &[],
        targets: None,
        edge_features: None,
        train_idx: &[],
        valid_idx: &[],
        test_idx: &[],
    }
}

/// Pearson's statistic of `counts` against probabilities `p` (summing to 1); with fixed
/// seeds, compared with a bound far in the tail (about six standard deviations of the
/// chi-square distribution of `counts.len() - 1` degrees of freedom).
fn assert_chi_square(counts: &[f64], p: &[f64], what: &str) {
    let total: f64 = counts.iter().sum();
    let stat: f64 = counts
        .iter()
        .zip(p)
        .map(|(&c, &q)| (c - total * q).powi(2) / (total * q))
        .sum();
    let df = (counts.len() - 1) as f64;
    assert!(
        stat < df + 6.0 * (2.0 * df).sqrt(),
        "{what}: chi-square {stat} on {df} df"
    );
    // And not suspiciously perfect (a sampler that returned expected counts).
    assert!(stat > 0.0, "{what}");
}

/// The graph's edges as (source, destination, edge id).
fn edges(data: GraphData<'_>) -> Vec<(NodeId, NodeId, usize)> {
    let mut all = Vec::new();
    for v in 0..data.num_nodes() as NodeId {
        let lo = data.row_ptr[v as usize] as usize;
        for (k, &u) in data.in_neighbors(v).iter().enumerate() {
            all.push((u, v, lo + k));
        }
    }
    all
}

#[test]
fn each_sampler_draws_with_its_probabilities() {
    let (g, meta) = one_way_graph();
    let data = data_of(&g, &meta);
    let n = data.num_nodes();
    let all = edges(data);
    let indeg = |v: NodeId| data.in_neighbors(v).len() as f64;
    let draws = 30_000u64;
    // Node sampler, one draw: node v with probability indeg(v) / E.
    let saint = Saint::new(SaintSampler::Node { budget: 1 }, data).unwrap();
    let mut counts = vec![0.0; n];
    for i in 0..draws {
        counts[saint.sample(data, 3, 0, i)[0] as usize] += 1.0;
    }
    let p: Vec<f64> = (0..n as NodeId)
        .map(|v| indeg(v) / all.len() as f64)
        .collect();
    let drawn: Vec<usize> = (0..n).filter(|&v| p[v] > 0.0).collect();
    assert!(drawn.iter().map(|&v| counts[v]).sum::<f64>() == draws as f64);
    assert_chi_square(
        &drawn.iter().map(|&v| counts[v]).collect::<Vec<_>>(),
        &drawn.iter().map(|&v| p[v]).collect::<Vec<_>>(),
        "node sampler",
    );
    // Edge sampler, one edge: u -> v with probability proportional to
    // 1/deg(u) + 1/deg(v), deg the in-degree counted as at least 1.
    let deg = |v: NodeId| indeg(v).max(1.0);
    let saint = Saint::new(SaintSampler::Edge { budget: 1 }, data).unwrap();
    let weight: Vec<f64> = all
        .iter()
        .map(|&(u, v, _)| 1.0 / deg(u) + 1.0 / deg(v))
        .collect();
    let sum: f64 = weight.iter().sum();
    let mut counts = vec![0.0; all.len()];
    for i in 0..draws {
        let s = saint.sample(data, 4, 0, i);
        let k = all
            .iter()
            .position(|&(u, v, _)| s == [u.min(v), u.max(v)])
            .expect("a sample of one edge is its two ends");
        counts[k] += 1.0;
    }
    let p: Vec<f64> = weight.iter().map(|w| w / sum).collect();
    assert_chi_square(&counts, &p, "edge sampler");
    // Random walk of one step from one root: the root uniform, then a uniform in-neighbour
    // (a root without one stays alone).
    let walk = SaintSampler::RandomWalk {
        roots: 1,
        length: 1,
    };
    let saint = Saint::new(walk, data).unwrap();
    let mut outcomes: Vec<(Vec<NodeId>, f64)> = Vec::new();
    for v in 0..n as NodeId {
        if indeg(v) == 0.0 {
            outcomes.push((vec![v], 1.0 / n as f64));
        }
    }
    for &(u, v, _) in &all {
        outcomes.push((vec![u.min(v), u.max(v)], 1.0 / n as f64 / indeg(v)));
    }
    let mut counts = vec![0.0; outcomes.len()];
    for i in 0..draws {
        let s = saint.sample(data, 5, 0, i);
        counts[outcomes.iter().position(|o| o.0 == s).unwrap()] += 1.0;
    }
    let p: Vec<f64> = outcomes.iter().map(|o| o.1).collect();
    assert_chi_square(&counts, &p, "random walk");
}

#[test]
fn the_normalisation_is_pygs_formulas_over_the_samples_counted() {
    let ds = graph();
    let data = ds.data();
    let walk = SaintSampler::RandomWalk {
        roots: 15,
        length: 2,
    };
    let saint = Saint::new(walk, data).unwrap();
    let (coverage, steps) = (3, 4);
    let norm = SaintNorm::estimate(&saint, data, coverage, steps, 9).unwrap();
    // Whole rounds of `steps` samples, the last one reaching the coverage.
    let m = norm.samples();
    assert_eq!(m % steps as u64, 0);
    let samples: Vec<Vec<NodeId>> = (0..m)
        .map(|i| saint.sample(data, 9, NORM_EPOCH, i))
        .collect();
    let held = |k: usize| samples[..k].iter().map(Vec::len).sum::<usize>();
    let target = coverage * data.num_nodes();
    assert!(held(m as usize) >= target && held(m as usize - steps) < target);
    // The counts, naively: a node per sample holding it, an edge per sample holding both
    // of its ends.
    let n = data.num_nodes();
    let all = edges(data);
    let mut node_count = vec![0.0f64; n];
    let mut edge_count = vec![0.0f64; all.len()];
    for s in &samples {
        for &v in s {
            node_count[v as usize] += 1.0;
        }
        for &(u, v, e) in &all {
            if s.contains(&u) && s.contains(&v) {
                edge_count[e] += 1.0;
            }
        }
    }
    // PyG: node_norm = M / count / N with an unseen node counted 0.1; edge_norm =
    // count[node] / count[edge] clamped to [0, 1e4], NaN (0/0) set to 0.1; the node being
    // the edge's destination here (the one that aggregates over it).
    for v in 0..n {
        let c = if node_count[v] == 0.0 {
            0.1
        } else {
            node_count[v]
        };
        assert_eq!(
            norm.node_norm(v as NodeId),
            m as f64 / c / n as f64,
            "node {v}"
        );
    }
    for &(_, v, e) in &all {
        let mut want = (node_count[v as usize] / edge_count[e]).clamp(0.0, 1e4);
        if want.is_nan() {
            want = 0.1;
        }
        assert_eq!(norm.edge_norm(e, v), want, "edge {e}");
    }
    // The fixed sample exercises the clamped case too.
    assert!(all
        .iter()
        .any(|&(_, v, e)| edge_count[e] == 0.0 && node_count[v as usize] > 0.0));
    // Bad coverage is refused.
    let err = |c| {
        SaintNorm::estimate(&saint, data, c, steps, 9)
            .unwrap_err()
            .to_string()
    };
    assert!(err(0).contains("saint_coverage"));
    assert!(err(MAX_COVERAGE + 1).contains("saint_coverage"));
}
