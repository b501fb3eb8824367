//! [`GraphView`]: a graph prepared for message passing, with its transpose and the row ranges
//! that split the kernels' work by edge count.

use graphloom_graph::{Csr, NodeId};
use graphloom_tensor::memory::{category_scope, Charge};
use graphloom_tensor::Category;

/// A graph ready for the aggregation kernels.
///
/// The forward pass runs over `by_dst` (each node's in-edges); the backward pass over
/// `by_src` (each node's out-edges), whose entry `i` is edge `src_edge[i]` of `by_dst`. The
/// sources may be nodes of another set than the destinations ([`GraphView::bipartite`]: a
/// relation between two node types), so `by_src` has a row per source.
/// `dst_chunks` and `src_chunks` cut the rows into ranges of about equal edge count, so a hub
/// node does not hold up a thread that was also given thousands of other rows.
pub struct GraphView {
    /// The graph, CSR by destination.
    pub by_dst: Csr,
    /// The transpose, CSR by source.
    pub by_src: Csr,
    /// For each entry of `by_src`, the index of the same edge in `by_dst`.
    pub src_edge: Vec<usize>,
    /// Row ranges of `by_dst` of balanced edge count: `[dst_chunks[i], dst_chunks[i+1])`.
    pub dst_chunks: Vec<usize>,
    /// Row ranges of `by_src` of balanced edge count.
    pub src_chunks: Vec<usize>,
    /// A weight per edge of `by_dst` (`edge_weight.npy`): GCN and the GraphSAGE mean weigh
    /// each neighbour by it, as PyG's `GCNConv(edge_weight)` does.
    pub edge_weight: Option<std::sync::Arc<[f32]>>,
    /// A feature row per edge of `by_dst` (`edge_feat.npy`, `[E, edge_dim]`): GINE's messages
    /// add them, mapped to the node rows' width, to their sources' rows.
    pub edge_features: Option<std::sync::Arc<graphloom_tensor::Tensor>>,
    /// The bytes of the arrays above (less the weights and edge features, which are the
    /// dataset's or a batch's, charged where they were made), charged to
    /// [`Category::Graph`] while the view lives, so memory reports count the graph.
    _charge: Charge,
}

/// Cuts `0..num_rows` into ranges whose cost (edges plus one per row) is about `total / parts`.
pub fn balanced_chunks(row_ptr: &[i64], parts: usize) -> Vec<usize> {
    let n = row_ptr.len() - 1;
    let total = row_ptr[n] as usize + n;
    let target = total.div_ceil(parts.max(1)).max(1);
    let mut bounds = vec![0];
    let mut start_cost = 0;
    for v in 0..n {
        let cost = row_ptr[v + 1] as usize + v + 1;
        if cost - start_cost >= target {
            bounds.push(v + 1);
            start_cost = cost;
        }
    }
    if *bounds.last().unwrap() != n {
        bounds.push(n);
    }
    bounds
}

impl GraphView {
    /// Prepares `graph`; with `self_loops`, first removes its self-loops and adds one per node
    /// (GAT's convention, as PyG's `GATConv` does).
    pub fn new(graph: &Csr, self_loops: bool) -> GraphView {
        let by_dst = if self_loops {
            with_self_loops(graph)
        } else {
            graph.clone()
        };
        let n = by_dst.num_nodes();
        GraphView::with_sources(by_dst, n)
    }

    /// `graph` with one self-loop per node (as [`GraphView::new`] makes it) and, when `rows`
    /// are given (one per edge of `graph`, in its order), their rows for its edges, the loops'
    /// the mean of their node's other in-edges' (GATv2's edge features).
    pub fn looped(
        graph: &Csr,
        rows: Option<&graphloom_tensor::Tensor>,
    ) -> crate::Result<GraphView> {
        let view = GraphView::new(graph, true);
        match rows {
            Some(rows) => {
                view.with_edge_features(std::sync::Arc::new(self_loop_rows(graph, rows)?))
            }
            None => Ok(view),
        }
    }

    /// A graph from `num_sources` source nodes to the rows of `graph` (CSR by destination
    /// whose entries are source ids below `num_sources`): one relation of a heterogeneous
    /// graph, whose aggregation reads `[num_sources, cols]` and writes a row per destination.
    pub fn bipartite(graph: &Csr, num_sources: usize) -> crate::Result<GraphView> {
        if let Some(&bad) = graph.col_idx.iter().find(|&&u| u as usize >= num_sources) {
            return Err(crate::Error::Mismatch {
                what: "a relation's edges and its source nodes",
                detail: format!("source {bad} is not below the {num_sources} sources"),
            });
        }
        Ok(GraphView::with_sources(graph.clone(), num_sources))
    }

