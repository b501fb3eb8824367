//! SIGN over a dataset from `prepare propagate`: full batch and mini-batches of rows train
//! alike (one batch of every training node is the full batch's step, to 1e-9 in f64), two
//! workers as one, `predict` reproduces the run's test accuracy, and what SIGN cannot take is
//! refused in one line.

mod common;
use common::{graphloom, graphloom_ok, losses, refused, s, scratch, small_dataset, summary};

use graphloom_graph::npy;

#[test]
fn sign_trains_on_rows_as_full_batch_and_on_workers_as_on_one() {
    let root = scratch("sign");
    let ds = root.join("ds");
    small_dataset(&ds);
    let propagated = root.join("propagated");
    graphloom_ok(&[
        "prepare",
        "propagate",
        "--dataset",
        s(&ds),
        "--hops",
        "2",
        "--operators",
        "sym,gcn",
        "--out",
        s(&propagated),
    ]);
    let meta = graphloom_graph::Meta::read(&propagated).unwrap();
    assert_eq!(meta.feat_dim, 8 * 5);
    let run = |extra: &[&str], name: &str| {
        let json = root.join(format!("{name}.json"));
        let mut args = vec![
            "train",
            "--dataset",
            s(&propagated),
            "--model",
            "sign",
            "--dtype",
            "f64",
            "--epochs",
            "4",
            "--quiet",
            "--summary-json",
            s(&json),
        ];
        args.extend(extra);
        graphloom_ok(&args);
        summary(&json)
    };
    let close = |a: &[f64], b: &[f64], what: &str| {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 1e-9 * y.abs(), "{what}: {x} vs {y}");
        }
    };
    // Every training node (180) in one batch of rows: the full batch's steps.
    let full = run(&[], "full");
    let rows = run(&["--batch-size", "1000"], "rows");
    close(&losses(&rows), &losses(&full), "rows");
    // Row batches evaluate on rows: the full batch's exact evaluation.
    for key in ["best_val_acc", "test_acc"] {
        assert_eq!(rows[key], full[key], "{key}");
    }
    assert_eq!(rows["fanouts"], serde_json::json!([0, 0]), "{rows}");
    let one = run(&["--batch-size", "50"], "one");
    let two = run(&["--batch-size", "50", "--workers", "2"], "two");
    close(&losses(&two), &losses(&one), "two workers");

    let model = root.join("sign.safetensors");
    let json = root.join("saved.json");
    graphloom_ok(&[
        "train",
        "--dataset",
        s(&propagated),
        "--model",
        "sign",
        "--epochs",
        "20",
        "--quiet",
        "--save-model",
        s(&model),
        "--summary-json",
        s(&json),
    ]);
    let pred = root.join("pred.npy");
    graphloom_ok(&[
        "predict",
        "--model",
        s(&model),
        "--dataset",
        s(&propagated),
        "--out",
        s(&pred),
        "--labels",
    ]);
    let pred = npy::read_ints(&pred).unwrap().data;
    let labels = npy::read_ints(&ds.join("node_label.npy")).unwrap().data;
    let test = npy::read_ints(&ds.join("test_idx.npy")).unwrap().data;
    let hits = test
        .iter()
        .filter(|&&v| pred[v as usize] == labels[v as usize])
        .count();
    assert_eq!(
        hits as f64 / test.len() as f64,
        summary(&json)["test_acc"].as_f64().unwrap()
    );

    let train = |dataset: &std::path::Path, extra: &[&str]| {
        let mut args = vec![
            "train",
            "--dataset",
            s(dataset),
            "--model",
            "sign",
            "--epochs",
            "1",
        ];
        args.extend(extra);
        graphloom(&args)
    };
    refused(&train(&ds, &[]), &["prepare propagate"]);
    refused(
        &train(&propagated, &["--fanouts", "3,3"]),
        &["--fanouts", "SIGN reads no graph"],
    );
    refused(
        &train(&propagated, &["--layers", "1"]),
        &["--layers", "at least 2"],
    );
    refused(&train(&propagated, &["--hops", "3"]), &["--hops"]);
}
