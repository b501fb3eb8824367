//! `.npy` arrays too large to hold in memory: mapped read-only ([`MappedNpy`]), or written in
//! pieces ([`NpyWriter`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::npy::{header_bytes, read_header, NpyElement};
use crate::{Error, FaultName, Result};

/// A `.npy` array of dtype exactly `T`, mapped read-only: its pages are the kernel's page
/// cache, not this process's memory. The file's length is checked against its header before
/// it is mapped, so a truncated file is an error, never a fault. Changing the file while it
/// is mapped is not supported: a read past an end it was cut to ends the process with an error
/// naming it ([`FaultName`]).
pub struct MappedNpy<T> {
    /// Declared before `map` so that it is dropped first: the range is unnamed before it is
    /// unmapped and can be mapped again.
    _name: FaultName,
    map: Option<memmap2::Mmap>,
    offset: usize,
    len: usize,
    shape: Vec<usize>,
    _element: PhantomData<T>,
}

impl<T: NpyElement> MappedNpy<T> {
    /// Maps `path`; fails when its dtype is not `T`'s, when it is shorter than its header says,
    /// or when its data is not aligned for `T`.
    pub fn open(path: &Path) -> Result<MappedNpy<T>> {
        const {
            assert!(
                cfg!(target_endian = "little"),
                ".npy files here are little-endian"
            )
        };
        let header = read_header(path)?;
        if header.dtype != T::DTYPE {
            return Err(Error::format(
                path,
                format!(
                    "dtype is {}, expected {}",
                    header.dtype.descr(),
                    T::DTYPE.descr()
                ),
            ));
        }
        if header.data_offset % std::mem::align_of::<T>() != 0 {
            return Err(Error::format(
                path,
                format!(
                    "data starts at byte {}, not aligned for {}-byte elements",
                    header.data_offset,
                    std::mem::size_of::<T>()
                ),
            ));
        }
        let len = header.numel();
        let map = if len == 0 {
            None
        } else {
            let file = File::open(path).map_err(|e| Error::io(path, e))?;
            // SAFETY: the map is read-only and private to this value; the file is documented
            // as not to be changed while it is in use.
            Some(unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?)
        };
        Ok(MappedNpy {
            _name: FaultName::register(map.as_deref().unwrap_or_default(), path),
            map,
            offset: header.data_offset,
            len,
            shape: header.shape,
            _element: PhantomData,
        })
    }

    /// The array's dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The elements in C order.
    pub fn as_slice(&self) -> &[T] {
        match &self.map {
            // SAFETY: `open` checked the length and the alignment, and `T` is plain data for
            // which every bit pattern is a value.
            Some(map) => unsafe {
                std::slice::from_raw_parts(map.as_ptr().add(self.offset).cast::<T>(), self.len)
            },
            None => &[],
        }
    }

    /// The elements' bytes.
    pub fn as_bytes(&self) -> &[u8] {
        let elements = self.as_slice();
        // SAFETY: any initialised memory may be read as bytes; the length is the slice's.
        unsafe {
            std::slice::from_raw_parts(
                elements.as_ptr().cast::<u8>(),
                std::mem::size_of_val(elements),
            )
        }
    }

    /// Tells the kernel that reads will be random, so a fault reads one page, not a window.
    pub fn advise_random(&self) {
        if let Some(map) = &self.map {
            let _ = map.advise(memmap2::Advice::Random);
        }
    }
}

impl<T: NpyElement> std::ops::Deref for MappedNpy<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

/// Writes a `.npy` array of a shape known up front in pieces, to a temporary file beside the
/// target renamed into place by [`NpyWriter::finish`]. Dropped unfinished, it removes the
/// temporary file.
pub struct NpyWriter<T: NpyElement> {
    out: Option<BufWriter<File>>,
    tmp: PathBuf,
    path: PathBuf,
    /// The shape's element count, and those still to write.
    total: usize,
    remaining: usize,
    header_len: usize,
    buf: Vec<u8>,
    _element: PhantomData<T>,
}

impl<T: NpyElement> NpyWriter<T> {
    /// Starts `path` with `shape`, buffering 1 MiB.
    pub fn create(path: &Path, shape: &[usize]) -> Result<NpyWriter<T>> {
        NpyWriter::with_buffer(path, shape, 1 << 20)
    }