    /// The view of `by_dst` over `n` sources.
    fn with_sources(by_dst: Csr, n: usize) -> GraphView {
        let (src, dst) = by_dst.edges();
        // Transpose with edge ids: sort edge ids by (src, dst) with a counting sort on src.
        let mut row_ptr = vec![0i64; n + 1];
        for &s in &src {
            row_ptr[s as usize + 1] += 1;
        }
        for i in 0..n {
            row_ptr[i + 1] += row_ptr[i];
        }
        let mut next = row_ptr.clone();
        let mut col_idx = vec![0 as NodeId; src.len()];
        let mut src_edge = vec![0usize; src.len()];
        // Edges are visited in destination order, so each source's out-edges come out sorted
        // by destination.
        for e in 0..src.len() {
            let slot = &mut next[src[e] as usize];
            col_idx[*slot as usize] = dst[e];
            src_edge[*slot as usize] = e;
            *slot += 1;
        }
        let by_src = Csr { row_ptr, col_idx };
        let parts = rayon::current_num_threads() * 8;
        let dst_chunks = balanced_chunks(&by_dst.row_ptr, parts);
        let src_chunks = balanced_chunks(&by_src.row_ptr, parts);
        let bytes = [&by_dst, &by_src]
            .iter()
            .map(|g| std::mem::size_of_val(&g.row_ptr[..]) + std::mem::size_of_val(&g.col_idx[..]))
            .sum::<usize>()
            + std::mem::size_of_val(&src_edge[..])
            + std::mem::size_of_val(&dst_chunks[..])
            + std::mem::size_of_val(&src_chunks[..]);
        let _charge = {
            let _g = category_scope(Category::Graph);
            Charge::new(bytes)
        };
        GraphView {
            dst_chunks,
            src_chunks,
            by_dst,
            by_src,
            src_edge,
            edge_weight: None,
            edge_features: None,
            _charge,
        }
    }

    /// The same graph with a weight per edge (in the edge order of `by_dst`).
    pub fn with_edge_weight(mut self, weight: std::sync::Arc<[f32]>) -> crate::Result<GraphView> {
        if weight.len() != self.by_dst.num_edges() {
            return Err(crate::Error::Mismatch {
                what: "edge weights and edges",
                detail: format!(
                    "{} weights for {} edges",
                    weight.len(),
                    self.by_dst.num_edges()
                ),
            });
        }
        self.edge_weight = Some(weight);
        Ok(self)
    }

    /// The same graph with a feature row per edge (`[E, edge_dim]`, in the edge order of
    /// `by_dst`).
    pub fn with_edge_features(
        mut self,
        features: std::sync::Arc<graphloom_tensor::Tensor>,
    ) -> crate::Result<GraphView> {
        let rows = features.shape().first().copied().unwrap_or(0);
        if features.shape().len() != 2 || rows != self.by_dst.num_edges() {
            return Err(crate::Error::Mismatch {
                what: "edge features and edges",
                detail: format!(
                    "edge features of shape {:?} for {} edges",
                    features.shape(),
                    self.by_dst.num_edges()
                ),
            });
        }
        self.edge_features = Some(features);
        Ok(self)
    }

    /// The weighted in-degree of every node: the sum of its in-edges' weights (their count
    /// without weights).
    pub fn weighted_in_degrees(&self) -> Vec<f64> {
        let g = &self.by_dst;
        (0..g.num_nodes())
            .map(|v| {
                let (lo, hi) = (g.row_ptr[v] as usize, g.row_ptr[v + 1] as usize);
                match &self.edge_weight {
                    Some(w) => w[lo..hi].iter().map(|&x| x as f64).sum(),
                    None => (hi - lo) as f64,
                }
            })
            .collect()
    }

    /// The number of nodes (destinations).
    pub fn num_nodes(&self) -> usize {
        self.by_dst.num_nodes()
    }

    /// The number of source nodes: the rows an aggregation reads (the nodes themselves, but
    /// for a [`GraphView::bipartite`] relation).
    pub fn num_sources(&self) -> usize {
        self.by_src.num_nodes()
    }
}

