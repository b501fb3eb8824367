//! A split the user brings: train, validation and test nodes read from files (one each) or
//! from one `.npz` archive, each as node ids or as a boolean mask over the nodes, instead of a
//! converter's seeded random split.
//!
//! A file is a `.npy` array (integer ids of any integer dtype, or a bool mask of one entry per
//! node) or text with one id per line (`#` comments; gzip when it ends in `.gz`, as OGB's
//! `split/*/train.csv.gz`). An archive holds `train_idx`, `valid_idx` and `test_idx` (PyG's and
//! OGB's names: `train`/`valid`/`val`/`test`, with `_idx` or `_mask`, are read too).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;

use graphloom_graph::format::dataset::check_split_ids;
use graphloom_graph::npy::{self, NpyDType};
use graphloom_graph::{Error, Result};

/// Where a user's split comes from.
#[derive(Clone, Copy, Debug)]
pub enum SplitSource<'a> {
    /// One file per split (train, validation, test); a split without a file is empty.
    Files([Option<&'a Path>; 3]),
    /// One `.npz` archive holding the three arrays.
    Npz(&'a Path),
}

/// The names an archive's array of each split may have, in the order they are looked for.
const NPZ_NAMES: [&[&str]; 3] = [
    &["train_idx", "train", "train_mask"],
    &[
        "valid_idx",
        "val_idx",
        "valid",
        "val",
        "valid_mask",
        "val_mask",
    ],
    &["test_idx", "test", "test_mask"],
];

impl<'a> SplitSource<'a> {
    /// The files read, for the checks that an output replaces none of them.
    pub fn paths(&self) -> Vec<&'a Path> {
        match self {
            SplitSource::Files(files) => files.iter().flatten().copied().collect(),
            SplitSource::Npz(p) => vec![p],
        }
    }

    /// The train, validation and test ids over `labels.len()` nodes, in the order given;
    /// refuses an id out of range, a node twice in a split or in two splits, and a split node
    /// without a label (-1).
    pub fn read(&self, labels: &[i64]) -> Result<[Vec<usize>; 3]> {
        let n = labels.len();
        let (splits, names): ([Vec<usize>; 3], [PathBuf; 3]) = match self {
            SplitSource::Files(files) => {
                let mut splits: [Vec<usize>; 3] = Default::default();
                let mut names: [PathBuf; 3] = Default::default();
                for s in 0..3 {
                    if let Some(p) = files[s] {
                        splits[s] = read_file(p, n)?;
                        names[s] = p.to_path_buf();
                    }
                }
                (splits, names)
            }
            SplitSource::Npz(path) => read_npz(path, n)?,
        };
        check_split_ids(names, [&splits[0], &splits[1], &splits[2]], labels)?;
        Ok(splits)
    }
}

/// Ids from the `.npy` bytes `bytes` (read from `origin`): integer ids, or a bool mask over
/// the `n` nodes.
fn ids_of_npy(bytes: &[u8], origin: &Path, n: usize) -> Result<Vec<usize>> {
    let header = npy::parse_header(bytes, origin)?;
    if header.shape.len() != 1 {
        return Err(Error::format(
            origin,
            format!(
                "shape {:?}: a split is a 1-D array of node ids or a mask",
                header.shape
            ),
        ));
    }
    if header.dtype != NpyDType::Bool {
        return in_range(npy::decode_ids(bytes, origin)?.data, origin, n);
    }
    let mask = npy::decode_mask(bytes, origin)?.data;
    if mask.len() != n {
        return Err(Error::invalid(
            origin,
            format!(
                "a mask of {} entries for {n} nodes (a boolean mask has one per node)",
                mask.len()
            ),
        ));
    }
    Ok((0..n).filter(|&v| mask[v]).collect())
}

/// `values` as node ids, refusing one outside `0..n`.
fn in_range(values: Vec<i64>, origin: &Path, n: usize) -> Result<Vec<usize>> {
    if let Some(&bad) = values.iter().find(|&&v| v < 0 || v as u64 >= n as u64) {
        return Err(Error::invalid(
            origin,
            format!("node {bad} is not in 0..{n}"),
        ));
    }
    Ok(values.into_iter().map(|v| v as usize).collect())
}

/// The ids of one split file.
fn read_file(path: &Path, n: usize) -> Result<Vec<usize>> {
    if path.extension().is_some_and(|e| e == "npy") {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        return ids_of_npy(&bytes, path, n);
    }
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let stream: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut values = Vec::new();
    for (i, line) in BufReader::new(stream).lines().enumerate() {
        let line = line.map_err(|e| Error::format(path, format!("not a text file of ids: {e}")))?;
        let word = line.split('#').next().unwrap_or("").trim();
        // OGB's csv files have one column; a header line has a name, not a number.
        let word = word.split(',').next().unwrap_or("").trim();
        if word.is_empty() {
            continue;
        }
        values.push(word.parse::<i64>().map_err(|_| {
            Error::format(path, format!("line {}: '{word}' is not a node id", i + 1))
        })?);
    }
    in_range(values, path, n)
}

/// The three splits of an `.npz` archive, and the names they are known by in errors.
fn read_npz(path: &Path, n: usize) -> Result<([Vec<usize>; 3], [PathBuf; 3])> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut zip = zip::ZipArchive::new(file)
        .map_err(|e| Error::format(path, format!("not an .npz archive: {e}")))?;
    let members: Vec<String> = zip.file_names().map(String::from).collect();
    let mut splits: [Vec<usize>; 3] = Default::default();
    let mut names: [PathBuf; 3] = Default::default();
    for s in 0..3 {
        let Some(name) = NPZ_NAMES[s]
            .iter()
            .find(|k| members.iter().any(|m| m == &format!("{k}.npy")))
        else {
            return Err(Error::format(
                path,
                format!(
                    "no array named {} (found {})",
                    NPZ_NAMES[s].join(", "),
                    members.join(", ")
                ),
            ));
        };
        let origin = path.join(name);
        let mut bytes = Vec::new();
        zip.by_name(&format!("{name}.npy"))
            .and_then(|mut e| Ok(e.read_to_end(&mut bytes)?))
            .map_err(|e| Error::format(&origin, e.to_string()))?;
        splits[s] = ids_of_npy(&bytes, &origin, n)?;
        names[s] = origin;
    }
    Ok((splits, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("graphloom-split-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A `.npy` of numpy's bool dtype.
    fn write_bool_mask(path: &Path, mask: &[bool]) {
        let bytes: Vec<u8> = mask.iter().map(|&b| u8::from(b)).collect();
        npy::write(path, &bytes, &[mask.len()]).unwrap();
        let mut file = std::fs::read(path).unwrap();
        let at = file.windows(5).position(|w| w == b"'|u1'").unwrap();
        file[at..at + 5].copy_from_slice(b"'|b1'");
        std::fs::write(path, file).unwrap();
    }

    #[test]
    fn ids_masks_and_text_are_read() {
        let d = dir("files");
        let (train, valid, test) = (d.join("train.npy"), d.join("valid.npy"), d.join("test.txt"));
        npy::write(&train, &[4i64, 0, 2], &[3]).unwrap();
        write_bool_mask(&valid, &[false, true, false, false, false, false]);
        std::fs::write(&test, "# test nodes\n3\n5\n").unwrap();
        let source = SplitSource::Files([Some(&train), Some(&valid), Some(&test)]);
        let splits = source.read(&[0; 6]).unwrap();
        assert_eq!(splits, [vec![4, 0, 2], vec![1], vec![3, 5]]);
        let only_train = SplitSource::Files([Some(&train), None, None]);
        assert_eq!(
            only_train.read(&[0; 6]).unwrap(),
            [vec![4, 0, 2], vec![], vec![]]
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn int8_ids_are_signed_and_uint8_ones_are_not_a_mask() {
        let d = dir("one-byte");
        let (train, valid) = (d.join("train.npy"), d.join("valid.npy"));
        npy::write(&valid, &[1u8, 5], &[2]).unwrap();
        npy::write(&train, &[4i8, -1], &[2]).unwrap();
        let source = SplitSource::Files([None, Some(&valid), None]);
        assert_eq!(source.read(&[0; 6]).unwrap(), [vec![], vec![1, 5], vec![]]);
        let source = SplitSource::Files([Some(&train), None, None]);
        let err = source.read(&[0; 6]).unwrap_err().to_string();
        assert!(
            err.contains("train.npy") && err.contains("node -1 is not in 0..6"),
            "{err}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_npz_of_pyg_masks_is_read() {
        use std::io::Write;
        let d = dir("npz");
        let member = |name: &str, write: &dyn Fn(&Path)| -> Vec<u8> {
            let p = d.join(name);
            write(&p);
            std::fs::read(&p).unwrap()
        };
        let path = d.join("split.npz");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        let arrays: [(&str, Vec<u8>); 3] = [
            (
                "train_mask",
                member("t.npy", &|p| write_bool_mask(p, &[true, false, true])),
            ),
            (
                "val_mask",
                member("v.npy", &|p| write_bool_mask(p, &[false, true, false])),
            ),
            (
                "test_idx",
                member("s.npy", &|p| npy::write(p, &[0i64; 0], &[0]).unwrap()),
            ),
        ];
        for (name, bytes) in arrays {
            zip.start_file(format!("{name}.npy"), options).unwrap();
            zip.write_all(&bytes).unwrap();
        }
        zip.finish().unwrap();
        let splits = SplitSource::Npz(&path).read(&[0; 3]).unwrap();
        assert_eq!(splits, [vec![0, 2], vec![1], vec![]]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn overlapping_or_out_of_range_splits_are_refused_naming_the_file() {
        let d = dir("bad");
        let (train, valid) = (d.join("train.npy"), d.join("valid.npy"));
        npy::write(&train, &[1i64, 2], &[2]).unwrap();
        npy::write(&valid, &[2i64], &[1]).unwrap();
        let err = SplitSource::Files([Some(&train), Some(&valid), None])
            .read(&[0; 4])
            .unwrap_err()
            .to_string();
        assert!(err.contains("valid.npy") && err.contains("node 2"), "{err}");
        let err = SplitSource::Files([Some(&train), None, None])
            .read(&[0; 2])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("train.npy") && err.contains("node 2 is not in 0..2"),
            "{err}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
