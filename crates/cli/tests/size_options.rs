//! Every size option at its bound runs or is refused before it allocates. The numeric options
//! of `prepare`, `partition`, `train`, `predict` and `embed` are found in their `--help` and
//! typed by clap's answer to a value that is no number; each is a size with rows in [`SIZES`]
//! or named in [`NOT_SIZES`], so an option added without a row fails here. Each row runs its
//! command on a small dataset with the option at its largest accepted value (and one past it,
//! where the option has a bound) under an address-space limit and a time limit: the run must
//! succeed or refuse with one `error:` line, never end by a signal, a panic or a failed
//! allocation, nor hang. (`bench` is left out: its sizes are those of the experiments it
//! measures.)

use std::path::Path;
use std::process::Output;

mod common;
use common::{graphloom, graphloom_limited, graphloom_ok, scratch, small_dataset};

/// `u64::MAX`: the largest value a count (`usize`) option takes on a 64-bit machine.
const MAX: &str = "18446744073709551615";
/// The largest fanout (`i64::MAX`), for two layers.
const FANOUTS: &str = "9223372036854775807,9223372036854775807";
/// The bound of the GiB options (1 EiB), and one past it.
const EIB: &str = "1073741824";
const PAST_EIB: &str = "1073741825";

/// The address space a run may take (KiB): 4 GiB, less than every size refused below needs.
const ADDRESS_SPACE_KIB: u64 = 4 << 20;
/// The time a run may take before it counts as hung; the slowest row takes about a second.
const TIME_LIMIT_S: u64 = 60;

/// What a row's run must do (either way without a signal, a panic or a failed allocation).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Outcome {
    Runs,
    Refused,
}
use Outcome::{Refused, Runs};

/// The command lines the rows start from, by name. Placeholders: `{ds}` (300 nodes, 8
/// features, 3 classes), `{link}` (its link split), `{parts}` (it in 2 parts), `{model}` (a
/// GCN trained on it), `{edges}` (a text edge list of 3 nodes), `{hetero}` (ogbn-mag's shape
/// at 0.001), `{out}` (a new path).
#[rustfmt::skip]
const BASES: &[(&str, &str)] = &[
    ("train", "train --dataset {ds} --epochs 1 --quiet"),
    ("sage", "train --dataset {ds} --epochs 1 --quiet --model sage"),
    ("gat", "train --dataset {ds} --epochs 1 --quiet --model gat"),
    ("appnp", "train --dataset {ds} --epochs 1 --quiet --model appnp"),
    // A validation accuracy that never improves stops the run after two evaluations.
    ("patient", "train --dataset {ds} --quiet --patience 1 --lr 1e-30"),
    ("snapshots", "train --dataset {ds} --epochs 1 --quiet --snapshot-dir {out}"),
    ("sampled", "train --dataset {ds} --epochs 1 --quiet --fanouts 2,2"),
    ("mmap", "train --dataset {ds} --epochs 1 --quiet --fanouts 2,2 --features-location mmap"),
    ("cluster", "train --dataset {ds} --epochs 1 --quiet --batching cluster --clusters 4"),
    ("saint-node", "train --dataset {ds} --epochs 1 --quiet --batching saint-node --saint-budget 300"),
    ("saint-rw", "train --dataset {ds} --epochs 1 --quiet --batching saint-rw --saint-budget 300"),
    ("link", "train --dataset {link} --task link --epochs 1 --quiet"),
    ("link-mlp", "train --dataset {link} --task link --epochs 1 --quiet --decoder mlp"),
    ("sar", "train --dataset {parts} --epochs 1 --quiet"),
    ("hetero", "train --dataset {hetero} --epochs 1 --quiet --fanouts 2,2"),
    ("synthetic", "prepare synthetic --nodes 100 --out {out}"),
    // Features no disk holds, so that the most nodes are refused before anything is written.
    ("synthetic-wide", "prepare synthetic --nodes 100 --feat-dim 1048576 --out {out}"),
    ("synthetic-hetero", "prepare synthetic --hetero mag --scale 0.001 --out {out}"),
    ("targets", "prepare synthetic --nodes 100 --targets regression --out {out}"),
    ("propagate", "prepare propagate --dataset {ds} --out {out}"),
    // Paper features no disk holds, so that the largest scale is refused before writing.
    ("synthetic-hetero-wide", "prepare synthetic --hetero mag --feat-dim 1048576 --out {out}"),
    ("edgelist", "prepare edgelist --edges {edges} --out {out}"),
    ("link-split", "prepare link-split --dataset {ds} --out {out}"),
    ("partition", "partition --dataset {ds} --parts 2 --out {out}"),
    (
        "partition-stream",
        "partition --dataset {ds} --parts 2 --out {out} --method stream",
    ),
    ("predict", "predict --model {model} --dataset {ds} --out {out}"),
    ("embed", "embed --model {model} --dataset {ds} --out {out}"),
];

