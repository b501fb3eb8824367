//! A heterogeneous graph's arrays already in memory (a PyG `HeteroData`'s tensors, handed over
//! by the Python package without a copy) to a heterogeneous dataset directory
//! ([`HeteroDataset`]'s layout): each relation's CSR built by the streaming writer in bounded
//! passes over its edge index, each type's features copied a chunk of rows at a time, the
//! target type's labels and splits, all through a temporary directory renamed into place.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::arrays::{feature_len, write_features, EdgeIndex, FeatureRows};
use super::stream_csr::{write_csr_between, CsrOptions, Phase, Progress};
use graphloom_graph::format::dataset::{check_split_ids, count_classes, write_splits};
use graphloom_graph::format::hetero::{relation_name, HeteroMeta, NodeType};
use graphloom_graph::format::meta::HETERO_FORMAT;
use graphloom_graph::format::output_dir::{write_dir_atomic, OutputKind};
use graphloom_graph::{npy, Error, HeteroDataset, Result};

/// A node type's arrays.
pub struct NodeTypeArrays<'a> {
    /// The type's name (a folder name of the directory).
    pub name: &'a str,
    /// Nodes of the type, numbered `0..num_nodes`.
    pub num_nodes: usize,
    /// The type's features and their width, if it has any.
    pub features: Option<(FeatureRows<'a>, usize)>,
}

/// A relation's edges.
pub struct RelationArrays<'a> {
    /// `[src, rel, dst]`, PyG's edge type.
    pub relation: [&'a str; 3],
    /// PyG's `edge_index` of the relation: `[2, E]` in C order, ids of the source type in row
    /// 0 sending to ids of the destination type in row 1.
    pub edge_index: &'a [i64],
}

