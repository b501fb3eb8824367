//! The dataset directory: `meta.json` plus `.npy` arrays that numpy users can read.
//!
//! | file | contents |
//! |---|---|
//! | `meta.json` | [`Meta`]: name, sizes, feature dtype, number of classes, directedness |
//! | `csr_row_ptr.npy` | i64, `num_nodes + 1` offsets (CSR by destination) |
//! | `csr_col_idx.npy` | i32 or i64 source ids, `num_edges` |
//! | `node_feat.npy` | `[num_nodes, feat_dim]`, f32, or bf16 stored as uint16 |
//! | `node_label.npy` | i64 class per node, -1 for none (never in a split); or [`NodeTargets`] |
//! | `train_idx.npy`, `valid_idx.npy`, `test_idx.npy` | i64 node ids |
//! | `edge_weight.npy` | optional f32 per edge |
//! | `edge_feat.npy` | optional `[num_edges, edge_dim]` f32 or bf16, in `csr_col_idx.npy`'s order ([`super::edge_features`]) |

use std::path::{Path, PathBuf};

use graphloom_tensor::memory::{category_scope, Category};
use graphloom_tensor::{bf16, DType, Tensor};

use super::edge_features::{read_edge_features, EDGE_FEATURES_FILE};
use super::meta::{Meta, MAX_CLASS, SPLIT_FILES};
use super::output_dir::{write_dir_atomic, OutputKind};
use super::targets::NodeTargets;
use crate::{npy, Csr, Error, NodeId, Result};

/// Writes the train, validation and test ids into the dataset directory `dir`.
pub fn write_splits(dir: &Path, splits: [&[usize]; 3]) -> Result<()> {
    for (name, ids) in SPLIT_FILES.iter().zip(splits) {
        let ids: Vec<i64> = ids.iter().map(|&v| v as i64).collect();
        npy::write(&file(dir, name), &ids, &[ids.len()])?;
    }
    Ok(())
}

/// A node-classification dataset in memory.
pub struct Dataset {
    /// Sizes and names.
    pub meta: Meta,
    /// The graph, CSR by destination.
    pub graph: Csr,
    /// `[num_nodes, feat_dim]` features, f32 or bf16, charged to [`Category::Features`].
    pub features: Tensor,
    /// Class of every node (-1: none); with [`Dataset::targets`], 0 for a node with a target
    /// and -1 for one without ([`NodeTargets::markers`]).
    pub labels: Vec<i64>,
    /// The targets of multi-label classification or regression, when `node_label.npy` holds
    /// them ([`NodeTargets`]) rather than one class per node.
    pub targets: Option<NodeTargets>,
    /// Training node ids.
    pub train_idx: Vec<usize>,
    /// Validation node ids.
    pub valid_idx: Vec<usize>,
    /// Test node ids.
    pub test_idx: Vec<usize>,
    /// Optional weight per edge, in edge order.
    pub edge_weight: Option<Vec<f32>>,
    /// Optional `[num_edges, edge_dim]` features per edge, in edge order (`edge_feat.npy`):
    /// read by [`Dataset::load_edge_features`], not by [`Dataset::load`].
    pub edge_features: Option<Tensor>,
}

/// Writes `[rows, dim]` features as `.npy`: f32, or bf16 as its `u16` bits.
pub fn write_features(path: &Path, features: &Tensor) -> Result<()> {
    let shape = features.shape();
    match features.dtype() {
        DType::BF16 => {
            let bits: Vec<u16> = features
                .as_slice::<bf16>()?
                .iter()
                .map(|v| v.to_bits())
                .collect();
            npy::write(path, &bits, shape)?
        }
        _ => npy::write(path, features.cast(DType::F32)?.as_slice::<f32>()?, shape)?,
    }
    Ok(())
}

