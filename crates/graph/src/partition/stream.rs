//! A streaming partitioner for graphs METIS cannot take: Fennel's one-pass placement
//! (Tsourakakis et al., WSDM 2014), restreamed with every neighbour's part known (Nishimura and
//! Ugander, KDD 2013), then refined by label propagation that moves a node only when it cuts
//! fewer edges and the balance allows it.
//!
//! Each pass reads the CSR once, in node order, and holds only the part of every node (4 bytes
//! a node), a bit per node for the training set and the loads of the parts: a mapped graph
//! costs page cache, not memory, and ids are not bounded by METIS's 32-bit counts.
//!
//! A node's neighbours are its in-neighbours (the dataset's CSR is by destination): for a graph
//! stored both ways, as `prepare` stores undirected graphs, that is every neighbour.

use graphloom_tensor::rng::mix64;
use rayon::prelude::*;

use super::coarse::split_groups;
use super::groups::{group, Groups};
use super::{check_parts, Partition};
use crate::format::mapped::GraphData;
use crate::{Error, NodeId, Result};

/// Fennel's exponent: the cost of a part of `x` nodes is `alpha * x^GAMMA`.
const GAMMA: f64 = 1.5;

/// A node not placed yet (the first pass only).
const UNPLACED: u32 = u32::MAX;

/// The size bound of the groups placed whole in the first pass: a part's share over this.
const GROUPS_PER_PART: usize = 16;

/// A refinement pass that moves fewer than this share of the nodes ends the refinement.
const SETTLED: f64 = 1e-4;

/// What a part's load counts, for the balance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BalanceOn {
    /// Nodes: every part holds about `nodes / parts`.
    Nodes,
    /// In-edges: every part aggregates about `edges / parts` (a node weighs its in-degree,
    /// at least 1), the work of a full-batch layer.
    Edges,
}

impl BalanceOn {
    /// Every value, in the order front ends list them.
    pub const ALL: &'static [BalanceOn] = &[BalanceOn::Nodes, BalanceOn::Edges];

    /// The value's name, as front ends spell it.
    pub fn name(self) -> &'static str {
        match self {
            BalanceOn::Nodes => "nodes",
            BalanceOn::Edges => "edges",
        }
    }
}

/// Settings of [`stream`].
#[derive(Clone, Debug)]
pub struct StreamSettings {
    /// The number of parts.
    pub parts: usize,
    /// The largest load a part may hold over the mean: 1.03 allows 3% above it.
    pub balance: f64,
    /// What the load counts.
    pub balance_on: BalanceOn,
    /// The seed of tie-breaks between parts of equal score.
    pub seed: u64,
    /// Label-propagation passes that form the groups (fewer when one moves almost nothing).
    pub grouping_passes: usize,
    /// Passes after the first that place every node again, each neighbour's part known.
    pub restreams: usize,
    /// Label-propagation passes after the restreams (fewer when a pass moves almost nothing).
    pub refinements: usize,
    /// The memory the graph of the groups may take, METIS's included, for METIS to split it
    /// (0: the groups are placed by Fennel, in one pass).
    pub coarse_bytes: u64,
    /// Graphs of at least this many nodes are placed a block of nodes at a time, each block's
    /// choices made in parallel from the state before it; smaller ones a node at a time.
    pub blocks_from: usize,
}

impl Default for StreamSettings {
    fn default() -> StreamSettings {
        StreamSettings {
            parts: 2,
            balance: 1.03,
            balance_on: BalanceOn::Nodes,
            seed: 0,
            grouping_passes: 5,
            restreams: 3,
            refinements: 5,
            coarse_bytes: 1 << 30,
            blocks_from: BLOCKS_FROM,
        }
    }
}

/// One pass of [`stream`]: what it was and how many nodes changed part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassFigures {
    /// `"metis-groups"` or `"fennel"` (the first placement), `"restream"` or `"refine"`.
    pub kind: &'static str,
    /// Nodes placed in a part other than the one they held before the pass (every node, in
    /// the first pass).
    pub moved: usize,
}

