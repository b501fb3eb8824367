//! Edge features end to end: on the synthetic shape whose class signal is in the edges, GINE
//! learns what GIN cannot; a sampled run and `predict` read the edges' rows too; damaged or
//! missing edge features are one-line errors; a link split keeps the kept edges' rows; a
//! model with batch normalisation (GIN's and GINE's MLPs have it) is not inferred layer by
//! layer.

mod common;
use common::{graphloom, graphloom_ok, refused, s, scratch, summary};

use graphloom_graph::npy;

/// The edge-signal shape: node features and graph (homophily 0) carry almost nothing of the
/// class, each edge carries its destination's class.
fn edge_signal_dataset(dir: &std::path::Path) {
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--nodes",
        "2000",
        "--classes",
        "4",
        "--homophily",
        "0",
        "--signal",
        "0.3",
        "--feat-dim",
        "16",
        "--edge-features",
        "8",
        "--seed",
        "3",
        "--out",
        s(dir),
    ]);
}

fn test_accuracy(dataset: &std::path::Path, json: &std::path::Path, extra: &[&str]) -> f64 {
    let mut args = vec![
        "train",
        "--dataset",
        s(dataset),
        "--batch-norm",
        "--epochs",
        "60",
        "--quiet",
        "--summary-json",
        s(json),
    ];
    args.extend(extra);
    graphloom_ok(&args);
    summary(json)["test_acc"].as_f64().unwrap()
}

#[test]
fn gine_reads_the_edges_that_gin_cannot() {
    let root = scratch("gine-edges");
    let ds = root.join("ds");
    edge_signal_dataset(&ds);
    let gin = test_accuracy(&ds, &root.join("gin.json"), &["--model", "gin"]);
    let gine = test_accuracy(&ds, &root.join("gine.json"), &["--model", "gine"]);
    // Chance is 0.25; the edges tell each node's class through about 10 in-edges.
    assert!(gine >= gin + 0.10 && gine > 0.8, "gine {gine}, gin {gin}");
    let sampled = test_accuracy(
        &ds,
        &root.join("sampled.json"),
        &[
            "--model",
            "gine",
            "--fanouts",
            "10,10",
            "--batch-size",
            "256",
            "--save-model",
            s(&root.join("gine.safetensors")),
        ],
    );
    assert!(sampled > 0.8, "sampled gine {sampled}");
    // `predict` gathers the edges' rows again (exact inference over the whole graph): its
    // labels score as well.
    let out = root.join("labels.npy");
    graphloom_ok(&[
        "predict",
        "--model",
        s(&root.join("gine.safetensors")),
        "--dataset",
        s(&ds),
        "--out",
        s(&out),
        "--labels",
    ]);
    let labels = npy::read_ints(&out).unwrap().data;
    let truth = npy::read_ints(&ds.join("node_label.npy")).unwrap().data;
    let test = npy::read_ints(&ds.join("test_idx.npy")).unwrap().data;
    let predicted = common::accuracy(&labels, &truth, &test);
    assert!(predicted > 0.8, "predict {predicted}");
}

#[test]
fn missing_or_damaged_edge_features_are_one_line_errors() {
    let root = scratch("gine-bad");
    let ds = root.join("ds");
    edge_signal_dataset(&ds);
    let file = ds.join("edge_feat.npy");
    let edges = npy::read_header(&file).unwrap().shape[0];
    let train = || {
        graphloom(&[
            "train",
            "--dataset",
            s(&ds),
            "--model",
            "gine",
            "--epochs",
            "1",
            "--quiet",
        ])
    };
    // One row short of the edges.
    npy::write(&file, &vec![0.5f32; (edges - 1) * 2], &[edges - 1, 2]).unwrap();
    refused(&train(), &["edge_feat.npy", "rows for", "csr_col_idx.npy"]);
    // A value that is not finite.
    let mut values = vec![0.5f32; edges * 2];
    values[7] = f32::NAN;
    npy::write(&file, &values, &[edges, 2]).unwrap();
    refused(&train(), &["edge_feat.npy", "edge 3, column 1"]);
    // One dimension, and a dtype that is not f32 or bf16.
    npy::write(&file, &vec![0.5f32; edges], &[edges]).unwrap();
    refused(&train(), &["edge_feat.npy", "2-D"]);
    npy::write(&file, &vec![0.5f64; edges * 2], &[edges, 2]).unwrap();
    refused(&train(), &["edge_feat.npy", "f32, or bf16"]);
    // None at all.
    std::fs::remove_file(&file).unwrap();
    refused(&train(), &["gine", "no edge_feat.npy", "train gin"]);
}

#[test]
fn a_link_split_keeps_each_kept_edge_s_features() {
    let root = scratch("gine-link");
    let ds = root.join("ds");
    edge_signal_dataset(&ds);
    let split = root.join("split");
    common::link_split(&ds, &split);
    let load = |dir: &std::path::Path| {
        let mut d = graphloom_graph::Dataset::load(dir).unwrap();
        d.load_edge_features(dir).unwrap();
        d
    };
    let (before, after) = (load(&ds), load(&split));
    let rows = |d: &graphloom_graph::Dataset| d.edge_features.as_ref().unwrap().to_vec_f64();
    let (was, is) = (rows(&before), rows(&after));
    assert!(after.meta.num_edges < before.meta.num_edges);
    assert_eq!(is.len(), after.meta.num_edges * 8);
    // Every edge of the split graph carries the row it had in the source graph.
    let mut by_pair = std::collections::HashMap::<(u32, u32), Vec<&[f64]>>::new();
    for v in 0..before.meta.num_nodes {
        let lo = before.graph.row_ptr[v] as usize;
        for (k, &u) in before.graph.in_neighbors(v).iter().enumerate() {
            by_pair
                .entry((u, v as u32))
                .or_default()
                .push(&was[(lo + k) * 8..(lo + k + 1) * 8]);
        }
    }
    for v in 0..after.meta.num_nodes {
        let lo = after.graph.row_ptr[v] as usize;
        for (k, &u) in after.graph.in_neighbors(v).iter().enumerate() {
            let row = &is[(lo + k) * 8..(lo + k + 1) * 8];
            assert!(by_pair[&(u, v as u32)].contains(&row), "edge {u} -> {v}");
        }
    }
}

#[test]
fn a_model_with_batch_norm_is_not_inferred_layer_by_layer() {
    // Each chunk of layer-wise inference would be normalised by its own statistics: on this
    // graph, by up to 0.13 in log-probability from the whole-graph pass.
    let root = scratch("gine-layerwise");
    let ds = root.join("ds");
    common::small_dataset(&ds);
    let model = root.join("gcn.safetensors");
    graphloom_ok(&[
        "train",
        "--dataset",
        s(&ds),
        "--batch-norm",
        "--epochs",
        "2",
        "--quiet",
        "--save-model",
        s(&model),
    ]);
    let out = root.join("pred.npy");
    let predict = |extra: &[&str]| {
        let mut args = vec![
            "predict",
            "--model",
            s(&model),
            "--dataset",
            s(&ds),
            "--out",
            s(&out),
        ];
        args.extend(extra);
        graphloom(&args)
    };
    assert!(predict(&[]).status.success());
    refused(
        &predict(&["--inference-memory-gib", "0.001"]),
        &["layer-wise inference", "batch normalisation"],
    );
}