/// The size options at their bounds: (option, value, base, outcome). The option's value
/// replaces the base's, or is added to it.
#[rustfmt::skip]
const SIZES: &[(&str, &str, &str, Outcome)] = &[
    ("--layers", "65536", "sage", Refused), // memory: a GCN of 65536 layers trains, for a minute
    ("--layers", "65537", "train", Refused),
    ("--hidden", MAX, "train", Refused),
    ("--hidden", MAX, "gat", Refused),
    ("--heads", MAX, "gat", Refused),
    ("--out-heads", MAX, "gat", Refused),
    ("--hops", "65537", "appnp", Refused), // 65536 steps train, for 13 s
    ("--hops", MAX, "appnp", Refused),
    ("--epochs", MAX, "patient", Runs),
    ("--patience", MAX, "train", Runs),
    ("--eval-every", MAX, "train", Runs),
    ("--threads", "1024", "train", Refused), // their stacks: 4 GiB of address space
    ("--threads", "1025", "train", Refused),
    ("--memory-gib", EIB, "sampled", Runs),
    ("--memory-gib", PAST_EIB, "train", Refused),
    ("--snapshot-every", MAX, "snapshots", Runs),
    ("--fanouts", FANOUTS, "train", Runs),
    ("--eval-fanouts", FANOUTS, "sampled", Runs),
    ("--batch-size", MAX, "sampled", Runs),
    ("--queue-depth", "1024", "sampled", Runs),
    ("--queue-depth", "1025", "sampled", Refused),
    ("--batches-per-epoch", MAX, "sampled", Runs),
    ("--eval-nodes", MAX, "sampled", Runs),
    ("--workers", "1024", "sampled", Refused), // their threads' stacks: 8 GiB of address space
    ("--workers", "1025", "sampled", Refused),
    ("--workers", "1024", "sar", Refused),
    ("--embedding-dim", MAX, "sampled", Refused),
    ("--embedding-dim", MAX, "hetero", Refused),
    ("--num-bases", "8", "hetero", Runs), // as many bases as the 8 relations
    ("--num-bases", "9", "hetero", Refused),
    ("--num-bases", MAX, "hetero", Refused),
    ("--buffer-cache-mib", MAX, "sampled", Runs),
    ("--inference-memory-gib", EIB, "sampled", Runs),
    ("--inference-memory-gib", PAST_EIB, "sampled", Refused),
    ("--feature-cache-gib", EIB, "mmap", Runs),
    ("--feature-cache-gib", PAST_EIB, "mmap", Refused),
    ("--clusters", "300", "cluster", Runs),
    ("--clusters", "301", "cluster", Refused),
    ("--clusters-per-batch", "4", "cluster", Runs),
    ("--clusters-per-batch", "5", "cluster", Refused),
    ("--saint-budget", "300", "saint-node", Runs),
    ("--saint-budget", "301", "saint-node", Refused),
    ("--batches-per-epoch", "300", "saint-node", Runs),
    ("--batches-per-epoch", "301", "saint-node", Refused),
    ("--saint-coverage", "10000", "saint-node", Runs),
    ("--saint-coverage", "10001", "saint-node", Refused),
    ("--walk-length", "300", "saint-rw", Runs),
    ("--walk-length", "301", "saint-rw", Refused),
    ("--out-dim", MAX, "link", Refused),
    ("--out-dim", "4294967296", "link-mlp", Refused), // its decoder's weight overflowed a count
    ("--neg-ratio", "65536", "link", Refused), // memory: 50 million pairs in one step
    ("--neg-ratio", "65537", "link", Refused),
    ("--batch-size", MAX, "link", Runs),
    ("--nodes", "4294967295", "synthetic-wide", Refused),
    ("--nodes", "4294967296", "synthetic", Refused),
    ("--avg-degree", MAX, "synthetic", Refused),
    ("--edges", "1152921504606846975", "synthetic", Refused), // 4 EiB of disk
    ("--edges", "1152921504606846976", "synthetic", Refused),
    ("--feat-dim", MAX, "synthetic", Refused),
    ("--feat-dim", MAX, "synthetic-hetero", Refused),
    ("--scale", "100", "synthetic-hetero-wide", Refused),
    ("--scale", "100.5", "synthetic-hetero", Refused),
    ("--classes", MAX, "synthetic", Runs), // no more classes than nodes are drawn
    ("--split-counts", "100,0,0", "synthetic", Runs),
    ("--split-counts", "101,0,0", "synthetic", Refused),
    ("--split-counts", "18446744073709551615,1,1", "synthetic", Refused),
    ("--num-targets", "4096", "targets", Runs),
    ("--num-targets", "4097", "targets", Refused),
    ("--num-targets", MAX, "targets", Refused),
    ("--edge-features", "4096", "synthetic", Runs),
    ("--edge-features", "4097", "synthetic", Refused),
    ("--edge-features", MAX, "synthetic", Refused),
    ("--hops", "64", "propagate", Runs),
    ("--hops", "65", "propagate", Refused),
    ("--hops", MAX, "propagate", Refused),
    ("--memory-gib", EIB, "propagate", Runs),
    ("--memory-gib", PAST_EIB, "propagate", Refused),
    ("--num-nodes", "4294967295", "edgelist", Refused), // memory: 161 GiB to convert
    ("--num-nodes", MAX, "edgelist", Refused),
    ("--neg-dst", "299", "link-split", Runs),
    ("--neg-dst", "300", "link-split", Refused),
    ("--neg-dst", MAX, "link-split", Refused),
    ("--parts", "300", "partition", Runs),
    ("--parts", "301", "partition", Refused),
    ("--parts", MAX, "partition", Refused),
    ("--grouping-passes", "100", "partition", Runs),
    ("--grouping-passes", "101", "partition", Refused),
    ("--restreams", "100", "partition-stream", Runs),
    ("--restreams", "101", "partition", Refused),
    ("--refinements", "100", "partition-stream", Runs),
    ("--refinements", "101", "partition", Refused),
    ("--memory-gib", EIB, "partition", Runs),
    ("--memory-gib", PAST_EIB, "partition", Refused),
    ("--inference-memory-gib", EIB, "predict", Runs),
    ("--inference-memory-gib", PAST_EIB, "predict", Refused),
    ("--inference-memory-gib", EIB, "embed", Runs),
    ("--inference-memory-gib", PAST_EIB, "embed", Refused),
    ("--layer", "2", "embed", Runs),
    ("--layer", "3", "embed", Refused),
    ("--layer", MAX, "embed", Refused),
];

