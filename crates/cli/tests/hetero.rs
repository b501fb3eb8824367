//! `graphloom train` on heterogeneous datasets: R-GCN and R-SAGE learn ogbn-mag's shape,
//! sampled batches of every neighbour give the full-batch loss, and what does not apply is
//! refused in one line.

mod common;

use common::{graphloom, graphloom_ok, losses, mag, refused, s, scratch, small_dataset, summary};
use std::path::{Path, PathBuf};

/// Sampled R-GCN and R-SAGE with learnt embeddings for the featureless types reach far above
/// chance (1/349) in a few epochs (R-SAGE at 4 epochs had 0.19, at 8 0.54), and write the
/// summary of a run.
#[test]
fn rgcn_and_rsage_learn_the_relations_of_a_mag_shaped_graph() {
    let root = scratch("hetero-learn");
    let data = mag(&root);
    for (model, extra) in [("rgcn", None), ("rgcn", Some("4")), ("rsage", None)] {
        let json = root.join(format!("{model}.json"));
        let mut args = vec![
            "train",
            "--dataset",
            s(&data),
            "--model",
            model,
            "--fanouts",
            "10,10",
            "--batch-size",
            "512",
            "--epochs",
            "8",
            "--summary-json",
            s(&json),
        ];
        if let Some(bases) = extra {
            args.extend(["--num-bases", bases]);
        }
        graphloom_ok(&args);
        let v = summary(&json);
        let test = v["test_acc"].as_f64().unwrap();
        assert!(test > 0.3, "{model} {extra:?}: test accuracy {test}");
        assert_eq!(v["hetero"], true);
        assert_eq!(v["target_node_type"], "paper");
        let l = losses(&v);
        assert!(l.last() < l.first(), "{model}: losses {l:?}");
    }
}

/// One epoch of one batch of every training node, sampled with every neighbour, computes the
/// full-batch loss (f64): the same model, dropout masks and learnt rows over the same nodes.
#[test]
fn sampled_blocks_of_every_neighbour_give_the_full_batch_loss() {
    let root = scratch("hetero-exact");
    let data = mag(&root);
    let run = |extra: &[&str]| {
        let json = root.join("run.json");
        let mut args = vec![
            "train",
            "--dataset",
            s(&data),
            "--epochs",
            "1",
            "--dtype",
            "f64",
            "--summary-json",
            s(&json),
        ];
        args.extend(extra);
        graphloom_ok(&args);
        losses(&summary(&json))[0]
    };
    for model in ["rgcn", "rsage"] {
        let full = run(&["--model", model]);
        let sampled = run(&[
            "--model",
            model,
            "--fanouts",
            "-1,-1",
            "--batch-size",
            "100000",
        ]);
        assert!(
            (full - sampled).abs() <= 1e-9 * full.abs(),
            "{model}: {full} vs {sampled}"
        );
    }
}

/// A homogeneous model on a heterogeneous dataset, a relational one on a homogeneous dataset,
/// and options heterogeneous training does not take are refused in one line.
#[test]
fn what_does_not_apply_to_heterogeneous_training_is_refused() {
    let root = scratch("hetero-refused");
    let data = mag(&root);
    let d = s(&data);
    refused(
        &graphloom(&["train", "--dataset", d, "--model", "gcn"]),
        &["gcn takes one node type", "rgcn or rsage"],
    );
    refused(
        &graphloom(&["train", "--dataset", d, "--task", "link"]),
        &["--task", "heterogeneous"],
    );
    refused(
        &graphloom(&["train", "--dataset", d, "--fanouts", "5"]),
        &["--fanouts", "1 values for 2 layers"],
    );
    refused(
        &graphloom(&[
            "train",
            "--dataset",
            d,
            "--model",
            "rsage",
            "--num-bases",
            "2",
        ]),
        &["--num-bases", "rsage has none"],
    );
    let homogeneous = root.join("small");
    small_dataset(&homogeneous);
    refused(
        &graphloom(&["train", "--dataset", s(&homogeneous), "--model", "rsage"]),
        &[
            "rsage trains a heterogeneous dataset",
            "gcn, sage, gat, gatv2, gin, gine, sgc, appnp or sign",
        ],
    );
    refused(
        &graphloom(&["train", "--dataset", s(&homogeneous), "--num-bases", "2"]),
        &["--num-bases"],
    );
    refused(
        &graphloom(&[
            "train",
            "--dataset",
            d,
            "--fanouts",
            "5,5",
            "--fanouts-per-relation",
            "rev_x=2,2",
        ]),
        &[
            "--fanouts-per-relation",
            "no relation \"rev_x\"",
            "author__writes__paper",
        ],
    );
    refused(
        &graphloom(&[
            "train",
            "--dataset",
            d,
            "--fanouts-per-relation",
            "writes=2,2",
        ]),
        &["--fanouts-per-relation", "heterogeneous training"],
    );
}

