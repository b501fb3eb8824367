//! A dataset's link-prediction split, `link_split/` beside its arrays: which edges supervise
//! training, which are held out for validation and test (removed from the graph's CSR), and
//! the negatives that evaluation scores them against. The layout follows OGB's link datasets,
//! so a split made by another tool trains too:
//!
//! | file | dtype, shape | what |
//! |---|---|---|
//! | `train_pos.npy` | int64 `[2, E]` | supervision edges (one direction per undirected edge, `u < v`), edges of the graph |
//! | `valid_pos.npy`, `test_pos.npy` | int64 `[2, E]` | held-out edges, in no direction left in the graph |
//! | `valid_neg.npy`, `test_neg.npy` | int64 `[2, E]` | pairs that are not edges, one per positive (AUC, Hits@K) |
//! | `valid_neg_dst.npy`, `test_neg_dst.npy` | int64 `[E, K]`, optional, `K >= 1` | K negative destinations per positive (MRR) |
//!
//! No file holds a pair of a node with itself: a supervision pair or a held-out positive is a
//! link between two nodes, and negatives join two distinct nodes as PyG's sampler draws them.
//!
//! Row 0 of a `[2, E]` array holds the sources, row 1 the destinations. Int64 arrays in C
//! order are mapped, not read, so a split of billions of edges costs no memory; others (other
//! integer dtypes, or a transposed NumPy view saved as is, which is in Fortran order) are read
//! into memory, through the one reader of ids ([`npy::decode_ids`]).

use std::path::{Path, PathBuf};

use graphloom_io::MappedNpy;
use rayon::prelude::*;

use super::mapped::GraphData;
use crate::{npy, Error, NodeId, Result};

pub use super::meta::LINK_SPLIT_DIR;

/// One of the split's sets of pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkSet {
    /// Supervision edges.
    TrainPos,
    /// Held-out validation edges.
    ValidPos,
    /// Held-out test edges.
    TestPos,
    /// Validation negatives, one per positive.
    ValidNeg,
    /// Test negatives, one per positive.
    TestNeg,
}

impl LinkSet {
    /// Every set, in the order of the table in the module docs.
    pub const ALL: [LinkSet; 5] = [
        LinkSet::TrainPos,
        LinkSet::ValidPos,
        LinkSet::TestPos,
        LinkSet::ValidNeg,
        LinkSet::TestNeg,
    ];

    /// The set's file name.
    pub fn file_name(self) -> &'static str {
        match self {
            LinkSet::TrainPos => "train_pos.npy",
            LinkSet::ValidPos => "valid_pos.npy",
            LinkSet::TestPos => "test_pos.npy",
            LinkSet::ValidNeg => "valid_neg.npy",
            LinkSet::TestNeg => "test_neg.npy",
        }
    }
}

/// The file names of the validation and test negative destinations.
pub const NEG_DST_FILES: [&str; 2] = ["valid_neg_dst.npy", "test_neg_dst.npy"];

/// A 2-D int64 array: mapped from its file, or read into memory.
enum Matrix {
    Mapped(MappedNpy<i64>),
    Read(npy::NpyArray<i64>),
}

impl Matrix {
    /// Opens `path`: mapped when it is int64 in C order, else read and converted.
    fn open(path: &Path) -> Result<Matrix> {
        match MappedNpy::<i64>::open(path) {
            Ok(m) => Ok(Matrix::Mapped(m)),
            Err(_) => Ok(Matrix::Read(npy::read_int_matrix(path)?)),
        }
    }

    fn shape(&self) -> &[usize] {
        match self {
            Matrix::Mapped(m) => m.shape(),
            Matrix::Read(a) => &a.shape,
        }
    }

    fn as_slice(&self) -> &[i64] {
        match self {
            Matrix::Mapped(m) => m.as_slice(),
            Matrix::Read(a) => &a.data,
        }
    }
}

/// Pairs of nodes `[2, E]`.
pub struct Pairs {
    array: Matrix,
    path: PathBuf,
}