fn file(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

impl Dataset {
    /// Loads and checks a dataset directory. Any inconsistency is an error naming the file.
    pub fn load(dir: &Path) -> Result<Dataset> {
        Dataset::load_impl(dir, true)
    }

    /// Loads everything but the features, which stay on disk (for a memory-mapped store
    /// tensor): `features` is an empty `[0, feat_dim]` tensor. The feature file's header is
    /// still checked.
    pub fn load_without_features(dir: &Path) -> Result<Dataset> {
        Dataset::load_impl(dir, false)
    }

    fn load_impl(dir: &Path, read_features: bool) -> Result<Dataset> {
        let meta = Meta::read(dir)?;
        let row_ptr_path = file(dir, "csr_row_ptr.npy");
        let row_ptr = npy::read_ints(&row_ptr_path)?.data;
        if row_ptr.len() != meta.num_nodes + 1 {
            return Err(Error::invalid(
                &row_ptr_path,
                format!(
                    "has {} entries, meta.json says num_nodes = {} (expected {})",
                    row_ptr.len(),
                    meta.num_nodes,
                    meta.num_nodes + 1
                ),
            ));
        }
        let col_path = file(dir, "csr_col_idx.npy");
        let cols = npy::read_ids(&col_path)?.data;
        if cols.len() != meta.num_edges {
            return Err(Error::invalid(
                &col_path,
                format!(
                    "has {} entries, meta.json says num_edges = {}",
                    cols.len(),
                    meta.num_edges
                ),
            ));
        }
        if let Some(e) = cols
            .iter()
            .position(|&c| c < 0 || c as usize >= meta.num_nodes)
        {
            return Err(Error::invalid(
                &col_path,
                format!(
                    "entry {e} is {}, not a node id (num_nodes = {})",
                    cols[e], meta.num_nodes
                ),
            ));
        }
        let graph = {
            let _g = category_scope(Category::Graph);
            Csr {
                row_ptr,
                col_idx: cols.into_iter().map(|c| c as NodeId).collect(),
            }
        };
        graph
            .check()
            .map_err(|msg| Error::invalid(&row_ptr_path, msg))?;
        let features = if meta.feat_dim == 0 && !file(dir, "node_feat.npy").exists() {
            // A graph without features needs no feature file.
            Tensor::zeros(&[meta.num_nodes, 0], DType::F32)
        } else if read_features {
            load_features(dir, &meta)?
        } else {
            let header = check_feature_header(dir, &meta)?;
            check_once(dir, "node_feat.npy", "finite", || {
                check_feature_values(
                    &file(dir, "node_feat.npy"),
                    &header,
                    &meta.feat_dtype,
                    meta.feat_dim,
                )
            })?;
            Tensor::zeros(&[0, meta.feat_dim], DType::F32)
        };
        let (labels, targets) = read_labels(dir, &meta)?;
        let split = |name: &str| read_split(dir, name, meta.num_nodes);
        let weight_path = file(dir, "edge_weight.npy");
        let edge_weight = if weight_path.exists() {
            Some(read_edge_weights(&weight_path, meta.num_edges)?)
        } else {
            None
        };
        let splits = [
            split("train_idx.npy")?,
            split("valid_idx.npy")?,
            split("test_idx.npy")?,
        ];
        check_splits(dir, [&splits[0], &splits[1], &splits[2]], &labels)?;
        let [train_idx, valid_idx, test_idx] = splits;
        Ok(Dataset {
            train_idx,
            valid_idx,
            test_idx,
            meta,
            graph,
            features,
            labels,
            targets,
            edge_weight,
            edge_features: None,
        })
    }

    /// Reads the dataset's `edge_feat.npy` from `dir` into [`Dataset::edge_features`] (none
    /// when the directory has no such file). Apart from [`Dataset::load`], so that a model
    /// that does not read them does not hold them.
    pub fn load_edge_features(&mut self, dir: &Path) -> Result<()> {
        self.edge_features = read_edge_features(dir, self.meta.num_edges)?;
        Ok(())
    }

    /// Writes the dataset directory: into a temporary directory beside `dir`, renamed into
    /// place at the end, so an interrupted run leaves no half-written dataset. `dir` must be
    /// new, empty or a dataset directory ([`crate::check_output_dir`]).
    pub fn save(&self, dir: &Path) -> Result<()> {
        write_dir_atomic(dir, OutputKind::Dataset, &[], |tmp| self.write_files(tmp))
    }

    fn write_files(&self, dir: &Path) -> Result<()> {
        self.meta.write(dir)?;
        let g = &self.graph;
        npy::write(
            &file(dir, "csr_row_ptr.npy"),
            &g.row_ptr,
            &[g.row_ptr.len()],
        )?;
        if g.num_nodes() <= i32::MAX as usize {
            let cols: Vec<i32> = g.col_idx.iter().map(|&c| c as i32).collect();
            npy::write(&file(dir, "csr_col_idx.npy"), &cols, &[cols.len()])?;
        } else {
            let cols: Vec<i64> = g.col_idx.iter().map(|&c| c as i64).collect();
            npy::write(&file(dir, "csr_col_idx.npy"), &cols, &[cols.len()])?;
        }
        if self.meta.feat_dim > 0 {
            write_features(&file(dir, "node_feat.npy"), &self.features)?;
        }
        match &self.targets {
            Some(targets) => targets.write(&file(dir, "node_label.npy"))?,
            None => npy::write(
                &file(dir, "node_label.npy"),
                &self.labels,
                &[self.labels.len()],
            )?,
        }
        write_splits(dir, [&self.train_idx, &self.valid_idx, &self.test_idx])?;
        if let Some(f) = &self.edge_features {
            write_features(&file(dir, EDGE_FEATURES_FILE), f)?;
        }
        if let Some(w) = &self.edge_weight {
            npy::write(&file(dir, "edge_weight.npy"), w, &[w.len()])?;
        }
        Ok(())
    }
}

/// The labels of the dataset directory `dir` of `meta`: its classes, or its targets with
/// their markers in the place of classes.
pub(crate) fn read_labels(dir: &Path, meta: &Meta) -> Result<(Vec<i64>, Option<NodeTargets>)> {
    let label_path = file(dir, "node_label.npy");
    if NodeTargets::held_by(&npy::read_header(&label_path)?, meta.num_classes) {
        let targets = NodeTargets::read(&label_path, meta.num_nodes, meta.num_classes)?;
        return Ok((targets.markers(), Some(targets)));
    }
    let labels = npy::read_ints(&label_path)?.data;
    if labels.len() != meta.num_nodes {
        return Err(Error::invalid(
            &label_path,
            format!("has {} labels for {} nodes", labels.len(), meta.num_nodes),
        ));
    }
    if let Some(i) = labels
        .iter()
        .position(|&l| l < UNLABELLED || l >= meta.num_classes as i64)
    {
        return Err(Error::invalid(
            &label_path,
            format!(
                "label of node {i} is {}, outside 0..{} (num_classes; -1 marks a node without \
                 a label)",
                labels[i], meta.num_classes
            ),
        ));
    }
    Ok((labels, None))
}

/// Reads `count` edge weights from `path`, refusing NaN, infinite and negative ones.
pub(crate) fn read_edge_weights(path: &Path, count: usize) -> Result<Vec<f32>> {
    let w = npy::read::<f32>(path)?.data;
    if w.len() != count {
        return Err(Error::invalid(
            path,
            format!("has {} weights for {count} edges", w.len()),
        ));
    }
    check_edge_weights(path, &w)?;
    Ok(w)
}

/// Refuses NaN, infinite and negative edge weights `w` (of `origin`, named in the error): a
/// weighted aggregation's normalisation takes square roots of their sums.
pub fn check_edge_weights(origin: &Path, w: &[f32]) -> Result<()> {
    match w.iter().position(|x| !(x.is_finite() && *x >= 0.0)) {
        Some(e) => Err(Error::invalid(
            origin,
            format!(
                "weight of edge {e} is {}: weights must be finite and not negative",
                w[e]
            ),
        )),
        None => Ok(()),
    }
}

/// The label of a node outside the splits that has none (papers100M labels 1.4% of its nodes).
pub const UNLABELLED: i64 = -1;

/// The number of classes of `labels` read from `path` (the largest plus one, at least 1);
/// refuses a label below -1 (a node without one) or above [`MAX_CLASS`].
pub fn count_classes(labels: &[i64], path: &Path) -> Result<usize> {
    if let Some(i) = labels
        .iter()
        .position(|&l| !(UNLABELLED..=MAX_CLASS).contains(&l))
    {
        return Err(Error::invalid(
            path,
            format!(
                "label of node {i} is {}: labels are classes 0..={MAX_CLASS}, or -1 for a node \
                 without one",
                labels[i]
            ),
        ));
    }
    Ok(labels.iter().max().map_or(1, |&m| m.max(0) as usize + 1))
}

/// Refuses a node listed twice in one split, or in two splits, and a split node without a
/// label (`labels` holds one per node), in the split files of the dataset directory `dir`.
pub(crate) fn check_splits(dir: &Path, splits: [&[usize]; 3], labels: &[i64]) -> Result<()> {
    check_split_ids(SPLIT_FILES.map(|name| file(dir, name)), splits, labels)
}

/// [`check_splits`] of splits read from the files `files` (train, validation, test), named in
/// errors. Every id must be below `labels.len()`.
pub fn check_split_ids(files: [PathBuf; 3], splits: [&[usize]; 3], labels: &[i64]) -> Result<()> {
    let mut owner = vec![u8::MAX; labels.len()];
    for (s, ids) in splits.iter().enumerate() {
        for &v in ids.iter() {
            match owner[v] {
                u8::MAX => owner[v] = s as u8,
                o if o as usize == s => {
                    return Err(Error::invalid(
                        &files[s],
                        format!("node {v} is listed twice"),
                    ))
                }
                o => {
                    let other = files[o as usize].file_name().unwrap_or_default();
                    return Err(Error::invalid(
                        &files[s],
                        format!(
                            "node {v} is also in {}: splits must not overlap",
                            other.to_string_lossy()
                        ),
                    ));
                }
            }
            if labels[v] == UNLABELLED {
                return Err(Error::invalid(
                    &files[s],
                    format!("node {v} has no label (its label is -1), so it cannot be in a split"),
                ));
            }
        }
    }
    Ok(())
}

/// Checks that `node_feat.npy` holds `[num_nodes, feat_dim]` elements; returns its header.
pub(crate) fn check_feature_header(dir: &Path, meta: &Meta) -> Result<npy::NpyHeader> {
    let path = file(dir, "node_feat.npy");
    let header = npy::read_header(&path)?;
    if header.shape != [meta.num_nodes, meta.feat_dim] {
        return Err(Error::invalid(
            &path,
            format!(
                "shape {:?}, meta.json says [{}, {}]",
                header.shape, meta.num_nodes, meta.feat_dim
            ),
        ));
    }
    Ok(header)
}

/// The file that records which checks passed on which version of a dataset's files.
const CHECKS_FILE: &str = ".graphloom-checks.json";

/// Runs `check` (named `what`) on the dataset file `name` unless it passed on this very
/// version of the file before: the file's size, modification and change times, and the
/// contents of `meta.json` (the bounds a check holds values to, such as `num_classes`) are
/// recorded in `.graphloom-checks.json` beside it once it passes, so opening a large dataset
/// again does not read it again. A file changed since (another size or time: the change time
/// cannot be set back by hand) or a changed `meta.json` is checked again. Recording is best
/// effort: a read-only dataset directory is checked on every open.
pub(crate) fn check_once(
    dir: &Path,
    name: &str,
    what: &str,
    check: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let stamp = |path: &Path| -> Option<String> {
        use std::hash::{Hash, Hasher};
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        let meta_json = std::fs::read(dir.join("meta.json")).ok()?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        meta_json.hash(&mut hasher);
        Some(format!(
            "{what} {} {}.{:09} {}.{:09} {:016x}",
            m.len(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
            hasher.finish()
        ))
    };
    let records_path = dir.join(CHECKS_FILE);
    let mut records: std::collections::BTreeMap<String, String> =
        std::fs::read_to_string(&records_path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
    let current = stamp(&dir.join(name));
    if current.is_some() && records.get(name) == current.as_ref() {
        return Ok(());
    }
    check()?;
    if let Some(current) = current {
        records.insert(name.to_string(), current);
        let text = serde_json::to_string_pretty(&records).expect("records serialise");
        let _ = crate::write_atomic(&records_path, |w| {
            std::io::Write::write_all(w, text.as_bytes())
        });
    }
    Ok(())
}

/// Checks that every value of a feature file left on disk is finite, reading it in chunks of
/// bounded size: a NaN in a mapped table is refused as it is in memory.
/// `feat_dtype` is what `meta.json` says the file holds (`f32` or `bf16`), `feat_dim` its
/// columns (to name a fault's node and column).
pub(crate) fn check_feature_values(
    path: &Path,
    header: &npy::NpyHeader,
    feat_dtype: &str,
    feat_dim: usize,
) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let elem = header.dtype.size();
    let finite: fn(&[u8]) -> bool = match (feat_dtype, header.dtype) {
        ("f32", npy::NpyDType::F32) => |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite(),
        ("bf16", npy::NpyDType::U16) => {
            |b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).is_finite()
        }
        (name, found) => {
            return Err(Error::invalid(
                path,
                format!("meta.json says feat_dtype {name}, the file holds {found:?}"),
            ))
        }
    };
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    f.seek(SeekFrom::Start(header.data_offset as u64))
        .map_err(|e| Error::io(path, e))?;
    let total = header.numel();
    let chunk_elems = (16 << 20) / elem;
    let mut buf = vec![0u8; chunk_elems * elem];
    let mut done = 0;
    while done < total {
        let n = chunk_elems.min(total - done);
        f.read_exact(&mut buf[..n * elem])
            .map_err(|e| Error::io(path, e))?;
        if let Some(k) = buf[..n * elem].chunks_exact(elem).position(|b| !finite(b)) {
            let i = done + k;
            return Err(Error::invalid(
                path,
                format!(
                    "non-finite feature at node {}, column {} (NaN or infinity)",
                    i / feat_dim.max(1),
                    i % feat_dim.max(1)
                ),
            ));
        }
        done += n;
    }
    Ok(())
}

fn load_features(dir: &Path, meta: &Meta) -> Result<Tensor> {
    check_feature_header(dir, meta)?;
    load_features_file(&file(dir, "node_feat.npy"), meta.num_nodes, meta)
}

/// Reads `rows` feature rows of `meta.feat_dim` columns, checked for shape, dtype and
/// non-finite values.
pub(crate) fn load_features_file(path: &Path, rows: usize, meta: &Meta) -> Result<Tensor> {
    load_feature_rows(path, rows, meta.feat_dim, &meta.feat_dtype)
}

/// Reads `rows` feature rows of `cols` columns stored as `dtype` (`f32` or `bf16`), checked
/// for shape, dtype and non-finite values.
pub(crate) fn load_feature_rows(
    path: &Path,
    rows: usize,
    cols: usize,
    dtype: &str,
) -> Result<Tensor> {
    load_rows(path, rows, cols, dtype, "node")
}

/// Reads `rows` rows of `cols` columns stored as `dtype` (`f32` or `bf16`), checked for shape,
/// dtype and non-finite values; an error names a bad value's row as a `row_noun` (a node's
/// features, an edge's).
pub(crate) fn load_rows(
    path: &Path,
    rows: usize,
    cols: usize,
    dtype: &str,
    row_noun: &str,
) -> Result<Tensor> {
    let path = path.to_path_buf();
    let header = npy::read_header(&path)?;
    if header.shape != [rows, cols] {
        return Err(Error::invalid(
            &path,
            format!("shape {:?}, expected [{rows}, {cols}]", header.shape),
        ));
    }
    let _g = category_scope(Category::Features);
    let shape = [rows, cols];
    let bad_value = |i: usize| {
        Error::invalid(
            &path,
            format!(
                "non-finite feature at {row_noun} {}, column {} (NaN or infinity)",
                i / cols.max(1),
                i % cols.max(1)
            ),
        )
    };
    match (dtype, header.dtype) {
        ("f32", npy::NpyDType::F32) => {
            let v = read_body(&path, &header, |x: f32| {
                f32::from_bits(u32::from_le(x.to_bits()))
            })?;
            if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                return Err(bad_value(i));
            }
            Ok(Tensor::from_vec(v, &shape)?)
        }
        ("bf16", npy::NpyDType::U16) => {
            let v: Vec<bf16> = read_body(&path, &header, u16::from_le)?
                .into_iter()
                .map(bf16::from_bits)
                .collect();
            if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                return Err(bad_value(i));
            }
            Ok(Tensor::from_vec(v, &shape)?)
        }
        (name, found) => Err(Error::invalid(
            &path,
            format!("meta.json says feat_dtype {name}, the file holds {found:?}"),
        )),
    }
}

