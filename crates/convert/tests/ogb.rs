//! OGB's homogeneous layouts (raw CSV, ogbn-proteins' edge features and binary labels,
//! ogbn-papers100M's npz) converted on small files written here, and their damage refused.

mod common;
use common::{gz, scratch};

use std::io::Write;
use std::path::PathBuf;

use graphloom_convert::ogb;
use graphloom_graph::npy;

#[test]
fn ogb_raw_layout() {
    let d = scratch("ogb").join("ogbn_toy");
    std::fs::create_dir_all(d.join("raw")).unwrap();
    std::fs::create_dir_all(d.join("split/time")).unwrap();
    gz(d.join("raw/edge.csv.gz"), "0,1\n2,1\n3,0\n");
    gz(d.join("raw/node-feat.csv.gz"), "0.5,1\n1,2\n-1,0\n3,3\n");
    gz(d.join("raw/node-label.csv.gz"), "2\n0\n1\n2\n");
    gz(d.join("raw/num-node-list.csv.gz"), "4\n");
    gz(d.join("split/time/train.csv.gz"), "0\n1\n");
    gz(d.join("split/time/valid.csv.gz"), "2\n");
    gz(d.join("split/time/test.csv.gz"), "3\n");
    let ds = ogb::convert(&d, false).unwrap();
    assert_eq!(
        (
            ds.meta.num_nodes,
            ds.meta.num_edges,
            ds.meta.feat_dim,
            ds.meta.num_classes
        ),
        (4, 3, 2, 3)
    );
    assert_eq!(ds.graph.in_neighbors(1), &[0, 2]);
    assert_eq!(
        (
            ds.train_idx.clone(),
            ds.valid_idx.clone(),
            ds.test_idx.clone()
        ),
        (vec![0, 1], vec![2], vec![3])
    );
    assert_eq!(ds.features.as_slice::<f32>().unwrap()[4], -1.0);
    // A node without a label (NaN, as most of ogbn-papers100M's) outside the splits is -1;
    // inside a split it is an error.
    gz(d.join("raw/num-node-list.csv.gz"), "5\n");
    gz(
        d.join("raw/node-feat.csv.gz"),
        "0.5,1\n1,2\n-1,0\n3,3\n0,0\n",
    );
    gz(d.join("raw/node-label.csv.gz"), "2\n0\n1\n2\nnan\n");
    let ds = ogb::convert(&d, false).unwrap();
    assert_eq!(ds.labels, vec![2, 0, 1, 2, -1]);
    gz(d.join("split/time/test.csv.gz"), "3\n4\n");
    let err = ogb::convert(&d, false).err().unwrap().to_string();
    assert!(err.contains("node 4") && err.contains("no label"), "{err}");
    std::fs::remove_dir_all(d.parent().unwrap()).unwrap();
}

#[test]
fn ogb_proteins_layout_gives_edge_features_and_binary_labels() {
    let d = scratch("ogb-proteins").join("ogbn_proteins");
    std::fs::create_dir_all(d.join("raw")).unwrap();
    std::fs::create_dir_all(d.join("split/species")).unwrap();
    // No node features; a row of edge features per edge; three binary labels per node.
    gz(d.join("raw/edge.csv.gz"), "0,1\n2,1\n3,0\n");
    gz(d.join("raw/edge-feat.csv.gz"), "1,10\n2,20\n3,30\n");
    gz(
        d.join("raw/node-label.csv.gz"),
        "0,1,1\n1,0,-1\n0,0,1\n1,1,0\n",
    );
    gz(d.join("raw/num-node-list.csv.gz"), "4\n");
    gz(d.join("split/species/train.csv.gz"), "0\n1\n");
    gz(d.join("split/species/valid.csv.gz"), "2\n");
    gz(d.join("split/species/test.csv.gz"), "3\n");
    let ds = ogb::convert(&d, true).unwrap();
    // Each edge and its reverse, with the same row.
    assert_eq!((ds.meta.num_edges, ds.meta.num_classes), (6, 3));
    assert_eq!(ds.graph.in_neighbors(0), &[1, 3]);
    assert_eq!(ds.graph.in_neighbors(1), &[0, 2]);
    let rows = ds.edge_features.as_ref().unwrap();
    assert_eq!(rows.shape(), &[6, 2]);
    assert_eq!(
        &rows.as_slice::<f32>().unwrap()[..8],
        &[1.0, 10.0, 3.0, 30.0, 1.0, 10.0, 2.0, 20.0]
    );
    // A node's features are its in-edges' mean.
    assert_eq!(ds.meta.feat_dim, 2);
    assert_eq!(
        &ds.features.as_slice::<f32>().unwrap()[..4],
        &[2.0, 20.0, 1.5, 15.0]
    );
    let targets = ds.targets.as_ref().unwrap();
    assert_eq!(targets.kind, graphloom_graph::TargetKind::Binary);
    assert_eq!(&targets.values[..3], &[0.0, 1.0, 1.0]);
    assert!(targets.values[5].is_nan());
    // Saved and read back, the edge rows are the dataset's edge_feat.npy.
    ds.save(&d.join("out")).unwrap();
    let mut back = graphloom_graph::Dataset::load(&d.join("out")).unwrap();
    back.load_edge_features(&d.join("out")).unwrap();
    assert_eq!(
        back.edge_features
            .as_ref()
            .unwrap()
            .as_slice::<f32>()
            .unwrap(),
        rows.as_slice::<f32>().unwrap()
    );
    // Edge features of another length than the edges are refused.
    gz(d.join("raw/edge-feat.csv.gz"), "1,10\n2,20\n");
    let err = ogb::convert(&d, true).err().unwrap().to_string();
    assert!(err.contains("2 edge feature rows for 3 edges"), "{err}");
    std::fs::remove_dir_all(d.parent().unwrap()).unwrap();
}

