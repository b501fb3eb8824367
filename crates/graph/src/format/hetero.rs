//! A heterogeneous dataset directory (`"format": "hetero"` in `meta.json`): node types, each
//! numbered from 0 with optional features of its own; relations `[src, rel, dst]` (PyG's
//! triples), each a CSR by destination over the destination type whose sources are ids of the
//! source type (`edges/<src>__<rel>__<dst>/`); labels and splits on the target type
//! (`nodes/<target>/`). The layout of DESIGN.md, which `../shared/baselines/make_hetero.py`
//! writes and DGL's `dgl_hetero.py` reads.
//!
//! [`HeteroMeta`] is its header; [`HeteroDataset::open`] maps its arrays and checks each one
//! against the types' sizes (offsets, source ids, labels, splits, feature shapes), naming the
//! file and the entry of the first fault.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use graphloom_comm::Communicator;
use graphloom_store::{Layout, StoreTensor};
use graphloom_tensor::{DType, Tensor};

use super::dataset::{check_feature_values, check_once, check_split_ids, load_feature_rows};
use super::mapped::{check_offsets, Column};
use super::meta::{HETERO_FORMAT, MAX_CLASS, SPLIT_FILES};
use crate::feature_table::{npy_feature_table, FeaturesLocation};
use crate::sample::CsrSource;
use crate::{npy, Csr, Error, MappedNpy, NodeId, Result, UNLABELLED};

/// A node type's entry in `meta.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeType {
    /// Nodes of the type, numbered `0..num_nodes`.
    pub num_nodes: usize,
    /// Feature width (0: the type has no features).
    #[serde(default)]
    pub feat_dim: usize,
    /// Feature dtype on disk: `f32` or `bf16`.
    #[serde(default = "default_feat_dtype")]
    pub feat_dtype: String,
}

fn default_feat_dtype() -> String {
    "f32".into()
}

/// The `meta.json` of a heterogeneous dataset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeteroMeta {
    /// Dataset name.
    pub name: String,
    /// Always [`HETERO_FORMAT`].
    pub format: String,
    /// Node types by name.
    pub node_types: BTreeMap<String, NodeType>,
    /// Relations as `[src, rel, dst]`.
    pub edge_types: Vec<[String; 3]>,
    /// The type whose nodes carry labels and splits.
    pub target_node_type: String,
    /// Classes of the target type's labels.
    pub num_classes: usize,
    /// Whether the relations are directed (reverse relations are types of their own).
    #[serde(default)]
    pub directed: bool,
}

impl HeteroMeta {
    /// Reads and checks the `meta.json` of the heterogeneous dataset in `dir`: every relation
    /// names known types, once; the target type exists; the sizes are addressable.
    pub fn read(dir: &Path) -> Result<HeteroMeta> {
        let path = dir.join("meta.json");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let meta: HeteroMeta =
            serde_json::from_str(&text).map_err(|e| Error::format(&path, e.to_string()))?;
        meta.check(&path)?;
        Ok(meta)
    }

