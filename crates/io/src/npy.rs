//! Reading and writing numpy `.npy` files (format versions 1, 2 and 3, little-endian).
//!
//! Every array of a dataset directory is a `.npy` file, so numpy users read them with
//! `np.load`. bf16 has no numpy dtype: it is stored as `<u2` and `meta.json` names the dtype.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::{Error, Result};

/// The element types a `.npy` file may hold here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NpyDType {
    /// `<f4`
    F32,
    /// `<f8`
    F64,
    /// `<u2` (bf16 bits)
    U16,
    /// `<i4`
    I32,
    /// `<i8`
    I64,
    /// `|u1`
    U8,
    /// `|i1`
    I8,
    /// `|b1`: numpy's bool, one byte of 0 or 1. A bool array is a mask, never ids or numbers
    /// to widen, so it has no [`NpyElement`] (not every byte is a bool to map); read it with
    /// [`decode_mask`].
    Bool,
}

impl NpyDType {
    pub(crate) fn descr(self) -> &'static str {
        match self {
            NpyDType::F32 => "<f4",
            NpyDType::F64 => "<f8",
            NpyDType::U16 => "<u2",
            NpyDType::I32 => "<i4",
            NpyDType::I64 => "<i8",
            NpyDType::U8 => "|u1",
            NpyDType::I8 => "|i1",
            NpyDType::Bool => "|b1",
        }
    }
    fn parse(descr: &str) -> Option<NpyDType> {
        Some(match descr {
            "<f4" => NpyDType::F32,
            "<f8" => NpyDType::F64,
            "<u2" => NpyDType::U16,
            "<i4" => NpyDType::I32,
            "<i8" => NpyDType::I64,
            "|u1" => NpyDType::U8,
            "|i1" => NpyDType::I8,
            "|b1" => NpyDType::Bool,
            _ => return None,
        })
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            NpyDType::U8 | NpyDType::I8 | NpyDType::Bool => 1,
            NpyDType::U16 => 2,
            NpyDType::F32 | NpyDType::I32 => 4,
            NpyDType::F64 | NpyDType::I64 => 8,
        }
    }
}

/// A plain-old-data element that `.npy` files hold.
pub trait NpyElement: Copy + Default + 'static {
    /// Its numpy dtype.
    const DTYPE: NpyDType;
    /// Decodes one little-endian element.
    fn from_le(bytes: &[u8]) -> Self;
    /// Appends the little-endian encoding.
    fn write_le(self, out: &mut Vec<u8>);
}

macro_rules! npy_element {
    ($t:ty, $d:ident) => {
        impl NpyElement for $t {
            const DTYPE: NpyDType = NpyDType::$d;
            fn from_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("sized by DTYPE"))
            }
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}
npy_element!(f32, F32);
npy_element!(f64, F64);
npy_element!(u16, U16);
npy_element!(i32, I32);
npy_element!(i64, I64);
npy_element!(u8, U8);
npy_element!(i8, I8);

/// The header of a `.npy` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyHeader {
    /// Element type.
    pub dtype: NpyDType,
    /// Dimensions (C order).
    pub shape: Vec<usize>,
    /// Bytes before the data.
    pub data_offset: usize,
}

impl NpyHeader {
    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Text of a damaged header as an error message shows it: on one line, escaped, cut short.
fn shown(text: &str) -> String {
    let escaped: String = text.trim().escape_debug().collect();
    match escaped.char_indices().nth(40) {
        Some((cut, _)) => format!("{}...", &escaped[..cut]),
        None => escaped,
    }
}

fn header_value<'a>(dict: &'a str, key: &str) -> Option<&'a str> {
    let at = dict.find(&format!("'{key}'"))?;
    let rest = dict[at + key.len() + 2..]
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    Some(rest)
}

/// Parses the header from the first bytes of a `.npy` file, which must be in C order (the
/// order every reader here maps and streams; NumPy writes it unless given a transposed view).
pub fn parse_header(bytes: &[u8], path: &Path) -> Result<NpyHeader> {
    let (header, fortran) = parse_header_and_order(bytes, path)?;
    if fortran {
        return Err(Error::format(
            path,
            "Fortran-order arrays are not supported; save with np.ascontiguousarray",
        ));
    }
    Ok(header)
}