/// ogbn-papers100M's raw layout (`data.npz`, `node-label.npz` with NaN for unlabelled nodes)
/// streams into the dataset directory: edges by destination, f64 features as f32, -1 labels.
#[test]
fn ogb_npz_layout_streams() {
    let d = scratch("ogb-npz").join("ogbn_papers_toy");
    std::fs::create_dir_all(d.join("raw")).unwrap();
    std::fs::create_dir_all(d.join("split/time")).unwrap();
    let npy_bytes = |write: &dyn Fn(&std::path::Path)| {
        let p = d.join("member.npy");
        write(&p);
        std::fs::read(&p).unwrap()
    };
    let archive = |path: PathBuf, members: Vec<(&str, Vec<u8>, bool)>| {
        let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
        for (name, bytes, stored) in members {
            let options = if stored {
                zip::write::SimpleFileOptions::default()
                    .compression_method(zip::CompressionMethod::Stored)
            } else {
                zip::write::SimpleFileOptions::default()
            };
            zip.start_file(name, options).unwrap();
            zip.write_all(&bytes).unwrap();
        }
        zip.finish().unwrap();
    };
    // 5 nodes; edges 0->1, 2->1, 3->0, 4->3, 0->1 (a duplicate).
    let edges = npy_bytes(&|p| npy::write(p, &[0i64, 2, 3, 4, 0, 1, 1, 0, 3, 1], &[2, 5]).unwrap());
    let feats: Vec<f64> = (0..10).map(|v| v as f64 * 0.5).collect();
    let feats = npy_bytes(&|p| npy::write(p, &feats, &[5, 2]).unwrap());
    archive(
        d.join("raw/data.npz"),
        vec![
            ("edge_index.npy", edges, true),
            ("node_feat.npy", feats, false),
        ],
    );
    let labels =
        npy_bytes(&|p| npy::write(p, &[1f32, f32::NAN, 0., 2., f32::NAN], &[5, 1]).unwrap());
    archive(
        d.join("raw/node-label.npz"),
        vec![("node_label.npy", labels, false)],
    );
    std::fs::remove_file(d.join("member.npy")).unwrap();
    gz(d.join("split/time/train.csv.gz"), "0\n3\n");
    gz(d.join("split/time/valid.csv.gz"), "2\n");
    gz(d.join("split/time/test.csv.gz"), "");
    assert!(ogb::has_npz_layout(&d));
    let out = d.parent().unwrap().join("out");
    let meta = ogb::write_npz(&d, false, &out, 1 << 20, &|_, _, _| {}).unwrap();
    let ds = graphloom_graph::Dataset::load(&out).unwrap();
    assert_eq!(
        (meta.num_nodes, meta.num_edges, meta.num_classes),
        (5, 5, 3)
    );
    assert_eq!(ds.graph.in_neighbors(1), &[0, 0, 2]);
    assert_eq!(ds.labels, vec![1, -1, 0, 2, -1]);
    assert_eq!(ds.features.as_slice::<f32>().unwrap()[9], 4.5);
    assert_eq!(
        (ds.train_idx.clone(), ds.valid_idx.clone()),
        (vec![0, 3], vec![2])
    );
    // Undirected: both ways, simple.
    ogb::write_npz(&d, true, &out, 1 << 20, &|_, _, _| {}).unwrap();
    let ds = graphloom_graph::Dataset::load(&out).unwrap();
    assert_eq!(ds.graph.in_neighbors(1), &[0, 2]);
    assert_eq!(ds.graph.in_neighbors(0), &[1, 3]);
    // An unlabelled node in a split is refused.
    gz(d.join("split/time/test.csv.gz"), "4\n");
    let err = ogb::write_npz(&d, false, &out, 1 << 20, &|_, _, _| {})
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("test.csv.gz") && err.contains("node 4 has no label"),
        "{err}"
    );
    // Overlapping splits are refused, naming the file.
    gz(d.join("split/time/test.csv.gz"), "3\n");
    let err = ogb::write_npz(&d, false, &out, 1 << 20, &|_, _, _| {})
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("test.csv.gz") && err.contains("node 3 is also in train.csv.gz"),
        "{err}"
    );
    gz(d.join("split/time/test.csv.gz"), "");
    // A label of infinity or a fraction is refused, naming the file, not truncated.
    for bad in [f32::INFINITY, 1.7] {
        let labels =
            npy_bytes(&|p| npy::write(p, &[1f32, f32::NAN, bad, 2., f32::NAN], &[5, 1]).unwrap());
        archive(
            d.join("raw/node-label.npz"),
            vec![("node_label.npy", labels, false)],
        );
        let err = ogb::write_npz(&d, false, &out, 1 << 20, &|_, _, _| {})
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("node-label.npz") && err.contains(&format!("label of node 2 is {bad}")),
            "{err}"
        );
    }
    // A damaged edge array is named as the archive's member, not as this run's temporary copy.
    let edges = npy_bytes(&|p| npy::write(p, &[0i64, 2, 3, 4, 0, 1, 1, 0, 3], &[3, 3]).unwrap());
    let feats: Vec<f64> = (0..10).map(|v| v as f64 * 0.5).collect();
    let feats = npy_bytes(&|p| npy::write(p, &feats, &[5, 2]).unwrap());
    archive(
        d.join("raw/data.npz"),
        vec![
            ("edge_index.npy", edges, true),
            ("node_feat.npy", feats, false),
        ],
    );
    let labels =
        npy_bytes(&|p| npy::write(p, &[1f32, f32::NAN, 0., 2., f32::NAN], &[5, 1]).unwrap());
    archive(
        d.join("raw/node-label.npz"),
        vec![("node_label.npy", labels, false)],
    );
    let err = ogb::write_npz(&d, false, &out, 1 << 20, &|_, _, _| {})
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("data.npz: array 'edge_index'") && !err.contains(".tmp-"),
        "{err}"
    );
    std::fs::remove_dir_all(d.parent().unwrap()).unwrap();
}

