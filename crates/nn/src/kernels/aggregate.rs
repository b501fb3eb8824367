//! Neighbourhood aggregation (SpMM): weighted sums (sum, mean, GCN's symmetric normalisation).
//!
//! For weighted sums, node `v`'s output row is
//!
//! `out[v] = dst_scale[v] * sum_{e = (u -> v)} w_e * src_scale[u] * x[u] + self_weight[v] * x[v]`
//!
//! with every factor optional (1, or 0 for `self_weight`; `w_e` is the edge weight, 1 on a
//! graph without them). Sum: no factors. Mean: `dst_scale = 1 / degree`. GCN (Kipf & Welling,
//! PyG's `gcn_norm`): a self-loop of weight 1 on every node that lacks one,
//! `src_scale = dst_scale = 1 / sqrt(degree + loop)` and `self_weight[v] = dst_scale[v]^2`
//! where the loop was added. `degree` is the sum of a node's in-edge weights (their count
//! without weights). The self-loop is a term, not an
//! edge, so the graph is not copied. The backward is the same sum over the transpose.

use std::sync::{Arc, Mutex};

use graphloom_graph::{GraphData, NodeId};
use graphloom_tensor::prefetch::prefetch;
use graphloom_tensor::{with_float, BackwardCtx, Category, Float, Op, Real, Tape, Tensor, Var};

use crate::graph::{par_row_ranges, GraphView};
use crate::{Error, Result};

/// GCN's `degree^-1/2` of a node of (weighted) in-degree `degree`: the self-loop that GCN
/// adds, weighing 1, counts unless the node has one of its own. Shared by every GCN
/// normalisation, in memory and over the parts of a SAR job.
pub fn gcn_inverse_sqrt_degree(degree: f64, has_loop: bool) -> f64 {
    let with_loop = degree + if has_loop { 0.0 } else { 1.0 };
    if with_loop > 0.0 {
        1.0 / with_loop.sqrt()
    } else {
        0.0
    }
}

/// GCN's normalisation of a set of nodes: each node's `degree^-1/2` and the weight of the
/// self-loop GCN adds to it (0 where it has one of its own).
#[derive(Clone, Debug, PartialEq)]
pub struct GcnNorm {
    /// [`gcn_inverse_sqrt_degree`] per node.
    pub inverse_sqrt_degree: Arc<[f64]>,
    /// The added self-loop's weight per node.
    pub self_weight: Arc<[f64]>,
}

impl GcnNorm {
    /// One node's scale and loop weight, from its (weighted) in-degree.
    pub fn of(degree: f64, has_loop: bool) -> (f64, f64) {
        let d = gcn_inverse_sqrt_degree(degree, has_loop);
        (d, if has_loop { 0.0 } else { d * d })
    }

    /// Node `v`'s scale and loop weight as sampled training gives it, as a source of a block
    /// at a hop of fanout `fanout` (-1: all in-edges): its degree is the count of in-edges it
    /// draws as a destination of that hop, `min(fanout, in-degree)`, whether or not it is one
    /// in this block, so that the scale does not depend on which seeds share the batch (a
    /// batch split over N workers normalises as on one); the graph's own loop at `v` counts
    /// when the hop takes all of `v`'s in-edges. With `fanout` -1, the whole graph's.
    pub fn of_sampled(data: GraphData<'_>, v: NodeId, fanout: i64) -> (f64, f64) {
        let row = data.in_neighbors(v);
        let all = fanout < 0 || row.len() <= fanout as usize;
        let degree = if all { row.len() } else { fanout as usize };
        GcnNorm::of(degree as f64, all && row.contains(&v))
    }

    /// The entries of `nodes` (indices into this one), in that order.
    pub fn select(&self, nodes: &[usize]) -> GcnNorm {
        GcnNorm {
            inverse_sqrt_degree: nodes.iter().map(|&v| self.inverse_sqrt_degree[v]).collect(),
            self_weight: nodes.iter().map(|&v| self.self_weight[v]).collect(),
        }
    }
}