/// Progress of [`stream`]: the pass's name, nodes done, nodes in all.
pub type StreamProgress<'a> = &'a dyn Fn(&str, u64, u64);

/// Partitions `data`'s graph into `settings.parts`, balancing the load (and, when there are
/// training nodes, the training nodes, by the same factor) within `settings.balance` of the
/// mean. Returns the partition and each pass's figures.
pub fn stream(
    data: &GraphData<'_>,
    settings: &StreamSettings,
    progress: StreamProgress<'_>,
) -> Result<(Partition, Vec<PassFigures>)> {
    let n = data.num_nodes();
    let k = settings.parts;
    check_parts(n, k)?;
    if !(settings.balance >= 1.0 && settings.balance.is_finite()) {
        return Err(Error::argument(
            "partition",
            format!(
                "balance {} is below 1: no part can hold less than the mean",
                settings.balance
            ),
        ));
    }
    if k == 1 {
        return Ok((Partition::single(n), Vec::new()));
    }
    let block = if n >= settings.blocks_from { BLOCK } else { 1 };
    let mut state = State::new(data, settings, block);
    let largest = (n / (k * GROUPS_PER_PART)).max(1) as u32;
    let groups = group(
        data,
        largest,
        settings.grouping_passes,
        block,
        &|pass, done, total| progress(&format!("grouping {}", pass + 1), done, total),
    );
    let split = split_groups(
        data,
        &groups,
        k,
        settings.seed,
        settings.coarse_bytes,
        &|v| node_load(data, v, state.by_edges),
        &|v| state.is_train(v),
    )?;
    let first = match split {
        Some(group_part) => {
            state.assign_groups(data, &groups, &group_part);
            "metis-groups"
        }
        None => {
            state.place_groups(data, &groups, progress);
            "fennel"
        }
    };
    drop(groups);
    let mut passes = vec![PassFigures {
        kind: first,
        moved: n,
    }];
    // Each pass is named apart (`restream 2`), so a progress display starts a new one.
    for r in 0..settings.restreams {
        let moved = state.pass(data, false, &format!("restream {}", r + 1), progress);
        passes.push(PassFigures {
            kind: "restream",
            moved,
        });
    }
    for r in 0..settings.refinements {
        let moved = state.pass(data, true, &format!("refine {}", r + 1), progress);
        passes.push(PassFigures {
            kind: "refine",
            moved,
        });
        if (moved as f64) < SETTLED * n as f64 {
            break;
        }
    }
    Ok((
        Partition {
            part: state.part,
            parts: k,
        },
        passes,
    ))
}

/// Neighbours of the node (or group) being placed, by part, and the parts that have any.
struct Counts {
    counts: Vec<u32>,
    touched: Vec<u32>,
}

impl Counts {
    fn new(parts: usize) -> Counts {
        Counts {
            counts: vec![0; parts],
            touched: Vec::new(),
        }
    }

    /// Adds the placed ones of `neighbours` (but `skip`, a self-loop) by their part.
    fn add(&mut self, part: &[u32], neighbours: &[NodeId], skip: usize) {
        for &u in neighbours {
            let q = part[u as usize];
            if q == UNPLACED || u as usize == skip {
                continue;
            }
            if self.counts[q as usize] == 0 {
                self.touched.push(q);
            }
            self.counts[q as usize] += 1;
        }
    }

    fn of(&self, q: usize) -> u32 {
        self.counts[q]
    }

    fn clear(&mut self) {
        for &q in &self.touched {
            self.counts[q as usize] = 0;
        }
        self.touched.clear();
    }
}

