//! The README's "Using it" commands run as written, in order, from a fresh folder holding only
//! the repository's `testdata/`: every `graphloom` line but the benchmarks (minutes each, with
//! their own tests in `bench.rs`), and the `mpirun` lines in a build with MPI.

use std::path::Path;
use std::process::Command;

mod common;
use common::scratch;

/// The commands of the README's first `sh` block under "## Using it", a line continued with
/// `\` joined to the next, comments and blank lines left out.
fn using_it_commands() -> Vec<String> {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = std::fs::read_to_string(&readme).unwrap();
    let section = &text[text.find("## Using it").expect("a Using it section")..];
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("an sh block in Using it");
    block
        .replace("\\\n", " ")
        .lines()
        .map(|line| {
            line.split(" #")
                .next()
                .unwrap_or_default()
                .trim()
                .to_string()
        })
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect()
}

#[test]
fn the_commands_of_using_it_run_as_written() {
    let dir = scratch("readme");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::os::unix::fs::symlink(
        repo.join("testdata").canonicalize().unwrap(),
        dir.join("testdata"),
    )
    .unwrap();
    // `graphloom` on PATH is this build's binary.
    let bin = dir.join(".bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_graphloom"), bin.join("graphloom")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let with_mpi = cfg!(feature = "mpi") && graphloom_comm::launch::mpirun_available();
    let commands = using_it_commands();
    assert!(commands.len() > 10, "{commands:?}");
    let mut ran = 0;
    for command in &commands {
        let first = command.split_whitespace().next().unwrap_or_default();
        let quick = match first {
            "graphloom" => !command.starts_with("graphloom bench"),
            "mpirun" => with_mpi,
            // The scripts under bench/ take minutes and need the baselines' environments.
            _ => false,
        };
        if !quick {
            eprintln!("not run here: {command}");
            continue;
        }
        let out = Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(&*dir)
            .env("PATH", &path)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert!(ran >= 15, "only {ran} of the README's commands ran");
    // What the commands wrote is where they said: datasets under data/, outputs under runs/.
    let mut left: Vec<String> = std::fs::read_dir(&*dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != ".bin" && name != "testdata")
        .collect();
    left.sort();
    assert_eq!(left, ["data", "runs"]);
}
