//! Damaged inputs of every reader of the graph crate (bounded, seeded): `meta.json`, the dataset
//! directory loaded and mapped, the partitioned directory, each converter's raw files, a
//! heterogeneous dataset directory, and a dataset's link split.
//! Every case is read without a panic, a hang or an allocation beyond its size times a small
//! factor, and refused with a one-line error naming its file (or accepted, and then what was
//! written loads). The cases come from the mutations shared with the `cargo fuzz` targets.

use std::path::Path;

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
fn damaged_link_splits_are_refused_cleanly() {
    guard::fuzz(&targets::link_split::target(), 1000, 1500);
}

#[test]
fn damaged_heterogeneous_datasets_are_refused_cleanly() {
    guard::fuzz(&targets::hetero(), 1100, 1500);
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
        targets::link_split::target(),
        targets::hetero(),
    ] {
        guard::replay(&target, &inputs);
    }
}

// Regression tests: the cases the fuzz runs found (or that their bounds rule out), each
// refused with a one-line error naming its file, under the same watch.

use guard::{assert_refused, read_edited, replace};

#[test]
fn a_partition_of_a_huge_part_count_is_refused_before_anything_is_sized_by_it() {
    let errors = read_edited(&targets::partition(), "partition.json", |b| {
        replace(b, b"\"parts\": 2", b"\"parts\": 1000000000000")
    });
    assert_refused(&errors, "entries for 1000000000000 parts");
}

#[test]
fn a_partition_whose_lists_disagree_with_its_part_count_is_refused() {
    let errors = read_edited(&targets::partition(), "partition.json", |b| {
        let mut meta: serde_json::Value = serde_json::from_slice(b).unwrap();
        meta["nodes"].as_array_mut().unwrap().pop();
        *b = serde_json::to_vec(&meta).unwrap();
    });
    assert_refused(&errors, "'nodes' has 1 entries for 2 parts");
    let errors = read_edited(&targets::partition(), "partition.json", |b| {
        let mut meta: serde_json::Value = serde_json::from_slice(b).unwrap();
        meta["offsets"][1] = serde_json::json!(3);
        *b = serde_json::to_vec(&meta).unwrap();
    });
    assert_refused(&errors, "part 0 holds ids 0..3");
}

#[test]
fn a_part_with_labels_or_degrees_of_another_length_is_refused() {
    for name in ["part_0/node_label.npy", "part_1/in_degree.npy"] {
        let errors = read_edited(&targets::partition(), name, |b| {
            *b = npy_bytes_i64(&[0, 1]);
        });
        assert_refused(&errors, "has 2 entries for");
    }
}

fn npy_bytes_i64(values: &[i64]) -> Vec<u8> {
    npy_bytes_shaped(values, &[values.len()])
}

fn npy_bytes_shaped(values: &[i64], shape: &[usize]) -> Vec<u8> {
    let p = guard::scratch("npy-bytes");
    std::fs::create_dir_all(&p).unwrap();
    graphloom_graph::npy::write(&p.join("a.npy"), values, shape).unwrap();
    let bytes = std::fs::read(p.join("a.npy")).unwrap();
    std::fs::remove_dir_all(&p).unwrap();
    bytes
}

#[test]
fn an_edge_list_id_at_the_end_of_the_integers_is_refused_without_overflow() {
    let errors = read_edited(&targets::edgelist_text(), "edges.txt", |b| {
        b.extend_from_slice(b"0 9223372036854775807\n")
    });
    assert_refused(&errors, "9223372036854775807");
}

#[test]
fn an_edge_list_id_that_would_size_gigabytes_of_nodes_is_refused() {
    let errors = read_edited(&targets::edgelist_text(), "edges.txt", |b| {
        b.extend_from_slice(b"0 2147483648\n")
    });
    // (Refused whatever the reason given, within the guard's bound on allocations.)
    assert!(!errors.is_empty(), "accepted");
}

#[test]
fn a_label_beyond_the_classes_a_model_can_have_is_refused() {
    let errors = read_edited(&targets::edgelist_npy(), "labels.npy", |b| {
        *b = npy_bytes_i64(&[i64::MAX; 40]);
    });
    assert_refused(&errors, "labels are classes 0..=2147483646");
    let errors = read_edited(&targets::ogb_csv(), "raw/node-label.csv", |b| {
        let end = b.iter().position(|&c| c == b'\n').unwrap();
        b.splice(0..end, b"99999999999999999999".iter().copied());
    });
    assert_refused(&errors, "label of node 0");
    let errors = read_edited(&targets::meta_json(), "meta.json", |b| {
        replace(
            b,
            b"\"num_classes\": 3",
            b"\"num_classes\": 1000000000000000000",
        )
    });
    assert_refused(&errors, "num_classes = 1000000000000000000 is above");
}

