//! Feature files copied as streams, a chunk of rows at a time: converters of graphs larger
//! than memory never hold a feature table.

use std::path::Path;

use graphloom_io::NpyWriter;

use super::stream_csr::{Phase, Progress};
use crate::{Error, Result};

/// Reads the `.npy` header at the start of a stream (a file, or a member of an `.npz`);
/// returns it and the bytes of data read past it.
pub(crate) fn stream_header(
    stream: &mut dyn std::io::Read,
    path: &Path,
) -> Result<(crate::npy::NpyHeader, Vec<u8>)> {
    let mut head = vec![0u8; 4096];
    let mut got = 0;
    while got < head.len() {
        let n = stream
            .read(&mut head[got..])
            .map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let header = crate::npy::parse_header(&head[..got], path)?;
    let rest = head[header.data_offset.min(got)..got].to_vec();
    Ok((header, rest))
}

/// Copies the `[n, dim]` f32 or f64 features of a `.npy` stream (`origin`, for errors) to an
/// f32 `.npy` at `to`, a chunk of rows at a time, refusing a non-finite value.
pub(crate) fn copy_features(
    stream: &mut dyn std::io::Read,
    n: usize,
    dim: usize,
    origin: &Path,
    to: &Path,
    progress: Progress<'_>,
) -> Result<()> {
    let (header, mut pending) = stream_header(stream, origin)?;
    let size = header.dtype.size();
    if !matches!(
        header.dtype,
        crate::npy::NpyDType::F32 | crate::npy::NpyDType::F64
    ) {
        return Err(Error::format(
            origin,
            format!(
                "features of dtype {:?}; expected float32 or float64",
                header.dtype
            ),
        ));
    }
    let mut out = NpyWriter::<f32>::create(to, &[n, dim])?;
    let rows_per_chunk = ((1 << 22) / dim.max(1)).max(1);
    let mut row = 0;
    while row < n {
        let rows = rows_per_chunk.min(n - row);
        let want = rows * dim * size;
        let start = pending.len();
        pending.resize(want.max(start), 0);
        if start < want {
            stream
                .read_exact(&mut pending[start..want])
                .map_err(|e| Error::format(origin, format!("features: {e}")))?;
        }
        let values: Vec<f32> = pending[..want]
            .chunks_exact(size)
            .map(|b| match size {
                4 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                _ => f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32,
            })
            .collect();
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(Error::invalid(
                origin,
                format!(
                    "non-finite feature at node {}, column {}",
                    row + i / dim.max(1),
                    i % dim.max(1)
                ),
            ));
        }
        out.write(&values)?;
        pending.drain(..want);
        row += rows;
        progress(Phase::Features, row as u64, n as u64);
    }
    Ok(out.finish()?)
}
