//! The readers of the graph crate: `meta.json`, the dataset directory (loaded and mapped), the
//! partitioned directory, and the converters' inputs (Planetoid pickles, edge lists in text and
//! `.npy`, OGB's gzip CSV and `.npz` layouts, the GNN-benchmark `.npz`); a heterogeneous
//! dataset directory; and, in [`link_split`], a dataset's link split.
//!
//! A converter that accepts its input must write a dataset that loads: that is checked too.

use std::io::Write;
use std::path::{Path, PathBuf};

use graphloom_convert::synthetic::{generate, SyntheticConfig};
use graphloom_convert::{edgelist, npz, ogb, planetoid};
use graphloom_graph::npy::{self, NpyElement};
use graphloom_graph::partition::metis;
use graphloom_graph::parts::{Part, PartitionMeta};
use graphloom_graph::{Dataset, GraphData, MappedDataset, Meta};

use crate::mutate::{plain, Files, Target};

#[path = "hetero.rs"]
mod hetero;
pub(crate) use hetero::hetero;
#[path = "link_split.rs"]
pub(crate) mod link_split;

/// A small dataset with edge weights, the source of the valid inputs.
fn small_dataset() -> Dataset {
    let mut ds = generate(&SyntheticConfig {
        nodes: 40,
        avg_degree: 4,
        feat_dim: 3,
        classes: 3,
        seed: 5,
        ..Default::default()
    })
    .expect("a synthetic dataset");
    let e = ds.graph.num_edges();
    ds.edge_weight = Some((0..e).map(|i| 0.5 + (i % 3) as f32).collect());
    ds
}

