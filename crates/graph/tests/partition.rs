//! METIS partitioning and the partitioned directory: balanced parts with a small cut, and parts
//! that together hold exactly the graph, its features, labels and splits.

use std::collections::HashSet;

use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::npy;
use graphloom_graph::partition::metis;
use graphloom_graph::parts::Part;

fn dataset() -> graphloom_graph::Dataset {
    generate(&SyntheticConfig {
        nodes: 2000,
        avg_degree: 8,
        feat_dim: 5,
        classes: 4,
        homophily: 0.8,
        seed: 9,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn metis_balances_nodes_and_training_nodes_and_cuts_few_edges() {
    let ds = dataset();
    let p = metis(&ds.graph, &ds.train_idx, 4, 1).unwrap();
    let report = p.report(&ds.data());
    for (q, &n) in report.nodes.iter().enumerate() {
        assert!((n as f64 - 500.0).abs() <= 50.0, "part {q} has {n} nodes");
        let t = report.train_nodes[q] as f64;
        assert!(
            (t - ds.train_idx.len() as f64 / 4.0).abs() <= 0.15 * ds.train_idx.len() as f64 / 4.0,
            "part {q}: {t} training nodes"
        );
    }
    // A random split of 4 parts cuts 3/4 of the edges.
    let cut = report.edge_cut as f64 / ds.graph.num_edges() as f64;
    assert!(cut < 0.6, "cut {cut}");
    assert!(metis(&ds.graph, &ds.train_idx, 2001, 1).is_err());
    assert_eq!(
        metis(&ds.graph, &ds.train_idx, 1, 1).unwrap().part,
        vec![0; 2000]
    );
}

#[test]
fn parts_hold_exactly_the_graph_and_its_data() {
    let ds = dataset();
    let parts = 3;
    let partition = metis(&ds.graph, &ds.train_idx, parts, 2).unwrap();
    let out = std::env::temp_dir().join(format!("graphloom-parts-{}", std::process::id()));
    let report = ds.write_parts(&partition, &out).unwrap();
    let loaded: Vec<Part> = (0..parts).map(|p| Part::load(&out, p).unwrap()).collect();
    // Every original edge, as (original source, original destination), comes back once.
    let mut edges = Vec::new();
    let mut cut = 0;
    for p in &loaded {
        for (q, shard) in p.shards.iter().enumerate() {
            for (i, &dst) in shard.dst.iter().enumerate() {
                for k in shard.ptr[i] as usize..shard.ptr[i + 1] as usize {
                    let src_local = loaded[q].send[p.index][shard.src[k] as usize] as usize;
                    edges.push((loaded[q].orig_ids[src_local], p.orig_ids[dst as usize]));
                    cut += usize::from(q != p.index);
                }
            }
        }
    }
    let mut want: Vec<(i64, i64)> = (0..ds.graph.num_nodes())
        .flat_map(|v| {
            ds.graph
                .in_neighbors(v)
                .iter()
                .map(move |&u| (u as i64, v as i64))
        })
        .collect();
    edges.sort_unstable();
    want.sort_unstable();
    assert_eq!(edges, want);
    assert_eq!(cut, report.edge_cut);
    for p in &loaded {
        let received: usize = (0..parts)
            .filter(|&q| q != p.index)
            .map(|q| loaded[q].send[p.index].len())
            .sum();
        assert_eq!(received, report.halo[p.index]);
        for (i, &v) in p.orig_ids.iter().enumerate() {
            let v = v as usize;
            assert_eq!(p.labels[i], ds.labels[v]);
            assert_eq!(p.in_degree[i] as usize, ds.graph.in_degree(v));
            let width = 5;
            let mine = &p.features.as_slice::<f32>().unwrap()[i * width..(i + 1) * width];
            let orig = &ds.features.as_slice::<f32>().unwrap()[v * width..(v + 1) * width];
            assert_eq!(mine, orig);
        }
    }
    let train: HashSet<i64> = loaded
        .iter()
        .flat_map(|p| p.train_idx.iter().map(|&i| p.orig_ids[i]))
        .collect();
    assert_eq!(train, ds.train_idx.iter().map(|&v| v as i64).collect());
    assert_eq!(loaded[0].meta.num_train, ds.train_idx.len());
    let err = Part::load(&out, parts).unwrap_err().to_string();
    assert!(
        err.contains("part 3 asked of a partition into 3 parts"),
        "{err}"
    );
    // A shard whose destinations do not increase is refused, naming the file.
    let shard = (0..parts)
        .flat_map(|p| (0..parts).map(move |q| (p, q)))
        .map(|(p, q)| (p, out.join(format!("part_{p}/shard_{q}_dst.npy"))))
        .find(|(_, f)| f.exists() && npy::read_ints(f).unwrap().data.len() > 1)
        .unwrap();
    let mut dst = npy::read_ints(&shard.1).unwrap();
    dst.data.swap(0, 1);
    npy::write(&shard.1, &dst.data, &dst.shape).unwrap();
    let err = Part::load(&out, shard.0).unwrap_err().to_string();
    assert!(
        err.contains("_dst.npy") && err.contains("destinations must increase"),
        "{err}"
    );
    std::fs::remove_dir_all(&out).unwrap();
}
