//! [`Csr`]: a graph stored by destination, each node's in-neighbours in one contiguous run.

use rayon::prelude::*;

/// A node id. 32 bits: graphs of up to 4.29e9 nodes (edges are counted in 64 bits).
pub type NodeId = u32;

/// A directed graph in compressed sparse rows by destination: the in-neighbours (sources) of
/// node `v` are `col_idx[row_ptr[v]..row_ptr[v + 1]]`. Aggregation is then a loop over
/// destination rows that needs no atomics. Edge `e` is the `e`-th entry of `col_idx`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Csr {
    /// `num_nodes + 1` offsets into `col_idx`, starting at 0 and non-decreasing.
    pub row_ptr: Vec<i64>,
    /// Source node of each edge.
    pub col_idx: Vec<NodeId>,
}

impl Csr {
    /// Builds the graph from edge lists `src[i] -> dst[i]`; in-neighbours are sorted by source,
    /// duplicates and self-loops kept. Ids must be below `num_nodes` (checked by the caller).
    pub fn from_edges(num_nodes: usize, src: &[NodeId], dst: &[NodeId]) -> Csr {
        assert_eq!(src.len(), dst.len());
        let mut counts = vec![0i64; num_nodes + 1];
        for &d in dst {
            counts[d as usize + 1] += 1;
        }
        for i in 0..num_nodes {
            counts[i + 1] += counts[i];
        }
        let row_ptr = counts.clone();
        let mut next = counts;
        let mut col_idx = vec![0 as NodeId; src.len()];
        for (&s, &d) in src.iter().zip(dst) {
            let slot = &mut next[d as usize];
            col_idx[*slot as usize] = s;
            *slot += 1;
        }
        let mut g = Csr { row_ptr, col_idx };
        g.sort_rows();
        g
    }

    fn sort_rows(&mut self) {
        let row_ptr = &self.row_ptr;
        let mut rest: &mut [NodeId] = &mut self.col_idx;
        let mut rows: Vec<&mut [NodeId]> = Vec::with_capacity(row_ptr.len().saturating_sub(1));
        for w in row_ptr.windows(2) {
            let (row, tail) = rest.split_at_mut((w[1] - w[0]) as usize);
            rows.push(row);
            rest = tail;
        }
        rows.into_par_iter().for_each(|r| r.sort_unstable());
    }

    /// The number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.row_ptr.len() - 1
    }

    /// The number of edges.
    pub fn num_edges(&self) -> usize {
        self.col_idx.len()
    }

    /// The in-neighbours of `v`.
    pub fn in_neighbors(&self, v: usize) -> &[NodeId] {
        &self.col_idx[self.row_ptr[v] as usize..self.row_ptr[v + 1] as usize]
    }

    /// The in-degree of `v`.
    pub fn in_degree(&self, v: usize) -> usize {
        (self.row_ptr[v + 1] - self.row_ptr[v]) as usize
    }

    /// The in-degree of every node.
    pub fn in_degrees(&self) -> Vec<usize> {
        self.row_ptr
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .collect()
    }

    /// Every edge as `(src, dst)` lists, in edge order.
    pub fn edges(&self) -> (Vec<NodeId>, Vec<NodeId>) {
        let mut dst = Vec::with_capacity(self.num_edges());
        for v in 0..self.num_nodes() {
            dst.extend(std::iter::repeat_n(v as NodeId, self.in_degree(v)));
        }
        (self.col_idx.clone(), dst)
    }

    /// The reverse graph: CSR by source, i.e. each node's out-neighbours. The backward pass of
    /// aggregation runs over it.
    pub fn transpose(&self) -> Csr {
        let (src, dst) = self.edges();
        Csr::from_edges(self.num_nodes(), &dst, &src)
    }

    /// The same graph with every edge also present in reverse, self-loops removed and duplicate
    /// edges merged: the symmetric, loop-free graph PyG's Planetoid builds and METIS expects.
    pub fn to_undirected_simple(&self) -> Csr {
        let (src, dst) = self.edges();
        let mut s = src.clone();
        let mut d = dst.clone();
        s.extend_from_slice(&dst);
        d.extend_from_slice(&src);
        Csr::from_edges(self.num_nodes(), &s, &d).without_self_loops_and_duplicates()
    }

    /// The same graph without self-loops and with duplicate edges merged.
    pub fn without_self_loops_and_duplicates(&self) -> Csr {
        let mut row_ptr = Vec::with_capacity(self.row_ptr.len());
        let mut col_idx = Vec::with_capacity(self.num_edges());
        row_ptr.push(0);
        for v in 0..self.num_nodes() {
            let mut last = None;
            for &u in self.in_neighbors(v) {
                if u as usize != v && Some(u) != last {
                    col_idx.push(u);
                }
                last = Some(u);
            }
            row_ptr.push(col_idx.len() as i64);
        }
        Csr { row_ptr, col_idx }
    }

    /// Checks the invariants: `row_ptr` starts at 0, never decreases and ends at the number of
    /// edges, and every source id is a node. Returns a description of the first violation.
    pub fn check(&self) -> Result<(), String> {
        if self.row_ptr.first() != Some(&0) {
            return Err("csr_row_ptr does not start at 0".into());
        }
        if let Some(i) = self.row_ptr.windows(2).position(|w| w[1] < w[0]) {
            return Err(format!("csr_row_ptr decreases at row {i}"));
        }
        let last = *self.row_ptr.last().unwrap();
        if last != self.num_edges() as i64 {
            return Err(format!(
                "csr_row_ptr ends at {last} but csr_col_idx has {} entries",
                self.num_edges()
            ));
        }
        let n = self.num_nodes();
        if let Some(e) = self.col_idx.iter().position(|&u| u as usize >= n) {
            return Err(format!(
                "csr_col_idx[{e}] = {} is not a node id (num_nodes = {n})",
                self.col_idx[e]
            ));
        }
        Ok(())
    }

    /// Bytes held by the two arrays.
    pub fn bytes(&self) -> usize {
        self.row_ptr.len() * 8 + self.col_idx.len() * std::mem::size_of::<NodeId>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_transpose_and_simplify() {
        // 0->1, 2->1, 1->1 (loop), 2->1 (duplicate), 1->0
        let g = Csr::from_edges(3, &[0, 2, 1, 2, 1], &[1, 1, 1, 1, 0]);
        assert_eq!(g.row_ptr, vec![0, 1, 5, 5]);
        assert_eq!(g.in_neighbors(1), &[0, 1, 2, 2]);
        assert!(g.check().is_ok());
        let t = g.transpose();
        assert_eq!(t.in_neighbors(1), &[0, 1]);
        assert_eq!(t.in_neighbors(2), &[1, 1]);
        assert_eq!(t.transpose(), g);
        let u = g.to_undirected_simple();
        assert_eq!(u.in_neighbors(0), &[1]);
        assert_eq!(u.in_neighbors(1), &[0, 2]);
        assert_eq!(u.in_neighbors(2), &[1]);
        let bad = Csr {
            row_ptr: vec![0, 2],
            col_idx: vec![0, 5],
        };
        assert!(bad.check().unwrap_err().contains("csr_col_idx[1] = 5"));
        let bad = Csr {
            row_ptr: vec![0, 1],
            col_idx: vec![0, 0],
        };
        assert!(bad.check().unwrap_err().contains("ends at 1"));
    }
}
