//! [`NodeTargets`]: what a node is trained to predict besides one class. `node_label.npy`
//! holds one class per node (i64, -1 for none) for node classification; when it is 2-D or
//! holds floats it holds targets instead:
//!
//! - `[N, T]` integers of 0, 1 or -1: T binary labels per node, -1 for a missing one
//!   (multi-label, ogbn-proteins' shape);
//! - `[N]` or `[N, T]` f32 or f64: real targets, NaN for a missing one (regression).
//!
//! `meta.json`'s `num_classes` is then T, the width of the model's output.

use std::path::Path;

use crate::{npy, Error, Result};

/// What a dataset's targets are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// Binary labels, 0 or 1 (multi-label classification).
    Binary,
    /// Real values (regression).
    Real,
}

impl TargetKind {
    /// How the kind is named in messages.
    pub fn describe(self) -> &'static str {
        match self {
            TargetKind::Binary => "binary labels of 0/1 (multi-label)",
            TargetKind::Real => "real targets (regression)",
        }
    }
}

/// Every node's targets, `width` per node in node order, NaN for a missing one.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeTargets {
    /// Targets per node (T).
    pub width: usize,
    /// `[num_nodes, width]` row-major; NaN marks a missing target.
    pub values: Vec<f32>,
    /// What they are.
    pub kind: TargetKind,
}

/// What the labels of the dataset directory `dir` (of `num_classes` in its `meta.json`) are,
/// in words: "7 classes", "112 binary labels per node (multi-label)" or "1 real target per
/// node (regression)"; from `node_label.npy`'s header, so any size is read at once.
pub fn describe_labels(dir: &Path, num_classes: usize) -> String {
    let header = npy::read_header(&dir.join("node_label.npy"));
    match header.ok().filter(|h| NodeTargets::held_by(h, num_classes)) {
        None => format!("{num_classes} classes"),
        Some(h) => {
            let (what, task) = match h.dtype {
                npy::NpyDType::F32 | npy::NpyDType::F64 => ("real target", "regression"),
                _ => ("binary label", "multi-label"),
            };
            let plural = if num_classes == 1 { "" } else { "s" };
            format!("{num_classes} {what}{plural} per node ({task})")
        }
    }
}

impl NodeTargets {
    /// Whether a `node_label.npy` of `header`, in a dataset of `num_classes` (its
    /// `meta.json`'s), holds targets rather than one class per node: floats, or integers of
    /// more than one column. Integers `[N, 1]` are classes (OGB's raw labels have that shape)
    /// unless `num_classes` is 1, one binary label.
    pub fn held_by(header: &npy::NpyHeader, num_classes: usize) -> bool {
        match (header.dtype, header.shape.as_slice()) {
            (npy::NpyDType::F32 | npy::NpyDType::F64, _) => true,
            (_, [_]) => false,
            (_, [_, 1]) => num_classes == 1,
            _ => true,
        }
    }

