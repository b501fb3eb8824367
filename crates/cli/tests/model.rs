//! Using a trained model: `predict` reproduces the test accuracy of the run that saved it,
//! `embed` gives the layers' outputs, `--init-model` starts where the saved model was, a
//! model trained on a learnt input embedding carries it, and GIN, SGC and APPNP train over
//! workers as on one.

mod common;
use common::{
    accuracy, cora, graphloom, graphloom_ok, losses, partition, scratch, small_dataset, summary,
    tensors,
};

use graphloom_graph::npy;

#[test]
fn predict_embed_and_init_model_on_cora() {
    let root = scratch("model-cora");
    let ds = cora(&root);
    let model = root.join("gcn.safetensors");
    let run = root.join("run.json");
    // Without dropout, a step's loss is a function of the parameters alone.
    graphloom_ok(&[
        "train",
        "--dataset",
        ds.to_str().unwrap(),
        "--model",
        "gcn",
        "--epochs",
        "40",
        "--dropout",
        "0",
        "--quiet",
        "--summary-json",
        run.to_str().unwrap(),
        "--save-model",
        model.to_str().unwrap(),
    ]);
    let run = summary(&run);

    // predict --labels gives the saved run's test accuracy.
    let pred = root.join("pred.npy");
    graphloom_ok(&[
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--dataset",
        ds.to_str().unwrap(),
        "--out",
        pred.to_str().unwrap(),
        "--labels",
    ]);
    let pred = npy::read_ints(&pred).unwrap().data;
    let labels = npy::read_ints(&ds.join("node_label.npy")).unwrap().data;
    let test = npy::read_ints(&ds.join("test_idx.npy")).unwrap().data;
    assert_eq!(pred.len(), 2708);
    assert_eq!(
        accuracy(&pred, &labels, &test),
        run["test_acc"].as_f64().unwrap()
    );

    // Log-probabilities of chosen nodes are the rows of the whole output, and the softmax of
    // the last layer's embedding.
    let nodes = root.join("nodes.npy");
    npy::write(&nodes, &[5i64, 0, 2707], &[3]).unwrap();
    let logp = root.join("logp.npy");
    graphloom_ok(&[
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--dataset",
        ds.to_str().unwrap(),
        "--out",
        logp.to_str().unwrap(),
        "--nodes",
        nodes.to_str().unwrap(),
    ]);
    let logp = npy::read::<f32>(&logp).unwrap();
    assert_eq!(logp.shape, vec![3, 7]);
    for (row, &node) in [5usize, 0, 2707].iter().enumerate() {
        let best = (0..7)
            .max_by(|&a, &b| logp.data[row * 7 + a].total_cmp(&logp.data[row * 7 + b]))
            .unwrap();
        assert_eq!(best as i64, pred[node]);
    }
    // Layer by layer in chunks over the mapped dataset, through scratch files: the same
    // log-probabilities up to float rounding.
    let chunked = root.join("logp-chunked.npy");
    let scratch = root.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    graphloom_ok(&[
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--dataset",
        ds.to_str().unwrap(),
        "--out",
        chunked.to_str().unwrap(),
        "--nodes",
        nodes.to_str().unwrap(),
        "--inference-memory-gib",
        "0.0001",
        "--scratch-dir",
        scratch.to_str().unwrap(),
    ]);
    let chunked = npy::read::<f32>(&chunked).unwrap();
    assert_eq!(chunked.shape, logp.shape);
    for (a, b) in chunked.data.iter().zip(&logp.data) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
    let scores = root.join("scores.npy");
    graphloom_ok(&[
        "embed",
        "--model",
        model.to_str().unwrap(),
        "--dataset",
        ds.to_str().unwrap(),
        "--out",
        scores.to_str().unwrap(),
        "--layer",
        "2",
        "--nodes",
        nodes.to_str().unwrap(),
    ]);
    let scores = npy::read::<f32>(&scores).unwrap();
    for row in 0..3 {
        let s: Vec<f64> = (0..7).map(|j| scores.data[row * 7 + j] as f64).collect();
        let max = s.iter().cloned().fold(f64::MIN, f64::max);
        let lse = max + s.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
        for j in 0..7 {
            let expect = s[j] - lse;
            assert!((logp.data[row * 7 + j] as f64 - expect).abs() < 1e-4);
        }
    }
    let hidden = root.join("hidden.npy");
    graphloom_ok(&[
        "embed",
        "--model",
        model.to_str().unwrap(),
        "--dataset",
        ds.to_str().unwrap(),
        "--out",
        hidden.to_str().unwrap(),
    ]);
    let hidden = npy::read::<f32>(&hidden).unwrap();
    assert_eq!(hidden.shape, vec![2708, 16]);
    assert!(hidden.data.iter().all(|&v| v >= 0.0), "after the ReLU");

    // --init-model starts at the saved parameters: the first step's loss is the loss the
    // saved run computed right after its best epoch. No model option is repeated.
    let best = run["best_epoch"].as_u64().unwrap() as usize;
    assert!(best < 40, "the best epoch is not the last");
    let again = root.join("again.json");
    graphloom_ok(&[
        "train",
        "--dataset",
        ds.to_str().unwrap(),
        "--init-model",
        model.to_str().unwrap(),
        "--epochs",
        "1",
        "--quiet",
        "--summary-json",
        again.to_str().unwrap(),
    ]);
    let first = losses(&summary(&again))[0];
    let saved = losses(&run)[best];
    assert!((first - saved).abs() <= 1e-6 * saved, "{first} vs {saved}");

    // A model of another shape is refused, naming both.
    let out = graphloom(&[
        "train",
        "--dataset",
        ds.to_str().unwrap(),
        "--init-model",
        model.to_str().unwrap(),
        "--hidden",
        "32",
        "--epochs",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--init-model holds a gcn of 2 layers, 1433 -> 16 -> 7"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// A model trained on a learnt input embedding saves the table with it; `predict` uses it.
#[test]
fn a_learnt_input_embedding_travels_with_the_model() {
    let root = scratch("model-embedding");
    let ds = root.join("ds");
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--nodes",
        "400",
        "--avg-degree",
        "8",
        "--feat-dim",
        "8",
        "--classes",
        "3",
        "--out",
        ds.to_str().unwrap(),
    ]);
    let model = root.join("m.safetensors");
    let run = root.join("run.json");
    graphloom_ok(&[
        "train",
        "--dataset",
        ds.to_str().unwrap(),
        "--model",
        "sage",
        "--fanouts",
        "5,5",
        "--batch-size",
        "64",
        "--embedding-dim",
        "12",
        "--epochs",
        "5",
        "--quiet",
        "--summary-json",
        run.to_str().unwrap(),
        "--save-model",
        model.to_str().unwrap(),
    ]);
    let bytes = std::fs::read(&model).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("input_embedding").unwrap().shape(), &[400, 12]);
    let pred = root.join("pred.npy");
    graphloom_ok(&[
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--dataset",
        ds.to_str().unwrap(),
        "--out",
        pred.to_str().unwrap(),
        "--labels",
    ]);
    let pred = npy::read_ints(&pred).unwrap().data;
    let labels = npy::read_ints(&ds.join("node_label.npy")).unwrap().data;
    let test = npy::read_ints(&ds.join("test_idx.npy")).unwrap().data;
    assert_eq!(
        accuracy(&pred, &labels, &test),
        summary(&run)["test_acc"].as_f64().unwrap()
    );
    // Full-batch training cannot continue a learnt input embedding: said, not dropped.
    let out = graphloom(&[
        "train",
        "--dataset",
        ds.to_str().unwrap(),
        "--init-model",
        model.to_str().unwrap(),
        "--epochs",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("learnt an input embedding"), "{stderr}");
    std::fs::remove_dir_all(&root).unwrap();
}

/// `predict` reads int8 node ids as signed, so -1 is out of range rather than node 255, and
/// refuses a bool array of nodes or of pairs: it is a mask, not ids.
#[test]
fn predict_reads_int8_ids_as_signed_and_refuses_bool_ones() {
    let root = scratch("model-one-byte");
    let ds = root.join("ds");
    small_dataset(&ds);
    let model = root.join("m.safetensors");
    let (ds, model) = (ds.to_str().unwrap(), model.to_str().unwrap());
    graphloom_ok(&[
        "train",
        "--dataset",
        ds,
        "--epochs",
        "1",
        "--quiet",
        "--save-model",
        model,
    ]);
    // One-byte ids with the dtype `descr` (`|i1` or `|b1`) in the header.
    let one_byte = |name: &str, descr: &str, values: &[u8], shape: &[usize]| {
        let path = root.join(name);
        npy::write(&path, values, shape).unwrap();
        let mut file = std::fs::read(&path).unwrap();
        let at = file.windows(5).position(|w| w == b"'|u1'").unwrap();
        file[at + 1..at + 4].copy_from_slice(descr.as_bytes());
        std::fs::write(&path, file).unwrap();
        path.to_str().unwrap().to_string()
    };
    let out = root.join("out.npy");
    let refused = |args: &[&str]| {
        let mut all = vec!["predict", "--model", model, "--dataset", ds];
        all.extend_from_slice(&["--out", out.to_str().unwrap()]);
        all.extend_from_slice(args);
        let run = graphloom(&all);
        let stderr = String::from_utf8_lossy(&run.stderr).to_string();
        assert_eq!(run.status.code(), Some(1), "{stderr}");
        stderr
    };
    let nodes = one_byte("nodes_int8.npy", "|i1", &[0, 0xff, 5], &[3]);
    let stderr = refused(&["--nodes", &nodes]);
    assert!(stderr.contains("holds node -1, outside 0..300"), "{stderr}");
    let nodes = one_byte("nodes_bool.npy", "|b1", &[1, 0, 1], &[3]);
    let stderr = refused(&["--nodes", &nodes]);
    assert!(
        stderr.contains("nodes_bool.npy") && stderr.contains("a bool array is a mask, not ids"),
        "{stderr}"
    );
    let pairs = one_byte("pairs_bool.npy", "|b1", &[1, 0, 0, 1], &[2, 2]);
    let stderr = refused(&["--task", "link", "--pairs", &pairs]);
    assert!(
        stderr.contains("pairs_bool.npy") && stderr.contains("a bool array is a mask, not ids"),
        "{stderr}"
    );
    assert!(!out.exists());
}

/// A run stopped after 3 epochs and resumed to 6 gives the losses and the parameters of an
/// uninterrupted 6-epoch run, bit for bit: full batch, mini-batch with a learnt input
/// embedding, and SAR over 2 workers.
#[test]
fn resume_is_bit_identical_in_every_mode() {
    let root = scratch("resume");
    let ds = root.join("ds");
    graphloom_ok(&[
        "prepare",
        "synthetic",
        "--nodes",
        "400",
        "--avg-degree",
        "8",
        "--feat-dim",
        "8",
        "--classes",
        "3",
        "--out",
        ds.to_str().unwrap(),
    ]);
    let parts = root.join("parts");
    partition(&ds, 2, &parts);
    let (ds, parts) = (ds.to_str().unwrap(), parts.to_str().unwrap());
    let modes: [(&str, Vec<&str>); 3] = [
        ("full", vec!["--dataset", ds, "--model", "gcn"]),
        (
            "sampled",
            vec![
                "--dataset",
                ds,
                "--model",
                "sage",
                "--fanouts",
                "5,5",
                "--batch-size",
                "64",
                "--embedding-dim",
                "8",
            ],
        ),
        (
            "sar",
            vec!["--dataset", parts, "--model", "gat", "--workers", "2"],
        ),
    ];
    for (name, args) in modes {
        let run = |epochs: &str, extra: &[&str], tag: &str| {
            let json = root.join(format!("{name}-{tag}.json"));
            let model = root.join(format!("{name}-{tag}.safetensors"));
            let mut all: Vec<&str> = vec!["train", "--epochs", epochs, "--quiet"];
            all.extend(&args);
            all.extend(extra);
            all.extend([
                "--summary-json",
                json.to_str().unwrap(),
                "--save-model",
                model.to_str().unwrap(),
            ]);
            graphloom_ok(&all);
            (summary(&json), model)
        };
        let snaps = root.join(format!("{name}-snapshots"));
        let snaps = snaps.to_str().unwrap();
        let (whole, whole_model) = run("6", &[], "whole");
        let (first, _) = run("3", &["--snapshot-dir", snaps], "first");
        assert_eq!(losses(&first)[..], losses(&whole)[..3], "{name}");
        let (resumed, resumed_model) = run("6", &["--snapshot-dir", snaps, "--resume"], "resumed");
        assert_eq!(losses(&resumed), losses(&whole), "{name}: losses");
        // The first three epochs were not run again: their records, timings included, are
        // the interrupted run's.
        assert_eq!(
            resumed["history"].as_array().unwrap()[..3],
            first["history"].as_array().unwrap()[..],
            "{name}: restored records"
        );
        assert_eq!(
            tensors(&resumed_model),
            tensors(&whole_model),
            "{name}: parameters"
        );
        // A snapshot past the epochs asked for is refused, not silently kept.
        let mut fewer: Vec<&str> = vec!["train", "--epochs", "4"];
        fewer.extend(&args);
        fewer.extend(["--snapshot-dir", snaps, "--resume"]);
        let out = graphloom(&fewer);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains("the snapshot is at epoch 6"),
            "{name}: {stderr}"
        );
        // A snapshot resumes only the run that took it.
        let mut other: Vec<&str> = vec!["train", "--epochs", "6", "--lr", "0.02"];
        other.extend(&args);
        other.extend(["--snapshot-dir", snaps, "--resume"]);
        let out = graphloom(&other);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains("learning rate") && stderr.contains("in the snapshot, 0.02 now"),
            "{name}: {stderr}"
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn gin_sgc_and_appnp_train_on_workers_as_on_one_and_predict_what_they_scored() {
    let root = scratch("model-families");
    let ds = root.join("ds");
    small_dataset(&ds);
    let parts = root.join("parts");
    partition(&ds, 2, &parts);
    for (model, extra) in [
        ("gin", vec![]),
        ("sgc", vec!["--layers", "3"]),
        ("appnp", vec!["--hops", "4", "--teleport", "0.2"]),
    ] {
        let run = |dataset: &std::path::Path, workers: Option<&str>, name: &str| {
            let json = root.join(format!("{model}-{name}.json"));
            let saved = root.join(format!("{model}-{name}.safetensors"));
            let mut args = vec![
                "train",
                "--dataset",
                dataset.to_str().unwrap(),
                "--model",
                model,
                "--dtype",
                "f64",
                "--epochs",
                "4",
                "--quiet",
                "--summary-json",
                json.to_str().unwrap(),
                "--save-model",
                saved.to_str().unwrap(),
            ];
            args.extend(&extra);
            if let Some(w) = workers {
                args.extend(["--workers", w]);
            }
            graphloom_ok(&args);
            (summary(&json), saved)
        };
        let (one, saved) = run(&ds, None, "one");
        let (two, _) = run(&parts, Some("2"), "sar");
        for (a, b) in losses(&one).iter().zip(losses(&two)) {
            assert!((a - b).abs() <= 1e-9 * a.abs(), "{model}: {a} vs {b}");
        }
        let pred = root.join(format!("{model}-pred.npy"));
        graphloom_ok(&[
            "predict",
            "--model",
            saved.to_str().unwrap(),
            "--dataset",
            ds.to_str().unwrap(),
            "--out",
            pred.to_str().unwrap(),
            "--labels",
        ]);
        let pred = npy::read_ints(&pred).unwrap().data;
        let labels = npy::read_ints(&ds.join("node_label.npy")).unwrap().data;
        let test = npy::read_ints(&ds.join("test_idx.npy")).unwrap().data;
        assert_eq!(
            accuracy(&pred, &labels, &test),
            one["test_acc"].as_f64().unwrap(),
            "{model}"
        );
    }
    // Layer-wise inference gives a layer one hop: APPNP's last layer takes all of its own.
    let out = graphloom(&[
        "predict",
        "--model",
        root.join("appnp-one.safetensors").to_str().unwrap(),
        "--dataset",
        ds.to_str().unwrap(),
        "--out",
        root.join("layerwise.npy").to_str().unwrap(),
        "--inference-memory-gib",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("APPNP's last layer takes all its hops"),
        "{stderr}"
    );
    // GATv2's scores need both ends' projected rows, which SAR does not exchange: refused.
    let out = graphloom(&[
        "train",
        "--dataset",
        parts.to_str().unwrap(),
        "--model",
        "gatv2",
        "--workers",
        "2",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("GATv2's scores need"), "{stderr}");
}