impl FromIterator<(f64, f64)> for GcnNorm {
    fn from_iter<I: IntoIterator<Item = (f64, f64)>>(iter: I) -> GcnNorm {
        let (d, w): (Vec<f64>, Vec<f64>) = iter.into_iter().unzip();
        GcnNorm {
            inverse_sqrt_degree: d.into(),
            self_weight: w.into(),
        }
    }
}

/// A linear aggregation as a layer uses it: the graph's in memory ([`WeightedSum`]), or one
/// spread over workers (the SAR crate's ring aggregation).
pub trait LinearAggregation: Send + Sync {
    /// The aggregation of `x` (one row per node), on the tape.
    fn apply(&self, tape: &mut Tape, x: &Var) -> Result<Var>;

    /// How many rows it outputs and over how many edges it sums, when it outputs fewer rows
    /// than it reads (a sampled block: its destinations only), for a layer to choose whether
    /// to project before or after; `None` when it outputs every row.
    fn block_shape(&self) -> Option<BlockShape> {
        None
    }
}

/// The shape of an aggregation that outputs only its first rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockShape {
    /// The rows it outputs.
    pub output_rows: usize,
    /// The edges it sums over.
    pub edges: usize,
}

impl LinearAggregation for WeightedSum {
    fn apply(&self, tape: &mut Tape, x: &Var) -> Result<Var> {
        WeightedSum::apply(self, tape, x)
    }

    fn block_shape(&self) -> Option<BlockShape> {
        self.output_rows.map(|output_rows| BlockShape {
            output_rows,
            edges: self.graph.by_dst.num_edges(),
        })
    }
}

/// The coefficients of a weighted-sum aggregation.
#[derive(Clone)]
pub struct WeightedSum {
    /// The last input features aggregated and their aggregation: input features carry no
    /// gradient and, without input dropout, are the same tensor every epoch, so a first layer
    /// that aggregates before it projects needs their aggregation only once.
    feature_cache: Arc<Mutex<Option<(Tensor, Tensor)>>>,
    graph: Arc<GraphView>,
    src_scale: Option<Arc<[f64]>>,
    dst_scale: Option<Arc<[f64]>>,
    self_weight: Option<Arc<[f64]>>,
    edge_weight: Option<Arc<[f32]>>,
    /// Only the first rows are outputs (a sampled block's destinations, the only rows with
    /// in-edges): the forward pass returns `[rows, cols]`, the backward pass takes it.
    output_rows: Option<usize>,
}

impl WeightedSum {
    /// `out[v] = sum of x[u] over in-edges u -> v`.
    pub fn sum(graph: Arc<GraphView>) -> WeightedSum {
        WeightedSum {
            feature_cache: Arc::default(),
            edge_weight: graph.edge_weight.clone(),
            graph,
            src_scale: None,
            dst_scale: None,
            self_weight: None,
            output_rows: None,
        }
    }

    /// The same aggregation computing only the first `rows` outputs; rows beyond them must
    /// have no in-edges (a block's sources that are not destinations).
    pub fn with_output_rows(mut self, rows: usize) -> WeightedSum {
        self.output_rows = Some(rows.min(self.graph.by_dst.num_nodes()));
        self
    }

    /// `out[v] = mean of x[u] over in-edges u -> v` (0 without in-edges); with edge weights,
    /// `sum of w * x[u] / sum of w` (0 where the weights sum to 0).
    pub fn mean(graph: Arc<GraphView>) -> WeightedSum {
        let scale: Arc<[f64]> = graph
            .weighted_in_degrees()
            .iter()
            .map(|&d| if d == 0.0 { 0.0 } else { 1.0 / d })
            .collect();
        WeightedSum {
            dst_scale: Some(scale),
            ..WeightedSum::sum(graph)
        }
    }

