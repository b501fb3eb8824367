//! The OGB node-property raw layout: `raw/edge.csv.gz` (one `src,dst` per line),
//! `raw/node-feat.csv.gz`, `raw/node-label.csv.gz`, `raw/num-node-list.csv.gz`, and
//! `split/<scheme>/{train,valid,test}.csv.gz`.

use std::io::Read;
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;

use super::assemble::{assemble, name_from, Parts};
use crate::{Dataset, Error, Result};

fn read_gz(path: &Path) -> Result<String> {
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut s = String::new();
    GzDecoder::new(f)
        .read_to_string(&mut s)
        .map_err(|e| Error::format(path, format!("not a readable gzip text file: {e}")))?;
    Ok(s)
}

/// Parses every comma-separated number of every line, one row per line.
fn read_rows<T: std::str::FromStr>(path: &Path) -> Result<Vec<Vec<T>>> {
    read_gz(path)?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            l.split(',')
                .map(|tok| {
                    tok.trim().parse::<T>().map_err(|_| {
                        Error::format(
                            path,
                            format!("line {}: '{}' is not a number", i + 1, tok.trim()),
                        )
                    })
                })
                .collect()
        })
        .collect()
}

/// Converts the OGB dataset in `dir` (the folder holding `raw/` and `split/`).
pub fn convert(dir: &Path, undirected: bool) -> Result<Dataset> {
    let raw = dir.join("raw");
    let edges = read_rows::<i64>(&raw.join("edge.csv.gz"))?;
    let edge_path = raw.join("edge.csv.gz");
    let (mut src, mut dst) = (
        Vec::with_capacity(edges.len()),
        Vec::with_capacity(edges.len()),
    );
    for (i, e) in edges.iter().enumerate() {
        let [s, d] = e[..] else {
            return Err(Error::format(
                &edge_path,
                format!("line {}: expected src,dst", i + 1),
            ));
        };
        src.push(s);
        dst.push(d);
    }
    let feat_rows = read_rows::<f32>(&raw.join("node-feat.csv.gz"))?;
    let feat_dim = feat_rows.first().map_or(0, Vec::len);
    if let Some(i) = feat_rows.iter().position(|r| r.len() != feat_dim) {
        return Err(Error::format(
            raw.join("node-feat.csv.gz"),
            format!(
                "line {} has {} values, the first has {feat_dim}",
                i + 1,
                feat_rows[i].len()
            ),
        ));
    }
    let num_nodes_path = raw.join("num-node-list.csv.gz");
    let num_nodes = if num_nodes_path.exists() {
        read_rows::<usize>(&num_nodes_path)?
            .first()
            .and_then(|r| r.first().copied())
            .ok_or_else(|| Error::format(&num_nodes_path, "empty"))?
    } else {
        feat_rows.len()
    };
    let labels: Vec<i64> = read_rows::<f64>(&raw.join("node-label.csv.gz"))?
        .iter()
        .map(|r| {
            r.first()
                .map_or(-1.0, |&v| if v.is_nan() { -1.0 } else { v }) as i64
        })
        .collect();
    let split_root = dir.join("split");
    let scheme: PathBuf = std::fs::read_dir(&split_root)
        .map_err(|e| Error::io(&split_root, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.is_dir())
        .ok_or_else(|| Error::format(&split_root, "no split scheme folder"))?;
    let ids = |name: &str| -> Result<Vec<usize>> {
        Ok(read_rows::<usize>(&scheme.join(format!("{name}.csv.gz")))?
            .into_iter()
            .filter_map(|r| r.first().copied())
            .collect())
    };
    let split = [ids("train")?, ids("valid")?, ids("test")?];
    let name = name_from(dir, "ogb").replace('_', "-");
    let features = feat_rows.into_iter().flatten().collect();
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
