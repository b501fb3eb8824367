//! [`StoreGraph`]: a graph's CSR arrays held in the store, in any layout and location, and
//! sampled through gathers, so the sampler works the same whether this rank holds the whole
//! graph, a mapped file, or only its own rows.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use graphloom_comm::Communicator;
use graphloom_store::{Layout, Location, StoreSpec, StoreTensor};
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::DType;
use rayon::prelude::*;

use crate::sample::{choose, require_weights, HopSample, NeighborSource, SamplerKind};
use crate::{Csr, Error, NodeId, Result};

/// A CSR graph (by destination) whose arrays live in the store.
#[derive(Debug)]
pub struct StoreGraph {
    row_ptr: StoreTensor,
    col_idx: StoreTensor,
    edge_weight: Option<StoreTensor>,
}

/// The location of one of the graph's arrays: Mmap locations get the array's name appended.
fn location_of(location: &Location, array: &str) -> Location {
    match location {
        Location::Mmap { path, writable } => {
            let mut name = path.as_os_str().to_owned();
            name.push(format!("_{array}.bin"));
            Location::Mmap {
                path: PathBuf::from(name),
                writable: *writable,
            }
        }
        other => other.clone(),
    }
}

impl StoreGraph {
    /// Puts `graph` (and its edge weights) into the store. Collective: every rank passes the
    /// same graph and writes its own rows.
    pub fn from_csr(
        comm: Arc<dyn Communicator>,
        graph: &Csr,
        weights: Option<&[f32]>,
        layout: Layout,
        location: &Location,
    ) -> Result<StoreGraph> {
        let n = graph.num_nodes();
        let m = graph.num_edges();
        let spec =
            |len, dtype, name| StoreSpec::new(&[len], dtype, layout, location_of(location, name));
        let mut row_ptr = StoreTensor::new(comm.clone(), spec(n + 1, DType::I64, "row_ptr"))?;
        let range = row_ptr.local_rows();
        row_ptr
            .local_mut::<i64>()?
            .copy_from_slice(&graph.row_ptr[range]);
        let mut col_idx = StoreTensor::new(comm.clone(), spec(m, DType::I64, "col_idx"))?;
        let range = col_idx.local_rows();
        col_idx
            .local_mut::<i64>()?
            .iter_mut()
            .zip(&graph.col_idx[range])
            .for_each(|(d, &s)| *d = i64::from(s));
        let edge_weight = match weights {
            Some(w) => {
                if w.len() != m {
                    return Err(Error::argument(
                        "edge_weight",
                        format!("{} weights for {m} edges", w.len()),
                    ));
                }
                let mut t = StoreTensor::new(comm, spec(m, DType::F32, "edge_weight"))?;
                let range = t.local_rows();
                t.local_mut::<f32>()?.copy_from_slice(&w[range]);
                Some(t)
            }
            None => None,
        };
        row_ptr.barrier()?;
        Ok(StoreGraph {
            row_ptr,
            col_idx,
            edge_weight,
        })
    }

    /// Maps (Mmap, read-only) or loads (Host, SharedHost) the CSR arrays of a dataset directory,
    /// each rank reading only its rows. Collective.
    pub fn from_dataset_dir(
        comm: Arc<dyn Communicator>,
        dir: &Path,
        layout: Layout,
        host_or_shared: Option<Location>,
    ) -> Result<StoreGraph> {
        let open = |name: &str| -> Result<StoreTensor> {
            let path = dir.join(name);
            let header = graphloom_io::npy::read_header(&path)?;
            let dtype = match header.dtype {
                graphloom_io::npy::NpyDType::I64 => DType::I64,
                graphloom_io::npy::NpyDType::I32 => DType::I32,
                graphloom_io::npy::NpyDType::F32 => DType::F32,
                other => {
                    return Err(Error::format(
                        &path,
                        format!("unexpected element type {other:?}"),
                    ))
                }
            };
            let location = host_or_shared.clone().unwrap_or(Location::Mmap {
                path: path.clone(),
                writable: false,
            });
            Ok(match location {
                Location::Mmap { .. } => StoreTensor::new(
                    comm.clone(),
                    StoreSpec::new(&header.shape, dtype, layout, location),
                )?,
                other => StoreTensor::from_files(comm.clone(), &[path], &[], dtype, layout, other)?,
            })
        };
        let weights = dir.join("edge_weight.npy");
        Ok(StoreGraph {
            row_ptr: open("csr_row_ptr.npy")?,
            col_idx: open("csr_col_idx.npy")?,
            edge_weight: if weights.exists() {
                Some(open("edge_weight.npy")?)
            } else {
                None
            },
        })
    }