/// A dataset with the awkward cases: the target type `paper` without features (it learns an
/// embedding) unless `paper_features`, a relation without edges, and a node type (`venue`)
/// without any edge.
fn awkward(root: &Path, paper_features: bool) -> PathBuf {
    use graphloom_graph::npy;
    let dir = root.join(format!("awkward-{paper_features}"));
    let writes = dir.join("edges/author__writes__paper");
    let rev = dir.join("edges/paper__rev_writes__author");
    let empty = dir.join("edges/paper__cites__paper");
    for d in [&writes, &rev, &empty] {
        std::fs::create_dir_all(d).unwrap();
    }
    let (papers, authors) = (40usize, 30usize);
    // Paper p is written by authors p % 30 and (p + 7) % 30; class p % 2; author a has
    // features that say the class of the papers it writes most.
    let mut ptr = vec![0i64];
    let mut cols = Vec::new();
    for p in 0..papers {
        cols.extend([(p % authors) as i64, ((p + 7) % authors) as i64]);
        ptr.push(cols.len() as i64);
    }
    npy::write(&writes.join("csr_row_ptr.npy"), &ptr, &[papers + 1]).unwrap();
    npy::write(&writes.join("csr_col_idx.npy"), &cols, &[cols.len()]).unwrap();
    let mut by_author: Vec<Vec<i64>> = vec![Vec::new(); authors];
    for p in 0..papers {
        for &a in &cols[2 * p..2 * p + 2] {
            by_author[a as usize].push(p as i64);
        }
    }
    let rptr: Vec<i64> = std::iter::once(0)
        .chain(by_author.iter().scan(0i64, |acc, v| {
            *acc += v.len() as i64;
            Some(*acc)
        }))
        .collect();
    let rcols: Vec<i64> = by_author.concat();
    npy::write(&rev.join("csr_row_ptr.npy"), &rptr, &[authors + 1]).unwrap();
    npy::write(&rev.join("csr_col_idx.npy"), &rcols, &[rcols.len()]).unwrap();
    npy::write(
        &empty.join("csr_row_ptr.npy"),
        &vec![0i64; papers + 1],
        &[papers + 1],
    )
    .unwrap();
    npy::write(&empty.join("csr_col_idx.npy"), &[] as &[i64], &[0]).unwrap();
    let author = dir.join("nodes/author");
    std::fs::create_dir_all(&author).unwrap();
    let feat: Vec<f32> = (0..authors)
        .flat_map(|a| {
            if a % 2 == 0 {
                [1.0f32, 0.0]
            } else {
                [0.0, 1.0]
            }
        })
        .collect();
    npy::write(&author.join("node_feat.npy"), &feat, &[authors, 2]).unwrap();
    let paper = dir.join("nodes/paper");
    std::fs::create_dir_all(&paper).unwrap();
    let labels: Vec<i64> = (0..papers as i64).map(|p| p % 2).collect();
    if paper_features {
        let feat: Vec<f32> = (0..papers).flat_map(|p| [(p % 3) as f32, 1.0]).collect();
        npy::write(&paper.join("node_feat.npy"), &feat, &[papers, 2]).unwrap();
    }
    npy::write(&paper.join("node_label.npy"), &labels, &[papers]).unwrap();
    let train: Vec<i64> = (0..30).collect();
    npy::write(&paper.join("train_idx.npy"), &train, &[30]).unwrap();
    npy::write(
        &paper.join("test_idx.npy"),
        &(30..40).collect::<Vec<i64>>(),
        &[10],
    )
    .unwrap();
    let meta = serde_json::json!({
        "name": "awkward", "format": "hetero",
        "node_types": {
            "paper": {"num_nodes": papers, "feat_dim": if paper_features { 2 } else { 0 }},
            "author": {"num_nodes": authors, "feat_dim": 2},
            "venue": {"num_nodes": 5},
        },
        "edge_types": [
            ["author", "writes", "paper"],
            ["paper", "rev_writes", "author"],
            ["paper", "cites", "paper"],
        ],
        "target_node_type": "paper", "num_classes": 2, "directed": true,
    });
    std::fs::write(dir.join("meta.json"), meta.to_string()).unwrap();
    dir
}

