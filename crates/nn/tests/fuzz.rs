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

// Regression tests: the cases the fuzz runs found (or that their bounds rule out), each
// refused with a one-line error naming its file, under the same watch.

use guard::{assert_refused, read_edited, replace};

/// Replaces the metadata value `"key":"from"` of a safetensors file by `to`. The tensors'
/// offsets count from the end of the header, so they stay right whatever its new length.
fn set_metadata(bytes: &mut Vec<u8>, key: &str, from: &str, to: &str) {
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header = bytes[8..8 + header_len].to_vec();
    replace(
        &mut header,
        format!("\"{key}\":\"{from}\"").as_bytes(),
        format!("\"{key}\":\"{to}\"").as_bytes(),
    );
    header.resize(header.len().next_multiple_of(8), b' ');
    bytes.splice(
        ..8 + header_len,
        (header.len() as u64)
            .to_le_bytes()
            .into_iter()
            .chain(header),
    );
}

#[test]
fn model_metadata_of_huge_widths_or_layer_counts_is_refused_before_the_model_is_built() {
    for (key, from, to) in [
        ("hidden", "4", "1e11"),
        ("hidden", "4", "100000000000"),
        ("in_dim", "5", "4294967296"),
        ("layers", "2", "1000000000000"),
    ] {
        let errors = read_edited(&targets::model_file(), "gcn.safetensors", |b| {
            set_metadata(b, key, from, to)
        });
        assert!(!errors.is_empty(), "{key} = {to}: accepted");
    }
    let errors = read_edited(&targets::model_file(), "gat.safetensors", |b| {
        set_metadata(b, "heads", "2", "9223372036854775807")
    });
    assert_refused(&errors, "whose weights do not fit in the file");
}

#[test]
fn model_metadata_out_of_its_domain_is_refused_naming_the_file() {
    let errors = read_edited(&targets::model_file(), "gcn.safetensors", |b| {
        set_metadata(b, "dropout", "0.5", "NaN")
    });
    assert_refused(
        &errors,
        "gcn.safetensors: metadata 'dropout' must be in [0, 1), not NaN",
    );
}

#[test]
fn snapshot_counters_at_the_end_of_the_integers_are_refused() {
    for key in ["step", "optimizer_step", "epoch"] {
        let errors = read_edited(&targets::snapshot(), "snapshot/state.safetensors", |b| {
            let header = String::from_utf8_lossy(&b[8..]).into_owned();
            let at = header.find(&format!("\"{key}\":\"")).unwrap() + key.len() + 4;
            let value: String = header[at..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            set_metadata(b, key, &value, "18446744073709551615");
        });
        assert_refused(&errors, &format!("metadata '{key}'"));
    }
}

#[test]
fn snapshot_counts_that_disagree_are_refused() {
    let errors = read_edited(&targets::snapshot(), "snapshot/state.safetensors", |b| {
        set_metadata(b, "epoch", "2", "1")
    });
    assert_refused(&errors, "2 records, the best at epoch");
}

#[test]
fn a_snapshot_of_another_model_or_of_non_finite_values_is_refused_naming_the_file() {
    let errors = read_edited(&targets::snapshot(), "snapshot/state.safetensors", |b| {
        replace(b, b"param.layers.0.weight", b"param.layers.0.wxight")
    });
    assert_refused(&errors, "state.safetensors is of another model");
    let errors = read_edited(&targets::snapshot(), "snapshot/state.safetensors", |b| {
        let data = 8 + u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
        b[data..data + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    });
    assert_refused(&errors, "holds NaN or an infinity");
}