    /// Reads the targets of `num_nodes` nodes from `path` (whose header [`NodeTargets::held_by`]
    /// accepted), `width` per node as `meta.json` says. Integers must be 0, 1 or -1 (missing),
    /// floats finite or NaN (missing).
    pub fn read(path: &Path, num_nodes: usize, width: usize) -> Result<NodeTargets> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let header = npy::parse_header(&bytes, path)?;
        let columns = match header.shape.as_slice() {
            [_] => 1,
            [_, t] => *t,
            shape => {
                return Err(Error::invalid(
                    path,
                    format!("has shape {shape:?}: labels are [N], or [N, T] targets"),
                ))
            }
        };
        if header.shape[0] != num_nodes {
            return Err(Error::invalid(
                path,
                format!("has {} rows for {num_nodes} nodes", header.shape[0]),
            ));
        }
        if columns != width {
            return Err(Error::invalid(
                path,
                format!(
                    "has {columns} targets per node, meta.json says num_classes = {width} (the \
                     number of targets)"
                ),
            ));
        }
        let real = matches!(header.dtype, npy::NpyDType::F32 | npy::NpyDType::F64);
        let raw = npy::decode_f64(&bytes, path)?.data;
        let at = |i: usize| format!("node {}, target {}", i / columns.max(1), i % columns.max(1));
        let values = if real {
            if let Some(i) = raw.iter().position(|v| v.is_infinite()) {
                return Err(Error::invalid(
                    path,
                    format!(
                        "{} is {}: targets are finite, or NaN for missing",
                        at(i),
                        raw[i]
                    ),
                ));
            }
            raw.iter().map(|&v| v as f32).collect()
        } else {
            if let Some(i) = raw.iter().position(|&v| v != 0.0 && v != 1.0 && v != -1.0) {
                return Err(Error::invalid(
                    path,
                    format!(
                        "{} is {}: multi-label labels are 0, 1 or -1 (missing); store \
                         regression targets as floats",
                        at(i),
                        raw[i]
                    ),
                ));
            }
            raw.iter()
                .map(|&v| if v < 0.0 { f32::NAN } else { v as f32 })
                .collect()
        };
        Ok(NodeTargets {
            width,
            values,
            kind: if real {
                TargetKind::Real
            } else {
                TargetKind::Binary
            },
        })
    }

    /// Writes them to `path` as [`NodeTargets::read`] reads them: binary labels as i8 (-1
    /// missing), real targets as f32 (`[N]` when there is one per node).
    pub fn write(&self, path: &Path) -> Result<()> {
        let rows = self.num_nodes();
        match self.kind {
            TargetKind::Binary => {
                let v: Vec<i8> = self
                    .values
                    .iter()
                    .map(|&x| if x.is_nan() { -1 } else { x as i8 })
                    .collect();
                npy::write(path, &v, &[rows, self.width])?
            }
            TargetKind::Real if self.width == 1 => npy::write(path, &self.values, &[rows])?,
            TargetKind::Real => npy::write(path, &self.values, &[rows, self.width])?,
        }
        Ok(())
    }

    /// The number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.values.len().checked_div(self.width).unwrap_or(0)
    }

    /// The targets of node `v`.
    pub fn row(&self, v: usize) -> &[f32] {
        &self.values[v * self.width..(v + 1) * self.width]
    }

    /// How many targets of node `v` are present.
    pub fn present(&self, v: usize) -> usize {
        self.row(v).iter().filter(|x| !x.is_nan()).count()
    }

    /// One marker per node in the place of a class: 0 where the node has a target, -1 where it
    /// has none, so that the splits are checked as a classification's are (a split node must
    /// have something to learn).
    pub fn markers(&self) -> Vec<i64> {
        (0..self.num_nodes())
            .map(|v| if self.present(v) > 0 { 0 } else { -1 })
            .collect()
    }

    /// The targets of `nodes`, one row each, row-major.
    pub fn rows_of(&self, nodes: impl IntoIterator<Item = usize>) -> Vec<f32> {
        nodes
            .into_iter()
            .flat_map(|v| self.row(v).iter().copied())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved(name: &str, write: impl FnOnce(&Path)) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("graphloom-targets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        write(&path);
        path
    }

    #[test]
    fn binary_labels_read_with_missing_as_nan_and_write_back() {
        let path = saved("binary.npy", |p| {
            npy::write(p, &[1i64, 0, -1, 1, -1, -1], &[3, 2]).unwrap()
        });
        let t = NodeTargets::read(&path, 3, 2).unwrap();
        assert_eq!(t.kind, TargetKind::Binary);
        assert_eq!(t.row(0), &[1.0, 0.0]);
        assert!(t.row(1)[0].is_nan());
        assert_eq!(t.markers(), vec![0, 0, -1]);
        t.write(&path).unwrap();
        let back = NodeTargets::read(&path, 3, 2).unwrap();
        assert_eq!(back.markers(), t.markers());
        assert_eq!(back.row(0), t.row(0));
    }

    #[test]
    fn one_integer_column_is_classes_unless_there_is_one_label() {
        let header = |dtype, shape: &[usize]| npy::NpyHeader {
            dtype,
            shape: shape.to_vec(),
            data_offset: 128,
        };
        use npy::NpyDType::{F32, I64};
        // OGB's raw labels are [N, 1] classes.
        assert!(!NodeTargets::held_by(&header(I64, &[5, 1]), 7));
        assert!(NodeTargets::held_by(&header(I64, &[5, 1]), 1));
        assert!(NodeTargets::held_by(&header(I64, &[5, 3]), 3));
        assert!(!NodeTargets::held_by(&header(I64, &[5]), 7));
        assert!(NodeTargets::held_by(&header(F32, &[5]), 1));
    }

    #[test]
    fn wrong_shapes_and_values_name_what_is_wrong() {
        let path = saved("bad.npy", |p| {
            npy::write(p, &[1i64, 2, 0, 1], &[2, 2]).unwrap()
        });
        let e = NodeTargets::read(&path, 2, 2).unwrap_err().to_string();
        assert!(e.contains("node 0, target 1 is 2"), "{e}");
        let e = NodeTargets::read(&path, 3, 2).unwrap_err().to_string();
        assert!(e.contains("has 2 rows for 3 nodes"), "{e}");
        let e = NodeTargets::read(&path, 2, 5).unwrap_err().to_string();
        assert!(e.contains("num_classes = 5"), "{e}");
        let path = saved("inf.npy", |p| {
            npy::write(p, &[0.5f32, f32::INFINITY], &[2]).unwrap()
        });
        let e = NodeTargets::read(&path, 2, 1).unwrap_err().to_string();
        assert!(e.contains("node 1, target 0 is inf"), "{e}");
    }
}
