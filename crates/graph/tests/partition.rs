//! METIS and streaming partitioning and the partitioned directory: balanced parts with a small
//! cut, and parts that together hold exactly the graph, its features, labels and splits, written
//! alike from a dataset in memory and from one mapped.

use std::collections::HashSet;

use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_graph::npy;
use graphloom_graph::partition::{
    metis, stream, BalanceOn, Partition, StreamSettings, BLOCKS_FROM,
};
use graphloom_graph::parts::{write_parts, MappedFeatures, Part, PartInputs};
use graphloom_graph::MappedDataset;

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

fn streamed(ds: &graphloom_graph::Dataset, settings: &StreamSettings) -> Partition {
    let (partition, passes) = stream(&ds.data(), settings, &|_, _, _| {}).unwrap();
    assert!(settings.parts == 1 || passes.len() > settings.restreams);
    partition
}

/// The most a part may hold: `balance` times the mean, rounded up.
fn cap(total: usize, parts: usize, balance: f64) -> usize {
    (balance * total as f64 / parts as f64).ceil() as usize
}

#[test]
fn stream_cuts_within_one_and_a_half_of_metis_and_keeps_the_balance() {
    let ds = dataset();
    let n = ds.graph.num_nodes();
    let train = ds.train_idx.len();
    for parts in [2, 4, 8] {
        let metis_cut = metis(&ds.graph, &ds.train_idx, parts, 0)
            .unwrap()
            .report(&ds.data())
            .edge_cut;
        // The groups split by METIS, and (no memory for their graph) placed by Fennel; a
        // node at a time, and (as on large graphs) a block of nodes at a time.
        for (coarse_bytes, blocks_from) in [
            (1 << 30, BLOCKS_FROM),
            (0, BLOCKS_FROM),
            (1 << 30, 0),
            (0, 0),
        ] {
            let settings = StreamSettings {
                parts,
                coarse_bytes,
                blocks_from,
                ..Default::default()
            };
            let report = streamed(&ds, &settings).report(&ds.data());
            let most = if coarse_bytes > 0 { 1.5 } else { 2.0 };
            assert!(
                report.edge_cut as f64 <= most * metis_cut as f64,
                "{parts} parts, coarse {coarse_bytes}: cut {} against METIS's {metis_cut}",
                report.edge_cut
            );
            // A random split cuts (1 - 1/parts) of the edges.
            let random = (1.0 - 1.0 / parts as f64) * ds.graph.num_edges() as f64;
            assert!((report.edge_cut as f64) < 0.6 * random);
            for p in 0..parts {
                assert!(report.nodes[p] <= cap(n, parts, 1.03), "{report:?}");
                assert!(
                    report.train_nodes[p] <= cap(train, parts, 1.03),
                    "{report:?}"
                );
            }
        }
    }
}

#[test]
fn stream_balances_in_edges_when_asked_and_depends_only_on_its_seed() {
    let ds = dataset();
    let parts = 4;
    let settings = StreamSettings {
        parts,
        balance: 1.1,
        balance_on: BalanceOn::Edges,
        seed: 3,
        ..Default::default()
    };
    let partition = streamed(&ds, &settings);
    let mut edges = vec![0; parts];
    for v in 0..ds.graph.num_nodes() {
        edges[partition.part[v] as usize] += ds.graph.in_degree(v).max(1);
    }
    let total: usize = (0..ds.graph.num_nodes())
        .map(|v| ds.graph.in_degree(v).max(1))
        .sum();
    for (p, &e) in edges.iter().enumerate() {
        assert!(e <= cap(total, parts, 1.1), "part {p}: {e} of {total}");
    }
    assert_eq!(streamed(&ds, &settings), partition);
    // In blocks, the choices are made in parallel and the result is still the seed's alone.
    let blocks = StreamSettings {
        blocks_from: 0,
        ..settings.clone()
    };
    let by_blocks = streamed(&ds, &blocks);
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    assert_eq!(one_thread.install(|| streamed(&ds, &blocks)), by_blocks);
    let other = streamed(
        &ds,
        &StreamSettings {
            seed: 4,
            ..settings.clone()
        },
    );
    assert_ne!(other, partition);
}

#[test]
fn stream_refuses_what_cannot_be_cut() {
    let ds = dataset();
    let err = |settings: StreamSettings| {
        stream(&ds.data(), &settings, &|_, _, _| {})
            .unwrap_err()
            .to_string()
    };
    let zero = err(StreamSettings {
        parts: 0,
        ..Default::default()
    });
    assert!(
        zero.contains("cannot cut 2000 nodes into 0 parts"),
        "{zero}"
    );
    let many = err(StreamSettings {
        parts: 2001,
        ..Default::default()
    });
    assert!(many.contains("into 2001 parts"), "{many}");
    let low = err(StreamSettings {
        balance: 0.9,
        ..Default::default()
    });
    assert!(low.contains("balance 0.9 is below 1"), "{low}");
    let one = streamed(
        &ds,
        &StreamSettings {
            parts: 1,
            restreams: 0,
            ..Default::default()
        },
    );
    assert_eq!(one.part, vec![0; 2000]);
}

/// Every file of a partitioned directory, by its path below it, with its bytes.
fn files(root: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for part in std::fs::read_dir(root).unwrap() {
        let part = part.unwrap().path();
        if part.is_dir() {
            for f in std::fs::read_dir(&part).unwrap() {
                let f = f.unwrap().path();
                let name = f.strip_prefix(root).unwrap().display().to_string();
                out.push((name, std::fs::read(&f).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn parts_written_from_a_mapped_dataset_equal_those_written_from_memory() {
    let root = std::env::temp_dir().join(format!("graphloom-mapped-parts-{}", std::process::id()));
    let mut ds = dataset();
    // With edge weights, so the shards' weight files are compared too.
    ds.edge_weight = Some(
        (0..ds.graph.num_edges())
            .map(|e| 0.5 + (e % 7) as f32)
            .collect(),
    );
    let dir = root.join("ds");
    ds.save(&dir).unwrap();
    let partition = streamed(
        &ds,
        &StreamSettings {
            parts: 3,
            ..Default::default()
        },
    );
    let from_memory = root.join("memory");
    let want = ds.write_parts(&partition, &from_memory).unwrap();
    let mapped = MappedDataset::open(&dir).unwrap();
    let features = MappedFeatures::open(&mapped).unwrap();
    let inputs = PartInputs {
        data: mapped.data(),
        edge_weight: mapped.edge_weight(),
        features: features.rows(mapped.meta.feat_dim),
    };
    let from_map = root.join("mapped");
    let written = std::sync::Mutex::new(Vec::new());
    let got = write_parts(&inputs, &partition, None, &from_map, &|done, total| {
        written.lock().unwrap().push((done, total))
    })
    .unwrap();
    assert_eq!(got, want);
    assert_eq!(got, partition.report(&ds.data()));
    assert_eq!(files(&from_map), files(&from_memory));
    assert_eq!(written.into_inner().unwrap().last(), Some(&(3, 3)));
    // The disk the partition was checked for before writing is what it took, within 10%.
    let taken: usize = files(&from_map).iter().map(|(_, bytes)| bytes.len()).sum();
    let estimate = graphloom_graph::parts::disk_bytes(&inputs, &partition) as f64;
    assert!(
        (estimate / taken as f64 - 1.0).abs() < 0.1,
        "estimated {estimate} bytes, took {taken}"
    );
    let loaded = Part::load(&from_map, 1).unwrap();
    assert!(loaded.shards.iter().any(|s| !s.weight.is_empty()));
    std::fs::remove_dir_all(&root).unwrap();
}
