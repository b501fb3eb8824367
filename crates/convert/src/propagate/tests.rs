use std::path::PathBuf;

use graphloom_graph::Dataset;

use super::*;
use crate::synthetic::{generate, SyntheticConfig};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphloom-prop-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A directed R-MAT graph (some nodes without in-edges) of 300 nodes and 5 features, saved.
fn source(dir: &Path) -> PathBuf {
    let ds = generate(&SyntheticConfig {
        nodes: 300,
        edges: Some(1500),
        feat_dim: 5,
        classes: 3,
        seed: 4,
        edge_model: crate::synthetic::EdgeModel::Rmat,
        ..Default::default()
    })
    .unwrap();
    let src = dir.join("src");
    ds.save(&src).unwrap();
    src
}

/// `op`'s hops 1..=k of the features, naively in f64: one row per node, the hops side by side.
fn naive(ds: &Dataset, op: Operator, hops: usize, teleport: f64) -> Vec<Vec<f64>> {
    let (n, f) = (ds.graph.num_nodes(), ds.meta.feat_dim);
    let x = ds.features.to_vec_f64();
    let degree = |v: usize| (ds.graph.row_ptr[v + 1] - ds.graph.row_ptr[v]) as f64;
    let gcn_degree = |v: usize| {
        let (lo, hi) = (
            ds.graph.row_ptr[v] as usize,
            ds.graph.row_ptr[v + 1] as usize,
        );
        degree(v) + f64::from(u8::from(!ds.graph.col_idx[lo..hi].contains(&(v as u32))))
    };
    let mut h = x.clone();
    let mut out = vec![Vec::new(); n];
    for _ in 0..hops {
        let mut next = vec![0.0; n * f];
        for v in 0..n {
            let lo = ds.graph.row_ptr[v] as usize;
            let hi = ds.graph.row_ptr[v + 1] as usize;
            let mut edges: Vec<(usize, f64)> = ds.graph.col_idx[lo..hi]
                .iter()
                .map(|&u| {
                    let u = u as usize;
                    let c = match op {
                        // PyG's: a node without in-edges has D^-1/2 = 0.
                        Operator::Sym if degree(u) == 0.0 => 0.0,
                        Operator::Sym => 1.0 / (degree(u) * degree(v)).sqrt(),
                        _ => 1.0 / (gcn_degree(u) * gcn_degree(v)).sqrt(),
                    };
                    (u, c)
                })
                .collect();
            // GraphLoom's GCN adds a loop where a node has none (R-MAT draws some loops).
            let has_loop = ds.graph.col_idx[lo..hi].contains(&(v as u32));
            if op != Operator::Sym && !has_loop {
                edges.push((v, 1.0 / gcn_degree(v)));
            }
            for (u, c) in edges {
                for j in 0..f {
                    next[v * f + j] += c * h[u * f + j];
                }
            }
            if op == Operator::Ppr {
                for j in 0..f {
                    next[v * f + j] = (1.0 - teleport) * next[v * f + j] + teleport * x[v * f + j];
                }
            }
        }
        h = next;
        for (v, row) in out.iter_mut().enumerate() {
            row.extend_from_slice(&h[v * f..(v + 1) * f]);
        }
    }
    out
}

fn settings(
    hops: usize,
    ops: &[Operator],
    teleport: f64,
    bf16: bool,
    block_bytes: usize,
) -> Settings {
    Settings {
        hops,
        operators: ops.to_vec(),
        teleport,
        bf16,
        block_bytes,
    }
}

fn quiet() -> impl Fn(Phase, u64, u64) + Sync {
    |_, _, _| {}
}

#[test]
fn each_operator_matches_a_naive_f64_propagation() {
    let dir = scratch("naive");
    let src = source(&dir);
    let ds = Dataset::load(&src).unwrap();
    let operators = [Operator::Sym, Operator::Gcn, Operator::Ppr];
    let out = dir.join("out");
    // Small blocks: many of them.
    let meta = propagate(
        &src,
        &out,
        &settings(2, &operators, 0.1, false, 4096),
        &quiet(),
    )
    .unwrap();
    assert_eq!(meta.feat_dim, 5 * 7);
    let got = Dataset::load(&out).unwrap();
    let values = got.features.to_vec_f64();
    let x = ds.features.to_vec_f64();
    for (o, &op) in operators.iter().enumerate() {
        let want = naive(&ds, op, 2, 0.1);
        for v in 0..300 {
            let row = &values[v * 35..(v + 1) * 35];
            assert_eq!(&row[..5], &x[v * 5..(v + 1) * 5]);
            for (i, w) in want[v].iter().enumerate() {
                let g = row[5 + o * 10 + i];
                assert!(
                    (g - w).abs() < 1e-5 * (1.0 + w.abs()),
                    "{op:?} node {v}: {g} vs {w}"
                );
            }
        }
    }
    assert_eq!(got.labels, ds.labels);
    assert_eq!(got.graph.col_idx, ds.graph.col_idx);
    let record = Propagation::read(&out).unwrap().unwrap();
    assert_eq!((record.hops, record.operators), (2, operators.to_vec()));
    assert!(Propagation::read(&src).unwrap().is_none());
}

#[test]
fn a_stopped_run_continues_to_the_bytes_of_an_uninterrupted_one() {
    let dir = scratch("resume");
    let src = source(&dir);
    let ops = [Operator::Gcn, Operator::Ppr];
    let whole = dir.join("whole");
    propagate(&src, &whole, &settings(3, &ops, 0.2, true, 2048), &quiet()).unwrap();
    let out = dir.join("out");
    for stop in [2, 5, 1] {
        let e = propagate_steps(
            &src,
            &out,
            &settings(3, &ops, 0.2, true, 2048),
            &quiet(),
            Some(stop),
        );
        assert!(e.is_err());
        assert!(
            !out.exists(),
            "nothing under the output's name before the end"
        );
    }
    // A run of other settings stopped as it started leaves its own file and record: the
    // next run of the first settings starts over rather than continue over that file.
    let e = propagate_steps(
        &src,
        &out,
        &settings(2, &ops, 0.2, false, 2048),
        &quiet(),
        Some(0),
    );
    assert!(e.is_err());
    propagate(&src, &out, &settings(3, &ops, 0.2, true, 2048), &quiet()).unwrap();
    for name in ["node_feat.npy", "meta.json", PROPAGATION_FILE] {
        let (a, b) = (
            std::fs::read(whole.join(name)).unwrap(),
            std::fs::read(out.join(name)).unwrap(),
        );
        assert!(a == b, "{name} differs");
    }
    assert!(!work_dir(&out).exists(), "the work folder is gone");
    // Other settings start over rather than continue someone else's work.
    let again = dir.join("again");
    let _ = propagate_steps(
        &src,
        &again,
        &settings(3, &ops, 0.2, true, 2048),
        &quiet(),
        Some(3),
    );
    propagate(&src, &again, &settings(2, &ops, 0.2, true, 2048), &quiet()).unwrap();
    assert_eq!(Propagation::read(&again).unwrap().unwrap().hops, 2);
}

#[test]
fn bad_settings_are_refused() {
    let dir = scratch("bad");
    let src = source(&dir);
    let out = dir.join("out");
    for (hops, ops, teleport) in [
        (0, vec![Operator::Sym], 0.1),
        (2, vec![], 0.1),
        (2, vec![Operator::Ppr], 1.0),
    ] {
        assert!(propagate(
            &src,
            &out,
            &settings(hops, &ops, teleport, false, 4096),
            &quiet()
        )
        .is_err());
    }
    assert!(!out.exists());
}