/// A featureless target type, a relation without edges and a type without edges train, full
/// batch and sampled, with both models.
#[test]
fn a_featureless_target_an_empty_relation_and_an_edgeless_type_train() {
    let root = scratch("hetero-awkward");
    let data = awkward(&root, false);
    for model in ["rgcn", "rsage"] {
        for batching in [&[][..], &["--fanouts", "3,3", "--batch-size", "8"][..]] {
            let json = root.join("run.json");
            let mut args = vec![
                "train",
                "--dataset",
                s(&data),
                "--model",
                model,
                "--epochs",
                "2",
                "--embedding-dim",
                "4",
                "--summary-json",
                s(&json),
            ];
            args.extend(batching);
            graphloom_ok(&args);
            let l = losses(&summary(&json));
            assert!(
                l.iter().all(|x| x.is_finite()),
                "{model} {batching:?}: {l:?}"
            );
        }
    }
}

/// Two workers, each taking a slice of every batch, train what one worker trains (f64): with
/// features on every type and SGD, the same losses and accuracies over epochs, up to the order
/// of the gradients' sums; with learnt embeddings, the same first step. (Adam makes no further
/// comparison possible: its first update is the sign of each gradient, and a gradient that is
/// zero in one sum is a rounding error's sign in another.)
#[test]
fn two_workers_train_what_one_worker_trains() {
    let root = scratch("hetero-workers");
    let run = |data: &Path, workers: &str, extra: &[&str]| {
        let json = root.join(format!("w{workers}.json"));
        let mut args = vec![
            "train",
            "--dataset",
            s(data),
            "--dtype",
            "f64",
            "--workers",
            workers,
            "--summary-json",
            s(&json),
        ];
        args.extend(extra);
        graphloom_ok(&args);
        summary(&json)
    };
    let featured = awkward(&root, true);
    let sgd = [
        "--fanouts",
        "3,3",
        "--batch-size",
        "8",
        "--epochs",
        "3",
        "--optimizer",
        "sgd",
        "--lr",
        "0.5",
    ];
    let (one, two) = (run(&featured, "1", &sgd), run(&featured, "2", &sgd));
    let (a, b) = (losses(&one), losses(&two));
    assert!(a[0] > a[2], "trains: {a:?}");
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-9 * x.abs(), "{a:?} vs {b:?}");
    }
    assert_eq!(one["test_acc"], two["test_acc"]);
    let data = mag(&root);
    let step = [
        "--fanouts",
        "5,5",
        "--batch-size",
        "100000",
        "--epochs",
        "1",
    ];
    let (one, two) = (run(&data, "1", &step), run(&data, "2", &step));
    let (a, b) = (losses(&one)[0], losses(&two)[0]);
    assert!((a - b).abs() <= 1e-12 * a.abs(), "{a} vs {b}");
}

/// A run stopped after 2 epochs and resumed from its snapshot to 4 trains the bits of an
/// uninterrupted 4-epoch run: the parameters, Adam's state, and each learnt embedding with
/// its LazyAdam state come back.
#[test]
fn a_resumed_run_trains_the_bits_of_an_uninterrupted_one() {
    let root = scratch("hetero-resume");
    let data = awkward(&root, false);
    let snaps = root.join("snaps");
    let run = |epochs: &str, extra: &[&str], name: &str| {
        let json = root.join(format!("{name}.json"));
        let mut args = vec![
            "train",
            "--dataset",
            s(&data),
            "--fanouts",
            "3,3",
            "--batch-size",
            "8",
            "--embedding-dim",
            "4",
            "--epochs",
            epochs,
            "--summary-json",
            s(&json),
        ];
        args.extend(extra);
        graphloom_ok(&args);
        losses(&summary(&json))
    };
    let whole = run("4", &[], "whole");
    let first = run("2", &["--snapshot-dir", s(&snaps)], "first");
    assert_eq!(first, whole[..2]);
    let resumed = run("4", &["--snapshot-dir", s(&snaps), "--resume"], "resumed");
    assert_eq!(resumed, whole, "the resumed run's epochs 3 and 4");
}

/// Two MPI processes, each with its own rows of the features and embeddings, train the bits
/// of two in-process workers; rank 0 alone prints the summary.
#[cfg(feature = "mpi")]
#[test]
fn mpi_processes_train_what_local_workers_train() {
    let root = scratch("hetero-mpi");
    let data = mag(&root);
    let mut args = vec![
        "train",
        "--dataset",
        s(&data),
        "--fanouts",
        "5,5",
        "--batch-size",
        "1000",
        "--epochs",
        "2",
        "--dtype",
        "f64",
        "--json",
        "--quiet",
    ];
    let local = {
        let mut a = args.clone();
        a.extend(["--workers", "2"]);
        graphloom_ok(&a)
    };
    args.extend(["--comm", "mpi"]);
    let out = graphloom_comm::launch::mpirun(2)
        .arg(env!("CARGO_BIN_EXE_graphloom"))
        .args(&args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "one summary: {text}");
    let mpi: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let local: serde_json::Value = serde_json::from_slice(&local.stdout).unwrap();
    assert_eq!(losses(&mpi), losses(&local));
}
