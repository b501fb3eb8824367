//! The memory behind a store tensor's rows: private anonymous maps, memory files shared between
//! the processes of one machine, and maps of files on disk. Every kind ends up as a [`Region`]:
//! a pointer, a length, and a handle that keeps the memory alive while any rank uses it. Maps of
//! files on disk are named for the SIGBUS handler ([`FaultName`]); anonymous memory and this
//! job's memory files have no file a user could cut short under it.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;
use std::sync::Arc;

use graphloom_comm::Handle;
use graphloom_io::FaultName;
use memmap2::{Mmap, MmapMut, MmapOptions};

use crate::{Result, StoreError};

/// Bytes of memory that a rank can address, kept alive by `keep`.
#[derive(Clone)]
pub(crate) struct Region {
    ptr: *mut u8,
    len: usize,
    keep: Handle,
}

// SAFETY: a region is a plain range of bytes owned by `keep`, which is Send + Sync. Concurrent
// writes to the same rows from several ranks are a caller error documented on the store tensor.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The sub-range `start..start + len` of this region, sharing its owner.
    pub(crate) fn slice(&self, start: usize, len: usize) -> Region {
        assert!(start + len <= self.len, "region slice out of bounds");
        Region {
            // SAFETY: in bounds, checked above.
            ptr: unsafe { self.ptr.add(start) },
            len,
            keep: self.keep.clone(),
        }
    }

    /// The object that owns the memory, to share it with other ranks of this process.
    pub(crate) fn owner(&self) -> Handle {
        self.keep.clone()
    }

    /// A region over an owner received from another rank of this process.
    pub(crate) fn from_owner(keep: Handle) -> Result<Region> {
        let owned = keep.downcast_ref::<Owned>().ok_or_else(|| {
            StoreError::Invalid("a rank shared something that is not memory".into())
        })?;
        let (ptr, len) = owned.range();
        Ok(Region { ptr, len, keep })
    }
}

/// The memory objects a region can belong to.
enum Owned {
    Writable(MmapMut),
    /// A map of a file on disk, its range named for the SIGBUS handler so that a file cut
    /// short under the run ends it with an error naming the file. The name is declared first
    /// so that it is dropped, and the range unnamed, before the range is unmapped.
    File {
        _name: FaultName,
        map: FileMap,
    },
    /// A memory file of this process, with its descriptor kept open until every other process
    /// of the machine has opened it.
    SharedWritable(MmapMut, #[allow(dead_code)] Option<File>),
}

impl Owned {
    fn range(&self) -> (*mut u8, usize) {
        match self {
            Owned::Writable(m)
            | Owned::SharedWritable(m, _)
            | Owned::File {
                map: FileMap::Writable(m),
                ..
            } => (m.as_ptr() as *mut u8, m.len()),
            // Read-only maps are never written: scatter refuses them before touching memory.
            Owned::File {
                map: FileMap::ReadOnly(m),
                ..
            } => (m.as_ptr() as *mut u8, m.len()),
        }
    }

    fn into_region(self, offset: usize, len: usize) -> Region {
        let keep: Handle = Arc::new(self);
        Region::from_owner(keep)
            .expect("an Owned is memory")
            .slice(offset, len)
    }
}

/// A map of a file, for writing or only reading.
enum FileMap {
    Writable(MmapMut),
    ReadOnly(Mmap),
}

fn advise_huge_pages(map: &MmapMut) {
    #[cfg(target_os = "linux")]
    {
        // Advice only: where the kernel has no transparent huge pages the map is unchanged.
        let _ = map.advise(memmap2::Advice::HugePage);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = map;
}

/// Zeroed private memory of `len` bytes.
pub(crate) fn host(len: usize) -> Result<Region> {
    let map = MmapMut::map_anon(len.max(1))
        .map_err(|e| StoreError::memory(format!("allocating {len} bytes of host memory"), e))?;
    advise_huge_pages(&map);
    Ok(Owned::Writable(map).into_region(0, len))
}

/// Zeroed memory of `len` bytes that the other processes of this machine can map: a memfd.
/// Returns the region and the `/proc` path through which the others open it (valid while the
/// region's owner lives, so share it and let the others open it before dropping anything).
pub(crate) fn shared(len: usize) -> Result<(Region, String)> {
    let what = || format!("creating {len} bytes of shared memory");
    // SAFETY: the name is a valid C string; memfd_create has no other preconditions.
    let fd = unsafe { libc::memfd_create(c"graphloom-store".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(StoreError::memory(what(), std::io::Error::last_os_error()));
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(len.max(1) as u64)
        .map_err(|e| StoreError::memory(what(), e))?;
    // SAFETY: the memfd is private to this job; every process maps it shared on purpose.
    let map = unsafe { MmapOptions::new().len(len.max(1)).map_mut(&file) }
        .map_err(|e| StoreError::memory(what(), e))?;
    advise_huge_pages(&map);
    let path = format!("/proc/{}/fd/{}", std::process::id(), file.as_raw_fd());
    Ok((
        Owned::SharedWritable(map, Some(file)).into_region(0, len),
        path,
    ))
}

/// Maps `len` bytes of another process's memory file, opened through its `/proc` path.
pub(crate) fn open_shared(path: &str, len: usize) -> Result<Region> {
    let what = || format!("mapping shared memory {path}");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| StoreError::memory(what(), e))?;
    // SAFETY: the memory file belongs to this job; all ranks map it shared on purpose.
    let map = unsafe { MmapOptions::new().len(len.max(1)).map_mut(&file) }
        .map_err(|e| StoreError::memory(what(), e))?;
    Ok(Owned::SharedWritable(map, None).into_region(0, len))
}

/// Maps bytes `offset..offset + len` of the file at `path`.
pub(crate) fn map_file(path: &Path, offset: u64, len: usize, writable: bool) -> Result<Region> {
    let file = OpenOptions::new()
        .read(true)
        .write(writable)
        .open(path)
        .map_err(|e| StoreError::io(path, e))?;
    // Maps must start on a page boundary: map from the page that holds `offset`.
    let page = page_size() as u64;
    let start = offset / page * page;
    let skip = (offset - start) as usize;
    let map_len = (skip + len).max(1);
    let mut options = MmapOptions::new();
    options.offset(start).len(map_len);
    // SAFETY: the file is the tensor's backing store; other processes changing it underneath is
    // the same hazard as with any memory-mapped dataset, and documented on Location::Mmap.
    let map = unsafe {
        if writable {
            FileMap::Writable(
                options
                    .map_mut(&file)
                    .map_err(|e| StoreError::io(path, e))?,
            )
        } else {
            let map = options.map(&file).map_err(|e| StoreError::io(path, e))?;
            // Rows are gathered at random: a fault should read its page, not a read-ahead
            // window of rows nobody asked for.
            let _ = map.advise(memmap2::Advice::Random);
            FileMap::ReadOnly(map)
        }
    };
    let mapped = match &map {
        FileMap::Writable(m) => &m[..],
        FileMap::ReadOnly(m) => &m[..],
    };
    let owned = Owned::File {
        _name: FaultName::register(mapped, path),
        map,
    };
    Ok(owned.into_region(skip, len))
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}
