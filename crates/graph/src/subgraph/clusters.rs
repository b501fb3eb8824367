//! Cluster-GCN's clusters (Chiang et al., KDD 2019): METIS parts of the graph, a batch being
//! the subgraph induced by a few of them, edges between them included (PyG's `ClusterData`
//! and `ClusterLoader`).
//!
//! METIS runs once per dataset and cluster count: its result is kept beside the dataset, in
//! `clusters/metis-{P}.npy` (the cluster of every node, int32) with `clusters/metis-{P}.json`
//! (what made it: the count, METIS's seed, and the graph's sizes and a digest of its CSR and
//! training nodes), each written atomically. A later run with the same dataset and count reads
//! it back; one whose graph changed computes and writes it again. A dataset folder that cannot
//! be written is clustered in memory only. The parts of a `graphloom partition` output can be
//! used as the clusters instead ([`partition_clusters`]).

use std::path::{Path, PathBuf};

use graphloom_tensor::rng::RngKey;
use serde::{Deserialize, Serialize};

use crate::format::mapped::GraphData;
use crate::format::meta::PartitionMeta;
use crate::partition::metis;
use crate::{npy, Error, NodeId, Result};

pub use crate::format::meta::CLUSTERS_DIR;

/// METIS's seed for clusters: fixed, so that clusters depend only on the graph and their count
/// and are shared by runs of any seed.
const METIS_SEED: u64 = 0;

/// The purpose of the draws that order an epoch's clusters.
const ORDER_PURPOSE: u64 = 0x434c_5553;

/// The clusters of a graph: the nodes of each, in increasing id order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clusters {
    /// `count + 1` offsets into `members`.
    offsets: Vec<usize>,
    /// The nodes of cluster 0, then of cluster 1, and so on.
    members: Vec<NodeId>,
}

impl Clusters {
    /// The clusters of `part` (the cluster of each node, every value below `count`).
    pub fn from_assignment(part: &[u32], count: usize) -> Clusters {
        let mut offsets = vec![0usize; count + 1];
        for &p in part {
            offsets[p as usize + 1] += 1;
        }
        for c in 0..count {
            offsets[c + 1] += offsets[c];
        }
        let mut next = offsets.clone();
        let mut members = vec![0 as NodeId; part.len()];
        for (v, &p) in part.iter().enumerate() {
            members[next[p as usize]] = v as NodeId;
            next[p as usize] += 1;
        }
        Clusters { offsets, members }
    }

    /// The number of clusters.
    pub fn count(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The nodes of cluster `c`, in increasing order.
    pub fn members(&self, c: usize) -> &[NodeId] {
        &self.members[self.offsets[c]..self.offsets[c + 1]]
    }

    /// The batches of an epoch: the clusters in an order drawn from (seed, epoch), cut into
    /// groups of `per_batch` (the last one shorter), as PyG's `ClusterLoader` with
    /// `shuffle=True` and `batch_size=per_batch` batches them.
    pub fn epoch_groups(&self, per_batch: usize, seed: u64, epoch: u64) -> Vec<Vec<usize>> {
        let key = RngKey::new(seed, epoch, ORDER_PURPOSE);
        let mut order: Vec<(u64, usize)> = (0..self.count())
            .map(|c| (key.bits(c as u64, 0), c))
            .collect();
        order.sort_unstable();
        let order: Vec<usize> = order.into_iter().map(|(_, c)| c).collect();
        order
            .chunks(per_batch.max(1))
            .map(<[usize]>::to_vec)
            .collect()
    }

    /// The nodes of the clusters `group`, in increasing order: a batch's nodes.
    pub fn batch_nodes(&self, group: &[usize]) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = group
            .iter()
            .flat_map(|&c| self.members(c).iter().copied())
            .collect();
        nodes.sort_unstable();
        nodes
    }
}

/// Where a run's clusters came from, for its report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterOrigin {
    /// Read back from the file METIS's earlier run left beside the dataset.
    Reused(PathBuf),
    /// Computed by METIS now, and kept in this file for the next runs.
    Computed(PathBuf),
    /// Computed by METIS now and kept in memory only (the dataset is generated, or its folder
    /// cannot be written: the reason).
    InMemory(String),
    /// The parts of this partitioned directory.
    Partition(PathBuf),
}