    /// Checks the header: every relation names known types, once; the target type exists;
    /// the sizes are addressable; `path` (where the header came from) is named in errors.
    pub fn check(&self, path: &Path) -> Result<()> {
        let invalid = |msg: String| Err(Error::invalid(path, msg));
        if self.format != HETERO_FORMAT {
            return invalid(format!(
                "format is {:?}, not {HETERO_FORMAT:?}",
                self.format
            ));
        }
        if !self.node_types.contains_key(&self.target_node_type) {
            return invalid(format!(
                "target_node_type {:?} is not among the node types ({})",
                self.target_node_type,
                self.type_names()
            ));
        }
        if self.num_classes as u64 > MAX_CLASS as u64 + 1 {
            return invalid(format!(
                "num_classes = {} is above the {} classes a model can have",
                self.num_classes,
                MAX_CLASS + 1
            ));
        }
        for (name, t) in &self.node_types {
            if t.num_nodes >= i32::MAX as usize {
                return invalid(format!(
                    "node type {name:?} has {} nodes; ids of a type are held in 32 bits",
                    t.num_nodes
                ));
            }
            if !matches!(t.feat_dtype.as_str(), "f32" | "bf16") {
                return invalid(format!(
                    "node type {name:?} has feat_dtype {:?}, not f32 or bf16",
                    t.feat_dtype
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for relation in &self.edge_types {
            for end in [&relation[0], &relation[2]] {
                if !self.node_types.contains_key(end) {
                    return invalid(format!(
                        "relation {} names node type {end:?}, which is not among the node \
                         types ({})",
                        relation_name(relation),
                        self.type_names()
                    ));
                }
            }
            if !seen.insert(relation_name(relation)) {
                return invalid(format!(
                    "relation {} is listed twice",
                    relation_name(relation)
                ));
            }
        }
        Ok(())
    }

    fn type_names(&self) -> String {
        let names: Vec<&str> = self.node_types.keys().map(String::as_str).collect();
        names.join(", ")
    }

    /// Writes `meta.json` into the dataset directory `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join("meta.json");
        let text = serde_json::to_string_pretty(self).expect("meta serialises");
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))
    }

    /// Nodes of type `name` (0 for an unknown type).
    pub fn num_nodes(&self, name: &str) -> usize {
        self.node_types.get(name).map_or(0, |t| t.num_nodes)
    }
}

/// A relation's folder name: `<src>__<rel>__<dst>`.
pub fn relation_name(relation: &[String; 3]) -> String {
    relation.join("__")
}

/// One relation's arrays, mapped.
pub struct Relation {
    /// `[src, rel, dst]`.
    pub relation: [String; 3],
    /// `num_nodes(dst) + 1` offsets into the sources.
    pub row_ptr: MappedNpy<i64>,
    /// Edges (sources' ids in the source type).
    pub num_edges: usize,
    /// The most sources of one destination.
    pub max_in_degree: usize,
    /// Whether it has `edge_weight.npy`.
    pub weighted: bool,
}

/// A heterogeneous dataset directory, opened and checked: its header, each relation's
/// offsets mapped, the target type's split sizes, and each type's feature file's shape.
pub struct HeteroDataset {
    /// The header.
    pub meta: HeteroMeta,
    /// The relations, in `meta.json`'s order.
    pub relations: Vec<Relation>,
    /// Nodes of the target type in the train, validation and test splits.
    pub splits: [usize; 3],
    /// Each node type's feature file's `[rows, width]`, for the types that have one.
    pub features: BTreeMap<String, Vec<usize>>,
    /// The directory.
    dir: PathBuf,
    /// The target type's label of each node (-1: none).
    labels: Vec<i64>,
    /// The target type's train, validation and test ids.
    split_ids: [Vec<usize>; 3],
}

/// A relation in memory, as training reads it.
pub struct TypedRelation {
    /// `<src>__<rel>__<dst>`.
    pub name: String,
    /// The source type's index in [`HeteroGraph::types`].
    pub src_type: usize,
    /// The destination type's index.
    pub dst_type: usize,
    /// CSR by destination (ids of the destination type) whose entries are ids of the source
    /// type.
    pub csr: RelationCsr,
}

/// A relation's CSR by destination as training reads it: mapped from its files (offsets, and
/// int32 sources as `prepare` and make_hetero.py write them; int64 sources are read and
/// narrowed), so a graph larger than memory costs page cache, not process memory; or built in
/// memory.
pub struct RelationCsr(Arrays);

enum Arrays {
    Memory(Csr),
    Mapped {
        row_ptr: MappedNpy<i64>,
        col_idx: Column,
    },
}

impl From<Csr> for RelationCsr {
    fn from(csr: Csr) -> RelationCsr {
        RelationCsr(Arrays::Memory(csr))
    }
}

impl RelationCsr {
    /// `num_nodes + 1` offsets into [`RelationCsr::col_idx`].
    pub fn row_ptr(&self) -> &[i64] {
        match &self.0 {
            Arrays::Memory(csr) => &csr.row_ptr,
            Arrays::Mapped { row_ptr, .. } => row_ptr.as_slice(),
        }
    }

    /// The source of each edge, in CSR order.
    pub fn col_idx(&self) -> &[NodeId] {
        match &self.0 {
            Arrays::Memory(csr) => &csr.col_idx,
            Arrays::Mapped { col_idx, .. } => col_idx.ids(),
        }
    }