/// A scratch folder for building valid inputs.
fn workshop(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("graphloom-fuzz-base-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Every file under `root`, by path relative to it.
fn files_under(root: &Path) -> Files {
    fn walk(root: &Path, dir: &Path, out: &mut Files) {
        for entry in std::fs::read_dir(dir).expect("a folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let name = path.strip_prefix(root).expect("under the root");
                let bytes = std::fs::read(&path).expect("a file");
                out.push((name.to_string_lossy().into_owned(), bytes));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// The bytes of a `.npy` file of `data` with `shape`.
fn npy_bytes<T: NpyElement>(data: &[T], shape: &[usize]) -> Vec<u8> {
    let dir = workshop("npy");
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let path = dir.join("a.npy");
    npy::write(&path, data, shape).expect("write a .npy");
    let bytes = std::fs::read(&path).expect("read it back");
    let _ = std::fs::remove_dir_all(&dir);
    bytes
}

/// `Ok` for a dataset written to `out` that loads; panics when it does not (a converter
/// accepted its input but wrote something it cannot read back).
fn must_load(out: &Path, origin: &str) {
    if let Err(e) = Dataset::load(out) {
        panic!("{origin} wrote a dataset that does not load: {e}");
    }
}

/// The checks an opened dataset promises to every reader, walked: every edge's source and
/// every split id is a node, every label a class or -1.
fn walk(d: GraphData<'_>) {
    let n = d.num_nodes();
    for v in 0..n {
        let row = &d.col_idx[d.row_ptr[v] as usize..d.row_ptr[v + 1] as usize];
        assert!(row.iter().all(|&u| (u as usize) < n), "a source is no node");
    }
    let classes = d.meta.num_classes as i64;
    assert!(d.labels.iter().all(|&l| (-1..classes).contains(&l)));
    for split in [d.train_idx, d.valid_idx, d.test_idx] {
        assert!(split.iter().all(|&v| v < n && d.labels[v] >= 0));
    }
}

fn errors(results: impl IntoIterator<Item = graphloom_graph::Result<()>>) -> Vec<String> {
    results
        .into_iter()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect()
}

/// `meta.json` alone, read by [`Meta::read`].
pub(crate) fn meta_json() -> Target {
    let dir = workshop("meta");
    small_dataset().save(&dir).expect("save");
    let files = files_under(&dir)
        .into_iter()
        .filter(|(n, _)| n == "meta.json")
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    Target {
        name: "meta_json",
        files,
        encode: plain,
        read: |dir| errors([Meta::read(dir).map(drop)]),
        alloc_factor: 16,
    }
}

/// A dataset directory, loaded in memory, without its features, and mapped.
pub(crate) fn dataset() -> Target {
    let dir = workshop("dataset");
    small_dataset().save(&dir).expect("save");
    let files = files_under(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    Target {
        name: "dataset",
        files,
        encode: plain,
        read: |dir| {
            errors([
                Dataset::load(dir).map(|ds| walk(ds.data())),
                Dataset::load_without_features(dir).map(|ds| walk(ds.data())),
                // Mapped twice: the second open skips the checks the first recorded.
                MappedDataset::open(dir).map(|ds| walk(ds.data())),
                MappedDataset::open(dir).map(|ds| walk(ds.data())),
            ])
        },
        alloc_factor: 16,
    }
}

/// A dataset partitioned in two (with edge weights): `partition.json` and the part folders.
pub(crate) fn partition() -> Target {
    let dir = workshop("partition");
    let ds = small_dataset();
    let p = metis(&ds.graph, &ds.train_idx, 2, 1).expect("metis");
    ds.write_parts(&p, &dir).expect("write the parts");
    let files = files_under(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    Target {
        name: "partition",
        files,
        encode: plain,
        read: |dir| {
            let mut results = vec![PartitionMeta::load(dir).map(drop)];
            for index in 0..2 {
                results.push(Part::load(dir, index).map(|p| check_part(&p)));
            }
            errors(results)
        },
        alloc_factor: 16,
    }
}

/// What a loaded part promises: one row of every per-node array per local node, shards whose
/// offsets cover their sources.
fn check_part(p: &Part) {
    let n = p.orig_ids.len();
    assert_eq!(p.labels.len(), n, "labels of a part");
    assert_eq!(p.in_degree.len(), n, "in-degrees of a part");
    assert_eq!(p.features.shape()[0], n, "features of a part");
    for s in &p.shards {
        assert_eq!(s.ptr.len(), s.dst.len() + 1);
        assert_eq!(*s.ptr.last().expect("offsets") as usize, s.src.len());
        assert!(s.weight.is_empty() || s.weight.len() == s.src.len());
        assert!(s.dst.iter().all(|&d| (d as usize) < n));
    }
    assert!(p.send.iter().flatten().all(|&r| (r as usize) < n));
}

/// A text edge list (comments, commas, tabs) alone: its node count taken from the ids.
pub(crate) fn edgelist_text() -> Target {
    let ds = small_dataset();
    let (src, dst) = ds.graph.edges();
    let mut text = String::from("# source destination\n");
    for (i, (s, d)) in src.iter().zip(&dst).enumerate() {
        let sep = [" ", ",", "\t"][i % 3];
        text.push_str(&format!("{s}{sep}{d}\n"));
    }
    Target {
        name: "edgelist_text",
        files: vec![("edges.txt".into(), text.into_bytes())],
        encode: plain,
        read: |dir| {
            let input = edgelist::EdgeListInput {
                edges: &dir.join("edges.txt"),
                features: None,
                labels: None,
                num_nodes: None,
                undirected: true,
                seed: 0,
                split: None,
            };
            write_edgelist(&input, dir)
        },
        alloc_factor: 16,
    }
}

/// A `.npy` edge list `[E, 2]` with `.npy` features and labels, directed.
pub(crate) fn edgelist_npy() -> Target {
    let ds = small_dataset();
    let (src, dst) = ds.graph.edges();
    let pairs: Vec<i64> = src
        .iter()
        .zip(&dst)
        .flat_map(|(&s, &d)| [s as i64, d as i64])
        .collect();
    let x = ds.features.as_slice::<f32>().expect("f32 features");
    Target {
        name: "edgelist_npy",
        files: vec![
            ("edges.npy".into(), npy_bytes(&pairs, &[src.len(), 2])),
            ("feat.npy".into(), npy_bytes(x, ds.features.shape())),
            (
                "labels.npy".into(),
                npy_bytes(&ds.labels, &[ds.labels.len()]),
            ),
        ],
        encode: plain,
        read: |dir| {
            let input = edgelist::EdgeListInput {
                edges: &dir.join("edges.npy"),
                features: Some(&dir.join("feat.npy")),
                labels: Some(&dir.join("labels.npy")),
                num_nodes: None,
                undirected: false,
                seed: 0,
                split: None,
            };
            write_edgelist(&input, dir)
        },
        alloc_factor: 16,
    }
}

fn write_edgelist(input: &edgelist::EdgeListInput<'_>, dir: &Path) -> Vec<String> {
    let out = dir.join("out");
    match edgelist::write(input, &out, 1 << 12, &|_, _, _| {}) {
        Ok(_) => {
            must_load(&out, "edgelist::write");
            Vec::new()
        }
        Err(e) => vec![e.to_string()],
    }
}

/// The text rows of an OGB CSV file.
fn csv<T: std::fmt::Display>(rows: impl IntoIterator<Item = Vec<T>>) -> Vec<u8> {
    let mut out = String::new();
    for row in rows {
        let row: Vec<String> = row.iter().map(|v| v.to_string()).collect();
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out.into_bytes()
}

/// The OGB split files of `ds` (scheme `time`), unencoded.
fn ogb_split(ds: &Dataset) -> Files {
    [
        ("train", &ds.train_idx),
        ("valid", &ds.valid_idx),
        ("test", &ds.test_idx),
    ]
    .into_iter()
    .map(|(name, ids)| {
        (
            format!("split/time/{name}.csv"),
            csv(ids.iter().map(|&v| vec![v])),
        )
    })
    .collect()
}

/// Gzips every `.csv` file (as `.csv.gz`) and puts the `.npy` files of a folder `X.npz/` into
/// the archive `X.npz`.
fn ogb_encode(files: Files) -> Files {
    let mut out: Files = Vec::new();
    let mut archives: Vec<(String, Files)> = Vec::new();
    for (name, bytes) in files {
        if let Some(stem) = name.strip_suffix(".csv") {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(&bytes).expect("gzip");
            out.push((format!("{stem}.csv.gz"), gz.finish().expect("gzip")));
        } else if let Some((archive, member)) = name.split_once(".npz/") {
            let archive = format!("{archive}.npz");
            match archives.iter_mut().find(|(a, _)| *a == archive) {
                Some((_, members)) => members.push((member.to_string(), bytes)),
                None => archives.push((archive, vec![(member.to_string(), bytes)])),
            }
        } else {
            out.push((name, bytes));
        }
    }
    for (archive, members) in archives {
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (member, bytes) in members {
            zip.start_file(member, options).expect("zip member");
            zip.write_all(&bytes).expect("zip member");
        }
        out.push((archive, zip.finish().expect("zip").into_inner()));
    }
    out
}

/// The OGB gzip CSV layout (`raw/*.csv.gz`, `split/time/*.csv.gz`).
pub(crate) fn ogb_csv() -> Target {
    let ds = small_dataset();
    let (src, dst) = ds.graph.edges();
    let x = ds.features.as_slice::<f32>().expect("f32 features");
    let mut files = vec![
        (
            "raw/edge.csv".to_string(),
            csv(src.iter().zip(&dst).map(|(&s, &d)| vec![s, d])),
        ),
        (
            "raw/node-feat.csv".to_string(),
            csv(x.chunks(3).map(|r| r.to_vec())),
        ),
        (
            "raw/node-label.csv".to_string(),
            csv(ds.labels.iter().map(|&l| vec![l])),
        ),
        (
            "raw/num-node-list.csv".to_string(),
            csv([vec![ds.meta.num_nodes]]),
        ),
    ];
    files.extend(ogb_split(&ds));
    Target {
        name: "ogb_csv",
        files,
        encode: ogb_encode,
        read: |dir| match ogb::convert(dir, true) {
            Ok(ds) => {
                let out = dir.join("out");
                ds.save(&out).expect("save a converted dataset");
                must_load(&out, "ogb::convert");
                Vec::new()
            }
            Err(e) => vec![e.to_string()],
        },
        alloc_factor: 16,
    }
}

/// The OGB `.npz` layout of ogbn-papers100M (`raw/data.npz`, `raw/node-label.npz`, a node
/// without a label as NaN).
pub(crate) fn ogb_npz() -> Target {
    let ds = small_dataset();
    let (src, dst) = ds.graph.edges();
    let index: Vec<i64> = src.iter().chain(&dst).map(|&v| v as i64).collect();
    let x = ds.features.as_slice::<f32>().expect("f32 features");
    let mut labels: Vec<f64> = ds.labels.iter().map(|&l| l as f64).collect();
    let in_split: std::collections::HashSet<usize> = [&ds.train_idx, &ds.valid_idx, &ds.test_idx]
        .into_iter()
        .flatten()
        .copied()
        .collect();
    if let Some(v) = (0..labels.len()).find(|v| !in_split.contains(v)) {
        labels[v] = f64::NAN;
    }
    let mut files = vec![
        (
            "raw/data.npz/edge_index.npy".to_string(),
            npy_bytes(&index, &[2, src.len()]),
        ),
        (
            "raw/data.npz/node_feat.npy".to_string(),
            npy_bytes(x, ds.features.shape()),
        ),
        (
            "raw/node-label.npz/node_label.npy".to_string(),
            npy_bytes(&labels, &[labels.len(), 1]),
        ),
    ];
    files.extend(ogb_split(&ds));
    Target {
        name: "ogb_npz",
        files,
        encode: ogb_encode,
        read: |dir| {
            // Beside the input folder: a dataset is never written inside its own input.
            let mut name = dir.file_name().unwrap_or_default().to_os_string();
            name.push("-out");
            let out = dir.with_file_name(name);
            let errors = match ogb::write_npz(dir, true, &out, 1 << 12, &|_, _, _| {}) {
                Ok(_) => {
                    must_load(&out, "ogb::write_npz");
                    Vec::new()
                }
                Err(e) => vec![e.to_string()],
            };
            let _ = std::fs::remove_dir_all(&out);
            errors
        },
        alloc_factor: 16,
    }
}

/// A GNN-benchmark `.npz` (adjacency and attributes as CSR, labels).
pub(crate) fn benchmark_npz() -> Target {
    let ds = small_dataset();
    let n = ds.meta.num_nodes;
    let t = ds.graph.transpose();
    let (mut ap, mut ai, mut ad) = (vec![0i64], Vec::new(), Vec::new());
    let x = ds.features.as_slice::<f32>().expect("f32 features");
    for row in x.chunks(3) {
        for (c, &v) in row.iter().enumerate() {
            if v > 0.0 {
                ai.push(c as i32);
                ad.push(v);
            }
        }
        ap.push(ai.len() as i64);
    }
    let member = |name: &str, bytes: Vec<u8>| (format!("g.npz/{name}.npy"), bytes);
    let files = vec![
        member(
            "adj_data",
            npy_bytes(&vec![1f32; t.num_edges()], &[t.num_edges()]),
        ),
        member(
            "adj_indices",
            npy_bytes(
                &t.col_idx.iter().map(|&c| c as i32).collect::<Vec<_>>(),
                &[t.num_edges()],
            ),
        ),
        member("adj_indptr", npy_bytes(&t.row_ptr, &[n + 1])),
        member("adj_shape", npy_bytes(&[n as i64, n as i64], &[2])),
        member("attr_data", npy_bytes(&ad, &[ad.len()])),
        member("attr_indices", npy_bytes(&ai, &[ai.len()])),
        member("attr_indptr", npy_bytes(&ap, &[n + 1])),
        member("attr_shape", npy_bytes(&[n as i64, 3], &[2])),
        member("labels", npy_bytes(&ds.labels, &[n])),
    ];
    Target {
        name: "benchmark_npz",
        files,
        encode: ogb_encode,
        read: |dir| match npz::convert(&dir.join("g.npz"), true, 0) {
            Ok(ds) => {
                let out = dir.join("out");
                ds.save(&out).expect("save a converted dataset");
                must_load(&out, "npz::convert");
                Vec::new()
            }
            Err(e) => vec![e.to_string()],
        },
        alloc_factor: 16,
    }
}

/// The raw Planetoid files of a small graph (`ind.tiny.*`): pickled scipy CSR matrices, numpy
/// arrays and an adjacency defaultdict, and `test.index` with gaps in its ids (as CiteSeer's).
pub(crate) fn planetoid() -> Target {
    let (features, classes) = (4usize, 3usize);
    let (train, all, test_ids) = (
        21usize,
        600usize,
        [605usize, 600, 608, 601, 610, 603, 602, 609, 606],
    );
    let n = 611;
    let feature_row = |v: usize| -> Vec<(usize, f32)> {
        vec![(v % features, 1.0), ((v * 7 + 1) % features, 0.5)]
    };
    let one_hot =
        |v: usize| -> Vec<i32> { (0..classes).map(|c| (c == v % classes) as i32).collect() };
    let x_rows = |ids: &mut dyn Iterator<Item = usize>| {
        let rows: Vec<Vec<(usize, f32)>> = ids.map(feature_row).collect();
        let (mut indptr, mut indices, mut data) = (vec![0i32], Vec::new(), Vec::new());
        for row in &rows {
            for &(c, v) in row {
                indices.push(c as i32);
                data.push(v);
            }
            indptr.push(indices.len() as i32);
        }
        csr_pickle([rows.len(), features], &indptr, &indices, &data)
    };
    let mut sorted = test_ids;
    sorted.sort_unstable();
    let files = vec![
        ("ind.tiny.x".to_string(), x_rows(&mut (0..train))),
        ("ind.tiny.allx".to_string(), x_rows(&mut (0..all))),
        (
            "ind.tiny.tx".to_string(),
            x_rows(&mut sorted.iter().copied()),
        ),
        ("ind.tiny.y".to_string(), {
            let rows: Vec<i32> = (0..train).flat_map(one_hot).collect();
            array_pickle("i4", &[train, classes], &bytes_le(&rows))
        }),
        ("ind.tiny.ally".to_string(), {
            let rows: Vec<i32> = (0..all).flat_map(one_hot).collect();
            array_pickle("i4", &[all, classes], &bytes_le(&rows))
        }),
        ("ind.tiny.ty".to_string(), {
            let rows: Vec<f64> = sorted
                .iter()
                .flat_map(|&v| one_hot(v).into_iter().map(f64::from))
                .collect();
            array_pickle("f8", &[sorted.len(), classes], &bytes_le(&rows))
        }),
        ("ind.tiny.graph".to_string(), {
            let adjacency: Vec<(usize, Vec<usize>)> = (0..n)
                .map(|v| (v, vec![(v + 1) % n, (v * 13 + 5) % n]))
                .collect();
            pickle_of(|p| p.adjacency(&adjacency))
        }),
        (
            "ind.tiny.test.index".to_string(),
            test_ids
                .iter()
                .map(|v| format!("{v}\n"))
                .collect::<String>()
                .into_bytes(),
        ),
    ];
    Target {
        name: "planetoid",
        files,
        encode: plain,
        read: |dir| match planetoid::convert(dir, "tiny") {
            Ok(ds) => {
                let out = dir.join("out");
                ds.save(&out).expect("save a converted dataset");
                must_load(&out, "planetoid::convert");
                Vec::new()
            }
            Err(e) => vec![e.to_string()],
        },
        alloc_factor: 64,
    }
}

/// The little-endian bytes of `values`.
pub(crate) fn bytes_le<T: NpyElement>(values: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    values.iter().for_each(|&v| v.write_le(&mut out));
    out
}

/// A pickle (protocol 2) being written.
struct Pickle(Vec<u8>);

fn pickle_of(body: impl FnOnce(&mut Pickle) -> &mut Pickle) -> Vec<u8> {
    let mut p = Pickle(vec![0x80, 2]);
    body(&mut p);
    p.0.push(b'.');
    p.0
}

impl Pickle {
    fn op(&mut self, bytes: &[u8]) -> &mut Pickle {
        self.0.extend_from_slice(bytes);
        self
    }
    fn global(&mut self, module: &str, name: &str) -> &mut Pickle {
        self.op(format!("c{module}\n{name}\n").as_bytes())
    }
    fn int(&mut self, v: usize) -> &mut Pickle {
        match v {
            0..=0xff => self.op(&[b'K', v as u8]),
            0x100..=0xffff => self.op(b"M").op(&(v as u16).to_le_bytes()),
            0x1_0000..=0x7fff_ffff => self.op(b"J").op(&(v as i32).to_le_bytes()),
            _ => self.op(&[0x8a, 8]).op(&(v as u64).to_le_bytes()),
        }
    }
    fn text(&mut self, s: &str) -> &mut Pickle {
        self.op(&[b'U', s.len() as u8]).op(s.as_bytes())
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Pickle {
        self.op(b"T").op(&(b.len() as u32).to_le_bytes()).op(b)
    }
    /// `numpy.dtype(descr)`.
    fn dtype(&mut self, descr: &str) -> &mut Pickle {
        self.global("numpy", "dtype")
            .text(descr)
            .int(0)
            .int(1)
            .op(&[0x87, b'R']);
        self.op(b"(")
            .int(3)
            .text("<")
            .op(b"NNN")
            .op(b"J")
            .op(&(-1i32).to_le_bytes());
        self.op(b"J").op(&(-1i32).to_le_bytes()).int(0).op(b"tb")
    }
    /// A numpy array as `numpy.core.multiarray._reconstruct` pickles it.
    fn array(&mut self, descr: &str, shape: &[usize], raw: &[u8]) -> &mut Pickle {
        self.global("numpy.core.multiarray", "_reconstruct");
        self.global("numpy", "ndarray")
            .int(0)
            .op(&[0x85])
            .text("b")
            .op(&[0x87, b'R']);
        self.op(b"(").int(1).op(b"(");
        for &d in shape {
            self.int(d);
        }
        self.op(b"t");
        self.dtype(descr).op(&[0x89]).bytes(raw).op(b"tb")
    }
    /// A `collections.defaultdict(list)` of adjacency lists.
    fn adjacency(&mut self, lists: &[(usize, Vec<usize>)]) -> &mut Pickle {
        self.global("collections", "defaultdict")
            .global("__builtin__", "list");
        self.op(&[0x85, b'R', b'(']);
        for (k, l) in lists {
            self.int(*k).op(b"](");
            for &v in l {
                self.int(v);
            }
            self.op(b"e");
        }
        self.op(b"u")
    }
}

/// A pickled numpy array of dtype `descr` (`f8`, `i4`...) and `shape`, holding `raw`.
pub(crate) fn array_pickle(descr: &str, shape: &[usize], raw: &[u8]) -> Vec<u8> {
    pickle_of(|p| p.array(descr, shape, raw))
}

/// A pickled `scipy.sparse.csr_matrix` of `shape` from its arrays.
pub(crate) fn csr_pickle(
    shape: [usize; 2],
    indptr: &[i32],
    indices: &[i32],
    data: &[f32],
) -> Vec<u8> {
    pickle_of(|p| {
        p.global("scipy.sparse.csr", "csr_matrix").op(b")R}(");
        p.text("_shape").int(shape[0]).int(shape[1]).op(&[0x86]);
        p.text("indptr")
            .array("i4", &[indptr.len()], &bytes_le(indptr));
        p.text("indices")
            .array("i4", &[indices.len()], &bytes_le(indices));
        p.text("data").array("f4", &[data.len()], &bytes_le(data));
        p.text("format").text("csr").op(b"ub")
    })
}

/// A pickled adjacency defaultdict in which every node of `keys` shares one memoized list of
/// `list` (a graph pickle never shares lists, but the format can).
pub(crate) fn shared_adjacency_pickle(keys: usize, list: &[usize]) -> Vec<u8> {
    pickle_of(|p| {
        p.global("collections", "defaultdict")
            .global("__builtin__", "list");
        p.op(&[0x85, b'R', b'(']);
        p.int(0).op(b"](");
        for &v in list {
            p.int(v);
        }
        p.op(b"eq\x00");
        for k in 1..keys {
            p.int(k).op(b"h\x00");
        }
        p.op(b"u")
    })
}