impl std::fmt::Display for ClusterOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterOrigin::Reused(p) => write!(f, "reused from {}", p.display()),
            ClusterOrigin::Computed(p) => write!(f, "computed by METIS, kept in {}", p.display()),
            ClusterOrigin::InMemory(why) => write!(f, "computed by METIS, not kept: {why}"),
            ClusterOrigin::Partition(p) => write!(f, "the parts of {}", p.display()),
        }
    }
}

/// What made a clusters file: compared with the current run's before the file is reused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct ClusterRecord {
    clusters: usize,
    metis_seed: u64,
    num_nodes: usize,
    num_edges: usize,
    num_train: usize,
    /// A digest of the CSR arrays and the training nodes, in hexadecimal.
    graph_digest: String,
}

impl ClusterRecord {
    fn of(data: GraphData<'_>, clusters: usize) -> ClusterRecord {
        let d = super::digest(0, data.row_ptr.iter().map(|&o| o as u64));
        let d = super::digest(d, data.col_idx.iter().map(|&u| u64::from(u)));
        let d = super::digest(d, data.train_idx.iter().map(|&v| v as u64));
        ClusterRecord {
            clusters,
            metis_seed: METIS_SEED,
            num_nodes: data.num_nodes(),
            num_edges: data.num_edges(),
            num_train: data.train_idx.len(),
            graph_digest: format!("{d:016x}"),
        }
    }
}

/// Fails unless `count` clusters can be cut from a graph of `nodes` nodes.
pub fn check_count(count: usize, nodes: usize) -> Result<()> {
    if count == 0 || count > nodes {
        return Err(Error::argument(
            "clusters",
            format!("cannot cut {nodes} nodes into {count} clusters: give 1..={nodes}"),
        ));
    }
    Ok(())
}

/// The `count` METIS clusters of `data` (balancing nodes and training nodes), read from the
/// dataset folder `dir` when a file there was made from the same graph and count, else
/// computed and written there for the next runs (in memory only when `dir` is `None` or cannot
/// be written).
pub fn metis_clusters(
    dir: Option<&Path>,
    data: GraphData<'_>,
    count: usize,
) -> Result<(Clusters, ClusterOrigin)> {
    check_count(count, data.num_nodes())?;
    let record = ClusterRecord::of(data, count);
    let Some(dir) = dir else {
        let part = compute(data, count)?;
        let why = "the dataset is generated in memory".to_string();
        return Ok((
            Clusters::from_assignment(&part, count),
            ClusterOrigin::InMemory(why),
        ));
    };
    let folder = dir.join(CLUSTERS_DIR);
    let (array, json) = (
        folder.join(format!("metis-{count}.npy")),
        folder.join(format!("metis-{count}.json")),
    );
    if let Some(part) = read_kept(&array, &json, &record) {
        return Ok((
            Clusters::from_assignment(&part, count),
            ClusterOrigin::Reused(array),
        ));
    }
    let part = compute(data, count)?;
    let origin = match keep(&folder, &array, &json, &record, &part) {
        Ok(()) => ClusterOrigin::Computed(array),
        Err(e) => ClusterOrigin::InMemory(e.to_string()),
    };
    Ok((Clusters::from_assignment(&part, count), origin))
}

/// METIS's `count` parts of `data`.
fn compute(data: GraphData<'_>, count: usize) -> Result<Vec<u32>> {
    Ok(metis(&data.to_csr(), data.train_idx, count, METIS_SEED)?.part)
}

/// The kept assignment, when its record matches `record` and the array is whole and in range.
fn read_kept(array: &Path, json: &Path, record: &ClusterRecord) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string(json).ok()?;
    let kept: ClusterRecord = serde_json::from_str(&text).ok()?;
    if &kept != record {
        return None;
    }
    let part = npy::read_ints(array).ok()?;
    let valid = part.shape == [record.num_nodes]
        && part
            .data
            .iter()
            .all(|&p| (0..record.clusters as i64).contains(&p));
    valid.then(|| part.data.into_iter().map(|p| p as u32).collect())
}

/// Writes the assignment, then its record (each atomically): a record is never beside an
/// array it did not make, since a run that dies between the two leaves the old record, which
/// no longer matches the new array only if the graph changed, and then it is recomputed.
fn keep(
    folder: &Path,
    array: &Path,
    json: &Path,
    record: &ClusterRecord,
    part: &[u32],
) -> Result<()> {
    std::fs::create_dir_all(folder).map_err(|e| Error::io(folder, e))?;
    let values: Vec<i32> = part.iter().map(|&p| p as i32).collect();
    npy::write(array, &values, &[values.len()])?;
    let text = serde_json::to_string_pretty(record).expect("a record serialises");
    graphloom_io::write_atomic(json, |w| std::io::Write::write_all(w, text.as_bytes()))?;
    Ok(())
}

