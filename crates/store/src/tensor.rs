//! [`StoreTensor`]: one logical 1-D or 2-D tensor whose rows are spread over the ranks of a job
//! by a [`Layout`] and held in a [`Location`].

use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use graphloom_comm::{Communicator, CommunicatorExt, Handle};
use graphloom_tensor::{DType, Element, Tensor};

use crate::copy::{as_uninit, copy_rows, gather_rows, gathered, SendPtr};
use crate::files::{part_path, RowFiles};
use crate::layout::{check_support, Layout, Location, RowPartition, Topology};
use crate::memory::{self, Region};
use crate::routing::Buckets;
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
    whole: Option<Region>,
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
    /// Creates a zero-filled tensor (or maps an existing file for [`Location::Mmap`]).
    /// Collective; fails on every rank when the ranks passed different specs, and with
    /// [`StoreError::Unsupported`] when the layout cannot live in that location on this job.
    pub fn new(comm: Arc<dyn Communicator>, spec: StoreSpec) -> Result<StoreTensor> {
        comm.check_same("StoreTensor::new", &spec.describe())?;
        if spec.shape.is_empty() || spec.shape.len() > 2 {
            return Err(StoreError::Invalid(format!(
                "a store tensor is 1-D or 2-D, not shape {:?}",
                spec.shape
            )));
        }
        let rows = spec.shape[0];
        let partition = match &spec.rows_per_rank {
            None => RowPartition::even(rows, comm.size()),
            Some(counts) => {
                if counts.len() != comm.size() || counts.iter().sum::<usize>() != rows {
                    return Err(StoreError::Invalid(format!(
                        "rows per rank {counts:?} must have one count for each of {} ranks \
                         and sum to {rows} rows",
                        comm.size()
                    )));
                }
                RowPartition::from_counts(counts)
            }
        };
        let row_elems = spec.shape.get(1).copied().unwrap_or(1);
        let row_bytes = row_elems * spec.dtype.size_in_bytes();
        let node = comm.node()?;
        let topology = Topology {
            ranks: comm.size(),
            ranks_on_node: node.size(),
            one_process: one_process(comm.as_ref())?,
        };
        check_support(spec.layout, &spec.location, topology)?;
        let mut tensor = StoreTensor {
            chunks: vec![None; comm.size()],
            whole: None,
            writable: true,
            comm,
            spec,
            partition,
            row_bytes,
            counters: Counters::default(),
        };
        match tensor.spec.location.clone() {
            Location::Mmap { path, writable } => tensor.map_file(&path, writable)?,
            Location::Host | Location::SharedHost if topology.one_process => {
                tensor.allocate_in_process()?
            }
            Location::SharedHost => tensor.allocate_shared(node.as_ref())?,
            Location::Host => {
                // Distributed only (check_support refused the rest): a private chunk.
                let me = tensor.comm.rank();
                tensor.chunks[me] = Some(memory::host(tensor.chunk_bytes(me))?);
            }
        }
        Ok(tensor)
    }

    fn chunk_bytes(&self, rank: usize) -> usize {
        self.partition.range(rank).len() * self.row_bytes
    }

    fn total_bytes(&self) -> usize {
        self.partition.rows() * self.row_bytes
    }

    /// Slices `whole` into every rank's chunk.
    fn set_whole(&mut self, whole: Region) {
        for r in 0..self.comm.size() {
            let range = self.partition.range(r);
            self.chunks[r] = Some(whole.slice(range.start * self.row_bytes, self.chunk_bytes(r)));
        }
        self.whole = Some(whole);
    }

    /// Host memory when every rank lives in this process: one allocation for Continuous, one
    /// per rank (allocated by its owner, so its pages are local to it) for the others.
    fn allocate_in_process(&mut self) -> Result<()> {
        let me = self.comm.rank();
        let mine = match self.spec.layout {
            Layout::Continuous if me == 0 => memory::host(self.total_bytes())?,
            Layout::Continuous => memory::host(0)?,
            _ => memory::host(self.chunk_bytes(me))?,
        };
        let all = self
            .comm
            .share_handles(mine.owner())?
            .expect("the ranks share one process");
        match self.spec.layout {
            Layout::Continuous => self.set_whole(Region::from_owner(all[0].clone())?),
            Layout::Chunked => {
                for (r, owner) in all.into_iter().enumerate() {
                    self.chunks[r] = Some(Region::from_owner(owner)?.slice(0, self.chunk_bytes(r)));
                }
            }
            Layout::Distributed => self.chunks[me] = Some(mine),
        }
        Ok(())
    }

    /// Shared memory between processes: memory files opened by the other processes of the
    /// machine through `/proc`, so no name ever appears in `/dev/shm`.
    fn allocate_shared(&mut self, node: &dyn Communicator) -> Result<()> {
        let me = self.comm.rank();
        match self.spec.layout {
            Layout::Continuous => {
                // check_support put every rank on this node, so node rank 0 is world rank 0.
                let created = if me == 0 {
                    Some(memory::shared(self.total_bytes())?)
                } else {
                    None
                };
                let path = created.as_ref().map(|(_, p)| p.clone()).unwrap_or_default();
                let path =
                    String::from_utf8_lossy(&node.broadcast(0, path.into_bytes())?).into_owned();
                let whole = match created {
                    Some((region, _)) => region,
                    None => memory::open_shared(&path, self.total_bytes())?,
                };
                // The creator keeps its descriptor open until everyone has mapped the file.
                node.barrier()?;
                self.set_whole(whole);
            }
            Layout::Chunked => {
                let (mine, path) = memory::shared(self.chunk_bytes(me))?;
                let paths = node.all_gather_v(path.as_bytes())?;
                for (r, p) in paths.iter().enumerate() {
                    self.chunks[r] = Some(if r == me {
                        mine.clone()
                    } else {
                        memory::open_shared(&String::from_utf8_lossy(p), self.chunk_bytes(r))?
                    });
                }
                node.barrier()?;
            }
            Layout::Distributed => {
                self.chunks[me] = Some(memory::shared(self.chunk_bytes(me))?.0);
            }
        }
        Ok(())
    }

    /// Maps the backing file: the whole of it for Continuous and Chunked, this rank's rows for
    /// Distributed. A missing writable file is created (zero-filled) by rank 0.
    fn map_file(&mut self, path: &Path, writable: bool) -> Result<()> {
        self.writable = writable;
        let row_elems = self.spec.shape.get(1).copied().unwrap_or(1);
        let exists = path.exists();
        let created = if !exists && writable && self.comm.rank() == 0 {
            create_zero_file(path, self.total_bytes() as u64)
        } else {
            Ok(())
        };
        // Every rank learns whether rank 0 managed before anyone opens the file.
        let ok = self.comm.broadcast_typed(0, &[u8::from(created.is_ok())])?;
        created?;
        if ok[0] == 0 {
            return Err(StoreError::Invalid(format!(
                "rank 0 could not create {}",
                path.display()
            )));
        }
        if !exists && !writable {
            return Err(StoreError::io(
                path,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file (read-only map)"),
            ));
        }
        let files = RowFiles::open(&[path.to_path_buf()], row_elems, self.spec.dtype)?;
        if files.rows() != self.partition.rows() {
            return Err(StoreError::format(
                path,
                format!(
                    "holds {} rows, the tensor has {}",
                    files.rows(),
                    self.partition.rows()
                ),
            ));
        }
        let (_, data_offset) = files.single().expect("one file");
        match self.spec.layout {
            Layout::Continuous | Layout::Chunked => {
                let whole = memory::map_file(path, data_offset, self.total_bytes(), writable)?;
                self.set_whole(whole);
            }
            Layout::Distributed => {
                let me = self.comm.rank();
                let start = self.partition.range(me).start * self.row_bytes;
                self.chunks[me] = Some(memory::map_file(
                    path,
                    data_offset + start as u64,
                    self.chunk_bytes(me),
                    writable,
                )?);
            }
        }
        Ok(())
    }

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

    /// Turns one rank's failure in a collective step into an error on every rank, so no rank
    /// continues with a half-done tensor.
    fn agree(&self, result: Result<()>) -> Result<()> {
        agree(self.comm.as_ref(), result)
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

    /// Gathers rows `ids` (any order, repeats allowed) into a new `[ids.len(), columns]` tensor
    /// (`[ids.len()]` for a 1-D tensor). Collective for the Distributed layout.
    pub fn gather(&self, ids: &[i64]) -> Result<Tensor> {
        let mut shape = self.spec.shape.clone();
        shape[0] = ids.len();
        // SAFETY: a successful gather writes every row of the output.
        unsafe { Tensor::from_fill(&shape, self.spec.dtype, |out| self.gather_uninit(ids, out)) }
    }

    /// Gathers rows `ids` into `out`, which must hold exactly `ids.len()` rows.
    pub fn gather_into(&self, ids: &[i64], out: &mut [u8]) -> Result<()> {
        self.gather_uninit(ids, as_uninit(out))
    }

    /// Gathers rows `ids` into possibly-uninitialised `out`; on success every byte is written.
    fn gather_uninit(&self, ids: &[i64], out: &mut [MaybeUninit<u8>]) -> Result<()> {
        let start = Instant::now();
        if out.len() != ids.len() * self.row_bytes {
            return Err(StoreError::Invalid(format!(
                "gather: the output holds {} bytes, {} rows need {}",
                out.len(),
                ids.len(),
                ids.len() * self.row_bytes
            )));
        }
        self.check_ids("gather", ids)?;
        match self.spec.layout {
            Layout::Continuous => {
                let base = SendPtr(self.whole.as_ref().expect("continuous").ptr());
                let rb = self.row_bytes;
                // SAFETY: ids are in range, so each source row lies inside the whole region.
                unsafe { gather_rows(out, rb, |i| base.get().add(ids[i] as usize * rb)) };
            }
            Layout::Chunked => {
                let rb = self.row_bytes;
                // Each chunk's base moved back by its first row, so a row's address is one
                // multiply-add from its owner's entry.
                let bases: Vec<SendPtr> = self
                    .chunks
                    .iter()
                    .enumerate()
                    .map(|(r, c)| {
                        let chunk = c.as_ref().expect("chunked maps every chunk");
                        let first = self.partition.range(r).start * rb;
                        SendPtr(chunk.ptr().wrapping_sub(first))
                    })
                    .collect();
                let partition = &self.partition;
                // SAFETY: ids are in range; each row lies inside its owner's chunk, where the
                // moved-back base plus the row's offset points.
                unsafe {
                    gather_rows(out, rb, |i| {
                        let row = ids[i] as usize;
                        bases[partition.owner(row)].get().wrapping_add(row * rb)
                    })
                };
            }
            Layout::Distributed => self.gather_distributed(ids, out)?,
        }
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        self.counters
            .rows
            .fetch_add(ids.len() as u64, Ordering::Relaxed);
        self.counters
            .nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Distributed gather: rows this rank owns are copied directly; for the others, each
    /// owner gets the ids it holds, reads them, sends the rows back, and they are put in the
    /// caller's order.
    fn gather_distributed(&self, ids: &[i64], out: &mut [MaybeUninit<u8>]) -> Result<()> {
        let me = self.comm.rank();
        let rb = self.row_bytes;
        let buckets = Buckets::by_owner(&self.partition, ids);
        let dst = SendPtr(out.as_mut_ptr().cast());
        let own = buckets.of(me);
        let chunk = SendPtr(self.own_chunk().ptr());
        let first = self.local_rows().start;
        // SAFETY: positions are distinct rows of `out`; the ids are this rank's rows.
        unsafe {
            copy_rows(
                own.len(),
                rb,
                |k| dst.get().add(own[k] * rb),
                |k| chunk.get().add((ids[own[k]] as usize - first) * rb),
            )
        };
        let mut requests = buckets.collect(|p| ids[p]);
        requests[me].clear();
        let comm_start = Instant::now();
        let incoming = self.comm.all_to_all_typed(&requests)?;
        let mut comm_nanos = comm_start.elapsed().as_nanos() as u64;
        let mine = self.local_rows();
        for (src, wanted) in incoming.iter().enumerate() {
            if let Some(&bad) = wanted.iter().find(|&&id| !mine.contains(&(id as usize))) {
                return Err(StoreError::Invalid(format!(
                    "rank {src} asked rank {me} for row {bad}, which it does not own: the \
                     ranks disagree about the partition"
                )));
            }
        }
        let replies = incoming
            .iter()
            .map(|wanted| {
                // SAFETY: every wanted id is this rank's (checked above).
                unsafe {
                    gathered(wanted.len(), rb, |i| {
                        chunk.get().add((wanted[i] as usize - first) * rb)
                    })
                }
            })
            .collect();
        let comm_start = Instant::now();
        let rows = self.comm.all_to_all_v(replies)?;
        comm_nanos += comm_start.elapsed().as_nanos() as u64;
        self.counters
            .comm_nanos
            .fetch_add(comm_nanos, Ordering::Relaxed);
        for (owner, reply) in rows.into_iter().enumerate() {
            if owner == me {
                continue;
            }
            let positions = buckets.of(owner);
            if reply.len() != positions.len() * rb {
                return Err(StoreError::Invalid(format!(
                    "rank {owner} sent {} bytes for {} rows",
                    reply.len(),
                    positions.len()
                )));
            }
            let src = SendPtr(reply.as_ptr() as *mut u8);
            // SAFETY: positions are distinct rows of `out`; the reply holds their rows in order.
            unsafe {
                copy_rows(
                    positions.len(),
                    rb,
                    |k| dst.get().add(positions[k] * rb),
                    |k| src.get().add(k * rb),
                )
            };
            graphloom_tensor::alloc::recycle(reply);
        }
        Ok(())
    }

    /// Writes `rows` (a tensor of this dtype with `ids.len()` rows) to rows `ids`. When an id
    /// repeats, its last occurrence wins. Collective: every rank calls it (with its own ids,
    /// possibly none), and when it returns every rank's writes are visible to every rank.
    /// Ranks must not write the same row in one call.
    pub fn scatter(&self, ids: &[i64], rows: &Tensor) -> Result<()> {
        let mut shape = self.spec.shape.clone();
        shape[0] = ids.len();
        if rows.shape() != shape.as_slice() || rows.dtype() != self.spec.dtype {
            return Err(StoreError::Invalid(format!(
                "scatter: rows are {} {:?}, {} ids need {} {:?}",
                rows.dtype(),
                rows.shape(),
                ids.len(),
                self.spec.dtype,
                shape
            )));
        }
        self.scatter_bytes(ids, rows.as_bytes())
    }

    /// [`StoreTensor::scatter`] from raw row bytes.
    pub fn scatter_bytes(&self, ids: &[i64], rows: &[u8]) -> Result<()> {
        if rows.len() != ids.len() * self.row_bytes {
            return Err(StoreError::Invalid(format!(
                "scatter: {} bytes of rows for {} ids of {} bytes",
                rows.len(),
                ids.len(),
                self.row_bytes
            )));
        }
        let checked = self
            .check_writable("scatter")
            .and_then(|_| self.check_ids("scatter", ids));
        self.agree(checked)?;
        let (ids, rows) = last_occurrences(ids, rows, self.row_bytes);
        match self.spec.layout {
            Layout::Continuous | Layout::Chunked => {
                self.write_rows(&ids, &rows, true);
                self.comm.barrier()?;
            }
            Layout::Distributed => {
                let buckets = Buckets::by_owner(&self.partition, &ids);
                let rb = self.row_bytes;
                let id_sends = buckets.collect(|p| ids[p]);
                let row_sends = buckets
                    .collect(|p| &rows[p * rb..(p + 1) * rb])
                    .into_iter()
                    .map(|parts| parts.concat())
                    .collect();
                let in_ids = self.comm.all_to_all_typed(&id_sends)?;
                let in_rows = self.comm.all_to_all_v(row_sends)?;
                // Rank order, then each rank's order: the same for any layout of the writers.
                let ids: Vec<i64> = in_ids.concat();
                let rows: Vec<u8> = in_rows.concat();
                let (ids, rows) = last_occurrences(&ids, &rows, rb);
                self.write_rows(&ids, &rows, false);
            }
        }
        Ok(())
    }

    /// Writes distinct rows through this rank's addressable chunks.
    fn write_rows(&self, ids: &[i64], rows: &[u8], any_chunk: bool) {
        let rb = self.row_bytes;
        let partition = &self.partition;
        let me = self.comm.rank();
        let bases: Vec<Option<SendPtr>> = self
            .chunks
            .iter()
            .map(|c| c.as_ref().map(|c| SendPtr(c.ptr())))
            .collect();
        // SAFETY: ids are distinct (last_occurrences) and in range; every row lies in its
        // owner's chunk, which this rank maps (all chunks for Continuous and Chunked, its own
        // for Distributed, where the ids were routed to their owner).
        let src = SendPtr(rows.as_ptr() as *mut u8);
        unsafe {
            copy_rows(
                ids.len(),
                rb,
                |i| {
                    let row = ids[i] as usize;
                    let owner = partition.owner(row);
                    debug_assert!(any_chunk || owner == me);
                    let base = bases[owner].expect("the owner's chunk is mapped");
                    base.get().add((row - partition.range(owner).start) * rb)
                },
                |i| src.get().add(i * rb),
            )
        };
    }

    /// Waits for every rank.
    pub fn barrier(&self) -> Result<()> {
        Ok(self.comm.barrier()?)
    }

    /// Gather counters since creation.
    pub fn stats(&self) -> GatherStats {
        let c = &self.counters;
        GatherStats {
            calls: c.calls.load(Ordering::Relaxed),
            rows: c.rows.load(Ordering::Relaxed),
            seconds: c.nanos.load(Ordering::Relaxed) as f64 * 1e-9,
            comm_seconds: c.comm_nanos.load(Ordering::Relaxed) as f64 * 1e-9,
        }
    }
}

/// Turns one rank's failure in a collective step into an error on every rank: the failing rank
/// returns its own error, the others an error naming it.
pub(crate) fn agree(comm: &dyn Communicator, result: Result<()>) -> Result<()> {
    let ok = comm.all_gather_one(u8::from(result.is_ok()))?;
    result?;
    if let Some(bad) = ok.iter().position(|&o| o == 0) {
        return Err(StoreError::Invalid(format!("rank {bad} failed this step")));
    }
    Ok(())
}

/// Keeps the last occurrence of each id and its row, sorted by id.
fn last_occurrences(ids: &[i64], rows: &[u8], row_bytes: usize) -> (Vec<i64>, Vec<u8>) {
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_unstable_by_key(|&p| (ids[p], std::cmp::Reverse(p)));
    order.dedup_by_key(|p| ids[*p]);
    let mut out_rows = Vec::with_capacity(order.len() * row_bytes);
    for &p in &order {
        out_rows.extend_from_slice(&rows[p * row_bytes..(p + 1) * row_bytes]);
    }
    (order.iter().map(|&p| ids[p]).collect(), out_rows)
}

/// Creates a zero-filled file of `len` bytes (sparse where the file system allows), through a
/// temporary name so a crash leaves no file of the wrong size under the final name.
fn create_zero_file(path: &Path, len: u64) -> Result<()> {
    graphloom_io::write_atomic(path, |w| w.get_ref().set_len(len))?;
    Ok(())
}
