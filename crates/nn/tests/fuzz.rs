//! Damaged model files and training snapshots (bounded, seeded): every one is read without a
//! panic, a hang or an allocation beyond its size times a small factor, and refused with a
//! one-line error naming its file, or accepted and then usable. The cases come from the
//! mutations shared with the `cargo fuzz` targets.

#[path = "../../../fuzz/src/guard.rs"]
mod guard;
#[path = "../../../fuzz/src/mutate.rs"]
mod mutate;
#[path = "../../../fuzz/src/targets/nn.rs"]
mod targets;

#[test]
fn damaged_model_files_are_refused_cleanly() {
    guard::fuzz(&targets::model_file(), 1000, 2000);
}

#[test]
fn damaged_snapshots_are_refused_cleanly() {
    guard::fuzz(&targets::snapshot(), 1100, 600);
}

#[test]
fn fuzzer_inputs_replay() {
    let inputs: [&[u8]; 3] = [b"", b"\x02\x00\x00\x00\x00\x00\x00\x00\x07", &[0xff; 40]];
    for target in [targets::model_file(), targets::snapshot()] {
        guard::replay(&target, &inputs);
    }
}
