//! [`RingAggregation`]: sum, mean and GCN's normalisation over a graph split into parts.

use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use bytemuck::Pod;
use graphloom_nn::kernels::aggregate::{
    gcn_inverse_sqrt_degree, LinearAggregation, PREFETCH_DISTANCE,
};
use graphloom_tensor::kernels::simd::with_simd;
use graphloom_tensor::memory::{category_scope, Charge};
use graphloom_tensor::prefetch::prefetch;
use graphloom_tensor::{
    with_float, BackwardCtx, Category, Element, Float, Op, Real, Tape, Tensor, Var,
};

use crate::exchange::{Direction, Exchange, Message};
use crate::graph::{fill_every_row, for_each_destination};
use crate::{comm_error, empty_scratch, scratch, PartGraph, Scratch};
use graphloom_nn::split_rows;

/// How a destination's sum is normalised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Normalisation {
    /// The plain sum.
    Sum,
    /// The mean over the destination's in-edges, weighted by the edge weights where the graph
    /// has them (its full weighted in-degree is known locally, because a part holds all
    /// in-edges of its nodes); 0 without in-edges.
    Mean,
    /// GCN's `D^-1/2 (A + I) D^-1/2`, a self-loop added where a node has none. Each owner
    /// scales its rows by its own `degree^-1/2` before sending them, so no part needs another
    /// part's degrees.
    Gcn,
}

/// A linear aggregation over the parts of a graph: the forward pass aggregates one part's
/// rows at a time; the backward pass sends each part the gradient of the rows it sent,
/// computed from the output gradient, so no halo is fetched again. Every worker must apply it
/// at the same points, since each pass exchanges messages with every other worker.
#[derive(Clone)]
pub struct RingAggregation {
    exchange: Arc<Exchange>,
    norm: Normalisation,
    /// Each row's factor, made on first use (empty for the plain sum).
    factors: Arc<OnceLock<RowFactors>>,
}

/// The factor of each local row's sum: `1 / degree` for the mean, `degree^-1/2` for GCN,
/// which is also the factor a GCN row is sent with. Computed once, because the backward pass
/// reads them at random, once per edge; charged to the worker's graph memory.
struct RowFactors {
    values: Vec<f64>,
    _charge: Charge,
}

impl RingAggregation {
    /// The aggregation of this worker over its exchange's graph.
    pub fn new(exchange: Arc<Exchange>, norm: Normalisation) -> Self {
        RingAggregation {
            exchange,
            norm,
            factors: Arc::default(),
        }
    }

    /// Each row's factor (see [`RowFactors`]), made on the first call: a worker whose model
    /// never aggregates linearly (GAT) holds none.
    #[inline(always)]
    fn factors(&self) -> &[f64] {
        &self
            .factors
            .get_or_init(|| {
                let g = self.graph();
                let values: Vec<f64> = match self.norm {
                    Normalisation::Sum => Vec::new(),
                    Normalisation::Mean => (g.degree.iter())
                        .map(|&d| if d == 0.0 { 0.0 } else { 1.0 / d })
                        .collect(),
                    Normalisation::Gcn => (g.degree.iter().zip(&g.has_loop))
                        .map(|(&d, &has_loop)| gcn_inverse_sqrt_degree(d, has_loop))
                        .collect(),
                };
                let _g = category_scope(Category::Graph);
                let _charge = Charge::new(values.len() * std::mem::size_of::<f64>());
                RowFactors { values, _charge }
            })
            .values
    }

    fn graph(&self) -> &PartGraph {
        &self.exchange.graph
    }

    /// The factor of destination row `v`'s sum.
    #[inline(always)]
    fn scale(&self, v: usize) -> f64 {
        match self.norm {
            Normalisation::Sum => 1.0,
            Normalisation::Mean | Normalisation::Gcn => self.factors()[v],
        }
    }

    /// The factor row `v` is multiplied by before it is sent (GCN's source normalisation).
    #[inline(always)]
    fn source_factor(&self, v: usize) -> f64 {
        match self.norm {
            Normalisation::Gcn => self.factors()[v],
            _ => 1.0,
        }
    }