    /// Destination nodes.
    pub fn num_nodes(&self) -> usize {
        self.row_ptr().len().saturating_sub(1)
    }

    /// Edges.
    pub fn num_edges(&self) -> usize {
        self.col_idx().len()
    }

    /// What the samplers read.
    pub fn source(&self) -> CsrSource<'_> {
        CsrSource::from_arrays(self.row_ptr(), self.col_idx())
    }

    /// A copy in memory (a whole-graph pass builds its structures from it).
    pub fn to_csr(&self) -> Csr {
        Csr {
            row_ptr: self.row_ptr().to_vec(),
            col_idx: self.col_idx().to_vec(),
        }
    }

    /// The bytes it holds in process memory: a mapped array holds none.
    pub fn owned_bytes(&self) -> usize {
        match &self.0 {
            Arrays::Memory(csr) => csr.bytes(),
            Arrays::Mapped { col_idx, .. } => col_idx.owned_bytes(),
        }
    }
}

/// A heterogeneous dataset in memory, as training reads it: node types in name order (that of
/// `meta.json`'s map), each relation's CSR, each type's features, the target type's labels and
/// splits.
pub struct HeteroGraph {
    /// The header.
    pub meta: HeteroMeta,
    /// The node types' names.
    pub types: Vec<String>,
    /// Nodes of each type.
    pub type_sizes: Vec<usize>,
    /// The target type's index.
    pub target: usize,
    /// The relations, in `meta.json`'s order.
    pub relations: Vec<TypedRelation>,
    /// Each type's feature file (checked when loaded, read again by [`FeatureFile::read`]
    /// where it is laid out), `None` for a type without.
    pub features: Vec<Option<FeatureFile>>,
    /// The target type's label of each node (-1: none).
    pub labels: Vec<i64>,
    /// The target type's train, validation and test ids.
    pub splits: [Vec<usize>; 3],
}

/// A node type's feature file, checked: its shape and dtype, every value finite.
#[derive(Clone, Debug)]
pub struct FeatureFile {
    /// `nodes/<type>/node_feat.npy`.
    pub path: PathBuf,
    /// Rows (the type's nodes).
    pub rows: usize,
    /// Columns.
    pub width: usize,
    /// `f32` or `bf16`.
    pub dtype: String,
}

impl FeatureFile {
    /// The features, checked again (the file may have changed since).
    pub fn read(&self) -> Result<Tensor> {
        load_feature_rows(&self.path, self.rows, self.width, &self.dtype)
    }

    /// The features as a store table over the ranks of `comm`, in `layout`, at `location`
    /// (the file mapped in place, or each rank's rows copied into memory). Collective.
    pub fn table(
        &self,
        comm: Arc<dyn Communicator>,
        layout: Layout,
        location: FeaturesLocation,
    ) -> Result<StoreTensor> {
        let dtype = DType::parse(&self.dtype).ok_or_else(|| {
            Error::invalid(
                &self.path,
                format!("unknown feature dtype {:?}", self.dtype),
            )
        })?;
        npy_feature_table(
            self.path.clone(),
            [self.rows, self.width],
            dtype,
            comm,
            layout,
            location,
        )
    }
}

impl HeteroGraph {
    /// The index of the node type `name`.
    pub fn type_index(&self, name: &str) -> Option<usize> {
        self.types.iter().position(|t| t == name)
    }
}

