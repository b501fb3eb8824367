//! [`HeteroDataset`]: a heterogeneous dataset directory read into memory
//! (`graphloom_graph::HeteroGraph`): its types, relations, the target type's labels and
//! splits, each relation as an edge index and each type's features as a store table; and
//! [`write_hetero_arrays`], one written from a PyG `HeteroData`'s arrays.

use std::path::PathBuf;
use std::sync::Arc;

use graphloom_convert::arrays::FeatureRows;
use graphloom_convert::arrays_hetero::{
    write_hetero, HeteroArraysInput, NodeTypeArrays, RelationArrays,
};
use graphloom_graph::{FeaturesLocation, HeteroDataset as Directory, HeteroGraph};
use graphloom_store::DlpackView;
use pyo3::prelude::*;

use crate::buffers::Held;
use crate::dataset::{check_exists, ids_view};
use crate::errors::{self, invalid};
use crate::job::Comm;
use crate::neighbourhood::{i64_tensor, stacked};
use crate::process::check_pool;
use crate::table::{parse_layout, Table};
use crate::view::View;

/// An opened heterogeneous dataset directory, its relations in memory.
#[pyclass(module = "graphloom._graphloom", frozen)]
pub(crate) struct HeteroDataset {
    pub(crate) graph: Arc<HeteroGraph>,
    path: PathBuf,
}

impl HeteroDataset {
    /// The index of node type `name`, or a ValueError listing the types.
    pub(crate) fn type_index(&self, name: &str) -> PyResult<usize> {
        self.graph.type_index(name).ok_or_else(|| {
            invalid(format!(
                "node type {name:?} is not one of the dataset's ({})",
                self.graph.types.join(", ")
            ))
        })
    }
}

#[pymethods]
impl HeteroDataset {
    /// Opens the heterogeneous dataset directory at `path` (`"format": "hetero"`), checks
    /// every array against the types' sizes and reads its relations into memory.
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<HeteroDataset> {
        check_pool()?;
        check_exists(&path)?;
        let graph = py
            .detach(|| Directory::open(&path).and_then(Directory::load))
            .map_err(errors::raise)?;
        Ok(HeteroDataset {
            graph: Arc::new(graph),
            path,
        })
    }

    /// The dataset's name.
    #[getter]
    fn name(&self) -> String {
        self.graph.meta.name.clone()
    }

    /// The directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// The node types, in name order (the order of every per-type list here).
    #[getter]
    fn node_types(&self) -> Vec<String> {
        self.graph.types.clone()
    }

    /// Nodes of each type.
    #[getter]
    fn type_sizes(&self) -> Vec<usize> {
        self.graph.type_sizes.clone()
    }

    /// Each type's feature width (0: none) and dtype on disk.
    #[getter]
    fn features(&self) -> Vec<(usize, String)> {
        self.graph
            .features
            .iter()
            .map(|f| {
                f.as_ref()
                    .map_or((0, "f32".into()), |f| (f.width, f.dtype.clone()))
            })
            .collect()
    }

    /// The relations as `(src, rel, dst)`, in `meta.json`'s order.
    #[getter]
    fn edge_types(&self) -> Vec<(String, String, String)> {
        self.graph
            .meta
            .edge_types
            .iter()
            .map(|[s, r, d]| (s.clone(), r.clone(), d.clone()))
            .collect()
    }

    /// The type whose nodes carry labels and splits.
    #[getter]
    fn target_node_type(&self) -> String {
        self.graph.types[self.graph.target].clone()
    }

    /// The number of classes.
    #[getter]
    fn num_classes(&self) -> usize {
        self.graph.meta.num_classes
    }

    /// Ids of the target type in a split (`train`, `valid` or `test`), as int64.
    fn split(&self, name: &str) -> PyResult<View> {
        let s = match name {
            "train" => 0,
            "valid" => 1,
            "test" => 2,
            other => {
                return Err(invalid(format!(
                    "split '{other}' is not train, valid or test"
                )))
            }
        };
        Ok(ids_view(&self.graph.splits[s]))
    }

    /// The target type's label of each node (int64; -1 where a node has none).
    fn labels(&self) -> View {
        let labels = self.graph.labels.clone();
        let n = labels.len();
        View::new(DlpackView::of_tensor(i64_tensor(labels, &[n])))
    }

    /// Relation `r` as PyG's `edge_index`: int64 `[2, E]`, ids of the source type in row 0,
    /// of the destination type in row 1, in CSR order (by destination).
    fn edge_index(&self, py: Python<'_>, r: usize) -> PyResult<View> {
        let relation =
            self.graph.relations.get(r).ok_or_else(|| {
                invalid(format!("relation {r} of {}", self.graph.relations.len()))
            })?;
        let tensor = py.detach(|| {
            let csr = &relation.csr;
            let src: Vec<i64> = csr.col_idx().iter().map(|&u| i64::from(u)).collect();
            let mut dst = Vec::with_capacity(src.len());
            for (v, w) in csr.row_ptr().windows(2).enumerate() {
                dst.extend(std::iter::repeat_n(v as i64, (w[1] - w[0]) as usize));
            }
            stacked(src, dst)
        });
        Ok(View::new(DlpackView::of_tensor(tensor)))
    }