    /// Row `v`'s [`Self::source_factor`], and whether it adds itself to its own sum (GCN's
    /// added self-loop).
    #[inline(always)]
    fn source(&self, v: usize) -> (f64, bool) {
        let self_loop = self.norm == Normalisation::Gcn && !self.graph().has_loop[v];
        (self.source_factor(v), self_loop)
    }

    /// Asks the cache for row `v`'s factor (a hint, no effect on results): a kernel that
    /// reads factors at random would wait on each.
    #[inline(always)]
    fn prefetch_factor(&self, v: usize) {
        if let Some(f) = self.factors().get(v) {
            prefetch(std::slice::from_ref(f));
        }
    }
}

impl LinearAggregation for RingAggregation {
    fn apply(&self, tape: &mut Tape, x: &Var) -> graphloom_nn::Result<Var> {
        let op = LinearOp {
            agg: self.clone(),
            kept: Mutex::default(),
        };
        Ok(tape.apply(op, &[x])?)
    }
}

struct LinearOp {
    agg: RingAggregation,
    /// Halos kept from the forward pass (modes sa and osa), freed in the backward pass.
    kept: Mutex<Vec<Message>>,
}

impl RingAggregation {
    /// `out[v] = scale(v) * (sum over in-edges u -> v of source(u) * x[u] + self-loop term)`.
    fn forward<T: Float + Pod>(
        &self,
        xs: &[T],
        cols: usize,
        kept: &mut Vec<Message>,
    ) -> graphloom_tensor::Result<Tensor>
    where
        T::Acc: Element,
    {
        type A<T> = <T as Float>::Acc;
        let g = self.graph();
        let rows = g.rows;
        let ex = &self.exchange;
        let own = g.index;
        let halos = self.graph().receives_rows();
        // Made here, on the worker's thread, so that its memory is charged to the worker.
        self.factors();
        let mut acc = empty_scratch::<A<T>>(rows * cols);
        let produce = |to: usize| {
            if to == own {
                return Ok(Message::empty());
            }
            let values = g.send[to].iter().flat_map(|&i| {
                let i = i as usize;
                let s = <A<T>>::from_f64(self.source_factor(i));
                xs[i * cols..(i + 1) * cols]
                    .iter()
                    .map(move |&x| T::from_acc(s * x.to_acc()))
            });
            Ok(Message::of_values(g.send[to].len() * cols, values))
        };
        let consume = |from: usize, message: Message| {
            if from == own {
                // The own part comes first (see `Exchange::pass`): it writes every row, in the
                // AVX2 copy of the loop (the same bits).
                fill_every_row(
                    &g.shards[own].ptr,
                    cols,
                    &mut acc.values,
                    |v, edges, row| {
                        with_simd(
                            #[inline(always)]
                            || {
                                self.add_edges(own, xs, cols, edges, row);
                                if !halos {
                                    self.finish_row(Direction::Out, v, xs, cols, row);
                                }
                            },
                        )
                    },
                );
                return Ok(());
            }
            {
                let halo = message.values::<T>();
                let shard = &g.shards[from];
                for_each_destination(shard, &mut acc, cols, |i, out| {
                    with_simd(
                        #[inline(always)]
                        || {
                            let edges = shard.ptr[i] as usize..shard.ptr[i + 1] as usize;
                            self.add_edges(from, &halo, cols, edges, out)
                        },
                    )
                });
            }
            if ex.mode.keeps_halos() {
                kept.push(message);
            }
            Ok(())
        };
        ex.pass(Direction::Out, produce, consume)
            .map_err(comm_error)?;
        if halos {
            // Every row on its own, in place: in parallel, the same bits as in order.
            self.for_each_row(
                &mut acc,
                cols,
                #[inline(always)]
                |v, row| self.finish_row(Direction::Out, v, xs, cols, row),
            );
        }
        into_tensor::<T>(acc, rows, cols)
    }