/// The header, and whether the array is in Fortran (column-major) order.
fn parse_header_and_order(bytes: &[u8], path: &Path) -> Result<(NpyHeader, bool)> {
    let bad = |msg: &str| Error::format(path, format!("not a valid .npy file: {msg}"));
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("missing the \\x93NUMPY magic"));
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(bad("truncated header"));
            }
            (
                u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
                12,
            )
        }
        v => return Err(bad(&format!("unsupported format version {v}"))),
    };
    let dict = bytes
        .get(start..start + len)
        .ok_or_else(|| bad("truncated header"))?;
    let dict = std::str::from_utf8(dict).map_err(|_| bad("header is not text"))?;
    let descr = header_value(dict, "descr")
        .and_then(|v| v.strip_prefix('\''))
        .and_then(|v| v.split('\'').next())
        .ok_or_else(|| bad("no 'descr' in header"))?;
    let dtype = NpyDType::parse(descr).ok_or_else(|| {
        Error::format(
            path,
            format!(
                "unsupported dtype '{}' (expected <f4, <f8, <u2, <i4, <i8, |u1, |i1 or |b1, \
                 little-endian)",
                shown(descr)
            ),
        )
    })?;
    let fortran = header_value(dict, "fortran_order")
        .ok_or_else(|| bad("no 'fortran_order' in header"))?
        .starts_with("True");
    let shape_text = header_value(dict, "shape")
        .and_then(|v| v.strip_prefix('('))
        .and_then(|v| v.split(')').next())
        .ok_or_else(|| bad("no 'shape' in header"))?;
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| bad(&format!("bad dimension '{}'", shown(s))))
        })
        .collect::<Result<Vec<_>>>()?;
    // The element and byte counts must fit in memory's addresses: a header that overflows is
    // damaged, not an array to allocate.
    let bytes = shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
        .and_then(|b| b.checked_add(start + len));
    if bytes.is_none() {
        return Err(bad(&format!(
            "shape {shape:?} of {} is more bytes than a file can hold",
            dtype.descr()
        )));
    }
    Ok((
        NpyHeader {
            dtype,
            shape,
            data_offset: start + len,
        },
        fortran,
    ))
}

/// Reads the header of a `.npy` file and checks the file holds all the data it announces.
pub fn read_header(path: &Path) -> Result<NpyHeader> {
    let mut f = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut head = vec![0u8; 4096];
    let mut got = 0;
    while got < head.len() {
        let n = f.read(&mut head[got..]).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let header = parse_header(&head[..got], path)?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len() as usize;
    check_length(&header, len, path)?;
    Ok(header)
}

fn check_length(header: &NpyHeader, file_len: usize, path: &Path) -> Result<()> {
    let want = header.data_offset + header.numel() * header.dtype.size();
    if file_len < want {
        return Err(Error::format(
            path,
            format!(
                "truncated .npy: shape {:?} of {} needs {} bytes, the file has {}",
                header.shape,
                header.dtype.descr(),
                want,
                file_len
            ),
        ));
    }
    Ok(())
}

/// An array read from a `.npy` file, with elements converted to `T`.
#[derive(Clone, Debug, PartialEq)]
pub struct NpyArray<T> {
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Elements in C order.
    pub data: Vec<T>,
}

/// Reads a whole `.npy` file whose dtype must be exactly `T`'s.
pub fn read<T: NpyElement>(path: &Path) -> Result<NpyArray<T>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    decode(&bytes, path)
}

/// Decodes the bytes of a `.npy` file (read from `path`, for messages) of dtype exactly `T`.
pub fn decode<T: NpyElement>(bytes: &[u8], path: &Path) -> Result<NpyArray<T>> {
    let (header, body) = body_of(bytes, path, T::DTYPE)?;
    let data = body.chunks_exact(T::DTYPE.size()).map(T::from_le).collect();
    Ok(NpyArray {
        shape: header.shape,
        data,
    })
}

/// Decodes the bytes of a bool `.npy` file (numpy's `|b1`, read from `path`): a mask.
pub fn decode_mask(bytes: &[u8], path: &Path) -> Result<NpyArray<bool>> {
    let (header, body) = body_of(bytes, path, NpyDType::Bool)?;
    Ok(NpyArray {
        shape: header.shape,
        data: body.iter().map(|&b| b != 0).collect(),
    })
}