/// The numeric options that size nothing: seeds, rates and shares.
const NOT_SIZES: &[&str] = &[
    "--seed",
    "--balance",
    "--lr",
    "--teleport",
    "--weight-decay",
    "--embedding-lr",
    "--dropout",
    "--input-dropout",
    "--attention-dropout",
    "--homophily",
    "--signal",
    "--target-noise",
    "--edge-signal",
    "--missing-targets",
    "--valid",
    "--test",
];

/// Clap's answers to a value that is no number, for the options that take numbers (counts,
/// floats, fanouts, probabilities).
const NOT_A_NUMBER: &[&str] = &[
    "invalid digit found in string",
    "invalid float literal",
    "is not a count",
    "is not a number",
];

#[test]
fn every_size_option_at_its_bound_runs_or_is_refused_cleanly() {
    let numeric = numeric_options();
    let mut failures = Vec::new();
    for (command, option) in &numeric {
        let rows = SIZES
            .iter()
            .any(|&(o, _, base, _)| o == option && command_of(base_line(base)) == *command);
        if !rows && !NOT_SIZES.contains(&option.as_str()) {
            failures.push(format!(
                "`{command} {option}` takes a number: give it rows in SIZES, or name it in \
                 NOT_SIZES"
            ));
        }
    }
    for &(option, _, base, _) in SIZES {
        let command = command_of(base_line(base));
        if !numeric.contains(&(command.clone(), option.to_string())) {
            failures.push(format!(
                "`{command} {option}` is no numeric option of the CLI"
            ));
        }
    }
    let root = scratch("size-options");
    let fixtures = Fixtures::new(&root);
    for (i, &(option, value, base, outcome)) in SIZES.iter().enumerate() {
        let args = row_args(
            base_line(base),
            option,
            value,
            &fixtures,
            &root.join(format!("out-{i}")),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = graphloom_limited(ADDRESS_SPACE_KIB, TIME_LIMIT_S, &args);
        if let Err(why) = check(&run, outcome) {
            failures.push(format!("graphloom {}: {why}", args.join(" ")));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// A partition of more parts than one process may run workers is refused before a worker
/// starts (a thread was spawned per part until one failed, which panicked). Its
/// `partition.json` is edited to say 1025 parts, all but one empty: cutting a graph into that
/// many takes a minute.
#[test]
fn a_partition_of_more_parts_than_one_process_may_run_is_refused() {
    let root = scratch("many-parts");
    let ds = root.join("ds");
    let parts = root.join("parts");
    let (ds_s, parts_s) = (ds.to_str().unwrap(), parts.to_str().unwrap());
    small_dataset(&ds);
    graphloom_ok(&[
        "partition",
        "--dataset",
        ds_s,
        "--parts",
        "2",
        "--out",
        parts_s,
    ]);
    let path = parts.join("partition.json");
    let mut meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let (n, train) = (
        meta["dataset"]["num_nodes"].clone(),
        meta["num_train"].clone(),
    );
    let count = 1025;
    let mut offsets = vec![n.clone(); count + 1];
    offsets[0] = 0.into();
    let mut nodes = vec![serde_json::json!(0); count];
    nodes[0] = n;
    let mut train_nodes = vec![serde_json::json!(0); count];
    train_nodes[0] = train;
    meta["parts"] = count.into();
    meta["offsets"] = offsets.into();
    meta["nodes"] = nodes.into();
    meta["train_nodes"] = train_nodes.into();
    meta["halo"] = vec![0; count].into();
    std::fs::write(&path, meta.to_string()).unwrap();
    let run = graphloom_limited(
        ADDRESS_SPACE_KIB,
        TIME_LIMIT_S,
        &["train", "--dataset", parts_s, "--epochs", "1", "--quiet"],
    );
    check(&run, Refused).unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("the partition's 1025 parts train on as many workers, more than the 1024"),
        "{stderr}"
    );
}

/// Checks that `run` ended as `outcome` says: exit 0, or a refusal (clap's usage error, exit
/// 2, or the command's own, exit 1, whose last line is its only `error:` line); and never by
/// a signal, a hang, a panic or a failed allocation.
fn check(run: &Output, outcome: Outcome) -> Result<(), String> {
    let stderr = String::from_utf8_lossy(&run.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines
        .iter()
        .rev()
        .take(3)
        .copied()
        .collect::<Vec<_>>()
        .join(" | ");
    for sign in ["panicked at", "memory allocation of", "fatal runtime error"] {
        if stderr.contains(sign) {
            return Err(format!("{sign:?}: {tail}"));
        }
    }
    let errors = lines.iter().filter(|l| l.starts_with("error:")).count();
    let ended = match run.status.code() {
        Some(0) => Runs,
        Some(1) if errors == 1 && lines.last().is_some_and(|l| l.starts_with("error: ")) => Refused,
        Some(2) if lines.first().is_some_and(|l| l.starts_with("error: ")) => Refused,
        Some(124) => return Err(format!("no answer after {TIME_LIMIT_S} s")),
        code => return Err(format!("ended with {code:?}: {tail}")),
    };
    if ended != outcome {
        return Err(format!("{ended:?}, expected {outcome:?}: {tail}"));
    }
    Ok(())
}

/// The command line of base `name`.
fn base_line(name: &str) -> &'static str {
    BASES
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no base {name}"))
        .1
}

/// The subcommand a command line runs (`train`, `prepare synthetic`): its words before the
/// first option.
fn command_of(line: &str) -> String {
    line.split_whitespace()
        .take_while(|w| !w.starts_with('-'))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The arguments of `line` with `option` set to `value` (replacing the line's own value, or
/// added), its placeholders filled in and `{out}` as `out`.
fn row_args(line: &str, option: &str, value: &str, f: &Fixtures, out: &Path) -> Vec<String> {
    let mut words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    match words.iter().position(|w| w == option) {
        Some(at) => words[at + 1] = value.to_string(),
        None => words.extend([option.to_string(), value.to_string()]),
    }
    let out = out.to_str().unwrap();
    words
        .into_iter()
        .map(|w| match w.as_str() {
            "{ds}" => f.ds.clone(),
            "{link}" => f.link.clone(),
            "{parts}" => f.parts.clone(),
            "{model}" => f.model.clone(),
            "{edges}" => f.edges.clone(),
            "{hetero}" => f.hetero.clone(),
            "{out}" => out.to_string(),
            _ => w,
        })
        .collect()
}

/// The inputs the rows run on, made once.
struct Fixtures {
    ds: String,
    link: String,
    parts: String,
    model: String,
    edges: String,
    hetero: String,
}

impl Fixtures {
    fn new(root: &Path) -> Fixtures {
        let path = |name: &str| root.join(name).to_str().unwrap().to_string();
        let f = Fixtures {
            ds: path("ds"),
            link: path("link"),
            parts: path("parts"),
            model: path("model.safetensors"),
            edges: path("edges.txt"),
            hetero: path("hetero"),
        };
        small_dataset(Path::new(&f.ds));
        graphloom_ok(&[
            "prepare",
            "link-split",
            "--dataset",
            &f.ds,
            "--neg-dst",
            "3",
            "--out",
            &f.link,
        ]);
        graphloom_ok(&[
            "partition",
            "--dataset",
            &f.ds,
            "--parts",
            "2",
            "--out",
            &f.parts,
        ]);
        graphloom_ok(&[
            "train",
            "--dataset",
            &f.ds,
            "--epochs",
            "1",
            "--quiet",
            "--save-model",
            &f.model,
        ]);
        std::fs::write(&f.edges, "0 1\n1 2\n2 0\n").unwrap();
        graphloom_ok(&[
            "prepare",
            "synthetic",
            "--hetero",
            "mag",
            "--scale",
            "0.001",
            "--out",
            &f.hetero,
        ]);
        f
    }
}

/// Every numeric option of the commands checked here, as (subcommand, option).
fn numeric_options() -> Vec<(String, String)> {
    let mut commands: Vec<String> = subcommands("")
        .into_iter()
        .filter(|c| c != "bench")
        .collect();
    for c in commands.clone() {
        commands.extend(subcommands(&c).into_iter().map(|s| format!("{c} {s}")));
    }
    let mut numeric = Vec::new();
    for command in &commands {
        for option in value_options(command) {
            // Clap parses the value when it meets the next argument: `--help` then prints the
            // help of an option that takes the value, so that no probe runs its command.
            let mut args: Vec<&str> = command.split(' ').collect();
            args.extend([option.as_str(), "x", "--help"]);
            let stderr = String::from_utf8_lossy(&graphloom(&args).stderr).to_string();
            let first = stderr.lines().next().unwrap_or_default();
            if NOT_A_NUMBER.iter().any(|answer| first.contains(answer)) {
                numeric.push((command.clone(), option));
            }
        }
    }
    assert!(
        numeric.len() > 40,
        "too few numeric options found: {numeric:?}"
    );
    numeric
}

/// The help of `command` (words, or "" for the top level).
fn help(command: &str) -> String {
    let mut args: Vec<&str> = command.split_whitespace().collect();
    args.push("--help");
    String::from_utf8(graphloom_ok(&args).stdout).unwrap()
}

/// The subcommands `command`'s help lists, but `help`.
fn subcommands(command: &str) -> Vec<String> {
    let help = help(command);
    let Some((_, listed)) = help.split_once("Commands:\n") else {
        return Vec::new();
    };
    listed
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// The options of `command` that take a value (`--name <VALUE>` in its help).
fn value_options(command: &str) -> Vec<String> {
    help(command)
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .split_once(", ")
                .filter(|(short, _)| short.len() == 2)
                .map_or(l, |(_, long)| long);
            let (name, rest) = l.strip_prefix("--")?.split_once(' ')?;
            rest.starts_with('<').then(|| format!("--{name}"))
        })
        .collect()
}