/// A heterogeneous graph and its target type's node data in memory.
pub struct HeteroArraysInput<'a> {
    /// The dataset's name.
    pub name: &'a str,
    /// The node types.
    pub node_types: Vec<NodeTypeArrays<'a>>,
    /// The relations, in the order `meta.json` lists them.
    pub relations: Vec<RelationArrays<'a>>,
    /// The type whose nodes carry labels and splits.
    pub target: &'a str,
    /// A class per node of the target type, -1 for a node without one.
    pub labels: &'a [i64],
    /// Train, validation and test ids of the target type.
    pub splits: [&'a [i64]; 3],
    /// What each split is called in errors (`train_mask`, ...).
    pub split_names: [&'a str; 3],
}

/// Fails unless `name` (a node type's or relation's) can be a folder name of the directory.
fn check_name(name: &str, what: &str) -> Result<()> {
    let bad = name.is_empty()
        || name.starts_with('.')
        || name.contains(['/', '\\', '\0'])
        || name.contains("__");
    if bad {
        return Err(Error::argument(
            "HeteroData",
            format!(
                "{what} {name:?} cannot name a folder of the dataset: names are non-empty, do \
                 not start with '.', and hold no '/', '\\' or '__'"
            ),
        ));
    }
    Ok(())
}

/// Ids of `values` as positions below `n`, naming `what` for the first that is not.
fn ids_below(values: &[i64], n: usize, what: &str) -> Result<Vec<usize>> {
    values
        .iter()
        .map(|&v| {
            usize::try_from(v)
                .ok()
                .filter(|&v| v < n)
                .ok_or_else(|| Error::invalid(what, format!("node {v} is not in 0..{n}")))
        })
        .collect()
}

/// The header `input` describes, checked: names, feature sizes, relation endpoints, labels.
fn header(input: &HeteroArraysInput<'_>) -> Result<HeteroMeta> {
    let mut node_types = BTreeMap::new();
    for t in &input.node_types {
        check_name(t.name, "node type")?;
        if let Some((rows, dim)) = t.features {
            let len = feature_len(rows);
            if Some(len) != t.num_nodes.checked_mul(dim) {
                return Err(Error::invalid(
                    format!("x of {}", t.name),
                    format!("{len} values for {} nodes of {dim} features", t.num_nodes),
                ));
            }
        }
        let entry = NodeType {
            num_nodes: t.num_nodes,
            feat_dim: t.features.map_or(0, |(_, d)| d),
            feat_dtype: match t.features {
                Some((FeatureRows::Bf16(_), _)) => "bf16".into(),
                _ => "f32".into(),
            },
        };
        if node_types.insert(t.name.to_string(), entry).is_some() {
            return Err(Error::argument(
                "HeteroData",
                format!("node type {:?} is given twice", t.name),
            ));
        }
    }
    for r in &input.relations {
        check_name(r.relation[1], "relation")?;
        if !r.edge_index.len().is_multiple_of(2) {
            return Err(Error::invalid(
                format!("edge_index of {}", r.relation.join("__")),
                "expected shape [2, E]",
            ));
        }
    }
    let target_nodes = node_types
        .get(input.target)
        .map(|t| t.num_nodes)
        .ok_or_else(|| {
            Error::argument(
                "HeteroData",
                format!(
                    "the target type {:?} is not among the node types",
                    input.target
                ),
            )
        })?;
    if input.labels.len() != target_nodes {
        return Err(Error::invalid(
            format!("y of {}", input.target),
            format!(
                "{} labels for the {target_nodes} nodes of {:?}",
                input.labels.len(),
                input.target
            ),
        ));
    }
    let meta = HeteroMeta {
        name: input.name.to_string(),
        format: HETERO_FORMAT.into(),
        node_types,
        edge_types: input
            .relations
            .iter()
            .map(|r| r.relation.map(str::to_string))
            .collect(),
        target_node_type: input.target.to_string(),
        num_classes: count_classes(input.labels, Path::new("y"))?,
        directed: true,
    };
    meta.check(Path::new("HeteroData"))?;
    Ok(meta)
}

/// Writes `input` into the heterogeneous dataset directory `dir` (through a temporary
/// directory renamed into place), holding at most `buffer_bytes` of edges at a time besides
/// per-node arrays; returns the written directory, opened and checked. Edges are kept as given
/// (duplicates and self-loops included).
pub fn write_hetero(
    input: &HeteroArraysInput<'_>,
    dir: &Path,
    buffer_bytes: usize,
    progress: Progress<'_>,
) -> Result<HeteroDataset> {
    let meta = header(input)?;
    let n_target = meta.num_nodes(input.target);
    let splits: Vec<Vec<usize>> = input
        .splits
        .iter()
        .zip(input.split_names)
        .map(|(ids, name)| ids_below(ids, n_target, name))
        .collect::<Result<_>>()?;
    let split_refs = [&splits[0][..], &splits[1][..], &splits[2][..]];
    check_split_ids(
        input.split_names.map(PathBuf::from),
        split_refs,
        input.labels,
    )?;
    let edges: u64 = input
        .relations
        .iter()
        .map(|r| r.edge_index.len() as u64 / 2)
        .sum();
    let per_type: u64 = input
        .node_types
        .iter()
        .map(|t| {
            8 * (t.num_nodes as u64 + 1) + 4 * (t.num_nodes * t.features.map_or(0, |f| f.1)) as u64
        })
        .sum();
    graphloom_graph::disk::check_free_space(dir, 12 * edges + per_type, "the dataset")?;
    let options = CsrOptions {
        simple: false,
        buffer_bytes,
    };
    write_dir_atomic(dir, OutputKind::Dataset, &[], |tmp| {
        let total = input.relations.len() as u64;
        for (i, r) in input.relations.iter().enumerate() {
            progress(Phase::Relations, i as u64, total);
            let relation = r.relation.map(str::to_string);
            let name = relation_name(&relation);
            let folder = tmp.join("edges").join(&name);
            std::fs::create_dir_all(&folder).map_err(|err| Error::io(&folder, err))?;
            let origin = PathBuf::from(format!("edge_index of {name}"));
            write_csr_between(
                &folder,
                meta.num_nodes(r.relation[0]),
                meta.num_nodes(r.relation[2]),
                &EdgeIndex(r.edge_index),
                &origin,
                &options,
                progress,
            )?;
        }
        progress(Phase::Relations, total, total);
        for t in &input.node_types {
            let folder = tmp.join("nodes").join(t.name);
            std::fs::create_dir_all(&folder).map_err(|err| Error::io(&folder, err))?;
            if let Some((rows, dim)) = t.features {
                write_features(
                    &folder.join("node_feat.npy"),
                    rows,
                    t.num_nodes,
                    dim,
                    progress,
                )?;
            }
        }
        let folder = tmp.join("nodes").join(input.target);
        npy::write(&folder.join("node_label.npy"), input.labels, &[n_target])?;
        write_splits(&folder, split_refs)?;
        meta.write(tmp)
    })?;
    HeteroDataset::open(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "graphloom-arrays-hetero-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// Papers (2, with features) cite papers; authors (3, featureless) write papers.
    fn input<'a>(cites: &'a [i64], writes: &'a [i64], x: &'a [f32]) -> HeteroArraysInput<'a> {
        HeteroArraysInput {
            name: "t",
            node_types: vec![
                NodeTypeArrays {
                    name: "paper",
                    num_nodes: 2,
                    features: Some((FeatureRows::F32(x), 2)),
                },
                NodeTypeArrays {
                    name: "author",
                    num_nodes: 3,
                    features: None,
                },
            ],
            relations: vec![
                RelationArrays {
                    relation: ["paper", "cites", "paper"],
                    edge_index: cites,
                },
                RelationArrays {
                    relation: ["author", "writes", "paper"],
                    edge_index: writes,
                },
            ],
            target: "paper",
            labels: &[1, 0],
            splits: [&[0], &[1], &[]],
            split_names: ["train_mask", "val_mask", "test_mask"],
        }
    }

    #[test]
    fn relations_are_written_by_destination_with_sources_of_their_type() {
        let dir = scratch("ok");
        // author 2 -> paper 0, author 0 -> paper 1, author 1 -> paper 0.
        let writes = [2, 0, 1, 0, 1, 0];
        let x = [1.0, 2.0, 3.0, 4.0];
        let ds = write_hetero(&input(&[1, 0], &writes, &x), &dir, 1 << 20, &|_, _, _| {}).unwrap();
        assert_eq!(ds.meta.node_types["author"].feat_dim, 0);
        assert_eq!(ds.meta.num_classes, 2);
        let graph = ds.load().unwrap();
        let writes = &graph.relations[1];
        assert_eq!(writes.name, "author__writes__paper");
        assert_eq!(writes.csr.row_ptr(), [0, 2, 3]);
        assert_eq!(writes.csr.col_idx(), [1, 2, 0]);
        // Paper 1 cites paper 0.
        assert_eq!(graph.relations[0].csr.row_ptr(), [0, 1, 1]);
        assert_eq!(graph.relations[0].csr.col_idx(), [1]);
        let paper = graph.type_index("paper").unwrap();
        let features = graph.features[paper].as_ref().unwrap().read().unwrap();
        assert_eq!(features.as_slice::<f32>().unwrap(), x);
        assert!(graph.features[graph.type_index("author").unwrap()].is_none());
        assert_eq!(graph.splits[0], vec![0]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn refused(input: &HeteroArraysInput, dir: &Path) -> Error {
        match write_hetero(input, dir, 1 << 20, &|_, _, _| {}) {
            Ok(_) => panic!("bad arrays were written"),
            Err(err) => err,
        }
    }

    #[test]
    fn bad_arrays_are_refused_naming_the_array_and_leave_nothing() {
        let dir = scratch("bad");
        let x = [0.0; 4];
        // Author 3 of 3.
        let err = write_hetero(&input(&[], &[3, 0], &x), &dir, 1 << 20, &|_, _, _| {})
            .err()
            .expect("an out-of-range source is refused")
            .to_string();
        assert!(err.contains("author__writes__paper"), "{err}");
        let mut bad = input(&[], &[], &x);
        bad.node_types[1].name = "a/b";
        let err = refused(&bad, &dir);
        assert!(err.to_string().contains("cannot name a folder"), "{err}");
        let mut bad = input(&[], &[], &x);
        bad.relations[1].relation[0] = "venue";
        let err = refused(&bad, &dir);
        assert!(err.to_string().contains("\"venue\""), "{err}");
        let mut bad = input(&[], &[], &x);
        bad.labels = &[0];
        let err = refused(&bad, &dir);
        assert!(
            err.to_string().contains("1 labels for the 2 nodes"),
            "{err}"
        );
        assert!(!dir.exists(), "nothing is left of a refused write");
    }
}
