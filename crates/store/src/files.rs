//! Rows stored in files: raw row-major `.bin` parts logically concatenated (WholeGraph's file
//! lists) or `.npy` arrays, read a range at a time so each rank reads only its own rows; and
//! the names of the per-rank part files that [`crate::StoreTensor::save`] writes.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use graphloom_io::npy::{self, NpyDType};
use graphloom_tensor::DType;

use crate::{Result, StoreError};

/// One file of a list: where its rows start and how many it holds.
#[derive(Clone, Debug)]
struct Source {
    path: PathBuf,
    data_offset: u64,
    rows: usize,
}

/// A list of files read as one table of rows.
#[derive(Clone, Debug)]
pub struct RowFiles {
    sources: Vec<Source>,
    row_bytes: usize,
}

/// The `.npy` element type that stores `dtype` (bf16 is stored as `<u2`).
pub fn npy_dtype(dtype: DType) -> NpyDType {
    match dtype {
        DType::F32 => NpyDType::F32,
        DType::F64 => NpyDType::F64,
        DType::BF16 => NpyDType::U16,
        DType::I32 => NpyDType::I32,
        DType::I64 => NpyDType::I64,
    }
}

impl RowFiles {
    /// Opens every file of the list (headers only) and checks that each holds whole rows of
    /// `row_elems` elements of `dtype`: a `.npy` file by its header, a raw file by its size.
    pub fn open(files: &[PathBuf], row_elems: usize, dtype: DType) -> Result<RowFiles> {
        if files.is_empty() {
            return Err(StoreError::Invalid("the file list is empty".into()));
        }
        let row_bytes = row_elems * dtype.size_in_bytes();
        let sources = files
            .iter()
            .map(|path| Self::source(path, row_elems, row_bytes, dtype))
            .collect::<Result<Vec<_>>>()?;
        Ok(RowFiles { sources, row_bytes })
    }

    fn source(path: &Path, row_elems: usize, row_bytes: usize, dtype: DType) -> Result<Source> {
        if path.extension().is_some_and(|e| e == "npy") {
            let header = npy::read_header(path)?;
            if header.dtype != npy_dtype(dtype) {
                return Err(StoreError::format(
                    path,
                    format!("holds {:?} elements, the tensor is {dtype}", header.dtype),
                ));
            }
            let width: usize = header.shape.iter().skip(1).product();
            if header.shape.is_empty() || width != row_elems {
                return Err(StoreError::format(
                    path,
                    format!(
                        "shape {:?} does not hold rows of {row_elems} elements",
                        header.shape
                    ),
                ));
            }
            return Ok(Source {
                path: path.to_path_buf(),
                data_offset: header.data_offset as u64,
                rows: header.shape[0],
            });
        }
        let len = std::fs::metadata(path)
            .map_err(|e| StoreError::io(path, e))?
            .len() as usize;
        if row_bytes == 0 || len % row_bytes != 0 {
            return Err(StoreError::format(
                path,
                format!(
                    "{len} bytes is not a whole number of rows of {row_bytes} bytes \
                     ({row_elems} x {dtype})"
                ),
            ));
        }
        Ok(Source {
            path: path.to_path_buf(),
            data_offset: 0,
            rows: len / row_bytes,
        })
    }

    /// The rows of all files together.
    pub fn rows(&self) -> usize {
        self.sources.iter().map(|s| s.rows).sum()
    }

    /// Reads rows `first..first + out.len() / row_bytes` of the concatenation into `out`,
    /// touching only the files that hold them.
    pub fn read_rows(&self, first: usize, out: &mut [u8]) -> Result<()> {
        let mut row = first;
        let mut done = 0;
        let mut file_start = 0;
        for source in &self.sources {
            let file_end = file_start + source.rows;
            if done < out.len() && row < file_end {
                let take = ((out.len() - done) / self.row_bytes).min(file_end - row);
                let bytes = take * self.row_bytes;
                let at = source.data_offset + ((row - file_start) * self.row_bytes) as u64;
                let file = File::open(&source.path).map_err(|e| StoreError::io(&source.path, e))?;
                file.read_exact_at(&mut out[done..done + bytes], at)
                    .map_err(|e| StoreError::io(&source.path, e))?;
                done += bytes;
                row += take;
            }
            file_start = file_end;
        }
        if done != out.len() {
            return Err(StoreError::Invalid(format!(
                "rows {first}..{} are past the end of the files ({} rows)",
                first + out.len() / self.row_bytes,
                self.rows()
            )));
        }
        Ok(())
    }

    /// Where the data of a single-file list starts, for mapping it in place.
    pub(crate) fn single(&self) -> Option<(&Path, u64)> {
        match self.sources.as_slice() {
            [only] => Some((&only.path, only.data_offset)),
            _ => None,
        }
    }
}

/// The name of part `index` of `parts`: `{prefix}_part_{index}_of_{parts}`.
pub fn part_path(prefix: &Path, index: usize, parts: usize) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(format!("_part_{index}_of_{parts}"));
    PathBuf::from(name)
}

/// The part files a job of `parts` ranks saved under `prefix`, in order.
pub fn part_paths(prefix: &Path, parts: usize) -> Vec<PathBuf> {
    (0..parts).map(|i| part_path(prefix, i, parts)).collect()
}