/// Nodes a pass over a large graph chooses for at once, in parallel, from the state before
/// them; their moves are then made in order, each only where it still fits. Smaller graphs
/// (where the state is in cache and a pass takes a fraction of a second) place one node at a
/// time, each seeing the moves before it.
pub(crate) const BLOCK: usize = 1 << 14;

/// Graphs of at least this many nodes are placed a block at a time (by default).
pub const BLOCKS_FROM: usize = 1 << 22;

/// The parts of the nodes and the loads of the parts.
struct State {
    part: Vec<u32>,
    /// Load of each part, and the most one may hold.
    load: Vec<u64>,
    cap: u64,
    /// Training nodes of each part, and the most one may hold.
    train: Vec<u64>,
    train_cap: u64,
    is_train: Vec<u64>,
    by_edges: bool,
    /// The part of least load.
    lightest: usize,
    /// Fennel's marginal cost of one more unit of load is `penalty * sqrt(load)`.
    penalty: f64,
    seed: u64,
    /// Nodes a pass chooses for at once.
    block: usize,
}

/// A node being placed again: its part before, its load and whether it is a training node.
/// Its own load is left out of its part's while it is placed.
#[derive(Clone, Copy)]
struct Placing {
    v: usize,
    was: Option<usize>,
    weight: u64,
    train: bool,
}

impl State {
    fn new(data: &GraphData<'_>, s: &StreamSettings, block: usize) -> State {
        let n = data.num_nodes();
        let k = s.parts;
        let mut is_train = vec![0u64; n.div_ceil(64)];
        for &t in data.train_idx {
            is_train[t / 64] |= 1 << (t % 64);
        }
        let by_edges = s.balance_on == BalanceOn::Edges;
        let total = if by_edges {
            (0..n).map(|v| node_load(data, v, true)).sum::<u64>()
        } else {
            n as u64
        };
        let cap_of = |total: u64| ((s.balance * total as f64 / k as f64).ceil() as u64).max(1);
        // Fennel's alpha = sqrt(k) m / n^1.5 with m the edges (half the entries of a graph
        // stored both ways), and its cost measured in node units of the load.
        let m = data.num_edges() as f64 / 2.0;
        let alpha = (k as f64).sqrt() * m / (n as f64).powf(1.5);
        let unit = n as f64 / total.max(1) as f64;
        State {
            part: filled(n, UNPLACED),
            load: vec![0; k],
            cap: cap_of(total),
            train: vec![0; k],
            train_cap: cap_of(data.train_idx.len() as u64),
            is_train,
            by_edges,
            lightest: 0,
            penalty: alpha * GAMMA * unit.powf(GAMMA - 1.0),
            seed: s.seed,
            block,
        }
    }

    /// Places every node once, in order (a block at a time on a large graph); returns how
    /// many changed part.
    fn pass(
        &mut self,
        data: &GraphData<'_>,
        refine: bool,
        label: &str,
        progress: StreamProgress<'_>,
    ) -> usize {
        let n = data.num_nodes();
        let k = self.load.len();
        let block = self.block;
        let mut counts = Counts::new(k);
        let mut wanted: Vec<usize> = Vec::with_capacity(block);
        let mut moved = 0;
        for start in (0..n).step_by(block) {
            let end = (start + block).min(n);
            if start % (1 << 20) < block {
                progress(label, start as u64, n as u64);
            }
            wanted.clear();
            if block > 1 {
                let state = &*self;
                (start..end)
                    .into_par_iter()
                    .map_init(
                        || Counts::new(k),
                        |c, v| state.choose(data, state.placing(data, v), refine, c),
                    )
                    .collect_into_vec(&mut wanted);
            } else {
                wanted.push(self.choose(data, self.placing(data, start), refine, &mut counts));
            }
            for (v, &to) in (start..end).zip(&wanted) {
                let p = self.placing(data, v);
                let was = p.was.expect("placed by the first pass");
                self.take(was, p.weight, p.train);
                // A move chosen from the block's state that no longer fits is not made.
                let to = if to == was || self.fits(to, p.weight, u64::from(p.train)) {
                    to
                } else {
                    was
                };
                self.put(to, p.weight, p.train);
                self.part[v] = to as u32;
                moved += usize::from(to != was);
            }
        }
        progress(label, n as u64, n as u64);
        moved
    }