impl HeteroDataset {
    /// Opens the heterogeneous dataset in `dir` and checks every array against the types'
    /// sizes: a relation's offsets (one per destination and one more, from 0, never
    /// decreasing, ending at its edges), its sources (ids of the source type), the target's
    /// labels (one per node, in `0..num_classes` or -1) and splits, each feature file's shape.
    pub fn open(dir: &Path) -> Result<HeteroDataset> {
        let meta = HeteroMeta::read(dir)?;
        let relations = meta
            .edge_types
            .iter()
            .map(|r| open_relation(dir, &meta, r))
            .collect::<Result<Vec<_>>>()?;
        let target = dir.join("nodes").join(&meta.target_node_type);
        let n = meta.num_nodes(&meta.target_node_type);
        let label_path = target.join("node_label.npy");
        if !label_path.exists() {
            return Err(Error::path(
                &label_path,
                format!(
                    "is missing: the target type {:?} needs a label per node",
                    meta.target_node_type
                ),
            ));
        }
        let labels = npy::read_ints(&label_path)?.data;
        if labels.len() != n {
            return Err(Error::invalid(
                &label_path,
                format!("has {} labels for {n} nodes", labels.len()),
            ));
        }
        let classes = meta.num_classes as i64;
        if let Some(i) = labels.iter().position(|&l| l < UNLABELLED || l >= classes) {
            return Err(Error::invalid(
                &label_path,
                format!(
                    "label of node {i} is {}, outside 0..{classes} (num_classes; -1 marks a \
                     node without a label)",
                    labels[i]
                ),
            ));
        }
        let files: [PathBuf; 3] = SPLIT_FILES.map(|f| target.join(f));
        let mut splits: [Vec<usize>; 3] = Default::default();
        for (s, path) in files.iter().enumerate() {
            if path.exists() {
                splits[s] = read_ids_below(path, n)?;
            }
        }
        check_split_ids(files, [&splits[0], &splits[1], &splits[2]], &labels)?;
        let mut features = BTreeMap::new();
        for (name, t) in &meta.node_types {
            let path = dir.join("nodes").join(name).join("node_feat.npy");
            if t.feat_dim == 0 && !path.exists() {
                continue;
            }
            let header = npy::read_header(&path)?;
            if header.shape != [t.num_nodes, t.feat_dim] {
                return Err(Error::invalid(
                    &path,
                    format!(
                        "shape {:?}, meta.json says [{}, {}] for node type {name:?}",
                        header.shape, t.num_nodes, t.feat_dim
                    ),
                ));
            }
            features.insert(name.clone(), header.shape);
        }
        Ok(HeteroDataset {
            meta,
            relations,
            splits: [0, 1, 2].map(|s| splits[s].len()),
            features,
            dir: dir.to_path_buf(),
            labels,
            split_ids: splits,
        })
    }

    /// The dataset as training reads it: each relation's CSR mapped (its sources checked when
    /// opened), the target's labels and splits in memory, each type's feature file checked
    /// finite (in one streaming pass, skipped when it passed on this version of the file) and
    /// left on disk for the run to lay out. Edge weights are not read: the relational models
    /// take each relation's mean.
    pub fn load(mut self) -> Result<HeteroGraph> {
        let types: Vec<String> = self.meta.node_types.keys().cloned().collect();
        let index = |name: &str| types.iter().position(|t| t == name).expect("checked type");
        let mut relations = Vec::with_capacity(self.relations.len());
        for r in std::mem::take(&mut self.relations) {
            let name = relation_name(&r.relation);
            let col_path = self.dir.join("edges").join(&name).join("csr_col_idx.npy");
            let n_src = self.meta.num_nodes(&r.relation[0]);
            // The sources were checked below the source type's size when opened.
            let col_idx = Column::open(&col_path, n_src)?;
            relations.push(TypedRelation {
                src_type: index(&r.relation[0]),
                dst_type: index(&r.relation[2]),
                name,
                csr: RelationCsr(Arrays::Mapped {
                    row_ptr: r.row_ptr,
                    col_idx,
                }),
            });
        }
        let mut features = Vec::with_capacity(types.len());
        for name in &types {
            let t = &self.meta.node_types[name];
            features.push(match self.features.get(name) {
                Some(_) => {
                    let file = FeatureFile {
                        path: self.dir.join("nodes").join(name).join("node_feat.npy"),
                        rows: t.num_nodes,
                        width: t.feat_dim,
                        dtype: t.feat_dtype.clone(),
                    };
                    // Checked now, before any training; laid out by the run, so the dataset
                    // holds no copy of its own.
                    let header = npy::read_header(&file.path)?;
                    let name = format!("nodes/{name}/node_feat.npy");
                    check_once(&self.dir, &name, "finite", || {
                        check_feature_values(&file.path, &header, &file.dtype, file.width)
                    })?;
                    Some(file)
                }
                None => None,
            });
        }
        Ok(HeteroGraph {
            type_sizes: types.iter().map(|t| self.meta.num_nodes(t)).collect(),
            target: index(&self.meta.target_node_type),
            types,
            relations,
            features,
            labels: self.labels,
            splits: self.split_ids,
            meta: self.meta,
        })
    }
}