    /// Type `node_type`'s features as a table (collective): `mmap` maps its `node_feat.npy`
    /// read-only; `host` and `shared` copy it into memory, each rank its own rows.
    #[pyo3(signature = (node_type, comm, layout="continuous", location="mmap"))]
    fn feature_table(
        &self,
        py: Python<'_>,
        node_type: &str,
        comm: &Comm,
        layout: &str,
        location: &str,
    ) -> PyResult<Table> {
        let t = self.type_index(node_type)?;
        let file = self.graph.features[t].as_ref().ok_or_else(|| {
            invalid(format!(
                "node type {node_type:?} has no features (give it a learnt embedding)"
            ))
        })?;
        let comm = comm.get()?;
        let layout = parse_layout(layout)?;
        let name = if location == "cpu" { "host" } else { location };
        let location = FeaturesLocation::from_name(name).ok_or_else(|| {
            invalid(format!(
                "location '{location}': the features are kept at host, shared or mmap"
            ))
        })?;
        let table = py
            .detach(|| file.table(comm, layout, location))
            .map_err(errors::raise)?;
        Ok(Table::wrap(graphloom_store::Embedding::frozen(table)))
    }

    fn __repr__(&self) -> String {
        let g = &self.graph;
        let types: Vec<String> = g
            .types
            .iter()
            .zip(&g.type_sizes)
            .map(|(t, n)| format!("{t}: {n}"))
            .collect();
        format!(
            "HeteroDataset(name={:?}, node_types={{{}}}, edge_types={}, target={:?}, \
             num_classes={})",
            g.meta.name,
            types.join(", "),
            g.relations.len(),
            g.types[g.target],
            g.meta.num_classes
        )
    }
}

/// One node type's features as the writer reads them, held for the call.
enum HeldRows {
    F32(Held<f32>),
    F64(Held<f64>),
    Bf16(Held<u16>),
}

impl HeldRows {
    fn new(x: &Bound<'_, PyAny>, dtype: &str, what: &str) -> PyResult<HeldRows> {
        Ok(match dtype {
            "f32" => HeldRows::F32(Held::new(x, what)?),
            "f64" => HeldRows::F64(Held::new(x, what)?),
            "bf16" => HeldRows::Bf16(Held::new(x, what)?),
            other => {
                return Err(invalid(format!(
                    "{what}: dtype {other}; features are float32, float64 or bfloat16"
                )))
            }
        })
    }

    fn rows(&self) -> FeatureRows<'_> {
        match self {
            HeldRows::F32(h) => FeatureRows::F32(h.slice()),
            HeldRows::F64(h) => FeatureRows::F64(h.slice()),
            HeldRows::Bf16(h) => FeatureRows::Bf16(h.slice()),
        }
    }
}

/// A node type as the Python half hands it over: name, nodes, and its features with their
/// width and dtype name, if any.
type TypeArg<'py> = (String, usize, Option<(Bound<'py, PyAny>, usize, String)>);

/// Writes the heterogeneous dataset directory `path` from node types (name, nodes, optional
/// features `[N, F]` with their width and dtype name), relations (`(src, rel, dst)` and an
/// int64 `[2, E]` edge index), the target type's labels (int64, -1 for none) and the three
/// splits' ids (int64, named `split_names` in errors). Returns the number of edges written.
#[pyfunction]
#[pyo3(signature = (path, name, node_types, relations, target, labels, splits, split_names))]
#[allow(clippy::too_many_arguments)] // the arrays of a HeteroData
pub(crate) fn write_hetero_arrays(
    py: Python<'_>,
    path: PathBuf,
    name: &str,
    node_types: Vec<TypeArg<'_>>,
    relations: Vec<((String, String, String), Bound<'_, PyAny>)>,
    target: &str,
    labels: &Bound<'_, PyAny>,
    splits: [Bound<'_, PyAny>; 3],
    split_names: [String; 3],
) -> PyResult<usize> {
    let mut rows = Vec::with_capacity(node_types.len());
    for (type_name, _, x) in &node_types {
        rows.push(match x {
            Some((x, dim, dtype)) => {
                Some((HeldRows::new(x, dtype, &format!("x of {type_name}"))?, *dim))
            }
            None => None,
        });
    }
    let mut edges = Vec::with_capacity(relations.len());
    for ((s, r, d), edge_index) in &relations {
        edges.push(Held::<i64>::new(
            edge_index,
            &format!("edge_index of ({s}, {r}, {d})"),
        )?);
    }
    let labels = Held::<i64>::new(labels, "y")?;
    let split_ids = [
        Held::<i64>::new(&splits[0], &split_names[0])?,
        Held::<i64>::new(&splits[1], &split_names[1])?,
        Held::<i64>::new(&splits[2], &split_names[2])?,
    ];
    let input = HeteroArraysInput {
        name,
        node_types: node_types
            .iter()
            .zip(&rows)
            .map(|((type_name, n, _), x)| NodeTypeArrays {
                name: type_name,
                num_nodes: *n,
                features: x.as_ref().map(|(h, dim)| (h.rows(), *dim)),
            })
            .collect(),
        relations: relations
            .iter()
            .zip(&edges)
            .map(|(((s, r, d), _), e)| RelationArrays {
                relation: [s.as_str(), r.as_str(), d.as_str()],
                edge_index: e.slice(),
            })
            .collect(),
        target,
        labels: labels.slice(),
        splits: [
            split_ids[0].slice(),
            split_ids[1].slice(),
            split_ids[2].slice(),
        ],
        split_names: [&split_names[0], &split_names[1], &split_names[2]],
    };
    let buffer = graphloom_convert::default_buffer_bytes();
    py.detach(|| write_hetero(&input, &path, buffer, &|_, _, _| {}))
        .map(|ds| ds.relations.iter().map(|r| r.num_edges).sum())
        .map_err(|e| match &e {
            // A fault of the caller's arrays (named by what the HeteroData calls them), not of
            // a file: an invalid argument.
            graphloom_graph::Error::Invalid { path, .. } if path.is_relative() => {
                invalid(e.to_string())
            }
            _ => errors::raise(e),
        })
}