/// OGB's CSV layout: a label of infinity or a fraction and overlapping splits are refused,
/// each naming its file.
#[test]
fn ogb_labels_must_be_classes_and_splits_disjoint() {
    let d = scratch("ogb-bad").join("ogbn_bad");
    std::fs::create_dir_all(d.join("raw")).unwrap();
    std::fs::create_dir_all(d.join("split/time")).unwrap();
    gz(d.join("raw/edge.csv.gz"), "0,1\n2,1\n3,0\n");
    gz(d.join("raw/node-feat.csv.gz"), "0.5,1\n1,2\n-1,0\n3,3\n");
    gz(d.join("split/time/train.csv.gz"), "0\n1\n");
    gz(d.join("split/time/valid.csv.gz"), "2\n");
    gz(d.join("split/time/test.csv.gz"), "3\n");
    for (labels, shown) in [("2\n0\ninf\n1\n", "inf"), ("2\n0\n1.7\n1\n", "1.7")] {
        gz(d.join("raw/node-label.csv.gz"), labels);
        let err = ogb::convert(&d, false).err().unwrap().to_string();
        assert!(
            err.contains("node-label.csv.gz") && err.contains(&format!("node 2 is {shown}")),
            "{err}"
        );
    }
    gz(d.join("raw/node-label.csv.gz"), "2\n0\n1\n1\n");
    gz(d.join("split/time/test.csv.gz"), "1\n3\n");
    let err = ogb::convert(&d, false).err().unwrap().to_string();
    assert!(
        err.contains("test.csv.gz") && err.contains("node 1 is also in train.csv.gz"),
        "{err}"
    );
    std::fs::remove_dir_all(d.parent().unwrap()).unwrap();
}
