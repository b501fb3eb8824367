//! Damaged `.npy` files (bounded, seeded): every one is read without a panic, a hang or an
//! allocation beyond its size, and refused with a one-line error naming it. The cases come from
//! the mutations shared with the `cargo fuzz` targets (`fuzz/`).

#[path = "../../../fuzz/src/guard.rs"]
mod guard;
#[path = "../../../fuzz/src/mutate.rs"]
mod mutate;
#[path = "../../../fuzz/src/targets/npy.rs"]
mod npy_target;

#[test]
fn damaged_npy_files_are_refused_cleanly() {
    guard::fuzz(&npy_target::target(), 0, 1000);
}

#[test]
fn fuzzer_inputs_replay() {
    guard::replay(
        &npy_target::target(),
        &[b"", b"\x01\x02\x03\x04\x05\x06\x07\x08\x09", &[0xff; 64]],
    );
}

#[test]
fn header_text_is_shown_on_one_line() {
    let target = npy_target::target();
    for (from, to, expected) in [
        (&b"'<f8'"[..], &b"'<\n8'"[..], "unsupported dtype '<\\n8'"),
        (b"(3,)", b"(3\nx,)", "bad dimension '3\\nx'"),
    ] {
        let errors = guard::read_edited(&target, "f64.npy", |b| guard::replace(b, from, to));
        guard::assert_refused(&errors, expected);
    }
}