impl Pairs {
    /// The number of pairs.
    pub fn len(&self) -> usize {
        self.array.shape()[1]
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sources.
    pub fn src(&self) -> &[i64] {
        &self.array.as_slice()[..self.len()]
    }

    /// The destinations.
    pub fn dst(&self) -> &[i64] {
        &self.array.as_slice()[self.len()..]
    }

    /// Pair `i`, as node ids.
    pub fn get(&self, i: usize) -> (NodeId, NodeId) {
        (self.src()[i] as NodeId, self.dst()[i] as NodeId)
    }

    /// The file the pairs come from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `K` negative destinations per positive, `[E, K]`.
pub struct NegDst {
    array: Matrix,
    path: PathBuf,
}

impl NegDst {
    /// The positives they are the negatives of.
    pub fn len(&self) -> usize {
        self.array.shape()[0]
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Negatives per positive.
    pub fn per_positive(&self) -> usize {
        self.array.shape()[1]
    }

    /// The negatives of positive `i`.
    pub fn of(&self, i: usize) -> &[i64] {
        let k = self.per_positive();
        &self.array.as_slice()[i * k..(i + 1) * k]
    }
}

/// A dataset's link split, opened in place and checked.
pub struct LinkSplit {
    sets: Vec<Pairs>,
    neg_dst: [Option<NegDst>; 2],
}

impl LinkSplit {
    /// Whether `dir` holds a link split.
    pub fn exists(dir: &Path) -> bool {
        dir.join(LINK_SPLIT_DIR)
            .join(LinkSet::TrainPos.file_name())
            .exists()
    }

    /// Opens `dir/link_split/`, checking every file's dtype and shape, every id against the
    /// graph's `num_nodes`, that no pair joins a node to itself, that the negatives match their
    /// positives in number, that no held-out positive is an edge of `graph` (the
    /// message-passing graph) in either direction, and that the sets do not leak into one
    /// another ([`LinkSplit::check_disjoint`]). Each error names its file.
    pub fn open(dir: &Path, graph: GraphData<'_>) -> Result<LinkSplit> {
        let root = dir.join(LINK_SPLIT_DIR);
        let n = graph.num_nodes() as i64;
        let mut sets = Vec::new();
        for set in LinkSet::ALL {
            let path = root.join(set.file_name());
            let array = Matrix::open(&path)?;
            if array.shape().len() != 2 || array.shape()[0] != 2 {
                return Err(Error::invalid(
                    &path,
                    format!("has shape {:?}, not [2, E]", array.shape()),
                ));
            }
            if let Some(&bad) = array.as_slice().iter().find(|&&v| v < 0 || v >= n) {
                return Err(Error::invalid(
                    &path,
                    format!("holds node {bad}, outside 0..{n}"),
                ));
            }
            let pairs = Pairs { array, path };
            refuse_self_pairs(&pairs, set)?;
            sets.push(pairs);
        }
        let neg_dst = |s: usize| -> Result<Option<NegDst>> {
            let path = root.join(NEG_DST_FILES[s]);
            if !path.exists() {
                return Ok(None);
            }
            let array = Matrix::open(&path)?;
            let positives = sets[1 + s].len();
            if array.shape().len() != 2 || array.shape()[0] != positives {
                return Err(Error::invalid(
                    &path,
                    format!(
                        "has shape {:?}, not [{positives}, K] (one row per positive of {})",
                        array.shape(),
                        LinkSet::ALL[1 + s].file_name()
                    ),
                ));
            }
            if array.shape()[1] == 0 {
                return Err(Error::invalid(
                    &path,
                    format!(
                        "has shape [{positives}, 0]: K = 0 negative destinations per positive \
                         leaves MRR nothing to rank; give K >= 1, or no file"
                    ),
                ));
            }
            if let Some(&bad) = array.as_slice().iter().find(|&&v| v < 0 || v >= n) {
                return Err(Error::invalid(
                    &path,
                    format!("holds node {bad}, outside 0..{n}"),
                ));
            }
            Ok(Some(NegDst { array, path }))
        };
        let split = LinkSplit {
            neg_dst: [neg_dst(0)?, neg_dst(1)?],
            sets,
        };
        if let [Some(_), None] | [None, Some(_)] = &split.neg_dst {
            let (have, missing) = match split.neg_dst[0] {
                Some(_) => (NEG_DST_FILES[0], NEG_DST_FILES[1]),
                None => (NEG_DST_FILES[1], NEG_DST_FILES[0]),
            };
            return Err(Error::invalid(
                root.join(missing),
                format!(
                    "is missing while {have} is there: MRR needs the negative destinations of \
                     both held-out splits (or of neither)"
                ),
            ));
        }
        for set in [LinkSet::ValidPos, LinkSet::TestPos] {
            if split.pairs(set).is_empty() {
                return Err(Error::invalid(
                    split.pairs(set).path(),
                    "holds no pairs: model selection and the test metrics need held-out edges",
                ));
            }
        }
        for (pos, neg) in [
            (LinkSet::ValidPos, LinkSet::ValidNeg),
            (LinkSet::TestPos, LinkSet::TestNeg),
        ] {
            let (p, q) = (split.pairs(pos), split.pairs(neg));
            if p.len() != q.len() {
                return Err(Error::invalid(
                    q.path(),
                    format!(
                        "holds {} pairs for the {} positives of {}: give one negative per positive",
                        q.len(),
                        p.len(),
                        pos.file_name()
                    ),
                ));
            }
        }
        split.check_disjoint(graph)?;
        for set in [LinkSet::ValidPos, LinkSet::TestPos] {
            let pairs = split.pairs(set);
            for i in 0..pairs.len() {
                let (u, v) = pairs.get(i);
                if graph.has_edge(u, v) || graph.has_edge(v, u) {
                    return Err(Error::invalid(
                        pairs.path(),
                        format!(
                            "pair {i} ({u}, {v}) is still an edge of the graph: a held-out \
                             edge must be removed from csr_col_idx.npy in both directions"
                        ),
                    ));
                }
            }
        }
        Ok(split)
    }

    /// Checks that the sets do not leak into one another: no held-out positive is a
    /// supervision pair or a positive of the other held-out split, and no negative is an edge
    /// of the graph or a held-out positive, nor is any negative destination `w` of a positive
    /// `(u, v)`: `(u, w)` is neither (pairs compared in either direction).
    fn check_disjoint(&self, graph: GraphData<'_>) -> Result<()> {
        let held = HeldOut::new(self);
        let fail = |pairs: &Pairs, i: usize, why: String| {
            let (u, v) = pairs.get(i);
            Err(Error::invalid(
                pairs.path(),
                format!("pair {i} ({u}, {v}) {why}"),
            ))
        };
        let train = self.pairs(LinkSet::TrainPos);
        for i in 0..train.len() {
            if let Some(set) = held.of(train.get(i)) {
                return fail(
                    train,
                    i,
                    format!(
                        "is a held-out positive of {}: it leaks into training",
                        set.file_name()
                    ),
                );
            }
        }
        let test_pos = self.pairs(LinkSet::TestPos);
        for i in 0..test_pos.len() {
            if held.valid.binary_search(&key(test_pos.get(i))).is_ok() {
                return fail(
                    test_pos,
                    i,
                    format!("is a positive of {} too", LinkSet::ValidPos.file_name()),
                );
            }
        }
        for set in [LinkSet::ValidNeg, LinkSet::TestNeg] {
            let negatives = self.pairs(set);
            for i in 0..negatives.len() {
                if let Some(why) = leak(graph, &held, negatives.get(i)) {
                    return fail(negatives, i, format!("{why}: a negative must not be one"));
                }
            }
        }
        for (s, set) in [LinkSet::ValidPos, LinkSet::TestPos]
            .into_iter()
            .enumerate()
        {
            if let Some(neg_dst) = &self.neg_dst[s] {
                check_neg_dst(neg_dst, self.pairs(set), graph, &held)?;
            }
        }
        Ok(())
    }

    /// The pairs of `set`.
    pub fn pairs(&self, set: LinkSet) -> &Pairs {
        &self.sets[LinkSet::ALL.iter().position(|&s| s == set).unwrap_or(0)]
    }

    /// The negative destinations of the validation (`test` false) or test positives, when the
    /// split has them.
    pub fn neg_dst(&self, test: bool) -> Option<&NegDst> {
        self.neg_dst[usize::from(test)].as_ref()
    }
}

/// A pair as a key equal for both its directions.
fn key((u, v): (NodeId, NodeId)) -> u64 {
    (u64::from(u.min(v)) << 32) | u64::from(u.max(v))
}

/// The held-out positives, keyed by [`key`] and sorted, to tell whether a pair is one.
struct HeldOut {
    valid: Vec<u64>,
    test: Vec<u64>,
}

impl HeldOut {
    fn new(split: &LinkSplit) -> HeldOut {
        let keys = |set: LinkSet| -> Vec<u64> {
            let pairs = split.pairs(set);
            let mut keys: Vec<u64> = (0..pairs.len()).map(|i| key(pairs.get(i))).collect();
            keys.sort_unstable();
            keys
        };
        HeldOut {
            valid: keys(LinkSet::ValidPos),
            test: keys(LinkSet::TestPos),
        }
    }

    /// The held-out set `pair` is a positive of, in either direction.
    fn of(&self, pair: (NodeId, NodeId)) -> Option<LinkSet> {
        let k = key(pair);
        if self.valid.binary_search(&k).is_ok() {
            Some(LinkSet::ValidPos)
        } else if self.test.binary_search(&k).is_ok() {
            Some(LinkSet::TestPos)
        } else {
            None
        }
    }
}

/// Why the pair `(u, v)` cannot be a negative: it is an edge of `graph` or a held-out
/// positive, in either direction; `None` when it can.
fn leak(graph: GraphData<'_>, held: &HeldOut, (u, v): (NodeId, NodeId)) -> Option<String> {
    if graph.has_edge(u, v) || graph.has_edge(v, u) {
        Some("is an edge of the graph".to_string())
    } else {
        held.of((u, v))
            .map(|set| format!("is a held-out positive of {}", set.file_name()))
    }
}

/// Refuses a pair of a node with itself in `pairs`, the pairs of `set`: a supervision pair or
/// a held-out positive is a link between two nodes, and a negative joins two distinct nodes
/// (PyG's negative sampler never draws a pair of a node with itself).
fn refuse_self_pairs(pairs: &Pairs, set: LinkSet) -> Result<()> {
    let Some(i) = (0..pairs.len()).find(|&i| pairs.src()[i] == pairs.dst()[i]) else {
        return Ok(());
    };
    let why = match set {
        LinkSet::TrainPos | LinkSet::ValidPos | LinkSet::TestPos => {
            "is a self-loop: a link to learn or predict joins two nodes"
        }
        LinkSet::ValidNeg | LinkSet::TestNeg => {
            "is a self-pair: a negative joins two distinct nodes"
        }
    };
    let (u, v) = pairs.get(i);
    Err(Error::invalid(
        pairs.path(),
        format!("pair {i} ({u}, {v}) {why}"),
    ))
}

/// Refuses a negative destination `w` of a positive `(u, v)` of `positives` that is `u`
/// itself, `v`, or joined to `u` by an edge of `graph` or a held-out positive (either
/// direction), naming the first such row; rows are checked in parallel.
fn check_neg_dst(
    neg_dst: &NegDst,
    positives: &Pairs,
    graph: GraphData<'_>,
    held: &HeldOut,
) -> Result<()> {
    let why = |(u, v): (NodeId, NodeId), w: NodeId| -> Option<String> {
        if w == u {
            Some("the source itself: a self-pair; a negative joins two distinct nodes".into())
        } else if w == v {
            Some("the positive's own destination: a negative must not be the positive".into())
        } else {
            leak(graph, held, (u, w))
                .map(|why| format!("and ({u}, {w}) {why}: a negative must not be one"))
        }
    };
    let bad = (0..neg_dst.len()).into_par_iter().find_map_first(|i| {
        let pair = positives.get(i);
        neg_dst.of(i).iter().find_map(|&w| {
            let w = w as NodeId;
            why(pair, w).map(|why| (i, pair, w, why))
        })
    });
    match bad {
        None => Ok(()),
        Some((i, (u, v), w, why)) => Err(Error::invalid(
            &neg_dst.path,
            format!("row {i} (the negatives of ({u}, {v})) holds {w}, {why}"),
        )),
    }
}