    /// GCN's `D^-1/2 (A + I) D^-1/2`, self-loops added where missing, degrees counted over
    /// in-edges with the loop (PyG's `gcn_norm` with `add_remaining_self_loops`); with edge
    /// weights, `A` holds them, degrees are weighted, and an added loop weighs 1.
    pub fn gcn(graph: Arc<GraphView>) -> WeightedSum {
        let g = &graph.by_dst;
        let n = g.num_nodes();
        let degree = graph.weighted_in_degrees();
        let norm: GcnNorm = (0..n)
            // Rows need not be sorted: a graph's own loop may sit anywhere in its row.
            .map(|v| GcnNorm::of(degree[v], g.in_neighbors(v).contains(&(v as u32))))
            .collect();
        WeightedSum::gcn_with(graph, &norm)
    }

    /// GCN's normalisation over `graph` with each node's scale given (`norm`, one entry per
    /// node): the scales of a larger graph that `graph` is a piece of, so that the piece
    /// aggregates exactly as the whole graph does.
    pub fn gcn_with(graph: Arc<GraphView>, norm: &GcnNorm) -> WeightedSum {
        WeightedSum {
            src_scale: Some(norm.inverse_sqrt_degree.clone()),
            dst_scale: Some(norm.inverse_sqrt_degree.clone()),
            self_weight: Some(norm.self_weight.clone()),
            ..WeightedSum::sum(graph)
        }
    }

    /// Applies the aggregation to `x: [num_nodes, cols]` on the tape.
    ///
    /// The aggregation of input features (a constant charged to [`Category::Features`]) is
    /// kept and returned again while the same features tensor comes back.
    pub fn apply(&self, tape: &mut Tape, x: &Var) -> Result<Var> {
        if x.requires_grad() || x.value().category() != Category::Features {
            return Ok(tape.apply(Aggregate::Weighted(self.clone()), &[x])?);
        }
        let mut cache = self.feature_cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((input, out)) = cache.as_ref() {
            if input.is_same_view(x.value()) {
                return Ok(Var::constant(out.clone()));
            }
        }
        let out = tape.apply(Aggregate::Weighted(self.clone()), &[x])?;
        *cache = Some((x.value().clone(), out.value().clone()));
        Ok(out)
    }