#[test]
fn ogb_splits_that_overlap_or_repeat_are_refused() {
    let target = targets::ogb_csv();
    let train = &target
        .files
        .iter()
        .find(|(n, _)| n == "split/time/train.csv")
        .unwrap()
        .1;
    let first_line = train.split(|&c| c == b'\n').next().unwrap().to_vec();
    let errors = read_edited(&target, "split/time/valid.csv", |b| {
        b.splice(0..0, first_line.iter().chain(b"\n").copied());
    });
    assert_refused(&errors, "splits must not overlap");
    let errors = read_edited(&targets::ogb_npz(), "split/time/train.csv", |b| {
        let first = b.split(|&c| c == b'\n').next().unwrap().to_vec();
        b.extend_from_slice(&first);
        b.push(b'\n');
    });
    assert_refused(&errors, "is listed twice");
}

#[test]
fn sparse_attributes_with_damaged_offsets_or_shape_are_refused() {
    let errors = read_edited(&targets::benchmark_npz(), "g.npz/attr_indptr.npy", |b| {
        let mut ptr = vec![0i64; 41];
        ptr[1] = 1000;
        *b = npy_bytes_i64(&ptr);
    });
    assert_refused(&errors, "attr_indptr is not 41 offsets");
    let errors = read_edited(&targets::benchmark_npz(), "g.npz/attr_shape.npy", |b| {
        *b = npy_bytes_i64(&[40, 1 << 40]);
    });
    assert_refused(&errors, "a shape that large for so few values is damaged");
}

#[test]
fn planetoid_matrices_with_a_huge_shape_or_damaged_offsets_are_refused() {
    let csr = targets::csr_pickle;
    let errors = read_edited(&targets::planetoid(), "ind.tiny.x", |b| {
        *b = csr([21, 1 << 40], &[0; 22], &[], &[]);
    });
    assert_refused(&errors, "a shape that large for so few values is damaged");
    let errors = read_edited(&targets::planetoid(), "ind.tiny.x", |b| {
        let mut ptr = vec![1i32; 22];
        ptr[0] = 0;
        ptr[1] = 5;
        *b = csr([21, 4], &ptr, &[0], &[1.0]);
    });
    assert_refused(&errors, "inconsistent csr_matrix arrays");
    let errors = read_edited(&targets::planetoid(), "ind.tiny.y", |b| {
        *b = targets::array_pickle("f8", &[1 << 30, 1 << 30, 1 << 30], &[]);
    });
    assert_refused(&errors, "does not fit its 0 bytes");
}

#[test]
fn planetoid_dtype_names_are_shown_on_one_line() {
    let errors = read_edited(&targets::planetoid(), "ind.tiny.x", |b| {
        replace(b, b"U\x02f4", b"U\x02f\n")
    });
    assert_refused(&errors, "unsupported dtype");
}

#[test]
fn planetoid_files_that_disagree_on_rows_or_classes_are_refused() {
    let errors = read_edited(&targets::planetoid(), "ind.tiny.ally", |b| {
        *b = targets::array_pickle("i4", &[599, 3], &targets::bytes_le(&[0i32; 599 * 3]));
    });
    assert_refused(&errors, "599 rows, expected 600");
    let errors = read_edited(&targets::planetoid(), "ind.tiny.ty", |b| {
        *b = targets::array_pickle("f8", &[9, 4], &targets::bytes_le(&[0f64; 36]));
    });
    assert_refused(&errors, "4 classes, expected 3");
}

#[test]
fn planetoid_test_ids_far_out_or_twice_are_refused() {
    let errors = read_edited(&targets::planetoid(), "ind.tiny.test.index", |b| {
        replace(b, b"605", b"1000000000")
    });
    assert_refused(&errors, "test id 1000000000 is far past");
    let errors = read_edited(&targets::planetoid(), "ind.tiny.test.index", |b| {
        replace(b, b"600", b"605")
    });
    assert_refused(&errors, "test id 605 is listed twice");
}

#[test]
fn planetoid_non_finite_features_are_refused() {
    let errors = read_edited(&targets::planetoid(), "ind.tiny.x", |b| {
        let mut ptr = vec![1i32; 22];
        ptr[0] = 0;
        *b = targets::csr_pickle([21, 4], &ptr, &[0], &[f32::NAN]);
    });
    assert_refused(&errors, "non-finite value");
}