/// Maps and checks the relation `r` of the dataset in `dir`.
fn open_relation(dir: &Path, meta: &HeteroMeta, r: &[String; 3]) -> Result<Relation> {
    let folder = dir.join("edges").join(relation_name(r));
    let (n_src, n_dst) = (meta.num_nodes(&r[0]), meta.num_nodes(&r[2]));
    let row_ptr_path = folder.join("csr_row_ptr.npy");
    let row_ptr = MappedNpy::<i64>::open(&row_ptr_path)?;
    if row_ptr.len() != n_dst + 1 {
        return Err(Error::invalid(
            &row_ptr_path,
            format!(
                "has {} entries for the {n_dst} nodes of destination type {:?} (expected {})",
                row_ptr.len(),
                r[2],
                n_dst + 1
            ),
        ));
    }
    let col_path = folder.join("csr_col_idx.npy");
    let num_edges = npy::read_header(&col_path)?.numel();
    check_offsets(row_ptr.as_slice(), num_edges)
        .map_err(|msg| Error::invalid(&row_ptr_path, msg))?;
    let name = format!("edges/{}/csr_col_idx.npy", relation_name(r));
    check_once(dir, &name, "sources", || {
        check_sources(&col_path, n_src, &r[0])
    })?;
    let max_in_degree = row_ptr
        .as_slice()
        .par_windows(2)
        .map(|w| (w[1] - w[0]) as usize)
        .max()
        .unwrap_or(0);
    let weight_path = folder.join("edge_weight.npy");
    let weighted = weight_path.exists();
    if weighted {
        let weights = MappedNpy::<f32>::open(&weight_path)?;
        if weights.len() != num_edges {
            return Err(Error::invalid(
                &weight_path,
                format!("has {} weights for {num_edges} edges", weights.len()),
            ));
        }
        super::dataset::check_edge_weights(&weight_path, weights.as_slice())?;
    }
    Ok(Relation {
        relation: r.clone(),
        row_ptr,
        num_edges,
        max_in_degree,
        weighted,
    })
}

/// Refuses a source in `path` (int32 or int64) that is not an id of the source type `name` of
/// `n` nodes, naming the first such entry.
fn check_sources(path: &Path, n: usize, name: &str) -> Result<()> {
    fn first_bad<T: Copy + Into<i64> + Sync>(cols: &[T], n: usize) -> Option<(usize, i64)> {
        cols.par_chunks(1 << 20)
            .enumerate()
            .find_map_first(|(c, chunk)| {
                let k = chunk.iter().position(|&v| {
                    let v: i64 = v.into();
                    v < 0 || v as u64 >= n as u64
                })?;
                Some(((c << 20) + k, chunk[k].into()))
            })
    }
    let bad = match npy::read_header(path)?.dtype {
        npy::NpyDType::I32 => first_bad(MappedNpy::<i32>::open(path)?.as_slice(), n),
        npy::NpyDType::I64 => first_bad(MappedNpy::<i64>::open(path)?.as_slice(), n),
        other => {
            return Err(Error::format(
                path,
                format!("dtype is {other:?}, expected int32 or int64"),
            ))
        }
    };
    match bad {
        Some((e, v)) => Err(Error::invalid(
            path,
            format!("entry {e} is {v}, not an id of source type {name:?} ({n} nodes)"),
        )),
        None => Ok(()),
    }
}

/// The ids of a split file, each below `n` (signed dtypes read as signed, bool refused).
fn read_ids_below(path: &Path, n: usize) -> Result<Vec<usize>> {
    let ids = npy::read_ids(path)?.data;
    if let Some(i) = ids.iter().position(|&v| v < 0 || v as u64 >= n as u64) {
        return Err(Error::invalid(
            path,
            format!(
                "entry {i} is {}, not a node of the target type ({n} nodes)",
                ids[i]
            ),
        ));
    }
    Ok(ids.into_iter().map(|v| v as usize).collect())
}