    /// Whether this part sends rows to another (which returns their gradients in the
    /// backward pass): without, the backward pass's own part finishes every row itself. In
    /// a directed graph a part may send rows and receive none, or the reverse.
    fn sends_rows(&self) -> bool {
        let g = self.graph();
        (g.send.iter().enumerate()).any(|(q, rows)| q != g.index && !rows.is_empty())
    }

    /// Adds into own row `u`'s input gradient `out` the terms of its out-edges in the own
    /// shard, entries `edges` of [`PartGraph::own_out_edges`]: `scale(v) * weight * grad[v]`
    /// for each edge into `v` (`grad`: rows of `cols`).
    #[inline(always)]
    fn add_out_edges<T: Float>(
        &self,
        grad: &[T],
        cols: usize,
        edges: Range<usize>,
        out: &mut [T::Acc],
    ) {
        let g = self.graph();
        let (shard, by_source) = (&g.shards[g.index], g.own_out_edges());
        for j in edges {
            // The row a few edges ahead is read at random: ask for it now (a hint).
            if let Some(&ahead) = by_source.dst.get(j + PREFETCH_DISTANCE) {
                let r = ahead as usize;
                prefetch(&grad[r * cols..(r + 1) * cols]);
                self.prefetch_factor(r);
            }
            let v = by_source.dst[j] as usize;
            // Without weights the edge's index is not needed (and `scale * 1` is `scale`).
            let c = match shard.weight.is_empty() {
                true => self.scale(v),
                false => self.scale(v) * shard.weight_of(by_source.edge[j] as usize),
            };
            let c = T::Acc::from_f64(c);
            for (h, &gv) in out.iter_mut().zip(&grad[v * cols..(v + 1) * cols]) {
                *h += c * gv.to_acc();
            }
        }
    }

    /// Adds the terms of edges `edges` of part `from`'s shard into `out`, reading `sources`
    /// (rows of `cols`): the own part's rows, scaled here as a sender would, or a halo.
    #[inline(always)]
    fn add_edges<T: Float>(
        &self,
        from: usize,
        sources: &[T],
        cols: usize,
        edges: Range<usize>,
        out: &mut [T::Acc],
    ) {
        let g = self.graph();
        let shard = &g.shards[from];
        let own = from == g.index;
        // Every coefficient is 1 without edge weights and source scales: add the rows as they
        // are (the same bits: 1 * h is h).
        let unit = shard.weight.is_empty() && self.norm != Normalisation::Gcn;
        for e in edges {
            if let Some(&ahead) = shard.src.get(e + PREFETCH_DISTANCE) {
                let r = ahead as usize;
                prefetch(&sources[r * cols..(r + 1) * cols]);
                if own && self.norm == Normalisation::Gcn {
                    self.prefetch_factor(r);
                }
            }
            // A halo row, or one of the own part's rows (the own shard's sources are rows).
            let row = shard.src[e] as usize;
            let h = &sources[row * cols..(row + 1) * cols];
            if unit {
                for (o, &h) in out.iter_mut().zip(h) {
                    *o += h.to_acc();
                }
                continue;
            }
            let w = shard.weight_of(e);
            let c = if own {
                T::Acc::from_f64(w * self.source_factor(row))
            } else {
                T::Acc::from_f64(w)
            };
            for (o, &h) in out.iter_mut().zip(h) {
                *o += c * h.to_acc();
            }
        }
    }

    /// Finishes row `v`'s sum once all its terms are in: its self-loop term (the row of
    /// `values`, rows of `cols`) and its scale. The forward pass finishes its output rows
    /// (`scale * (sum + source * x)`), the backward pass its input gradients, the two factors
    /// swapped (`source * (sum + scale * g)`).
    #[inline(always)]
    fn finish_row<T: Float>(
        &self,
        pass: Direction,
        v: usize,
        values: &[T],
        cols: usize,
        row: &mut [T::Acc],
    ) {
        let (source, self_loop) = self.source(v);
        let (outer, inner) = match pass {
            Direction::Out => (self.scale(v), source),
            Direction::Back => (source, self.scale(v)),
        };
        let outer = T::Acc::from_f64(outer);
        if self_loop {
            let inner = T::Acc::from_f64(inner);
            let own = &values[v * cols..(v + 1) * cols];
            for (a, &x) in row.iter_mut().zip(own) {
                *a = outer * (*a + inner * x.to_acc());
            }
        } else {
            for a in row.iter_mut() {
                *a = outer * *a;
            }
        }
    }

