//! [`StoreTensor`]: one logical 1-D or 2-D tensor whose rows are spread over the ranks of a job
//! by a [`Layout`] and held in a [`Location`]. Each job of it has a file: `create` (memory and
//! file maps), `files` (loading and saving), `gather` and `scatter`; this one holds the type,
//! its specification and its accessors.

mod create;
mod files;
mod gather;
mod scatter;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use graphloom_comm::{Communicator, CommunicatorExt, Handle};
use graphloom_tensor::{DType, Element};

use crate::layout::{Layout, Location, RowPartition};
use crate::memory::Region;
use crate::{Result, StoreError};

/// What a store tensor is: shape, element type, layout, location and row partition. Every
/// rank must pass the same spec; the constructor checks it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreSpec {
    /// `[rows]` or `[rows, columns]`.
    pub shape: Vec<usize>,
    /// The element type.
    pub dtype: DType,
    /// How the rows are split and addressed.
    pub layout: Layout,
    /// Which memory holds them.
    pub location: Location,
    /// Rows per rank, in rank order; `None` splits them evenly.
    pub rows_per_rank: Option<Vec<usize>>,
}

impl StoreSpec {
    /// A spec with an even row partition.
    pub fn new(shape: &[usize], dtype: DType, layout: Layout, location: Location) -> StoreSpec {
        StoreSpec {
            shape: shape.to_vec(),
            dtype,
            layout,
            location,
            rows_per_rank: None,
        }
    }

    /// The same spec with rank `r` owning `counts[r]` rows.
    pub fn with_rows_per_rank(mut self, counts: Vec<usize>) -> StoreSpec {
        self.rows_per_rank = Some(counts);
        self
    }

    fn describe(&self) -> String {
        format!(
            "shape {:?}, dtype {}, layout {}, location {}, rows per rank {}",
            self.shape,
            self.dtype,
            self.layout,
            self.location,
            match &self.rows_per_rank {
                Some(c) => format!("{c:?}"),
                None => "even".to_string(),
            }
        )
    }
}

/// Counters of a tensor's gathers, for benchmarks and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GatherStats {
    /// Gather calls.
    pub calls: u64,
    /// Rows gathered.
    pub rows: u64,
    /// Seconds spent in gathers.
    pub seconds: f64,
    /// Seconds of those spent exchanging ids and rows with other ranks.
    pub comm_seconds: f64,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    rows: AtomicU64,
    nanos: AtomicU64,
    comm_nanos: AtomicU64,
}

/// One logical tensor spread over the ranks of a job: this rank's view of it.
///
/// - [`StoreTensor::gather`] reads any rows; [`StoreTensor::scatter`] writes any rows.
/// - [`StoreTensor::local`] is this rank's own chunk, without a copy (also as DLPack).
/// - [`StoreTensor::from_files`] fills it from `.bin` or `.npy` files, each rank reading only
///   its rows; [`StoreTensor::save`] writes one file per rank.
///
/// Creation, scatter, save and every operation on the Distributed layout are collective: all
/// ranks call them, in the same order. Gathers from the Continuous and Chunked layouts read
/// memory directly and need no other rank.
pub struct StoreTensor {
    comm: Arc<dyn Communicator>,
    spec: StoreSpec,
    partition: RowPartition,
    row_bytes: usize,
    /// The chunk of every rank that this rank can address (only its own for Distributed).
    chunks: Vec<Option<Region>>,
    /// The whole tensor as one range, for the Continuous layout.
    pub(crate) whole: Option<Region>,
    writable: bool,
    counters: Counters,
}

impl std::fmt::Debug for StoreTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreTensor({})", self.spec.describe())
    }
}

/// Whether the ranks of `comm` share one address space; collective.
fn one_process(comm: &dyn Communicator) -> Result<bool> {
    let unit: Handle = Arc::new(());
    Ok(comm.share_handles(unit)?.is_some())
}
impl StoreTensor {
    /// Turns one rank's failure in a collective step into an error on every rank, so no rank
    /// continues with a half-done tensor.
    fn agree(&self, result: Result<()>) -> Result<()> {
        self.comm.agree(result)
    }

    /// The communicator the tensor lives on.
    pub fn comm(&self) -> &Arc<dyn Communicator> {
        &self.comm
    }

    /// The spec it was created with.
    pub fn spec(&self) -> &StoreSpec {
        &self.spec
    }

