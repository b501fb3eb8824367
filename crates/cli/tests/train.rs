//! `train` end to end: the default job and what it writes, the summary JSON, the epoch log,
//! `--help`'s defaults.

mod common;
use common::{graphloom, graphloom_ok, scratch};

#[test]
fn default_job_trains_and_writes_summary_plot_and_model() {
    let dir = scratch("default");
    let summary = dir.join("s.json");
    let plot = dir.join("p.png");
    let model = dir.join("m.safetensors");
    let out = graphloom(&[
        "train",
        "--epochs",
        "20",
        "--quiet",
        "--model",
        "sage",
        "--summary-json",
        summary.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
        "--save-model",
        model.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    for key in [
        "test_acc",
        "best_val_acc",
        "best_epoch",
        "epochs",
        "final_train_loss",
        "mean_epoch_seconds",
        "peak_rss_bytes",
    ] {
        assert!(s.get(key).is_some(), "summary lacks {key}");
    }
    assert!(s["test_acc"].as_f64().unwrap() > 0.5, "{s}");
    assert!(s["peak_bytes"]["features"].as_u64().unwrap() > 0);
    assert_eq!(&std::fs::read(&plot).unwrap()[1..4], b"PNG");
    let bytes = std::fs::read(&model).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert!(st
        .names()
        .iter()
        .any(|n| n.as_str() == "layers.0.lin_l.weight"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn buffer_cache_can_be_turned_off() {
    let dir = scratch("cache");
    let summary = dir.join("s.json");
    let out = graphloom(&[
        "train",
        "--epochs",
        "3",
        "--quiet",
        "--buffer-cache-mib",
        "0",
        "--summary-json",
        summary.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["allocator_cache_bytes"].as_u64(), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--json` prints exactly one JSON object on stdout, in `prepare`, `info` and `train`.
#[test]
fn prepare_info_and_train_print_one_json_object() {
    let root = scratch("json");
    let dir = root.join("ds");
    let one_object = |args: &[&str]| -> serde_json::Value {
        let out = graphloom(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(stdout.lines().count(), 1, "{stdout}");
        serde_json::from_str(&stdout).unwrap()
    };
    let prepared = one_object(&[
        "prepare",
        "synthetic",
        "--nodes",
        "300",
        "--classes",
        "3",
        "--out",
        dir.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(prepared["num_nodes"], 300);
    assert_eq!(prepared["num_classes"], 3);
    let info = one_object(&["info", dir.to_str().unwrap(), "--json"]);
    assert_eq!(info["num_nodes"], 300);
    assert_eq!(info["num_edges"], prepared["num_edges"]);
    assert_eq!(
        info["train"].as_u64().unwrap()
            + info["valid"].as_u64().unwrap()
            + info["test"].as_u64().unwrap(),
        300
    );
    let trained = one_object(&[
        "train",
        "--dataset",
        dir.to_str().unwrap(),
        "--epochs",
        "2",
        "--quiet",
        "--json",
    ]);
    assert_eq!(trained["epochs"], 2);
    assert!(trained["test_acc"].as_f64().is_some());
    std::fs::remove_dir_all(&root).unwrap();
}

/// When stderr is not a terminal (a log file, a pipe, mpirun), every epoch is a plain line.
#[test]
fn epoch_lines_reach_a_log() {
    let out = graphloom(&["train", "--epochs", "3", "--eval-every", "2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("epoch")).collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(lines[0].contains("(not evaluated)"), "{stderr}");
    assert!(lines[1].contains("val "), "{stderr}");
    assert!(lines[2].contains("val "), "{stderr}");
}

/// `train --help` shows each default that the run decides, as the plan reads it off the
/// definition the run uses, once, after its flag's own text.
#[test]
fn train_help_shows_the_defaults_the_run_uses() {
    let out = graphloom_ok(&["train", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for (setting, default) in graphloom_plan::help_defaults() {
        let flag = format!("--{} <", setting.replace('_', "-"));
        let at = help
            .find(&flag)
            .unwrap_or_else(|| panic!("no {flag} in {help}"));
        let text = &help[at..];
        let next = text[2..].find("\n      --").map_or(text.len(), |n| n + 2);
        let said = format!("[default: {default}]");
        assert_eq!(
            text[..next].matches("[default:").count(),
            1,
            "{}",
            &text[..next]
        );
        assert!(text[..next].contains(&said), "{setting}: {}", &text[..next]);
    }
}
