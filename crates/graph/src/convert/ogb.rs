//! The OGB node-property raw layout: `raw/edge.csv.gz` (one `src,dst` per line),
//! `raw/node-feat.csv.gz`, `raw/node-label.csv.gz`, `raw/num-node-list.csv.gz`, and
//! `split/<scheme>/{train,valid,test}.csv.gz`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;

use super::assemble::{assemble, name_from, Parts};
use crate::{Dataset, Error, Result};

/// Calls `row(line_number, values)` with the comma-separated numbers of each non-empty line
/// of the gzip text file `path`, read as a stream: memory holds one line, not the file.
fn for_each_row<T: std::str::FromStr>(
    path: &Path,
    mut row: impl FnMut(usize, &[T]) -> Result<()>,
) -> Result<()> {
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut reader = BufReader::with_capacity(1 << 20, GzDecoder::new(f));
    let (mut line, mut values) = (String::new(), Vec::new());
    let mut number = 0;
    loop {
        line.clear();
        let read = reader
            .read_line(&mut line)
            .map_err(|e| Error::format(path, format!("not a readable gzip text file: {e}")))?;
        if read == 0 {
            return Ok(());
        }
        number += 1;
        if line.trim().is_empty() {
            continue;
        }
        values.clear();
        for tok in line.trim().split(',') {
            values.push(tok.trim().parse::<T>().map_err(|_| {
                Error::format(
                    path,
                    format!("line {number}: '{}' is not a number", tok.trim()),
                )
            })?);
        }
        row(number, &values)?;
    }
}

/// The first value of every row.
fn first_values<T: std::str::FromStr + Copy>(path: &Path) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for_each_row::<T>(path, |_, r| {
        out.extend(r.first().copied());
        Ok(())
    })?;
    Ok(out)
}

/// Converts the OGB dataset in `dir` (the folder holding `raw/` and `split/`).
pub fn convert(dir: &Path, undirected: bool) -> Result<Dataset> {
    let raw = dir.join("raw");
    let edge_path = raw.join("edge.csv.gz");
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for_each_row::<i64>(&edge_path, |line, e| {
        let [s, d] = e[..] else {
            return Err(Error::format(
                &edge_path,
                format!("line {line}: expected src,dst"),
            ));
        };
        src.push(s);
        dst.push(d);
        Ok(())
    })?;
    let feat_path = raw.join("node-feat.csv.gz");
    let (mut features, mut feat_dim, mut rows) = (Vec::new(), None, 0usize);
    for_each_row::<f32>(&feat_path, |line, r| {
        let dim = *feat_dim.get_or_insert(r.len());
        if r.len() != dim {
            return Err(Error::format(
                &feat_path,
                format!("line {line} has {} values, the first has {dim}", r.len()),
            ));
        }
        features.extend_from_slice(r);
        rows += 1;
        Ok(())
    })?;
    let feat_dim = feat_dim.unwrap_or(0);
    let num_nodes_path = raw.join("num-node-list.csv.gz");
    let num_nodes = if num_nodes_path.exists() {
        *first_values::<usize>(&num_nodes_path)?
            .first()
            .ok_or_else(|| Error::format(&num_nodes_path, "empty"))?
    } else {
        rows
    };
    // Unlabelled nodes are NaN in OGB's files (papers100M labels 1.4% of its nodes).
    let labels: Vec<i64> = first_values::<f64>(&raw.join("node-label.csv.gz"))?
        .into_iter()
        .map(|v| if v.is_nan() { -1 } else { v as i64 })
        .collect();
    let split_root = dir.join("split");
    let scheme: PathBuf = std::fs::read_dir(&split_root)
        .map_err(|e| Error::io(&split_root, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.is_dir())
        .ok_or_else(|| Error::format(&split_root, "no split scheme folder"))?;
    let ids = |name: &str| first_values::<usize>(&scheme.join(format!("{name}.csv.gz")));
    let split = [ids("train")?, ids("valid")?, ids("test")?];
    let name = name_from(dir, "ogb").replace('_', "-");
    assemble(
        Parts {
            name,
            num_nodes,
            src,
            dst,
            features,
            feat_dim,
            labels: Some(labels),
            split: Some(split),
            undirected,
            seed: 0,
        },
        dir,
    )
}
