//! Filling a store tensor from files (each rank reads its own rows) and saving one file per rank.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use graphloom_comm::Communicator;
use graphloom_tensor::DType;

use super::{StoreSpec, StoreTensor};
use crate::files::{part_path, RowFiles};
use crate::layout::{Layout, Location};
use crate::{Result, StoreError};

impl StoreTensor {
    /// Creates a tensor and fills it from a list of files: raw row-major `.bin` parts, logically
    /// concatenated, or `.npy` arrays. The number of rows is the files' total; each rank reads
    /// only its own rows. `row_shape` is `[]` for a 1-D tensor or `[columns]`.
    pub fn from_files(
        comm: Arc<dyn Communicator>,
        files: &[PathBuf],
        row_shape: &[usize],
        dtype: DType,
        layout: Layout,
        location: Location,
    ) -> Result<StoreTensor> {
        let row_elems = row_shape.iter().product();
        let files = RowFiles::open(files, row_elems, dtype)?;
        let mut shape = vec![files.rows()];
        shape.extend_from_slice(row_shape);
        let mut tensor = StoreTensor::new(comm, StoreSpec::new(&shape, dtype, layout, location))?;
        tensor.fill_from(&files)?;
        Ok(tensor)
    }

    /// Reads this rank's rows from `files`, then waits for every rank.
    pub fn fill_from(&mut self, files: &RowFiles) -> Result<()> {
        if files.rows() != self.rows() {
            return Err(StoreError::Invalid(format!(
                "the files hold {} rows, the tensor has {}",
                files.rows(),
                self.rows()
            )));
        }
        let first = self.local_rows().start;
        let result = files.read_rows(first, self.local_bytes_mut()?);
        self.agree(result)
    }

    /// Copies this rank's rows out of `all`, the bytes of the whole table (every rank holds a
    /// copy), then waits for every rank. Collective.
    pub fn fill_from_whole(&mut self, all: &[u8]) -> Result<()> {
        let expected = self.rows() * self.row_bytes;
        let result = if all.len() != expected {
            Err(StoreError::Invalid(format!(
                "fill_from_whole: {} bytes for a table of {expected}",
                all.len()
            )))
        } else {
            let range = self.local_rows();
            let row_bytes = self.row_bytes;
            self.local_bytes_mut().map(|local| {
                local.copy_from_slice(&all[range.start * row_bytes..range.end * row_bytes])
            })
        };
        self.agree(result)
    }

    /// Writes this rank's rows to `{prefix}_part_{rank}_of_{ranks}` (through a temporary file
    /// renamed into place) and returns the path. Collective: returns once every rank's part is
    /// written. [`crate::part_paths`] lists the parts for [`StoreTensor::from_files`], at any
    /// world size.
    pub fn save(&self, prefix: &Path) -> Result<PathBuf> {
        let path = part_path(prefix, self.comm.rank(), self.comm.size());
        let bytes = self.local_bytes();
        let result = graphloom_io::write_atomic(&path, |w| std::io::Write::write_all(w, bytes))
            .map_err(StoreError::from);
        self.agree(result)?;
        Ok(path)
    }
}