    /// Starts `path` with `shape`, buffering `buffer` bytes (less for a writer among many open
    /// at once).
    pub fn with_buffer(path: &Path, shape: &[usize], buffer: usize) -> Result<NpyWriter<T>> {
        let remaining = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| Error::format(path, format!("shape {shape:?} overflows")))?;
        let tmp = crate::atomic::temporary_path(path);
        let file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        let mut out = BufWriter::with_capacity(buffer, file);
        let header = header_bytes(T::DTYPE, shape, 0);
        out.write_all(&header).map_err(|e| Error::io(&tmp, e))?;
        Ok(NpyWriter {
            out: Some(out),
            tmp,
            path: path.to_path_buf(),
            total: remaining,
            remaining,
            header_len: header.len(),
            buf: Vec::new(),
            _element: PhantomData,
        })
    }

    /// Appends elements in C order.
    pub fn write(&mut self, data: &[T]) -> Result<()> {
        if data.len() > self.remaining {
            return Err(Error::format(
                &self.path,
                format!(
                    "{} more elements than the shape holds",
                    data.len() - self.remaining
                ),
            ));
        }
        self.remaining -= data.len();
        let out = self.out.as_mut().expect("open until finish");
        for chunk in data.chunks(1 << 16) {
            self.buf.clear();
            for &v in chunk {
                v.write_le(&mut self.buf);
            }
            out.write_all(&self.buf)
                .map_err(|e| Error::io(&self.tmp, e))?;
        }
        Ok(())
    }

    /// Appends elements given as their little-endian bytes (rows copied from another array of
    /// the same dtype), a whole number of elements.
    pub fn write_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        let size = std::mem::size_of::<T>();
        let count = bytes.len() / size;
        if bytes.len() % size != 0 || count > self.remaining {
            return Err(Error::format(
                &self.path,
                format!(
                    "{} bytes are not whole elements within the {} still to write",
                    bytes.len(),
                    self.remaining
                ),
            ));
        }
        self.remaining -= count;
        let out = self.out.as_mut().expect("open until finish");
        out.write_all(bytes).map_err(|e| Error::io(&self.tmp, e))
    }

    /// Checks every element was written, then renames the file into place.
    pub fn finish(self) -> Result<()> {
        if self.remaining != 0 {
            return Err(Error::format(
                &self.path,
                format!("{} elements short of its shape", self.remaining),
            ));
        }
        self.close(None)
    }

    /// Ends a 1-D array at the elements written so far, fewer than its shape announced (rows
    /// whose final length is known only once written): the header is rewritten in place.
    pub fn finish_shorter(self) -> Result<()> {
        let written = self.total - self.remaining;
        self.close(Some(written))
    }

    /// Flushes, rewrites the header for `len` elements when given, syncs and renames.
    fn close(mut self, len: Option<usize>) -> Result<()> {
        use std::io::{Seek, SeekFrom};
        let io = |e| Error::io(&self.tmp, e);
        let out = self.out.take().expect("open until finish");
        let mut file = out.into_inner().map_err(|e| io(e.into_error()))?;
        if let Some(len) = len {
            let header = header_bytes(T::DTYPE, &[len], self.header_len);
            if header.len() != self.header_len {
                return Err(Error::format(&self.path, "the shorter header does not fit"));
            }
            file.seek(SeekFrom::Start(0)).map_err(io)?;
            file.write_all(&header).map_err(io)?;
            file.set_len((self.header_len + len * std::mem::size_of::<T>()) as u64)
                .map_err(io)?;
        }
        file.sync_all().map_err(io)?;
        std::fs::rename(&self.tmp, &self.path).map_err(|e| Error::io(&self.path, e))
    }
}

impl<T: NpyElement> Drop for NpyWriter<T> {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_arrays_map_back_and_unfinished_ones_leave_nothing() {
        let dir = std::env::temp_dir().join(format!("graphloom-npy-stream-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.npy");
        let mut w = NpyWriter::<i64>::create(&p, &[5, 2]).unwrap();
        w.write(&[0, 1, 2]).unwrap();
        w.write(&[3, 4, 5, 6, 7, 8, 9]).unwrap();
        assert!(w.write(&[10]).is_err());
        w.finish().unwrap();
        assert_eq!(
            crate::npy::read::<i64>(&p).unwrap().data,
            (0..10).collect::<Vec<_>>()
        );
        let m = MappedNpy::<i64>::open(&p).unwrap();
        assert_eq!(m.shape(), &[5, 2]);
        assert_eq!(&m[..], &(0..10).collect::<Vec<i64>>()[..]);
        assert!(MappedNpy::<i32>::open(&p).is_err());
        let mut cut = NpyWriter::<i32>::create(&dir.join("cut.npy"), &[1_000_000]).unwrap();
        cut.write(&[7, 8, 9]).unwrap();
        cut.finish_shorter().unwrap();
        assert_eq!(
            crate::npy::read::<i32>(&dir.join("cut.npy")).unwrap().data,
            vec![7, 8, 9]
        );
        std::fs::remove_file(dir.join("cut.npy")).unwrap();
        let short = NpyWriter::<f32>::create(&dir.join("b.npy"), &[4]).unwrap();
        assert!(short.finish().unwrap_err().to_string().contains("short"));
        drop(NpyWriter::<f32>::create(&dir.join("c.npy"), &[4]).unwrap());
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("a.npy")]);
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 8]).unwrap();
        let err = MappedNpy::<i64>::open(&p).err().unwrap().to_string();
        assert!(err.contains("truncated") && err.contains("a.npy"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