    /// The shape: `[rows]` or `[rows, columns]`.
    pub fn shape(&self) -> &[usize] {
        &self.spec.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.spec.dtype
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.partition.rows()
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Which rows each rank owns.
    pub fn partition(&self) -> &RowPartition {
        &self.partition
    }

    /// The rows this rank owns.
    pub fn local_rows(&self) -> std::ops::Range<usize> {
        self.partition.range(self.comm.rank())
    }

    /// Rank `rank`'s rows where this process maps them.
    pub(crate) fn chunk(&self, rank: usize) -> Option<&Region> {
        self.chunks.get(rank).and_then(Option::as_ref)
    }

    pub(crate) fn own_chunk(&self) -> &Region {
        self.chunks[self.comm.rank()]
            .as_ref()
            .expect("every rank maps its own chunk")
    }

    /// This rank's rows as bytes, without a copy.
    pub fn local_bytes(&self) -> &[u8] {
        let chunk = self.own_chunk();
        // SAFETY: the region is `len` readable bytes kept alive by `self`; other ranks write
        // these rows only inside collective scatters, which this borrow cannot overlap.
        unsafe { std::slice::from_raw_parts(chunk.ptr(), chunk.len()) }
    }

    /// Every row as bytes, without a copy, for the Continuous layout (every rank addresses the
    /// whole tensor); `None` for the others.
    pub fn whole_bytes(&self) -> Option<&[u8]> {
        let whole = self.whole.as_ref()?;
        // SAFETY: as in `local_bytes`: the region is `len` readable bytes kept alive by `self`.
        Some(unsafe { std::slice::from_raw_parts(whole.ptr(), whole.len()) })
    }

    /// This rank's rows as mutable bytes, without a copy; fails for a read-only file map.
    pub fn local_bytes_mut(&mut self) -> Result<&mut [u8]> {
        self.check_writable("local_bytes_mut")?;
        let chunk = self.own_chunk();
        // SAFETY: as in `local_bytes`, and `&mut self` excludes other borrows on this rank.
        Ok(unsafe { std::slice::from_raw_parts_mut(chunk.ptr(), chunk.len()) })
    }

    /// This rank's rows as elements of `T` (which must be the tensor's dtype).
    pub fn local<T: Element>(&self) -> Result<&[T]> {
        self.check_element::<T>()?;
        let bytes = self.local_bytes();
        // SAFETY: the dtype matches, and chunks start at a multiple of the row size from a
        // page-aligned (or .npy 64-byte aligned) base, so the pointer is aligned for T.
        Ok(unsafe {
            std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len() / size_of::<T>())
        })
    }

    /// This rank's rows as mutable elements of `T`.
    pub fn local_mut<T: Element>(&mut self) -> Result<&mut [T]> {
        self.check_element::<T>()?;
        let bytes = self.local_bytes_mut()?;
        // SAFETY: as in `local`.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(
                bytes.as_mut_ptr().cast::<T>(),
                bytes.len() / size_of::<T>(),
            )
        })
    }

    fn check_element<T: Element>(&self) -> Result<()> {
        if T::DTYPE != self.spec.dtype {
            return Err(StoreError::Invalid(format!(
                "the tensor holds {}, not {}",
                self.spec.dtype,
                T::DTYPE
            )));
        }
        let ptr = self.own_chunk().ptr() as usize;
        if ptr % align_of::<T>() != 0 {
            return Err(StoreError::Invalid(format!(
                "the local chunk is not aligned for {}",
                T::DTYPE
            )));
        }
        Ok(())
    }

    /// Whether scatters may write (false for a read-only file map).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    fn check_writable(&self, op: &str) -> Result<()> {
        if !self.writable {
            return Err(StoreError::Invalid(format!(
                "{op}: the tensor is a read-only map of {}",
                self.spec.location
            )));
        }
        Ok(())
    }

    /// Fails with [`StoreError::OutOfRange`] naming the first id outside the tensor.
    pub(crate) fn check_ids(&self, op: &'static str, ids: &[i64]) -> Result<()> {
        let rows = self.rows();
        match ids.iter().find(|&&id| id < 0 || id as usize >= rows) {
            Some(&id) => Err(StoreError::OutOfRange { op, id, rows }),
            None => Ok(()),
        }
    }

    /// Waits for every rank.
    pub fn barrier(&self) -> Result<()> {
        Ok(self.comm.barrier()?)
    }
}
