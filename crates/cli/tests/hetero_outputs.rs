//! What heterogeneous training leaves behind, used: a saved relational model's predictions
//! and per-type embeddings (`predict`, `embed`), and bf16 features written by `prepare`.

mod common;

use common::{graphloom, graphloom_ok, losses, mag, refused, s, scratch, small_dataset, summary};
use std::path::Path;

/// A saved relational model predicts, on its dataset, the classes its run measured: the
/// test accuracy of the predictions is the run's at its best epoch (the best parameters and
/// learnt rows are saved together); `--nodes` picks rows; a model of the other kind, or
/// `embed`, is refused in one line.
#[test]
fn a_saved_relational_model_predicts_what_its_run_measured() {
    use graphloom_graph::npy;
    let root = scratch("hetero-predict");
    let data = mag(&root);
    let model = root.join("model.safetensors");
    let json = root.join("run.json");
    graphloom_ok(&[
        "train",
        "--dataset",
        s(&data),
        "--fanouts",
        "5,5",
        "--batch-size",
        "512",
        "--epochs",
        "3",
        "--save-model",
        s(&model),
        "--summary-json",
        s(&json),
    ]);
    let out = root.join("labels.npy");
    graphloom_ok(&[
        "predict",
        "--dataset",
        s(&data),
        "--model",
        s(&model),
        "--out",
        s(&out),
        "--labels",
    ]);
    let predicted = npy::read_ids(&out).unwrap().data;
    let paper = data.join("nodes/paper");
    let labels = npy::read_ids(&paper.join("node_label.npy")).unwrap().data;
    let test = npy::read_ids(&paper.join("test_idx.npy")).unwrap().data;
    assert_eq!(predicted.len(), labels.len());
    let right = test
        .iter()
        .filter(|&&v| predicted[v as usize] == labels[v as usize])
        .count();
    let measured = summary(&json)["test_acc"].as_f64().unwrap();
    assert_eq!(right as f64 / test.len() as f64, measured);
    // Rows of chosen nodes, in their order.
    let nodes = root.join("nodes.npy");
    npy::write(&nodes, &[5i64, 0], &[2]).unwrap();
    let some = root.join("some.npy");
    graphloom_ok(&[
        "predict",
        "--dataset",
        s(&data),
        "--model",
        s(&model),
        "--out",
        s(&some),
        "--labels",
        "--nodes",
        s(&nodes),
    ]);
    assert_eq!(
        npy::read_ids(&some).unwrap().data,
        [predicted[5], predicted[0]]
    );
    // The other kind of model, or of dataset.
    let small = root.join("small");
    small_dataset(&small);
    let gcn = root.join("gcn.safetensors");
    graphloom_ok(&[
        "train",
        "--dataset",
        s(&small),
        "--epochs",
        "1",
        "--quiet",
        "--save-model",
        s(&gcn),
    ]);
    let elsewhere = root.join("elsewhere.npy");
    refused(
        &graphloom(&[
            "predict",
            "--dataset",
            s(&data),
            "--model",
            s(&gcn),
            "--out",
            s(&elsewhere),
        ]),
        &["heterogeneous dataset", "rgcn or rsage"],
    );
    refused(
        &graphloom(&[
            "predict",
            "--dataset",
            s(&small),
            "--model",
            s(&model),
            "--out",
            s(&elsewhere),
        ]),
        &["relational model"],
    );
    refused(
        &graphloom(&[
            "embed",
            "--dataset",
            s(&small),
            "--model",
            s(&gcn),
            "--node-type",
            "paper",
            "--out",
            s(&elsewhere),
        ]),
        &["--node-type", "one node type"],
    );
    assert!(!elsewhere.exists());
    embed_per_type(&root, &data, &model, &nodes);
}