    /// Adds, for every edge from part `to` (another part) into this worker's destinations,
    /// `scale * g_dst` into the row of `out` (rows of `cols`) at the edge's source's position
    /// in the halo of part `to`.
    ///
    /// In parallel over ranges of `out`'s rows: each task walks every edge in shard order and
    /// keeps those whose row it owns, so no two tasks write one row and each row receives its
    /// terms in edge order, the order of a single thread, whatever the thread count.
    fn shard_grad_into<T: Float>(&self, to: usize, grad: &[T], cols: usize, out: &mut [T::Acc]) {
        use rayon::prelude::*;
        let shard = &self.graph().shards[to];
        let rows = out.len().checked_div(cols).unwrap_or(0);
        if rows == 0 || shard.dst.is_empty() {
            return;
        }
        let tasks = rayon::current_num_threads().clamp(1, rows);
        let bounds: Vec<usize> = (0..=tasks).map(|k| k * rows / tasks).collect();
        split_rows(out, cols, &bounds)
            .into_par_iter()
            .for_each(|(first, piece)| {
                with_simd(
                    #[inline(always)]
                    || {
                        let end = first + piece.len() / cols;
                        for (i, &dst) in shard.dst.iter().enumerate() {
                            let dst = dst as usize;
                            let s = self.scale(dst);
                            let gd = &grad[dst * cols..(dst + 1) * cols];
                            for e in shard.ptr[i] as usize..shard.ptr[i + 1] as usize {
                                // The row a few edges ahead is read and written at random: ask for it
                                // now (a hint, no effect on results).
                                if let Some(&ahead) = shard.src.get(e + PREFETCH_DISTANCE) {
                                    let ahead = ahead as usize;
                                    if (first..end).contains(&ahead) {
                                        prefetch(
                                            &piece[(ahead - first) * cols
                                                ..(ahead - first + 1) * cols],
                                        );
                                    }
                                }
                                let row = shard.src[e] as usize;
                                if row < first || row >= end {
                                    continue;
                                }
                                let c = T::Acc::from_f64(s * shard.weight_of(e));
                                let target =
                                    &mut piece[(row - first) * cols..(row - first + 1) * cols];
                                for (h, &v) in target.iter_mut().zip(gd) {
                                    *h += c * v.to_acc();
                                }
                            }
                        }
                    },
                )
            });
    }