/// The header and the data bytes of a whole `.npy` file, which must be of `dtype`.
fn body_of<'a>(bytes: &'a [u8], path: &Path, dtype: NpyDType) -> Result<(NpyHeader, &'a [u8])> {
    let header = parse_header(bytes, path)?;
    check_length(&header, bytes.len(), path)?;
    if header.dtype != dtype {
        return Err(Error::format(
            path,
            format!(
                "dtype is {}, expected {}",
                header.dtype.descr(),
                dtype.descr()
            ),
        ));
    }
    let start = header.data_offset;
    let body = &bytes[start..start + header.numel() * dtype.size()];
    Ok((header, body))
}

/// Decodes the bytes of a `.npy` file of any numeric dtype, widening every element to f64.
pub fn decode_f64(bytes: &[u8], path: &Path) -> Result<NpyArray<f64>> {
    Ok(match parse_header(bytes, path)?.dtype {
        NpyDType::F32 => widen(decode::<f32>(bytes, path)?, f64::from)?,
        NpyDType::F64 => decode::<f64>(bytes, path)?,
        NpyDType::U16 => widen(decode::<u16>(bytes, path)?, f64::from)?,
        NpyDType::I32 => widen(decode::<i32>(bytes, path)?, f64::from)?,
        NpyDType::I64 => widen(decode::<i64>(bytes, path)?, |v| v as f64)?,
        NpyDType::U8 => widen(decode::<u8>(bytes, path)?, f64::from)?,
        NpyDType::I8 => widen(decode::<i8>(bytes, path)?, f64::from)?,
        NpyDType::Bool => widen(decode_mask(bytes, path)?, f64::from)?,
    })
}

/// Reads a 2-D `.npy` file of node ids (pairs, or ids per row) as [`decode_ids`] does, in C
/// order whichever order it was saved in: a transposed NumPy view (`edges.T`, saved as is) is
/// Fortran-ordered, and its elements are put back in row order here, in memory.
pub fn read_int_matrix(path: &Path) -> Result<NpyArray<i64>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let (header, fortran) = parse_header_and_order(&bytes, path)?;
    if header.shape.len() != 2 {
        return Err(Error::format(
            path,
            format!("shape {:?}, expected a 2-D array", header.shape),
        ));
    }
    if !fortran {
        return decode_ids(&bytes, path);
    }
    // Decode the column-major body as the C-order transpose it is, then transpose back.
    let (rows, cols) = (header.shape[0], header.shape[1]);
    let mut transposed = header_bytes(header.dtype, &[cols, rows], 0);
    transposed.extend_from_slice(&bytes[header.data_offset..]);
    let t = decode_ids(&transposed, path)?;
    let mut data = vec![0i64; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            data[r * cols + c] = t.data[c * rows + r];
        }
    }
    Ok(NpyArray {
        shape: vec![rows, cols],
        data,
    })
}

/// Reads pairs of node ids from a 2-D `.npy` file as [`read_int_matrix`] does, whichever
/// order it was saved in: `[2, P]` (the sources, then the destinations, as PyG's
/// `edge_index`) or `[P, 2]` (a pair a row; a `[2, 2]` array is read as `[2, P]`). Returns
/// the sources and the destinations.
pub fn read_id_pairs(path: &Path) -> Result<(Vec<i64>, Vec<i64>)> {
    let ids = read_int_matrix(path)?;
    match ids.shape.as_slice() {
        [2, p] => {
            let mut src = ids.data;
            let dst = src.split_off(*p);
            Ok((src, dst))
        }
        [_, 2] => Ok(ids.data.chunks_exact(2).map(|c| (c[0], c[1])).unzip()),
        shape => Err(Error::format(
            path,
            format!("shape {shape:?}, expected pairs of node ids as [2, P] or [P, 2]"),
        )),
    }
}

/// Decodes a whole `.npy` file of any integer dtype as i64, signed ones as signed; a bool
/// array as 0 and 1 (a label may be one).
fn decode_ints(bytes: &[u8], path: &Path) -> Result<NpyArray<i64>> {
    match parse_header(bytes, path)?.dtype {
        NpyDType::I64 => decode::<i64>(bytes, path),
        NpyDType::I32 => widen(decode::<i32>(bytes, path)?, i64::from),
        NpyDType::U16 => widen(decode::<u16>(bytes, path)?, i64::from),
        NpyDType::U8 => widen(decode::<u8>(bytes, path)?, i64::from),
        NpyDType::I8 => widen(decode::<i8>(bytes, path)?, i64::from),
        NpyDType::Bool => widen(decode_mask(bytes, path)?, i64::from),
        other => Err(Error::format(
            path,
            format!("dtype is {}, expected an integer dtype", other.descr()),
        )),
    }
}