/// `embed` of a relational model: the last layer's rows are the class scores whose softmax
/// `predict` writes (checked in f64), a hidden layer's rows of a type it computes are ReLU
/// outputs of the hidden width, and a type or layer it does not compute is refused naming
/// what it does.
fn embed_per_type(root: &Path, data: &Path, model: &Path, nodes: &Path) {
    use graphloom_graph::npy;
    let run = |args: &[&str]| {
        let mut full = vec!["embed", "--dataset", s(data), "--model", s(model)];
        full.extend(args);
        graphloom(&full)
    };
    let logp = root.join("logp.npy");
    graphloom_ok(&[
        "predict",
        "--dataset",
        s(data),
        "--model",
        s(model),
        "--out",
        s(&logp),
    ]);
    let scores = root.join("scores.npy");
    assert!(run(&["--layer", "2", "--out", s(&scores)]).status.success());
    let logp = npy::read::<f32>(&logp).unwrap();
    let scores = npy::read::<f32>(&scores).unwrap();
    assert_eq!(scores.shape, logp.shape);
    let width = scores.shape[1];
    for (row, expect) in scores.data.chunks(width).zip(logp.data.chunks(width)) {
        let max = row.iter().fold(f64::MIN, |m, &v| m.max(f64::from(v)));
        let sum: f64 = row.iter().map(|&v| (f64::from(v) - max).exp()).sum();
        for (&v, &e) in row.iter().zip(expect) {
            let softmax = f64::from(v) - max - sum.ln();
            assert!((softmax - f64::from(e)).abs() < 1e-4, "{softmax} vs {e}");
        }
    }
    let authors = root.join("authors.npy");
    let out = run(&[
        "--layer",
        "1",
        "--node-type",
        "author",
        "--nodes",
        s(nodes),
        "--out",
        s(&authors),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let authors = npy::read::<f32>(&authors).unwrap();
    assert_eq!(authors.shape, [2, 64]);
    assert!(authors.data.iter().all(|&v| v >= 0.0) && authors.data.iter().any(|&v| v > 0.0));
    let elsewhere = root.join("elsewhere.npy");
    refused(
        &run(&[
            "--layer",
            "1",
            "--node-type",
            "institution",
            "--out",
            s(&elsewhere),
        ]),
        &[
            "--node-type institution is not computed at layer 1",
            "lead to paper",
        ],
    );
    refused(
        &run(&["--layer", "3", "--out", s(&elsewhere)]),
        &["--layer must be between 1 and 2, the model's layers, not 3"],
    );
    refused(
        &run(&["--node-type", "venue", "--out", s(&elsewhere)]),
        &["venue is not one of the node types"],
    );
    assert!(!elsewhere.exists());
}

/// `prepare synthetic --hetero mag --feat-dtype bf16` writes the papers' features as bf16,
/// each the f32 dataset's value rounded to nearest; training reads them as those values (the
/// losses of a dataset holding the rounded values in f32, to the bit) from half the memory.
#[test]
fn bf16_paper_features_train_as_their_rounded_values_in_half_the_memory() {
    use graphloom_graph::npy;
    let root = scratch("hetero-bf16");
    let prepare = |dir: &Path, extra: &[&str]| {
        let mut args = vec![
            "prepare",
            "synthetic",
            "--hetero",
            "mag",
            "--scale",
            "0.005",
            "--seed",
            "3",
            "--out",
            s(dir),
        ];
        args.extend(extra);
        graphloom_ok(&args);
    };
    let (f32_dir, bf16_dir, rounded_dir) = (root.join("f32"), root.join("bf16"), root.join("r"));
    prepare(&f32_dir, &[]);
    prepare(&bf16_dir, &["--feat-dtype", "bf16"]);
    prepare(&rounded_dir, &[]);
    let meta = std::fs::read_to_string(bf16_dir.join("meta.json")).unwrap();
    let meta: serde_json::Value = serde_json::from_str(&meta).unwrap();
    assert_eq!(meta["node_types"]["paper"]["feat_dtype"], "bf16");
    let exact = npy::read::<f32>(&f32_dir.join("nodes/paper/node_feat.npy")).unwrap();
    let bits = npy::read::<u16>(&bf16_dir.join("nodes/paper/node_feat.npy")).unwrap();
    assert_eq!(bits.shape, exact.shape);
    let rounded: Vec<f32> = exact
        .data
        .iter()
        .map(|&v| half::bf16::from_f32(v).to_f32())
        .collect();
    for (&b, &r) in bits.data.iter().zip(&rounded) {
        assert_eq!(half::bf16::from_bits(b).to_f32().to_bits(), r.to_bits());
    }
    npy::write(
        &rounded_dir.join("nodes/paper/node_feat.npy"),
        &rounded,
        &exact.shape,
    )
    .unwrap();
    let train = |dir: &Path| {
        let out = graphloom(&[
            "train",
            "--dataset",
            s(dir),
            "--fanouts",
            "5,5",
            "--epochs",
            "2",
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let (b, r) = (train(&bf16_dir), train(&rounded_dir));
    assert_eq!(losses(&b), losses(&r));
    let features = |v: &serde_json::Value| v["peak_bytes"]["features"].as_u64().unwrap();
    assert_eq!(2 * features(&b), features(&r), "{b}");
}
