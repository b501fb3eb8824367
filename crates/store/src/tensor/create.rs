//! Creating a store tensor: private or shared memory, or a file map, as its spec says.

use std::path::Path;
use std::sync::Arc;

use graphloom_comm::{Communicator, CommunicatorExt};

use super::{one_process, Counters, StoreSpec, StoreTensor};
use crate::files::RowFiles;
use crate::layout::{check_support, Layout, Location, RowPartition, Topology};
use crate::memory::{self, Region};
use crate::{Result, StoreError};

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
        let row_bytes = row_elems
            .checked_mul(spec.dtype.size_in_bytes())
            .filter(|&b| {
                rows.checked_mul(b)
                    .is_some_and(|t| t <= isize::MAX as usize)
            })
            .ok_or_else(|| {
                StoreError::Invalid(format!(
                    "shape {:?} of {} is too large to address",
                    spec.shape, spec.dtype
                ))
            })?;
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
}

/// Creates a zero-filled file of `len` bytes (sparse where the file system allows), through a
/// temporary name so a crash leaves no file of the wrong size under the final name.
fn create_zero_file(path: &Path, len: u64) -> Result<()> {
    graphloom_io::write_atomic(path, |w| w.get_ref().set_len(len))?;
    Ok(())
}
