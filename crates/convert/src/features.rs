//! Feature files copied as streams, a chunk of rows at a time: converters of graphs larger
//! than memory never hold a feature table.

use std::path::Path;

use graphloom_io::NpyWriter;

use super::stream_csr::{Phase, Progress};
use graphloom_graph::{Error, Result};

/// The most elements a dense table may have per value (or row) of the sparse table it is
/// built from: a damaged shape, not data, asks for more. The bag-of-words features of the
/// Planetoid datasets have about 80 per value.
const MAX_ZEROS_PER_VALUE: usize = 4096;

/// The element count of the dense `[rows, cols]` table of a sparse one holding `stored`
/// values; refused when it overflows or is implausibly sparse (see [`MAX_ZEROS_PER_VALUE`]),
/// before any of it is allocated.
pub(crate) fn dense_size(rows: usize, cols: usize, stored: usize) -> Result<usize, String> {
    let allowed = stored
        .saturating_add(rows)
        .saturating_mul(MAX_ZEROS_PER_VALUE);
    match rows.checked_mul(cols) {
        Some(size) if size <= allowed => Ok(size),
        _ => Err(format!(
            "a sparse [{rows}, {cols}] table of {stored} values: a shape that large for so few \
             values is damaged"
        )),
    }
}

/// Whether `indptr` (as read into f64) are the offsets of a sparse table of `rows` rows and
/// `stored` values: `rows + 1` whole numbers from 0, never decreasing, ending at `stored`.
pub(crate) fn offsets_ok(indptr: &[f64], rows: usize, stored: usize) -> bool {
    indptr.len() == rows.wrapping_add(1)
        && indptr.first() == Some(&0.0)
        && indptr
            .windows(2)
            .all(|w| w[0] <= w[1] && w[1].fract() == 0.0)
        && indptr.last() == Some(&(stored as f64))
}

/// Reads the `.npy` header at the start of a stream (a file, or a member of an `.npz`);
/// returns it and the bytes of data read past it.
pub(crate) fn stream_header(
    stream: &mut dyn std::io::Read,
    path: &Path,
) -> Result<(graphloom_graph::npy::NpyHeader, Vec<u8>)> {
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
    let header = graphloom_graph::npy::parse_header(&head[..got], path)?;
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
        graphloom_graph::npy::NpyDType::F32 | graphloom_graph::npy::NpyDType::F64
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
    // Chunks of elements, not rows: a row as wide as a damaged header says is never held.
    let total = n
        .checked_mul(dim)
        .ok_or_else(|| Error::format(origin, format!("features of shape [{n}, {dim}]")))?;
    let mut done = 0;
    while done < total {
        let count = (1 << 22).min(total - done);
        let want = count * size;
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
                    (done + i) / dim,
                    (done + i) % dim
                ),
            ));
        }
        out.write(&values)?;
        pending.drain(..want);
        done += count;
        progress(Phase::Features, (done / dim) as u64, n as u64);
    }
    Ok(out.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header that announces rows wider than any buffer, over a stream that ends at once:
    /// refused after reading one bounded chunk, never sized by the row width.
    #[test]
    fn a_stream_of_huge_rows_is_copied_in_bounded_chunks() {
        let dict = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1099511627776), }\n";
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        bytes.extend_from_slice(dict);
        bytes.extend_from_slice(&[0; 64]);
        let dir = std::env::temp_dir().join(format!("graphloom-copy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let origin = dir.join("data.npz");
        let err = copy_features(
            &mut std::io::Cursor::new(bytes),
            2,
            1 << 40,
            &origin,
            &dir.join("node_feat.npy"),
            &|_, _, _| {},
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("data.npz") && err.contains("features"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