/// The rows of `rows` (one per edge of `graph`, in its order) for the edges of
/// `with_self_loops(graph)`, in its order: each kept edge its own row, each added self-loop the
/// mean of its node's other in-edges' rows (zeros for a node without any), as PyG's
/// `add_self_loops(fill_value="mean")` gives GATv2's loops. In f64, whatever `rows`' dtype:
/// the layer casts them to its own, so a loop's mean is rounded once, in whichever graph (the
/// whole one, or a block whose rows were cast first) it was made.
pub(crate) fn self_loop_rows(
    graph: &Csr,
    rows: &graphloom_tensor::Tensor,
) -> crate::Result<graphloom_tensor::Tensor> {
    let (edges, width) = rows.dims2();
    if edges != graph.num_edges() {
        return Err(crate::Error::Mismatch {
            what: "edge features and edges",
            detail: format!("{edges} rows for {} edges", graph.num_edges()),
        });
    }
    let values = rows.to_vec_f64();
    let row = |e: usize| &values[e * width..(e + 1) * width];
    let mut out = Vec::with_capacity((graph.num_edges() + graph.num_nodes()) * width);
    for v in 0..graph.num_nodes() {
        let lo = graph.row_ptr[v] as usize;
        let nb = graph.in_neighbors(v);
        let others = || (0..nb.len()).filter(|&i| nb[i] as usize != v);
        let count = others().count().max(1) as f64;
        let mut mean = vec![0f64; width];
        for i in others() {
            mean.iter_mut().zip(row(lo + i)).for_each(|(m, &x)| *m += x);
        }
        mean.iter_mut().for_each(|m| *m /= count);
        // The same walk as `with_self_loops`: the loop before the first source above `v`.
        let mut placed = false;
        for i in others() {
            if !placed && nb[i] as usize > v {
                out.extend_from_slice(&mean);
                placed = true;
            }
            out.extend_from_slice(row(lo + i));
        }
        if !placed {
            out.extend_from_slice(&mean);
        }
    }
    let shape = [out.len() / width.max(1), width];
    Ok(graphloom_tensor::Tensor::from_f64(
        &out,
        &shape,
        graphloom_tensor::DType::F64,
    )?)
}

fn with_self_loops(graph: &Csr) -> Csr {
    let mut row_ptr = Vec::with_capacity(graph.row_ptr.len());
    let mut col_idx = Vec::with_capacity(graph.num_edges() + graph.num_nodes());
    row_ptr.push(0);
    for v in 0..graph.num_nodes() {
        let nb = graph.in_neighbors(v);
        let mut placed = false;
        for &u in nb {
            if u as usize == v {
                continue;
            }
            if !placed && u as usize > v {
                col_idx.push(v as NodeId);
                placed = true;
            }
            col_idx.push(u);
        }
        if !placed {
            col_idx.push(v as NodeId);
        }
        row_ptr.push(col_idx.len() as i64);
    }
    Csr { row_ptr, col_idx }
}

/// Sums `f(node, neighbour, edge, acc)` over every edge, grouped by its destination (`by_src`
/// false) or its source (`by_src` true), into rows `[rows, width]`, in
/// parallel over the balanced row ranges: the per-node reductions of the edge kernels. `edge`
/// is always the edge's index in destination order.
pub(crate) fn reduce_rows<T: graphloom_tensor::Float>(
    gv: &GraphView,
    by_src: bool,
    width: usize,
    f: impl Fn(usize, usize, usize, &mut [T::Acc]) + Sync,
) -> Vec<T> {
    let (csr, chunks) = if by_src {
        (&gv.by_src, &gv.src_chunks)
    } else {
        (&gv.by_dst, &gv.dst_chunks)
    };
    let mut out = graphloom_tensor::alloc::zeros::<T>(csr.num_nodes() * width);
    par_row_ranges(
        &mut out,
        width,
        chunks,
        #[inline(always)]
        |first, block| {
            let mut acc = vec![<T::Acc as graphloom_tensor::Real>::ZERO; width];
            for (r, orow) in block.chunks_mut(width.max(1)).enumerate() {
                let node = first + r;
                acc.iter_mut()
                    .for_each(|a| *a = graphloom_tensor::Real::ZERO);
                for i in csr.row_ptr[node] as usize..csr.row_ptr[node + 1] as usize {
                    let e = if by_src { gv.src_edge[i] } else { i };
                    f(node, csr.col_idx[i] as usize, e, &mut acc);
                }
                for (o, &a) in orow.iter_mut().zip(&acc) {
                    *o = T::from_acc(a);
                }
            }
        },
    );
    out
}