/// The elements of the `.npy` file at `path` (of `header`, whose dtype is `T`'s: `f32` or
/// `u16`) read straight into a vector, without a copy of the file's bytes, so loading
/// features holds them once; `from_le` turns a little-endian element into a native one.
fn read_body<T: Copy + Default>(
    path: &Path,
    header: &npy::NpyHeader,
    from_le: impl Fn(T) -> T,
) -> Result<Vec<T>> {
    use std::io::{Read, Seek, SeekFrom};
    let n = header.numel();
    let mut v = vec![T::default(); n];
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    f.seek(SeekFrom::Start(header.data_offset as u64))
        .map_err(|e| Error::io(path, e))?;
    // SAFETY: the callers' `T` are f32 and u16, numbers without padding for which any bytes
    // are a value; the slice covers exactly the vector's initialised elements.
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(&v[..]))
    };
    f.read_exact(bytes).map_err(|e| Error::io(path, e))?;
    if cfg!(target_endian = "big") {
        v.iter_mut().for_each(|x| *x = from_le(*x));
    }
    Ok(v)
}

/// A seeded random split of `0..num_nodes` into train, validation and test ids with the given
/// fractions of the nodes (the rest of the nodes belong to no split).
pub fn random_split(
    num_nodes: usize,
    train: f64,
    valid: f64,
    test: f64,
    seed: u64,
) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let key = graphloom_tensor::rng::RngKey::new(seed, 0, 0x5917);
    let mut order: Vec<(u64, usize)> = (0..num_nodes).map(|i| (key.bits(i as u64, 0), i)).collect();
    order.sort_unstable();
    let ids: Vec<usize> = order.into_iter().map(|(_, i)| i).collect();
    let a = (train * num_nodes as f64).round() as usize;
    let b = a + (valid * num_nodes as f64).round() as usize;
    let c = (b + (test * num_nodes as f64).round() as usize).min(num_nodes);
    let sorted = |s: &[usize]| {
        let mut v = s.to_vec();
        v.sort_unstable();
        v
    };
    (sorted(&ids[..a]), sorted(&ids[a..b]), sorted(&ids[b..c]))
}

/// Reads the split file `name`, checking every id is a node.
pub(crate) fn read_split(dir: &Path, name: &str, num_nodes: usize) -> Result<Vec<usize>> {
    let p = dir.join(name);
    let ids = npy::read_ids(&p)?.data;
    if let Some(&bad) = ids.iter().find(|&&i| i < 0 || i as usize >= num_nodes) {
        return Err(Error::invalid(
            &p,
            format!("node id {bad} out of range 0..{num_nodes}"),
        ));
    }
    Ok(ids.into_iter().map(|i| i as usize).collect())
}