    fn placing(&self, data: &GraphData<'_>, v: usize) -> Placing {
        let was = self.part[v];
        Placing {
            v,
            was: (was != UNPLACED).then_some(was as usize),
            weight: node_load(data, v, self.by_edges),
            train: self.is_train(v),
        }
    }

    /// The part node `p.v` goes to: label propagation's choice (`refine`) or Fennel's.
    fn choose(&self, data: &GraphData<'_>, p: Placing, refine: bool, c: &mut Counts) -> usize {
        c.add(&self.part, data.in_neighbors(p.v as NodeId), p.v);
        let to = match (refine, p.was) {
            (true, Some(own)) => self.gainful(c, p, own),
            _ => self.fennel(c, p),
        };
        c.clear();
        to
    }

    /// Puts every group's nodes in the part given for the group, loads counted even where a
    /// part goes over its cap: the restreams that follow move nodes out of such a part.
    fn assign_groups(&mut self, data: &GraphData<'_>, groups: &Groups, group_part: &[u32]) {
        for (g, &q) in group_part.iter().enumerate() {
            for &v in groups.members(g) {
                let v = v as usize;
                let t = self.is_train(v);
                self.put(q as usize, node_load(data, v, self.by_edges), t);
                self.part[v] = q;
            }
        }
    }

    /// Fennel's first pass over groups: each group goes whole to the part with most of its
    /// members' placed neighbours less the cost of its load, or, when no part has room for
    /// it, node by node.
    fn place_groups(
        &mut self,
        data: &GraphData<'_>,
        groups: &Groups,
        progress: StreamProgress<'_>,
    ) {
        let n = data.num_nodes() as u64;
        let mut c = Counts::new(self.load.len());
        let mut done = 0u64;
        for g in 0..groups.count() {
            let members = groups.members(g);
            if done >> 20 != (done + members.len() as u64) >> 20 {
                progress("fennel", done, n);
            }
            done += members.len() as u64;
            let (mut weight, mut train) = (0, 0u64);
            for &v in members {
                c.add(&self.part, data.in_neighbors(v), v as usize);
                weight += node_load(data, v as usize, self.by_edges);
                train += u64::from(self.is_train(v as usize));
            }
            let cost = |q: usize| {
                let load = self.load[q] as f64;
                self.penalty * (load + weight as f64 / 2.0).sqrt() * members.len() as f64
            };
            let first = members[0] as usize;
            let best = c
                .touched
                .iter()
                .map(|&q| q as usize)
                .chain(std::iter::once(self.lightest))
                .filter(|&q| self.fits(q, weight, train))
                .map(|q| (c.of(q) as f64 - cost(q), q))
                .reduce(|a, b| {
                    let better = b.0 > a.0
                        || (b.0 == a.0
                            && (self.load[b.1], self.tie(first, b.1))
                                < (self.load[a.1], self.tie(first, a.1)));
                    if better {
                        b
                    } else {
                        a
                    }
                });
            c.clear();
            for &v in members {
                let p = self.placing(data, v as usize);
                let q = match best {
                    Some((_, q)) => q,
                    None => self.choose(data, p, false, &mut c),
                };
                self.put(q, p.weight, p.train);
                self.part[p.v] = q as u32;
            }
        }
        progress("fennel", n, n);
    }

    fn is_train(&self, v: usize) -> bool {
        self.is_train[v / 64] >> (v % 64) & 1 == 1
    }

    /// Whether part `q` has room for `weight` more load and `train` more training nodes.
    fn fits(&self, q: usize, weight: u64, train: u64) -> bool {
        self.load[q] + weight <= self.cap && (train == 0 || self.train[q] + train <= self.train_cap)
    }

