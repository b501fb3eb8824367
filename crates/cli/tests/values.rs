//! Multi-label classification and regression from the command line: planted targets are
//! learnt (R² above 0.9), the summary's ROC-AUC is the one recomputed from `predict`'s
//! logits, SAR and `--workers` match one worker, and labels of the wrong shape for the task
//! are refused in one line.

mod common;

use common::{graphloom, graphloom_ok, partition, refused, s, scratch, small_dataset, summary};
use graphloom_io::npy;

/// A planted-target dataset of `nodes` nodes in `dir` (`prepare synthetic --targets`).
fn targets_dataset(dir: &std::path::Path, kind: &str, nodes: usize, extra: &[&str]) {
    let nodes = nodes.to_string();
    let mut args = vec![
        "prepare",
        "synthetic",
        "--nodes",
        &nodes,
        "--avg-degree",
        "8",
        "--feat-dim",
        "16",
        "--targets",
        kind,
        "--out",
        s(dir),
    ];
    args.extend(extra);
    graphloom_ok(&args);
}

/// The AUC by its definition, from the logits of the nodes where the label is present: the
/// chance a positive outscores a negative, ties halved.
fn pairwise_auc(scores: &[f64], labels: &[i64]) -> Option<f64> {
    let (mut wins, mut pairs) = (0.0, 0.0);
    for (i, &si) in scores.iter().enumerate() {
        for (j, &sj) in scores.iter().enumerate() {
            if labels[i] == 1 && labels[j] == 0 {
                pairs += 1.0;
                wins += match si.partial_cmp(&sj).unwrap() {
                    std::cmp::Ordering::Greater => 1.0,
                    std::cmp::Ordering::Equal => 0.5,
                    std::cmp::Ordering::Less => 0.0,
                };
            }
        }
    }
    (pairs > 0.0).then(|| wins / pairs)
}

#[test]
fn a_planted_linear_target_is_learnt_to_r2_above_0_9() {
    let root = scratch("values-regression");
    let ds = root.join("ds");
    // Noise 0.2 bounds R² at 1 / 1.04 = 0.96.
    targets_dataset(&ds, "regression", 3000, &["--target-noise", "0.2"]);
    let json = root.join("s.json");
    graphloom_ok(&[
        "train",
        "--dataset",
        s(&ds),
        "--task",
        "regression",
        "--model",
        "sgc",
        "--epochs",
        "150",
        "--quiet",
        "--summary-json",
        s(&json),
    ]);
    let sum = summary(&json);
    assert_eq!(sum["task"], "regression");
    assert_eq!(sum["metric"], "r2");
    let r2 = sum["test_r2"].as_f64().unwrap();
    assert!(r2 > 0.9, "test R² {r2}");
    for key in ["test_mae", "test_rmse", "best_val_r2", "best_val_rmse"] {
        assert!(sum[key].as_f64().unwrap().is_finite(), "{key}: {sum}");
    }
    assert!(sum["history"][0]["train_r2"].is_number(), "{sum}");
}