    fn run(&self, x: &Tensor, backward: bool) -> Result<Tensor> {
        let gv = &*self.graph;
        let (n, sources) = (gv.num_nodes(), gv.num_sources());
        let kept = self.output_rows.unwrap_or(n);
        let (in_rows, rows) = if backward {
            (kept, sources)
        } else {
            (sources, kept)
        };
        let cols = x.dims2().1;
        check_rows(x, in_rows)?;
        let (csr, chunks) = if backward {
            (&gv.by_src, gv.src_chunks.clone())
        } else {
            // Only the kept destinations: cut the row ranges there.
            let mut cut: Vec<usize> = gv.dst_chunks.iter().map(|&c| c.min(rows)).collect();
            cut.dedup();
            (&gv.by_dst, cut)
        };
        if chunks.first() != Some(&0) || chunks.last() != Some(&rows) {
            // The output is written row range by row range: they must cover it.
            return Err(Error::Mismatch {
                what: "an aggregation's row ranges and its graph",
                detail: format!(
                    "ranges {:?}..{:?} for {rows} rows",
                    chunks.first(),
                    chunks.last()
                ),
            });
        }
        let chunks = &chunks;
        // Forward: row v gathers from its in-edges; the scale of the row is dst_scale and the
        // neighbour's is src_scale. Backward swaps the two roles.
        let (row_scale, nb_scale) = if backward {
            (&self.src_scale, &self.dst_scale)
        } else {
            (&self.dst_scale, &self.src_scale)
        };
        let edge_of = |i: usize| if backward { gv.src_edge[i] } else { i };
        Ok(with_float!(x.dtype(), "aggregate", T => {
            let xs = x.as_slice::<T>()?;
            // Every output row is written below (the row ranges cover all of them), so the
            // buffer is not zeroed first: a zeroing pass would cost as much memory traffic as
            // writing the output.
            let mut out = graphloom_tensor::alloc::with_capacity::<T>(rows * cols);
            par_row_ranges(&mut out.spare_capacity_mut()[..rows * cols], cols, chunks, #[inline(always)] |first, block| {
                let mut acc = vec![<<T as Float>::Acc as Real>::ZERO; cols];
                for (r, orow) in block.chunks_mut(cols.max(1)).enumerate() {
                    let v = first + r;
                    acc.iter_mut().for_each(|a| *a = Real::ZERO);
                    let (lo, hi) = (csr.row_ptr[v] as usize, csr.row_ptr[v + 1] as usize);
                    for i in lo..hi {
                        let u = csr.col_idx[i] as usize;
                        if let Some(&ahead) = csr.col_idx.get(i + PREFETCH_DISTANCE) {
                            let ahead = ahead as usize;
                            prefetch(&xs[ahead * cols..(ahead + 1) * cols]);
                            // Its scale too, read at random as the row is.
                            if let Some(s) = nb_scale {
                                prefetch(&s[ahead..ahead + 1]);
                            }
                        }
                        let mut c = nb_scale.as_ref().map_or(1.0, |s| s[u]);
                        if let Some(w) = &self.edge_weight {
                            c *= w[edge_of(i)] as f64;
                        }
                        let c = <<T as Float>::Acc as Real>::from_f64(c);
                        for (a, &xv) in acc.iter_mut().zip(&xs[u * cols..(u + 1) * cols]) {
                            *a += c * xv.to_acc();
                        }
                    }
                    let rs = <<T as Float>::Acc as Real>::from_f64(row_scale.as_ref().map_or(1.0, |s| s[v]));
                    // The self-loop term reads the input's own row, which a kept-rows backward
                    // pass has only for the kept rows.
                    match self.self_weight.as_ref().filter(|_| v < in_rows) {
                        Some(s) => {
                            let sw = <<T as Float>::Acc as Real>::from_f64(s[v]);
                            let own = &xs[v * cols..(v + 1) * cols];
                            for ((o, &a), &xv) in orow.iter_mut().zip(&acc).zip(own) {
                                o.write(T::from_acc(rs * a + sw * xv.to_acc()));
                            }
                        }
                        None => {
                            for (o, &a) in orow.iter_mut().zip(&acc) {
                                o.write(T::from_acc(rs * a));
                            }
                        }
                    }
                }
            });
            // SAFETY: the row ranges cover rows 0..rows and every column of each row was
            // written above.
            unsafe { out.set_len(rows * cols) };
            Tensor::from_vec(out, &[rows, cols])
        })?)
    }
}

/// How many edges ahead the gather loop prefetches a source row: neighbour rows are scattered
/// over memory, and asking for them early hides most of the latency of the random reads.
pub const PREFETCH_DISTANCE: usize = 4;

fn check_rows(x: &Tensor, n: usize) -> Result<()> {
    if x.dims2().0 != n {
        return Err(Error::Mismatch {
            what: "an aggregation's input and its graph",
            detail: format!("{n} nodes, an input of shape {:?}", x.shape()),
        });
    }
    Ok(())
}

enum Aggregate {
    Weighted(WeightedSum),
}

impl Op for Aggregate {
    fn name(&self) -> &'static str {
        match self {
            Aggregate::Weighted(_) => "aggregate_sum",
        }
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> graphloom_tensor::Result<Tensor> {
        let x = inputs[0];
        match self {
            Aggregate::Weighted(w) => w.run(x, false).map_err(to_tensor_error),
        }
    }

    fn backward(&self, ctx: &BackwardCtx<'_>) -> graphloom_tensor::Result<Vec<Option<Tensor>>> {
        let dx = match self {
            Aggregate::Weighted(w) => w.run(ctx.grad, true),
        };
        Ok(vec![Some(dx.map_err(to_tensor_error)?)])
    }
    fn reads_input(&self, _index: usize, _needs_grad: &[bool]) -> bool {
        false
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// Ops return the tensor crate's error; other errors travel inside it as its source.
pub(crate) fn to_tensor_error(e: Error) -> graphloom_tensor::Error {
    match e {
        Error::Tensor(t) => t,
        other => graphloom_tensor::Error::Op {
            op: "aggregate",
            source: Box::new(other),
        },
    }
}

#[cfg(test)]
mod tests;
