//! A mapped dataset's node features as a store table: the one place that lays out
//! `node_feat.npy` in the store, for training, inference, benchmarks and the Python package.

use std::path::PathBuf;
use std::sync::Arc;

use graphloom_comm::Communicator;
use graphloom_store::{Layout, Location, StoreSpec, StoreTensor};
use graphloom_tensor::DType;

use crate::format::mapped::MappedDataset;
use crate::{Error, Result};

/// Where a dataset's features are kept while a run reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeaturesLocation {
    /// Copied into the private memory of each process.
    Host,
    /// Copied into memory shared by the processes of one machine.
    Shared,
    /// `node_feat.npy` mapped read-only from disk, for features larger than memory.
    Mmap,
}

impl FeaturesLocation {
    /// Every location, in the order front ends list them.
    pub const ALL: &'static [FeaturesLocation] = &[
        FeaturesLocation::Host,
        FeaturesLocation::Shared,
        FeaturesLocation::Mmap,
    ];

    /// The location's name, as front ends spell it.
    pub fn name(self) -> &'static str {
        match self {
            FeaturesLocation::Host => "host",
            FeaturesLocation::Shared => "shared",
            FeaturesLocation::Mmap => "mmap",
        }
    }

    /// The location named `name`.
    pub fn from_name(name: &str) -> Option<FeaturesLocation> {
        FeaturesLocation::ALL
            .iter()
            .copied()
            .find(|l| l.name() == name)
    }
}

impl MappedDataset {
    /// The features' dtype, from `meta.json`.
    pub fn feature_dtype(&self) -> Result<DType> {
        DType::parse(&self.meta.feat_dtype).ok_or_else(|| {
            Error::invalid(
                self.dir().join("meta.json"),
                format!("has an unknown feature dtype '{}'", self.meta.feat_dtype),
            )
        })
    }

    /// The features as a store table over the ranks of `comm`, in `layout`, at `location`:
    /// `node_feat.npy` mapped in place, or each rank's rows copied from it into memory (in the
    /// file's dtype). Collective.
    pub fn feature_table(
        &self,
        comm: Arc<dyn Communicator>,
        layout: Layout,
        location: FeaturesLocation,
    ) -> Result<StoreTensor> {
        let shape = [self.meta.num_nodes, self.meta.feat_dim];
        npy_feature_table(
            self.features_path(),
            shape,
            self.feature_dtype()?,
            comm,
            layout,
            location,
        )
    }
}

/// The `[rows, width]` features of `dtype` in the `.npy` file at `path` as a store table over
/// the ranks of `comm`, in `layout`, at `location`: the file mapped in place, or each rank's
/// rows copied from it into memory (in the file's dtype). Collective.
pub(crate) fn npy_feature_table(
    path: PathBuf,
    shape: [usize; 2],
    dtype: DType,
    comm: Arc<dyn Communicator>,
    layout: Layout,
    location: FeaturesLocation,
) -> Result<StoreTensor> {
    Ok(match location {
        FeaturesLocation::Mmap => {
            let location = Location::Mmap {
                path,
                writable: false,
            };
            StoreTensor::new(comm, StoreSpec::new(&shape, dtype, layout, location))?
        }
        FeaturesLocation::Host | FeaturesLocation::Shared => {
            let location = if location == FeaturesLocation::Host {
                Location::Host
            } else {
                Location::SharedHost
            };
            let table = StoreTensor::from_files(
                comm,
                std::slice::from_ref(&path),
                &shape[1..],
                dtype,
                layout,
                location,
            )?;
            if table.rows() != shape[0] {
                return Err(Error::invalid(
                    path,
                    format!(
                        "holds {} rows, meta.json says {} nodes",
                        table.rows(),
                        shape[0]
                    ),
                ));
            }
            table
        }
    })
}