/// Splits a row-major output of rows `width` wide at the row bounds `bounds` (increasing,
/// from the first row of `out`): one `(first_row, rows)` piece per range, disjoint, so each
/// parallel task writes only its own rows. Buffers split by the same bounds zip together.
pub fn split_rows<'a, T>(
    out: &'a mut [T],
    width: usize,
    bounds: &[usize],
) -> Vec<(usize, &'a mut [T])> {
    let mut pieces = Vec::with_capacity(bounds.len().saturating_sub(1));
    let mut rest = out;
    for w in bounds.windows(2) {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut((w[1] - w[0]) * width);
        pieces.push((w[0], head));
        rest = tail;
    }
    pieces
}

/// Runs `f(first_row, rows_slice)` over the row ranges `bounds` of a row-major `[n, cols]`
/// output in parallel, compiled for the processor's vector instructions
/// ([`graphloom_tensor::kernels::simd::with_simd`]; mark `f` `#[inline(always)]`). The ranges
/// are disjoint, so every task writes its own rows.
pub(crate) fn par_row_ranges<T: Send>(
    out: &mut [T],
    cols: usize,
    bounds: &[usize],
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    use rayon::prelude::*;
    split_rows(out, cols, bounds)
        .into_par_iter()
        .for_each(|(start, rows)| {
            graphloom_tensor::kernels::simd::with_simd(
                #[inline(always)]
                || f(start, rows),
            )
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_keeps_edge_ids_and_chunks_cover_rows() {
        let g = Csr::from_edges(4, &[0, 2, 1, 3, 3, 3], &[1, 1, 0, 0, 2, 1]);
        let v = GraphView::new(&g, false);
        for u in 0..4 {
            for i in v.by_src.row_ptr[u] as usize..v.by_src.row_ptr[u + 1] as usize {
                let e = v.src_edge[i];
                assert_eq!(v.by_dst.col_idx[e] as usize, u);
                let d = v.by_dst.row_ptr.partition_point(|&p| p as usize <= e) - 1;
                assert_eq!(v.by_src.col_idx[i] as usize, d);
            }
        }
        let c = balanced_chunks(&v.by_dst.row_ptr, 3);
        assert_eq!((c[0], *c.last().unwrap()), (0, 4));
        assert!(c.windows(2).all(|w| w[0] < w[1]));
        let looped = GraphView::new(&g, true);
        for u in 0..4 {
            let nb = looped.by_dst.in_neighbors(u);
            assert_eq!(nb.iter().filter(|&&x| x as usize == u).count(), 1);
            assert!(nb.windows(2).all(|w| w[0] <= w[1]));
        }
    }

    #[test]
    fn self_loop_rows_follow_the_looped_graph_and_fill_loops_with_the_mean() {
        // Node 1's in-edges: 0 (row 1), 2 (row 2); node 2's: 2 (its own loop, row 3).
        let g = Csr::from_edges(3, &[0, 2, 2], &[1, 1, 2]);
        let rows = graphloom_tensor::Tensor::from_f64(
            &[1.0, 3.0, 5.0],
            &[3, 1],
            graphloom_tensor::DType::F64,
        )
        .unwrap();
        let looped = GraphView::new(&g, true);
        let out = self_loop_rows(&g, &rows).unwrap().to_vec_f64();
        assert_eq!(out.len(), looped.by_dst.num_edges());
        // Node 0: its loop (no in-edges: 0). Node 1: 0 -> 1, its loop (mean 2), 2 -> 1.
        // Node 2: its loop alone, the mean of no other in-edges.
        assert_eq!(looped.by_dst.col_idx, vec![0, 0, 1, 2, 2]);
        assert_eq!(out, vec![0.0, 1.0, 2.0, 3.0, 0.0]);
    }

    #[test]
    fn a_view_is_charged_to_the_graph_while_it_lives() {
        use graphloom_tensor::memory::{set_thread_tracker, thread_tracker, MemoryTracker};
        set_thread_tracker(MemoryTracker::new());
        let graph = || thread_tracker().report().current_of(Category::Graph);
        let g = Csr::from_edges(4, &[0, 2, 1, 3, 3, 3], &[1, 1, 0, 0, 2, 1]);
        let v = GraphView::new(&g, false);
        // Two CSRs of 5 offsets and 6 edges, an edge id per edge, and the chunks' bounds.
        let id = std::mem::size_of::<NodeId>();
        let at_least = 2 * (5 * 8 + 6 * id) + 6 * std::mem::size_of::<usize>();
        assert!(graph() >= at_least, "{} < {at_least}", graph());
        drop(v);
        assert_eq!(graph(), 0);
    }
}