/// Decodes a whole `.npy` file of node ids (read from `path`, for messages) as i64: any
/// integer dtype, signed ones as signed (so an int8 -1 is -1, for the range checks to refuse,
/// not node 255). A bool array is refused: it is a mask, and its 0s and 1s are no ids. Every
/// reader of ids comes here.
pub fn decode_ids(bytes: &[u8], path: &Path) -> Result<NpyArray<i64>> {
    if parse_header(bytes, path)?.dtype == NpyDType::Bool {
        return Err(Error::format(
            path,
            "dtype is |b1: a bool array is a mask, not ids (np.flatnonzero(mask) gives its ids)",
        ));
    }
    decode_ints(bytes, path)
}

/// Reads a `.npy` file of node ids as [`decode_ids`] does.
pub fn read_ids(path: &Path) -> Result<NpyArray<i64>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    decode_ids(&bytes, path)
}

/// Reads an integer `.npy` file that holds no node ids (labels, offsets, part numbers) as i64:
/// any integer dtype, signed ones as signed, and bool as 0 and 1.
pub fn read_ints(path: &Path) -> Result<NpyArray<i64>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    decode_ints(&bytes, path)
}

fn widen<S, T>(a: NpyArray<S>, f: impl Fn(S) -> T) -> Result<NpyArray<T>> {
    Ok(NpyArray {
        shape: a.shape,
        data: a.data.into_iter().map(f).collect(),
    })
}

