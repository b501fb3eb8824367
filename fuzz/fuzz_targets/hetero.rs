//! `cargo fuzz run hetero`: the cases of the workspace's fuzz test of the heterogeneous dataset
//! reader, their choices taken from libFuzzer's input.
#![no_main]
#![allow(dead_code)]

#[path = "../src/mutate.rs"]
mod mutate;
#[path = "../src/targets/graph.rs"]
mod targets;

use std::sync::OnceLock;

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    static TARGET: OnceLock<mutate::Target> = OnceLock::new();
    let target = TARGET.get_or_init(targets::hetero);
    let dir =
        mutate::scratch_root().join(format!("graphloom-fuzz-hetero-{}", std::process::id()));
    mutate::run_input(target, &dir, input);
});