#[test]
fn a_planetoid_graph_sharing_one_list_between_keys_is_refused_before_it_is_expanded() {
    let errors = read_edited(&targets::planetoid(), "ind.tiny.graph", |b| {
        *b = targets::shared_adjacency_pickle(20_000, &[1; 3000]);
    });
    assert_refused(&errors, "adjacency entries in");
}

#[test]
fn a_pickle_fetching_one_large_value_from_its_memo_many_times_stays_small() {
    let errors = read_edited(&targets::planetoid(), "ind.tiny.graph", |b| {
        let mut p = vec![0x80, 2, b'T'];
        p.extend_from_slice(&(1u32 << 16).to_le_bytes());
        p.extend(std::iter::repeat_n(b'x', 1 << 16));
        p.extend_from_slice(b"q\x00");
        for _ in 0..20_000 {
            p.extend_from_slice(b"h\x00");
        }
        p.push(b'.');
        *b = p;
    });
    assert_refused(&errors, "dict of adjacency lists expected");
}

/// The errors of the link split whose int64 file `name` (in `link_split/`) has its elements
/// and shape changed by `edit`.
fn edited_split(name: &str, edit: impl FnOnce(&mut Vec<i64>, &mut Vec<usize>)) -> Vec<String> {
    let path = format!("link_split/{name}");
    read_edited(&targets::link_split::target(), &path, |b| {
        let mut a = graphloom_graph::npy::decode::<i64>(b, Path::new(name)).unwrap();
        edit(&mut a.data, &mut a.shape);
        *b = npy_bytes_shaped(&a.data, &a.shape);
    })
}

/// The pairs `[2, E]` of the valid link split's file `name`, as (sources, destinations).
fn split_pairs(name: &str) -> (Vec<i64>, Vec<i64>) {
    let target = targets::link_split::target();
    let path = format!("link_split/{name}");
    let bytes = &target.files.iter().find(|(n, _)| *n == path).unwrap().1;
    let mut src = graphloom_graph::npy::decode::<i64>(bytes, Path::new(name))
        .unwrap()
        .data;
    let dst = src.split_off(src.len() / 2);
    (src, dst)
}

#[test]
fn link_split_ids_outside_the_graph_or_shapes_not_pairs_are_refused() {
    let errors = edited_split("valid_pos.npy", |d, _| d[0] = 60);
    assert_refused(&errors, "valid_pos.npy: holds node 60, outside 0..60");
    let errors = edited_split("test_neg_dst.npy", |d, _| d[0] = -1);
    assert_refused(&errors, "test_neg_dst.npy: holds node -1, outside 0..60");
    let errors = edited_split("train_pos.npy", |_, s| s.reverse());
    assert_refused(&errors, "not [2, E]");
    let errors = edited_split("valid_neg.npy", |d, s| {
        let e = s[1];
        d.remove(2 * e - 1);
        d.remove(e - 1);
        s[1] = e - 1;
    });
    assert_refused(&errors, "give one negative per positive");
}

#[test]
fn link_split_self_pairs_and_leaks_between_sets_are_refused() {
    let errors = edited_split("train_pos.npy", |d, s| d[s[1]] = d[0]);
    assert_refused(&errors, "is a self-loop");
    let errors = edited_split("test_neg.npy", |d, s| d[s[1]] = d[0]);
    assert_refused(
        &errors,
        "is a self-pair: a negative joins two distinct nodes",
    );
    // A negative that is an edge of the graph, in either direction.
    let (src, dst) = targets::link_split::graph().graph.edges();
    let errors = edited_split("valid_neg.npy", |d, s| {
        d[0] = dst[0] as i64;
        d[s[1]] = src[0] as i64;
    });
    assert_refused(
        &errors,
        "is an edge of the graph: a negative must not be one",
    );
    // A supervision pair that is a held-out positive.
    let (valid_src, valid_dst) = split_pairs("valid_pos.npy");
    let errors = edited_split("train_pos.npy", |d, s| {
        d[0] = valid_src[0];
        d[s[1]] = valid_dst[0];
    });
    assert_refused(
        &errors,
        "is a held-out positive of valid_pos.npy: it leaks into training",
    );
    // A negative destination that is the positive's own source.
    let errors = edited_split("valid_neg_dst.npy", |d, _| d[0] = valid_src[0]);
    assert_refused(&errors, "the source itself");
}