/// The version-1 header of an array of `dtype` and `shape`, padded so the data starts on a
/// 64-byte boundary.
///
/// The header is at least `min_len` bytes long (padded with spaces), so a shorter header can
/// overwrite a longer one in place.
pub fn header_bytes(dtype: NpyDType, shape: &[usize], min_len: usize) -> Vec<u8> {
    let shape_text = match shape {
        [n] => format!("({n},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
        dtype.descr(),
        shape_text
    );
    // Pad so the data starts on a 64-byte boundary, ending the header with a newline.
    while (10 + dict.len() + 1) % 64 != 0 || 10 + dict.len() + 1 < min_len {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

/// Writes `data` with `shape` as a version-1 `.npy` file, through a temporary file renamed into
/// place, so a reader never sees half an array.
pub fn write<T: NpyElement>(path: &Path, data: &[T], shape: &[usize]) -> Result<()> {
    let mut out = crate::NpyWriter::<T>::create(path, shape)?;
    out.write(data)?;
    out.finish()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn a_fortran_ordered_matrix_is_read_in_row_order() {
        // NumPy saves `np.array([[1, 2, 3], [4, 5, 6]]).T` (shape (3, 2)) column-major: its
        // body is 1 2 3 4 5 6, and its rows are (1, 4), (2, 5), (3, 6).
        let mut bytes = header_bytes(NpyDType::I32, &[3, 2], 0);
        let at = bytes.windows(5).position(|w| w == b"False").unwrap();
        bytes[at..at + 5].copy_from_slice(b"True ");
        for v in 1i32..=6 {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let path =
            std::env::temp_dir().join(format!("graphloom-fortran-{}.npy", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let m = read_int_matrix(&path).unwrap();
        assert_eq!(
            (m.shape.clone(), m.data.clone()),
            (vec![3, 2], vec![1, 4, 2, 5, 3, 6])
        );
        // Readers that map or stream the file still refuse it, saying how to save it.
        let e = read_ints(&path).unwrap_err().to_string();
        assert!(e.contains("np.ascontiguousarray"), "{e}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn pairs_are_read_from_either_shape_in_either_order() {
        let dir = std::env::temp_dir().join(format!("graphloom-pairs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let want = (vec![0i64, 1, 2], vec![3i64, 4, 5]);
        let rows = dir.join("rows.npy");
        write(&rows, &[0i64, 1, 2, 3, 4, 5], &[2, 3]).unwrap();
        assert_eq!(read_id_pairs(&rows).unwrap(), want);
        let pairs = dir.join("pairs.npy");
        write(&pairs, &[0i32, 3, 1, 4, 2, 5], &[3, 2]).unwrap();
        assert_eq!(read_id_pairs(&pairs).unwrap(), want);
        // `pairs.T` saved as is: [2, 3] in Fortran order, its body the pairs one after another.
        let mut bytes = header_bytes(NpyDType::I64, &[2, 3], 0);
        let at = bytes.windows(5).position(|w| w == b"False").unwrap();
        bytes[at..at + 5].copy_from_slice(b"True ");
        for v in [0i64, 3, 1, 4, 2, 5] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let transposed = dir.join("transposed.npy");
        std::fs::write(&transposed, &bytes).unwrap();
        assert_eq!(read_id_pairs(&transposed).unwrap(), want);
        let square = dir.join("square.npy");
        write(&square, &[0i64; 9], &[3, 3]).unwrap();
        let e = read_id_pairs(&square).unwrap_err().to_string();
        assert!(
            e.contains("shape [3, 3], expected pairs of node ids"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A one-byte array of `shape` holding `values`, whose header names `descr` (`|i1`, `|b1`
    /// or `|u1`).
    fn one_byte_file(name: &str, descr: &str, shape: &[usize], values: &[u8]) -> PathBuf {
        let mut bytes = header_bytes(NpyDType::U8, shape, 0);
        let at = bytes.windows(5).position(|w| w == b"'|u1'").unwrap();
        bytes[at + 1..at + 4].copy_from_slice(descr.as_bytes());
        bytes.extend_from_slice(values);
        let path =
            std::env::temp_dir().join(format!("graphloom-{name}-{}.npy", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        path
    }

    #[test]
    fn int8_ids_are_signed_and_a_bool_array_is_not_ids() {
        // np.array([0, -1, 5], dtype=np.int8): -1 stays -1, for the range checks to refuse.
        let int8 = one_byte_file("int8", "|i1", &[3], &[0, 0xff, 5]);
        assert_eq!(read_ids(&int8).unwrap().data, vec![0, -1, 5]);
        assert_eq!(read_ints(&int8).unwrap().data, vec![0, -1, 5]);
        let bytes = std::fs::read(&int8).unwrap();
        assert_eq!(
            decode_f64(&bytes, &int8).unwrap().data,
            vec![0.0, -1.0, 5.0]
        );
        // np.array([True, False, True]) is a mask: read as ids it would be nodes 1, 0, 1.
        let mask = one_byte_file("bool", "|b1", &[3], &[1, 0, 1]);
        let e = read_ids(&mask).unwrap_err().to_string();
        assert!(e.starts_with(&mask.display().to_string()), "{e}");
        assert!(e.contains("a bool array is a mask, not ids"), "{e}");
        assert_eq!(
            decode_mask(&std::fs::read(&mask).unwrap(), &mask)
                .unwrap()
                .data,
            vec![true, false, true]
        );
        // Nor is a 2-D one a matrix of ids (pairs).
        let pairs = one_byte_file("bool-pairs", "|b1", &[2, 1], &[1, 0]);
        let e = read_int_matrix(&pairs).unwrap_err().to_string();
        assert!(e.contains("a bool array is a mask, not ids"), "{e}");
        // uint8 stays unsigned.
        let uint8 = one_byte_file("uint8", "|u1", &[2], &[0, 0xff]);
        assert_eq!(read_ids(&uint8).unwrap().data, vec![0, 255]);
        for p in [int8, mask, pairs, uint8] {
            std::fs::remove_file(p).unwrap();
        }
    }

    #[test]
    fn round_trip_and_truncation_is_detected() {
        let dir = std::env::temp_dir().join(format!("graphloom-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.npy");
        let v: Vec<f32> = (0..12).map(|i| i as f32 * 0.5).collect();
        write(&p, &v, &[3, 4]).unwrap();
        let a = read::<f32>(&p).unwrap();
        assert_eq!(a.shape, vec![3, 4]);
        assert_eq!(a.data, v);
        assert!(read::<f64>(&p)
            .unwrap_err()
            .to_string()
            .contains("dtype is <f4"));
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        let err = read::<f32>(&p).unwrap_err().to_string();
        assert!(err.contains("truncated") && err.contains("a.npy"), "{err}");
        write(&p, &[1i32, 2, 3], &[3]).unwrap();
        assert_eq!(read_ints(&p).unwrap().data, vec![1, 2, 3]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