#[test]
fn multilabel_rocauc_is_the_one_of_the_predicted_logits_and_sar_matches_one_worker() {
    let root = scratch("values-multilabel");
    let ds = root.join("ds");
    targets_dataset(&ds, "multilabel", 400, &["--missing-targets", "0.2"]);
    let parts = root.join("parts");
    partition(&ds, 2, &parts);
    let run = |dataset: &std::path::Path, extra: &[&str], name: &str| {
        let json = root.join(format!("{name}.json"));
        let model = root.join(format!("{name}.safetensors"));
        let mut args = vec![
            "train",
            "--dataset",
            s(dataset),
            "--task",
            "multilabel",
            "--dtype",
            "f64",
            "--epochs",
            "5",
            "--quiet",
            "--summary-json",
            s(&json),
            "--save-model",
            s(&model),
        ];
        args.extend(extra);
        graphloom_ok(&args);
        (summary(&json), model)
    };
    let (one, model) = run(&ds, &[], "one");
    let (sar, _) = run(&parts, &["--workers", "2"], "sar");
    for key in ["test_rocauc", "best_val_rocauc"] {
        let (a, b) = (one[key].as_f64().unwrap(), sar[key].as_f64().unwrap());
        assert!((a - b).abs() < 1e-9, "{key}: {a} vs {b}");
    }
    // Sampled over two workers: the same as over one.
    let sampled = ["--model", "gcn", "--fanouts", "5,5", "--batch-size", "64"];
    let (a, _) = run(&ds, &sampled, "sampled-one");
    let (b, _) = run(
        &ds,
        &[&sampled[..], &["--workers", "2"]].concat(),
        "sampled-two",
    );
    let (a, b) = (
        a["test_rocauc"].as_f64().unwrap(),
        b["test_rocauc"].as_f64().unwrap(),
    );
    assert!((a - b).abs() < 1e-9, "sampled: {a} vs {b}");

    let logits = root.join("logits.npy");
    graphloom_ok(&[
        "predict",
        "--model",
        s(&model),
        "--dataset",
        s(&ds),
        "--out",
        s(&logits),
    ]);
    let header = npy::read_header(&logits).unwrap();
    assert_eq!(header.shape, vec![400, 4]);
    let scores = npy::read::<f32>(&logits).unwrap().data;
    let labels = npy::read_ints(&ds.join("node_label.npy")).unwrap().data;
    let test = npy::read_ints(&ds.join("test_idx.npy")).unwrap().data;
    let aucs: Vec<f64> = (0..4)
        .filter_map(|j| {
            let (x, y): (Vec<f64>, Vec<i64>) = test
                .iter()
                .map(|&v| (v as usize) * 4 + j)
                .filter(|&i| labels[i] >= 0)
                .map(|i| (f64::from(scores[i]), labels[i]))
                .unzip();
            pairwise_auc(&x, &y)
        })
        .collect();
    let want = aucs.iter().sum::<f64>() / aucs.len() as f64;
    let got = one["test_rocauc"].as_f64().unwrap();
    assert!(
        (got - want).abs() < 1e-9,
        "summary {got}, recomputed {want}"
    );

    // --labels: 1 where the logit is positive.
    let bits = root.join("bits.npy");
    graphloom_ok(&[
        "predict",
        "--model",
        s(&model),
        "--dataset",
        s(&ds),
        "--out",
        s(&bits),
        "--labels",
    ]);
    let bits = npy::read_ints(&bits).unwrap().data;
    assert!(bits
        .iter()
        .zip(&scores)
        .all(|(&b, &x)| b == i64::from(x > 0.0)));
    refused(
        &graphloom(&[
            "predict",
            "--model",
            s(&model),
            "--dataset",
            s(&ds),
            "--out",
            s(&root.join("x.npy")),
            "--task",
            "regression",
        ]),
        &["--task regression", "trained with --task multilabel"],
    );
}

#[test]
fn labels_of_the_wrong_shape_for_the_task_are_refused_in_one_line() {
    let root = scratch("values-refused");
    let (classes, binary, real) = (root.join("classes"), root.join("binary"), root.join("real"));
    small_dataset(&classes);
    targets_dataset(&binary, "multilabel", 300, &[]);
    targets_dataset(&real, "regression", 300, &["--num-targets", "1"]);
    let train = |ds: &std::path::Path, extra: &[&str]| {
        let mut args = vec!["train", "--dataset", s(ds), "--epochs", "1", "--quiet"];
        args.extend(extra);
        graphloom(&args)
    };
    refused(
        &train(&binary, &[]),
        &["holds 4 binary labels", "--task multilabel"],
    );
    refused(&train(&real, &[]), &["--task regression"]);
    refused(
        &train(&classes, &["--task", "multilabel"]),
        &["one class per node", "[N, T] labels of 0/1"],
    );
    refused(
        &train(&real, &["--task", "multilabel"]),
        &["real targets", "regression"],
    );
    refused(
        &train(&binary, &["--task", "multilabel", "--loss", "l1"]),
        &["--loss", "regression"],
    );
    refused(
        &train(
            &binary,
            &[
                "--task",
                "multilabel",
                "--fanouts",
                "3,3",
                "--eval-fanouts",
                "3,3",
            ],
        ),
        &["--eval-fanouts", "every node exactly"],
    );
    // A label other than 0, 1 or -1; a width other than num_classes.
    let labels = binary.join("node_label.npy");
    let mut v = npy::read_ints(&labels).unwrap().data;
    v[9] = 2;
    npy::write(&labels, &v, &[300, 4]).unwrap();
    refused(
        &train(&binary, &["--task", "multilabel"]),
        &["node_label.npy", "node 2, target 1 is 2", "0, 1 or -1"],
    );
    let v: Vec<f32> = vec![0.5; 600];
    npy::write(&real.join("node_label.npy"), &v, &[300, 2]).unwrap();
    refused(
        &train(&real, &["--task", "regression"]),
        &["node_label.npy", "2 targets per node", "num_classes = 1"],
    );
}