    /// Part `q`'s load and training nodes without node `p` (while it is placed again).
    fn without(&self, q: usize, p: Placing) -> (u64, u64) {
        if p.was == Some(q) {
            (self.load[q] - p.weight, self.train[q] - u64::from(p.train))
        } else {
            (self.load[q], self.train[q])
        }
    }

    /// Whether part `q` has room for node `p`, its own load left out of its part.
    fn room(&self, q: usize, p: Placing) -> bool {
        let (load, train) = self.without(q, p);
        let more = u64::from(p.train);
        load + p.weight <= self.cap && (more == 0 || train + more <= self.train_cap)
    }

    /// A fixed pseudo-random order of the parts for node `v`, to break ties.
    fn tie(&self, v: usize, q: usize) -> u64 {
        mix64(self.seed ^ mix64(v as u64) ^ q as u64)
    }

    /// Fennel's choice: most neighbours less the marginal cost of the part's load, among the
    /// parts with room; the parts without neighbours are only as good as the lightest.
    fn fennel(&self, c: &Counts, p: Placing) -> usize {
        let load = |q: usize| self.without(q, p).0;
        let score = |q: usize| c.of(q) as f64 - self.penalty * (load(q) as f64).sqrt();
        let better = |a: usize, b: usize| {
            let (sa, sb) = (score(a), score(b));
            sa > sb || (sa == sb && (load(a), self.tie(p.v, a)) < (load(b), self.tie(p.v, b)))
        };
        let candidates = c
            .touched
            .iter()
            .map(|&q| q as usize)
            .chain(std::iter::once(self.lightest));
        let best = candidates
            .filter(|&q| self.room(q, p))
            .reduce(|a, b| if better(b, a) { b } else { a });
        // The lightest part can be full of training nodes: then any part with room will do.
        best.or_else(|| {
            (0..self.load.len())
                .filter(|&q| self.room(q, p))
                .reduce(|a, b| if better(b, a) { b } else { a })
        })
        .unwrap_or(self.lightest)
    }

    /// Label propagation's choice: the part with the most neighbours if it has more than the
    /// node's own part and room for it, else the node's own part.
    fn gainful(&self, c: &Counts, p: Placing, own: usize) -> usize {
        let mut best = own;
        for &q in &c.touched {
            let q = q as usize;
            let more = c.of(q) > c.of(best)
                || (c.of(q) == c.of(best) && best != own && self.tie(p.v, q) < self.tie(p.v, best));
            if q != own && more && self.room(q, p) {
                best = q;
            }
        }
        best
    }

    fn take(&mut self, q: usize, weight: u64, train: bool) {
        self.load[q] -= weight;
        self.train[q] -= u64::from(train);
        if self.load[q] < self.load[self.lightest] {
            self.lightest = q;
        }
    }

    fn put(&mut self, q: usize, weight: u64, train: bool) {
        self.load[q] += weight;
        self.train[q] += u64::from(train);
        if q == self.lightest {
            self.lightest = (0..self.load.len())
                .min_by_key(|&p| self.load[p])
                .expect("at least one part");
        }
    }
}

/// `n` copies of `value` in memory advised to be backed by huge pages: the arrays of the
/// partitioner are read at random, a TLB miss per access on 4 KiB pages.
pub(crate) fn filled<T: Copy + Send + 'static>(n: usize, value: T) -> Vec<T> {
    let mut v = graphloom_tensor::alloc::with_capacity(n);
    v.resize(n, value);
    v
}

/// The load of node `v`: 1, or its in-degree (at least 1) when the balance is on edges.
fn node_load(data: &GraphData<'_>, v: usize, by_edges: bool) -> u64 {
    if by_edges {
        ((data.row_ptr[v + 1] - data.row_ptr[v]) as u64).max(1)
    } else {
        1
    }
}