/// The parts of the partitioned directory `root` (from `graphloom partition` of this dataset) as
/// clusters: the nodes of part `p` are the original ids in its `orig_ids.npy`.
pub fn partition_clusters(root: &Path, data: GraphData<'_>) -> Result<Clusters> {
    let meta = PartitionMeta::load(root)?;
    let n = data.num_nodes();
    let meta_path = PartitionMeta::path(root);
    if meta.dataset.num_nodes != n || meta.dataset.num_edges != data.num_edges() {
        return Err(Error::invalid(
            &meta_path,
            format!(
                "partitions a graph of {} nodes and {} edges, the dataset has {n} and {}",
                meta.dataset.num_nodes,
                meta.dataset.num_edges,
                data.num_edges()
            ),
        ));
    }
    let mut part = vec![u32::MAX; n];
    for p in 0..meta.parts {
        let path = root.join(format!("part_{p}")).join("orig_ids.npy");
        for v in npy::read_ids(&path)?.data {
            let slot = usize::try_from(v).ok().and_then(|v| part.get_mut(v));
            match slot {
                Some(slot) if *slot == u32::MAX => *slot = p as u32,
                _ => {
                    return Err(Error::invalid(
                        &path,
                        format!("node {v} is not a node of the dataset, or is in two parts"),
                    ))
                }
            }
        }
    }
    if let Some(v) = part.iter().position(|&p| p == u32::MAX) {
        return Err(Error::invalid(
            &meta_path,
            format!("node {v} is in no part"),
        ));
    }
    Ok(Clusters::from_assignment(&part, meta.parts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::random_dataset;

    #[test]
    fn clusters_are_kept_beside_the_dataset_and_recomputed_when_the_graph_changes() {
        let root = std::env::temp_dir().join(format!("graphloom-clusters-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let ds = random_dataset(400, 6, 2);
        ds.save(&root).unwrap();
        let (first, origin) = metis_clusters(Some(&root), ds.data(), 8).unwrap();
        assert!(matches!(origin, ClusterOrigin::Computed(_)), "{origin}");
        assert_eq!(first.count(), 8);
        let mut all: Vec<NodeId> = (0..8).flat_map(|c| first.members(c).to_vec()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..400).collect::<Vec<_>>());
        let (again, origin) = metis_clusters(Some(&root), ds.data(), 8).unwrap();
        assert!(matches!(origin, ClusterOrigin::Reused(_)), "{origin}");
        assert_eq!(again, first);
        // Another count is computed afresh; a changed graph does not reuse the old file.
        let (_, origin) = metis_clusters(Some(&root), ds.data(), 5).unwrap();
        assert!(matches!(origin, ClusterOrigin::Computed(_)), "{origin}");
        let other = random_dataset(400, 6, 3);
        let (_, origin) = metis_clusters(Some(&root), other.data(), 8).unwrap();
        assert!(matches!(origin, ClusterOrigin::Computed(_)), "{origin}");
        // A damaged array is recomputed, not trusted.
        std::fs::write(root.join(CLUSTERS_DIR).join("metis-8.npy"), b"junk").unwrap();
        let (_, origin) = metis_clusters(Some(&root), other.data(), 8).unwrap();
        assert!(matches!(origin, ClusterOrigin::Computed(_)), "{origin}");
        assert!(check_count(401, 400)
            .unwrap_err()
            .to_string()
            .contains("401 clusters"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn an_epoch_takes_every_cluster_once_in_groups() {
        let part: Vec<u32> = (0..100).map(|v| (v * 7 % 10) as u32).collect();
        let c = Clusters::from_assignment(&part, 10);
        let groups = c.epoch_groups(3, 1, 4);
        assert_eq!(
            groups.iter().map(Vec::len).collect::<Vec<_>>(),
            [3, 3, 3, 1]
        );
        let mut seen: Vec<usize> = groups.concat();
        seen.sort_unstable();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        assert_ne!(groups, c.epoch_groups(3, 1, 5));
        let nodes = c.batch_nodes(&groups[0]);
        assert_eq!(nodes.len(), 30);
        assert!(nodes.windows(2).all(|w| w[0] < w[1]));
        assert!(nodes
            .iter()
            .all(|&v| groups[0].contains(&(part[v as usize] as usize))));
    }
}
