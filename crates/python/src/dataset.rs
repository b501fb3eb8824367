//! [`Dataset`]: a dataset directory opened in place (`graphloom_graph::MappedDataset`): sizes,
//! splits, labels, the whole graph as an edge index, and the features as a store table.

use std::path::PathBuf;
use std::sync::Arc;

use graphloom_graph::FeaturesLocation;
use graphloom_graph::MappedDataset;
use graphloom_graph::{LinkSet, LinkSplit};
use graphloom_store::DlpackView;
use graphloom_tensor::Tensor;
use pyo3::prelude::*;

use crate::errors::{self, invalid};
use crate::job::Comm;
use crate::process::check_pool;
use crate::table::{parse_layout, Table};
use crate::view::View;

/// An opened dataset directory.
#[pyclass(module = "graphloom._graphloom", frozen)]
pub(crate) struct Dataset {
    pub(crate) inner: Arc<MappedDataset>,
}

/// `ids` as an int64 view.
pub(crate) fn ids_view(ids: &[usize]) -> View {
    let ids: Vec<i64> = ids.iter().map(|&v| v as i64).collect();
    let n = ids.len();
    View::new(DlpackView::of_tensor(
        Tensor::from_vec(ids, &[n]).expect("length matches"),
    ))
}

/// FileNotFoundError unless the dataset directory `path` exists.
pub(crate) fn check_exists(path: &std::path::Path) -> PyResult<()> {
    if path.exists() {
        return Ok(());
    }
    Err(pyo3::exceptions::PyFileNotFoundError::new_err(format!(
        "dataset {}: no such directory",
        path.display()
    )))
}

#[pymethods]
impl Dataset {
    /// Opens a dataset directory (the format of `graphloom prepare`): arrays are mapped, and
    /// each file's checks run once and are remembered.
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<Dataset> {
        check_pool()?;
        check_exists(&path)?;
        let inner = py
            .detach(|| MappedDataset::open(&path))
            .map_err(errors::raise)?;
        Ok(Dataset {
            inner: Arc::new(inner),
        })
    }

    /// The dataset's name.
    #[getter]
    fn name(&self) -> String {
        self.inner.meta.name.clone()
    }

    /// The number of nodes.
    #[getter]
    fn num_nodes(&self) -> usize {
        self.inner.meta.num_nodes
    }

    /// The number of (directed) edges of the CSR.
    #[getter]
    fn num_edges(&self) -> usize {
        self.inner.meta.num_edges
    }

    /// The number of classes.
    #[getter]
    fn num_classes(&self) -> usize {
        self.inner.meta.num_classes
    }

    /// The width of a feature row.
    #[getter]
    fn feat_dim(&self) -> usize {
        self.inner.meta.feat_dim
    }

    /// The features' dtype in the file (f32 or bf16).
    #[getter]
    fn feat_dtype(&self) -> String {
        self.inner.meta.feat_dtype.clone()
    }

    /// The directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.dir().to_path_buf()
    }

    /// The node ids of a split (`train`, `valid` or `test`), as int64.
    fn split(&self, name: &str) -> PyResult<View> {
        Ok(ids_view(match name {
            "train" => &self.inner.train_idx,
            "valid" => &self.inner.valid_idx,
            "test" => &self.inner.test_idx,
            other => {
                return Err(invalid(format!(
                    "split '{other}' is not train, valid or test"
                )))
            }
        }))
    }

    /// Every node's label (int64; -1 where a node has none), copied out of the file; for a
    /// dataset of targets (multi-label or regression), every node's targets (float32 `[N, T]`,
    /// NaN where missing).
    fn labels(&self) -> View {
        let data = self.inner.data();
        let all: Vec<i64> = (0..data.num_nodes() as i64).collect();
        View::new(DlpackView::of_tensor(crate::neighbourhood::node_y(
            data, &all,
        )))
    }

    /// The whole graph as PyG's `edge_index`: int64 `[2, num_edges]`, sources in row 0 and
    /// destinations in row 1 (messages flow from row 0 to row 1), ordered by destination.
    fn edge_index(&self, py: Python<'_>) -> View {
        let data = self.inner.data();
        let e = data.num_edges();
        let mut out = vec![0i64; 2 * e];
        py.detach(|| {
            let (src, dst) = out.split_at_mut(e);
            for (s, &u) in src.iter_mut().zip(data.col_idx) {
                *s = i64::from(u);
            }
            for (v, w) in data.row_ptr.windows(2).enumerate() {
                dst[w[0] as usize..w[1] as usize].fill(v as i64);
            }
        });
        View::new(DlpackView::of_tensor(
            Tensor::from_vec(out, &[2, e]).expect("length matches"),
        ))
    }

    /// The features as a table (collective): `mmap` maps `node_feat.npy` read-only; `host` and
    /// `shared` copy it into memory, each rank its own rows.
    /// The dataset's link split (`link_split/`), checked against the graph: each file's
    /// name without `.npy` and its array (`[2, E]` pairs, `[E, K]` negative destinations).
    fn link_split(&self, py: Python<'_>) -> PyResult<Vec<(String, View)>> {
        let dir = self.inner.dir();
        if !LinkSplit::exists(dir) {
            return Err(pyo3::exceptions::PyFileNotFoundError::new_err(format!(
                "dataset {}: no link split (make one with `graphloom prepare link-split`)",
                dir.display()
            )));
        }
        py.detach(|| {
            let split = LinkSplit::open(dir, self.inner.data()).map_err(errors::raise)?;
            let mut out = Vec::new();
            for set in LinkSet::ALL {
                let pairs = split.pairs(set);
                let values = [pairs.src(), pairs.dst()].concat();
                let tensor = Tensor::from_vec(values, &[2, pairs.len()]).expect("length matches");
                out.push((
                    stem(set.file_name()),
                    View::new(DlpackView::of_tensor(tensor)),
                ));
            }
            for (test, set) in [(false, "valid_neg_dst"), (true, "test_neg_dst")] {
                if let Some(neg) = split.neg_dst(test) {
                    let (rows, k) = (neg.len(), neg.per_positive());
                    let values: Vec<i64> = (0..rows).flat_map(|i| neg.of(i).to_vec()).collect();
                    let tensor = Tensor::from_vec(values, &[rows, k]).expect("length matches");
                    out.push((set.to_string(), View::new(DlpackView::of_tensor(tensor))));
                }
            }
            Ok(out)
        })
    }

    #[pyo3(signature = (comm, layout="continuous", location="mmap"))]
    fn feature_table(
        &self,
        py: Python<'_>,
        comm: &Comm,
        layout: &str,
        location: &str,
    ) -> PyResult<Table> {
        let comm = comm.get()?;
        let layout = parse_layout(layout)?;
        // "cpu" is WholeGraph's name of host memory.
        let name = if location == "cpu" { "host" } else { location };
        let location = FeaturesLocation::from_name(name).ok_or_else(|| {
            invalid(format!(
                "location '{location}': the features are kept at host, shared or mmap"
            ))
        })?;
        let table = py
            .detach(|| self.inner.feature_table(comm, layout, location))
            .map_err(errors::raise)?;
        Ok(Table::wrap(graphloom_store::Embedding::frozen(table)))
    }

    fn __repr__(&self) -> String {
        let m = &self.inner.meta;
        format!(
            "Dataset(name={:?}, num_nodes={}, num_edges={}, feat_dim={}, num_classes={})",
            m.name, m.num_nodes, m.num_edges, m.feat_dim, m.num_classes
        )
    }
}

/// A file name without its `.npy`.
fn stem(file: &str) -> String {
    file.trim_end_matches(".npy").to_string()
}
