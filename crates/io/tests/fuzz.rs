//! Damaged `.npy` files (bounded, seeded), read as arrays and as pairs of node ids: every one is
//! read without a panic, a hang or an allocation beyond its size, and refused with a one-line
//! error naming it. The cases come from the mutations shared with the `cargo fuzz` targets
//! (`fuzz/`).

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
fn damaged_pair_files_are_refused_cleanly() {
    guard::fuzz(&npy_target::pairs(), 1, 1000);
}

#[test]
fn fuzzer_inputs_replay() {
    for target in [npy_target::target(), npy_target::pairs()] {
        guard::replay(
            &target,
            &[b"", b"\x01\x02\x03\x04\x05\x06\x07\x08\x09", &[0xff; 64]],
        );
    }
}

#[test]
fn pairs_of_another_shape_or_a_mask_are_refused() {
    let target = npy_target::pairs();
    let errors = guard::read_edited(&target, "rows.npy", |b| {
        guard::replace(b, b"(2, 4)", b"(4, 2)")
    });
    assert!(errors.is_empty(), "[4, 2] is four pairs: {errors:?}");
    let errors = guard::read_edited(&target, "rows.npy", |b| {
        guard::replace(b, b"(2, 4)", b"(1, 8)")
    });
    guard::assert_refused(
        &errors,
        "shape [1, 8], expected pairs of node ids as [2, P] or [P, 2]",
    );
    let errors = guard::read_edited(&target, "small.npy", |b| guard::replace(b, b"|u1", b"|b1"));
    guard::assert_refused(&errors, "a bool array is a mask, not ids");
    let errors = guard::read_edited(&target, "transposed.npy", |b| {
        guard::replace(b, b"(2, 3)", b"(2, 4)")
    });
    assert!(
        !errors.is_empty(),
        "a transposed view longer than its body was read"
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
