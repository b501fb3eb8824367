//! Damaged inputs of every reader of the graph crate (bounded, seeded): `meta.json`, the dataset
//! directory loaded and mapped, the partitioned directory, and each converter's raw files.
//! Every case is read without a panic, a hang or an allocation beyond its size times a small
//! factor, and refused with a one-line error naming its file (or accepted, and then what was
//! written loads). The cases come from the mutations shared with the `cargo fuzz` targets.

#[path = "../../../fuzz/src/guard.rs"]
mod guard;
#[path = "../../../fuzz/src/mutate.rs"]
mod mutate;
#[path = "../../../fuzz/src/targets/graph.rs"]
mod targets;

#[test]
fn damaged_meta_json_is_refused_cleanly() {
    guard::fuzz(&targets::meta_json(), 100, 3000);
}

#[test]
fn damaged_dataset_directories_are_refused_cleanly() {
    guard::fuzz(&targets::dataset(), 200, 1500);
}

#[test]
fn damaged_partitions_are_refused_cleanly() {
    guard::fuzz(&targets::partition(), 300, 1500);
}

#[test]
fn damaged_text_edge_lists_are_refused_cleanly() {
    guard::fuzz(&targets::edgelist_text(), 400, 800);
}

#[test]
fn damaged_npy_edge_lists_are_refused_cleanly() {
    guard::fuzz(&targets::edgelist_npy(), 500, 800);
}

#[test]
fn damaged_ogb_csv_files_are_refused_cleanly() {
    guard::fuzz(&targets::ogb_csv(), 600, 800);
}

#[test]
fn damaged_ogb_npz_files_are_refused_cleanly() {
    guard::fuzz(&targets::ogb_npz(), 700, 800);
}

#[test]
fn damaged_benchmark_npz_files_are_refused_cleanly() {
    guard::fuzz(&targets::benchmark_npz(), 800, 800);
}

#[test]
fn damaged_planetoid_pickles_are_refused_cleanly() {
    guard::fuzz(&targets::planetoid(), 900, 1500);
}

#[test]
fn fuzzer_inputs_replay() {
    let inputs: [&[u8]; 3] = [b"", b"\x05\x00\x00\x00\x00\x00\x00\x00\x01", &[0xff; 40]];
    for target in [
        targets::meta_json(),
        targets::dataset(),
        targets::partition(),
        targets::edgelist_text(),
        targets::edgelist_npy(),
        targets::ogb_csv(),
        targets::ogb_npz(),
        targets::benchmark_npz(),
        targets::planetoid(),
    ] {
        guard::replay(&target, &inputs);
    }
}