    /// The gradient of the input: each part gets the gradient of the rows it sent (the
    /// transposed shard times the scaled output gradient) and adds it into its own rows.
    fn backward<T: Float + Pod>(&self, grad: &[T], cols: usize) -> graphloom_tensor::Result<Tensor>
    where
        T::Acc: Element,
    {
        type A<T> = <T as Float>::Acc;
        let g = self.graph();
        let rows = g.rows;
        let own = g.index;
        let halos = self.sends_rows();
        // Made here, on the worker's thread, so that their memory is charged to the worker.
        self.factors();
        g.own_out_edges();
        let mut acc = empty_scratch::<A<T>>(rows * cols);
        let produce = |to: usize| {
            if to == own {
                return Ok(Message::empty());
            }
            let mut halo_grad = scratch::<A<T>>(g.halo_rows(to) * cols);
            self.shard_grad_into(to, grad, cols, &mut halo_grad);
            Ok(Message::of_values(
                halo_grad.len(),
                halo_grad.iter().map(|&a| T::from_acc(a)),
            ))
        };
        let consume = |from: usize, message: Message| {
            if from == own {
                // The own part comes first: each row gathers over its out-edges (the own
                // shard by source, in the shard's order: the order a scatter over the shard
                // would add them in), in the AVX2 copy of the loop.
                let by_source = g.own_out_edges();
                fill_every_row(&by_source.ptr, cols, &mut acc.values, |u, edges, row| {
                    with_simd(
                        #[inline(always)]
                        || {
                            self.add_out_edges(grad, cols, edges, row);
                            if !halos {
                                self.finish_row(Direction::Back, u, grad, cols, row);
                            }
                        },
                    )
                });
                return Ok(());
            }
            // The gradients of my rows that part `from` received, in its order.
            let mine = message.values::<T>();
            for (j, &row) in g.send[from].iter().enumerate() {
                let dst = &mut acc[row as usize * cols..(row as usize + 1) * cols];
                for (d, &v) in dst.iter_mut().zip(&mine[j * cols..(j + 1) * cols]) {
                    *d += v.to_acc();
                }
            }
            Ok(())
        };
        self.exchange
            .pass(Direction::Back, produce, consume)
            .map_err(comm_error)?;
        if halos {
            self.for_each_row(
                &mut acc,
                cols,
                #[inline(always)]
                |u, row| self.finish_row(Direction::Back, u, grad, cols, row),
            );
        }
        into_tensor::<T>(acc, rows, cols)
    }

    /// Runs `f(v, row)` for every row `v` of `out` (rows of `cols`), in parallel, in the AVX2
    /// copy of the loop where the processor has it: mark `f` `#[inline(always)]` so that it is
    /// compiled into that copy (see `with_simd`).
    fn for_each_row<T: Send>(
        &self,
        out: &mut [T],
        cols: usize,
        f: impl Fn(usize, &mut [T]) + Sync,
    ) {
        use rayon::prelude::*;
        if cols == 0 {
            return;
        }
        out.par_chunks_mut(cols)
            .enumerate()
            .with_min_len(256)
            .for_each(|(v, row)| with_simd(|| f(v, row)));
    }
}

impl Op for LinearOp {
    fn name(&self) -> &'static str {
        "sar_aggregate"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> graphloom_tensor::Result<Tensor> {
        let x = inputs[0];
        let (rows, cols) = x.dims2();
        check_rows(rows, self.agg.graph().rows)?;
        let kept = self.kept.get_mut().unwrap_or_else(|e| e.into_inner());
        with_float!(x.dtype(), "sar_aggregate", T => {
            self.agg.forward(x.as_slice::<T>()?, cols, kept)
        })
    }

    fn backward(&self, ctx: &BackwardCtx<'_>) -> graphloom_tensor::Result<Vec<Option<Tensor>>> {
        // The halos kept by sa and osa served their purpose once the backward pass starts.
        drop(std::mem::take(
            &mut *self.kept.lock().unwrap_or_else(|e| e.into_inner()),
        ));
        let g = ctx.grad;
        let cols = g.dims2().1;
        let dx = with_float!(g.dtype(), "sar_aggregate", T => {
            self.agg.backward(g.as_slice::<T>()?, cols)
        })?;
        Ok(vec![Some(dx)])
    }
    fn reads_input(&self, _index: usize, _needs_grad: &[bool]) -> bool {
        false
    }
    fn reads_output(&self) -> bool {
        false
    }
}

/// Fails unless a local input has one row per local node.
/// Sums finished in place, as a tensor of `T` (the accumulators themselves when `T` is its own
/// accumulator type: f32 and f64).
fn into_tensor<T: Float>(
    acc: Scratch<T::Acc>,
    rows: usize,
    cols: usize,
) -> graphloom_tensor::Result<Tensor>
where
    T::Acc: Element,
{
    Tensor::from_vec(acc.into_vec(), &[rows, cols])?.cast(T::DTYPE)
}

pub(crate) fn check_rows(rows: usize, expected: usize) -> graphloom_tensor::Result<()> {
    if rows != expected {
        return Err(graphloom_tensor::Error::Autodiff(format!(
            "SAR: an input of {rows} rows for a part of {expected} nodes"
        )));
    }
    Ok(())
}