    /// The number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.row_ptr.rows() - 1
    }

    /// The number of edges.
    pub fn num_edges(&self) -> usize {
        self.col_idx.rows()
    }

    /// The `(start, end)` edge range of each node. Collective for the Distributed layout.
    fn ranges(&self, nodes: &[NodeId]) -> Result<Vec<(i64, i64)>> {
        let ids: Vec<i64> = nodes
            .iter()
            .flat_map(|&v| [i64::from(v), i64::from(v) + 1])
            .collect();
        let bounds = self.row_ptr.gather(&ids)?.to_vec_f64();
        Ok(bounds
            .chunks_exact(2)
            .map(|b| (b[0] as i64, b[1] as i64))
            .collect())
    }

    /// The in-degree of each node. Collective for the Distributed layout.
    pub fn degrees(&self, nodes: &[NodeId]) -> Result<Vec<usize>> {
        Ok(self
            .ranges(nodes)?
            .into_iter()
            .map(|(s, e)| (e - s) as usize)
            .collect())
    }

    /// The whole graph in local memory. Collective.
    pub fn to_csr(&self) -> Result<Csr> {
        let all = |t: &StoreTensor| -> Result<Vec<f64>> {
            let ids: Vec<i64> = (0..t.rows() as i64).collect();
            Ok(t.gather(&ids)?.to_vec_f64())
        };
        Ok(Csr {
            row_ptr: all(&self.row_ptr)?.into_iter().map(|x| x as i64).collect(),
            col_idx: all(&self.col_idx)?
                .into_iter()
                .map(|x| x as NodeId)
                .collect(),
        })
    }

    /// The edge weights in local memory, if any. Collective.
    pub fn weights(&self) -> Result<Option<Vec<f32>>> {
        let Some(w) = &self.edge_weight else {
            return Ok(None);
        };
        let ids: Vec<i64> = (0..w.rows() as i64).collect();
        Ok(Some(w.gather(&ids)?.as_slice::<f32>()?.to_vec()))
    }

    /// A new store graph (same layout, host memory) with one self-loop per node and no other
    /// self-loops or duplicate edges. Collective.
    pub fn with_self_loops(&self) -> Result<StoreGraph> {
        self.transformed(|g| {
            let simple = g.without_self_loops_and_duplicates();
            let n = simple.num_nodes() as NodeId;
            let (mut src, mut dst) = simple.edges();
            src.extend(0..n);
            dst.extend(0..n);
            Csr::from_edges(n as usize, &src, &dst)
        })
    }

    /// A new store graph (same layout, host memory) with every edge in both directions, without
    /// self-loops or duplicates. Collective.
    pub fn to_undirected(&self) -> Result<StoreGraph> {
        self.transformed(Csr::to_undirected_simple)
    }

    fn transformed(&self, f: impl FnOnce(&Csr) -> Csr) -> Result<StoreGraph> {
        let graph = f(&self.to_csr()?);
        StoreGraph::from_csr(
            self.row_ptr.comm().clone(),
            &graph,
            None,
            self.row_ptr.spec().layout,
            &Location::Host,
        )
    }
}

impl NeighborSource for StoreGraph {
    fn num_nodes(&self) -> usize {
        StoreGraph::num_nodes(self)
    }

    fn sample_hop(
        &self,
        frontier: &[NodeId],
        fanout: Option<usize>,
        kind: SamplerKind,
        key: RngKey,
    ) -> Result<HopSample> {
        require_weights(kind, self.edge_weight.is_some())?;
        let ranges = self.ranges(frontier)?;
        // Weighted sampling reads every weight of each neighbourhood; uniform needs none.
        let (weights, weight_offsets) = match (&self.edge_weight, kind) {
            (Some(w), SamplerKind::Weighted) => {
                let ids: Vec<i64> = ranges.iter().flat_map(|&(s, e)| s..e).collect();
                let mut offsets = Vec::with_capacity(ranges.len() + 1);
                offsets.push(0usize);
                for &(s, e) in &ranges {
                    offsets.push(offsets.last().unwrap() + (e - s) as usize);
                }
                (w.gather(&ids)?.as_slice::<f32>()?.to_vec(), offsets)
            }
            _ => (Vec::new(), Vec::new()),
        };
        let per_node: Vec<Vec<u32>> = frontier
            .par_iter()
            .enumerate()
            .map_init(Vec::new, |scratch, (i, &v)| {
                let (s, e) = ranges[i];
                let w = (!weight_offsets.is_empty())
                    .then(|| &weights[weight_offsets[i]..weight_offsets[i + 1]]);
                let mut out = Vec::new();
                choose(
                    (e - s) as usize,
                    w,
                    fanout,
                    kind,
                    key.row(u64::from(v)),
                    scratch,
                    &mut out,
                );
                out
            })
            .collect();
        let mut sample = HopSample {
            offsets: Vec::with_capacity(frontier.len() + 1),
            ..Default::default()
        };
        sample.offsets.push(0);
        for (positions, &(s, _)) in per_node.iter().zip(&ranges) {
            sample
                .edge_ids
                .extend(positions.iter().map(|&p| s + i64::from(p)));
            sample.offsets.push(sample.edge_ids.len() as i64);
        }
        sample.neighbors = self
            .col_idx
            .gather(&sample.edge_ids)?
            .to_vec_f64()
            .into_iter()
            .map(|x| x as NodeId)
            .collect();
        Ok(sample)
    }
}
