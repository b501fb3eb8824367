//! The folders that other tools download datasets into, recognised so that a user who points
//! GraphLoom at one is told which `graphloom prepare` command converts it: PyG's `Planetoid`
//! (`root/Cora/raw/ind.cora.x`), OGB's (`ogbn_arxiv/raw/edge.csv.gz`, `split/`) and a PyG
//! dataset's `processed/` files.

use std::path::{Path, PathBuf};

/// `dir` and the folders directly in it (a root of several datasets, as the `root` arguments
/// of PyG's and OGB's dataset classes make).
fn dir_and_children(dir: &Path) -> Vec<PathBuf> {
    let mut children: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n != "raw"))
        .collect();
    children.sort();
    std::iter::once(dir.to_path_buf()).chain(children).collect()
}

/// The folders under `dir` where raw files may sit: each of [`dir_and_children`], and its
/// `raw/` folder.
fn candidate_folders(dir: &Path) -> Vec<PathBuf> {
    dir_and_children(dir)
        .into_iter()
        .flat_map(|d| [d.join("raw"), d])
        .collect()
}

/// The raw Planetoid datasets under `dir`: each folder holding `ind.NAME.x` and the NAME its
/// files spell, in the order of [`candidate_folders`].
pub fn planetoid_sets(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    for folder in candidate_folders(dir) {
        let mut names: Vec<String> = std::fs::read_dir(&folder)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|f| Some(f.strip_prefix("ind.")?.strip_suffix(".x")?.to_string()))
            .filter(|n| !n.is_empty() && !n.contains('.'))
            .collect();
        names.sort();
        found.extend(names.into_iter().map(|n| (folder.clone(), n)));
    }
    found
}

/// The folder under `dir` that holds OGB's raw layout (`raw/` beside `split/`, or the
/// `raw/data.npz` of the largest datasets).
fn ogb_folder(dir: &Path) -> Option<PathBuf> {
    dir_and_children(dir).into_iter().find(|d| {
        d.join("raw/edge.csv.gz").exists()
            || d.join("raw/data.npz").exists()
            || (d.join("raw").is_dir() && d.join("split").is_dir())
    })
}

/// Whether `dir` (or a folder in it) holds a PyG dataset's `processed/*.pt` files.
fn has_pyg_processed(dir: &Path) -> bool {
    dir_and_children(dir).iter().any(|d| {
        std::fs::read_dir(d.join("processed"))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .any(|e| e.path().extension().is_some_and(|x| x == "pt"))
    })
}

/// What to run to make a dataset directory from `dir` when it is another tool's download,
/// as a sentence for an error about `dir`.
pub(crate) fn conversion_hint(dir: &Path) -> Option<String> {
    let shown = dir.display();
    if let Some((_, name)) = planetoid_sets(dir).first() {
        return Some(format!(
            "it holds the raw Planetoid files of {name} (PyG's Planetoid layout): convert them \
             with `graphloom prepare planetoid --raw {shown} --name {name} --out DIR`"
        ));
    }
    if let Some(ogb) = ogb_folder(dir) {
        return Some(format!(
            "it holds an OGB dataset: convert it with `graphloom prepare ogb --raw {} --out DIR` \
             (add --undirected for ogbn-arxiv)",
            ogb.display()
        ));
    }
    if has_pyg_processed(dir) {
        return Some(
            "it holds a PyG dataset's processed files: load the dataset in PyG and write it with \
             `graphloom.Dataset.from_pyg(dataset[0], DIR)` (Python)"
                .into(),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("graphloom-layout-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn pyg_and_ogb_downloads_are_recognised() {
        let root = scratch("pyg");
        std::fs::create_dir_all(root.join("Cora/raw")).unwrap();
        std::fs::write(root.join("Cora/raw/ind.cora.x"), b"").unwrap();
        assert_eq!(
            planetoid_sets(&root),
            vec![(root.join("Cora/raw"), "cora".into())]
        );
        assert_eq!(
            planetoid_sets(&root.join("Cora")),
            vec![(root.join("Cora/raw"), "cora".into())]
        );
        let hint = conversion_hint(&root).unwrap();
        assert!(
            hint.contains("prepare planetoid") && hint.contains("--name cora"),
            "{hint}"
        );

        let ogb = scratch("ogb");
        std::fs::create_dir_all(ogb.join("ogbn_arxiv/raw")).unwrap();
        std::fs::create_dir_all(ogb.join("ogbn_arxiv/split/time")).unwrap();
        let hint = conversion_hint(&ogb).unwrap();
        assert!(
            hint.contains("prepare ogb --raw") && hint.contains("ogbn_arxiv"),
            "{hint}"
        );

        let processed = scratch("processed");
        std::fs::create_dir_all(processed.join("processed")).unwrap();
        std::fs::write(processed.join("processed/data.pt"), b"").unwrap();
        assert!(conversion_hint(&processed).unwrap().contains("from_pyg"));
        let empty = scratch("empty");
        assert_eq!(conversion_hint(&empty), None);
        for d in [root, ogb, processed, empty] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }
}
