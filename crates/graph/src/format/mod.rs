//! The dataset directory format: what GraphLoom reads and writes on disk, in one place.
//!
//! - [`meta`]: `meta.json` ([`Meta`]) and `partition.json` ([`PartitionMeta`]), and the names
//!   of a directory's entries. The lowest file: it uses no other.
//! - [`output_dir`]: the rules of where a writer may write (never over anything of the
//!   user's) and the atomic write of a directory ([`swap`] exchanges it into place).
//! - [`dataset`]: a dataset directory read whole into memory ([`Dataset`]), with every
//!   consistency check, and its writer; the checks converters apply to what they write.
//! - [`edge_features`]: `edge_feat.npy`, a feature row per edge, and the gather of a batch's
//!   rows by edge id.
//! - [`mapped`]: the same directory mapped in place ([`MappedDataset`], [`GraphData`]).
//! - [`parts`]: a partitioned directory and one worker's part of it.
//! - [`hetero`]: a heterogeneous dataset directory (node and edge types), opened and checked.
//! - [`link_split`]: the link-prediction split kept beside a dataset.
//! - [`summary`]: what `graphloom info` prints, read without loading the arrays.
//! - [`layouts`]: recognising the raw layouts datasets are published in, to say which
//!   converter a folder needs.
//! - [`disk`]: free space and file systems of the folders written.
//!
//! The file order, lowest first: `layouts`, `swap`, `disk` → `meta` → `output_dir` →
//! `edge_features` → `dataset` → `mapped` → `link_split`, `parts`, `hetero`, `summary`. Graph algorithms (`sample`,
//! `subgraph`, `partition`) use the format; of them only `partition`'s [`Partition`] (written
//! by [`parts::write_parts`]) and `sample`'s `CsrSource` (what [`GraphData`] hands samplers)
//! are used by it, and neither uses the format back.
//!
//! [`Meta`]: meta::Meta
//! [`PartitionMeta`]: meta::PartitionMeta
//! [`Dataset`]: dataset::Dataset
//! [`MappedDataset`]: mapped::MappedDataset
//! [`GraphData`]: mapped::GraphData
//! [`Partition`]: crate::partition::Partition

pub mod dataset;
pub mod disk;
pub mod edge_features;
pub mod hetero;
pub mod layouts;
pub mod link_split;
pub mod mapped;
pub mod meta;
pub mod output_dir;
pub mod parts;
pub mod summary;
pub mod swap;
pub mod targets;
