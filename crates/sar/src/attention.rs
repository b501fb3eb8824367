//! [`RingAttention`]: GAT's attention over a graph split into parts, with the softmax over a
//! destination's in-edges computed online as the parts' rows arrive.
//!
//! For destination `v` and head `k`, every worker keeps a running max `m`, a running sum `z`
//! of `exp(s - m)` and an unnormalised output `acc`. An edge with score `s > m` rescales `z`
//! and `acc` by `exp(m - s)` first, so after the last part `acc / z` is the softmax-weighted
//! sum over all in-edges, whatever order the parts came in. The own part comes first and is
//! computed as the single-graph kernel does (its scores, their max, the exponentials, then one
//! pass over the rows), so only halos' scores can rescale; with no halo to follow (one worker)
//! it normalises there too. Only `m` and `z` are kept for the backward pass (`[rows, heads]`),
//! never a coefficient per edge.
//!
//! The backward pass needs each halo's rows again. With `c_v = g_v . out_v` per head (the
//! softmax's `sum_u alpha_uv dA_uv`, from the output, so no pass over the edges is needed
//! first), every edge's gradients follow from the halo, `m`, `z` and the output gradient:
//! `ds = alpha (d g_v . h_u - c_v) LeakyReLU'`, `der_v += ds`, `del_u += ds`,
//! `dh_u += alpha d g_v`. The gradients of a halo go back to its owner. In [`SarMode::Sar`]
//! the halo is fetched again, round by round; the other modes kept it. The own part's edges
//! go by source (each task owns its sources' sums; each edge's `ds` waits in a scratch for
//! a pass by destination), a halo's by groups of heads (each group owns its heads' entries).

use std::cell::RefCell;

use std::sync::{Arc, Mutex};

use bytemuck::Pod;

use graphloom_nn::kernels::aggregate::PREFETCH_DISTANCE;
use graphloom_nn::kernels::gat::{leaky, Attention};
use graphloom_tensor::autodiff::ops::{Dropout, RowFactors};
use graphloom_tensor::kernels::simd::with_simd;
use graphloom_tensor::prefetch::{prefetch, prefetch_at};
use graphloom_tensor::{with_float, BackwardCtx, Element, Float, Op, Real, Tape, Tensor, Var};
use rayon::prelude::*;

use crate::exchange::{Direction, Exchange, Message, SarMode};
use crate::graph::{fill_every_row_with, for_each_destination};
use crate::linear::check_rows;
use crate::{comm_error, empty_scratch, scratch, PartGraph};

mod backward;
use backward::{Grads, Shared};

/// The attention step of a GAT layer over the parts of a graph; one self-loop per node, as
/// in the single-graph layer (existing self-loops are ignored and one is added).
#[derive(Clone)]
pub struct RingAttention {
    exchange: Arc<Exchange>,
    heads: usize,
    negative_slope: f64,
}

impl RingAttention {
    /// The attention of this worker over its exchange's graph, with `heads` heads.
    pub fn new(exchange: Arc<Exchange>, heads: usize) -> RingAttention {
        RingAttention {
            exchange,
            heads,
            negative_slope: graphloom_nn::layers::GAT_NEGATIVE_SLOPE,
        }
    }
}

impl Attention for RingAttention {
    fn apply(
        &self,
        tape: &mut Tape,
        h: &Var,
        el: &Var,
        er: &Var,
        dropout: Option<Dropout>,
    ) -> graphloom_nn::Result<Var> {
        let heads = el.value().dims2().1;
        let op = AttentionOp {
            att: RingAttention {
                heads,
                ..self.clone()
            },
            dropout,
            stats: None,
            kept: Mutex::default(),
        };
        Ok(tape.apply(op, &[h, el, er])?)
    }
}

struct AttentionOp {
    att: RingAttention,
    dropout: Option<Dropout>,
    /// `[rows, heads, 2]`: the max score and the softmax denominator of each (node, head).
    stats: Option<Tensor>,
    /// Halos kept from the forward pass (modes sa and osa), by part.
    kept: Mutex<Vec<Option<Message>>>,
}

/// The local tensors of one application: `h: [rows, heads * c]`, `el, er: [rows, heads]`.
struct Inputs<'a, T> {
    h: &'a [T],
    el: &'a [T],
    er: &'a [T],
    heads: usize,
    c: usize,
}

impl<T> Inputs<'_, T> {
    fn width(&self) -> usize {
        self.heads * self.c
    }
}

impl<T: Float + Pod> Inputs<'_, T> {
    /// Row `i`'s message: its `h` row, then its `el` row.
    fn pack(&self, rows: &[u32]) -> Message {
        let (w, heads) = (self.width(), self.heads);
        let slices = rows.iter().flat_map(|&i| {
            let i = i as usize;
            [
                &self.h[i * w..(i + 1) * w],
                &self.el[i * heads..(i + 1) * heads],
            ]
        });
        Message::of_slices(rows.len() * (w + heads), slices)
    }
}

/// The attention dropout's factors of one destination's in-edges: element `(v, u * heads + k)`
/// of the rule, with `v`'s hash and the rule's scale worked out once for all its edges.
#[derive(Clone, Copy)]
struct EdgeFactors<A> {
    /// `None` without dropout.
    row: Option<RowFactors<A>>,
    heads: u64,
}

impl<A: Real> EdgeFactors<A> {
    /// The factor of the edge from node `u` (an id) at head `k`: 1 without dropout.
    #[inline(always)]
    fn of(&self, u: i64, k: usize) -> A {
        self.row
            .as_ref()
            .map_or(A::ONE, |f| f.factor(u as u64 * self.heads + k as u64))
    }
}

impl AttentionOp {
    fn graph(&self) -> &PartGraph {
        &self.att.exchange.graph
    }

    /// The dropout factors of destination `v`'s in-edges (a node id).
    #[inline(always)]
    fn factors_of<A: Real>(&self, v: i64) -> EdgeFactors<A> {
        EdgeFactors {
            row: self.dropout.map(|d| d.row_factors(v as u64)),
            heads: self.att.heads as u64,
        }
    }

    /// Calls `edge(u_id, src, hu, elu)` for every in-edge of destination `i` of part `from`'s
    /// shard (another part's), whose source rows are in `halo` (rows of `h` then `el`): `src`
    /// the source's position in the halo, `hu` and `elu` its rows. A few edges ahead it
    /// prefetches the source's rows and calls `ahead_hook(src)`, for the caller to prefetch
    /// what its `edge` will write.
    #[inline(always)]
    fn edges_of<T: Float>(
        &self,
        from: usize,
        i: usize,
        x: &Inputs<'_, T>,
        halo: &[T],
        ahead_hook: &impl Fn(usize),
        mut edge: impl FnMut(i64, usize, &[T], &[T]),
    ) {
        let g = self.graph();
        let (w, heads) = (x.width(), x.heads);
        let shard = &g.shards[from];
        let ids = &g.halo_ids[from];
        let row_width = w + heads;
        for e in shard.ptr[i] as usize..shard.ptr[i + 1] as usize {
            // The row a few edges ahead, asked of the cache now (a hint, no effect on results).
            if let Some(&ahead) = shard.src.get(e + PREFETCH_DISTANCE) {
                let ahead = ahead as usize;
                prefetch(&halo[ahead * row_width..(ahead + 1) * row_width]);
                ahead_hook(ahead);
            }
            let src = shard.src[e] as usize;
            let row = &halo[src * row_width..(src + 1) * row_width];
            edge(ids[src], src, &row[..w], &row[w..]);
        }
    }

    /// [`AttentionOp::edges_of`] for every destination, with the destination's local row
    /// first: `edge(v, u_id, src, hu, elu)`.
    fn for_each_edge<T: Float>(
        &self,
        from: usize,
        x: &Inputs<'_, T>,
        halo: &[T],
        ahead_hook: &impl Fn(usize),
        mut edge: impl FnMut(usize, i64, usize, &[T], &[T]),
    ) {
        let shard = &self.graph().shards[from];
        for (i, &dst) in shard.dst.iter().enumerate() {
            self.edges_of(from, i, x, halo, ahead_hook, |u, src, hu, elu| {
                edge(dst as usize, u, src, hu, elu)
            });
        }
    }

    /// The online-softmax update of destination `v`'s state (its unnormalised output, then
    /// its running max and sum per head) with source `u`'s rows `hu`, `elu`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn update<T: Float>(
        &self,
        x: &Inputs<'_, T>,
        slope: T::Acc,
        v: usize,
        (acc, mz): (&mut [T::Acc], &mut [T::Acc]),
        u: i64,
        hu: &[T],
        elu: &[T],
    ) {
        let (heads, c) = (x.heads, x.c);
        let (m, z) = mz.split_at_mut(heads);
        let factors = self.factors_of::<T::Acc>(self.graph().ids[v]);
        for k in 0..heads {
            let s = leaky(elu[k].to_acc() + x.er[v * heads + k].to_acc(), slope);
            let out = &mut acc[k * c..(k + 1) * c];
            if s > m[k] {
                let f = (m[k] - s).exp();
                z[k] *= f;
                out.iter_mut().for_each(|a| *a *= f);
                m[k] = s;
            }
            let p = (s - m[k]).exp();
            z[k] += p;
            let a = p * factors.of(u, k);
            for (o, &hv) in out.iter_mut().zip(&hu[k * c..(k + 1) * c]) {
                *o += a * hv.to_acc();
            }
        }
    }

    /// Destination `v`'s output row over its self-loop and its in-edges `edges` of the own
    /// shard, as the single-graph kernel computes it: every score first (into `scores`, a
    /// task's scratch), then the max and the exponentials per head, then one pass over the
    /// sources' rows. With `finish` the weights are normalised (no other part's edges
    /// follow); without, `row` is left unnormalised for halos' online updates. Writes the max
    /// and the sum per head into `mz`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn own_row<T: Float>(
        &self,
        x: &Inputs<'_, T>,
        slope: T::Acc,
        v: usize,
        edges: std::ops::Range<usize>,
        (row, mz): (&mut [T::Acc], &mut [T::Acc]),
        scores: &mut Vec<T::Acc>,
        finish: bool,
    ) {
        let (heads, c, w) = (x.heads, x.c, x.width());
        let g = self.graph();
        let src = &g.shards[g.index].src;
        let erv = &x.er[v * heads..(v + 1) * heads];
        // The self-loop, then the in-edges but the shard's own self-loops (one is added).
        let sources = || {
            std::iter::once(v).chain(
                src[edges.clone()]
                    .iter()
                    .map(|&u| u as usize)
                    .filter(move |&u| u != v),
            )
        };
        let (m, z) = mz.split_at_mut(heads);
        m.fill(T::Acc::NEG_INFINITY);
        scores.clear();
        for u in sources() {
            for (k, m) in m.iter_mut().enumerate() {
                let s = leaky(x.el[u * heads + k].to_acc() + erv[k].to_acc(), slope);
                *m = m.max(s);
                scores.push(s);
            }
        }
        z.fill(T::Acc::ZERO);
        for e in scores.chunks_mut(heads.max(1)) {
            for k in 0..heads {
                e[k] = (e[k] - m[k]).exp();
                z[k] += e[k];
            }
        }
        let factors = self.factors_of::<T::Acc>(g.ids[v]);
        for (i, (u, e)) in sources().zip(scores.chunks(heads.max(1))).enumerate() {
            // A row a few edges ahead in the shard (the next rows' first ones at the end),
            // asked of the cache now: a hint, no effect on results.
            if let Some(&a) = src.get(edges.start + i + PREFETCH_DISTANCE) {
                prefetch(&x.h[a as usize * w..(a as usize + 1) * w]);
                // Its node id too, for the dropout mask: ids are read in the sources' random
                // order, and a miss per edge cost the forward pass a third more at N=1.
                if self.dropout.is_some() {
                    prefetch_at(&g.ids, a as usize);
                }
            }
            let hu = &x.h[u * w..(u + 1) * w];
            // The source's node id, only for a dropout mask (a lookup per edge otherwise).
            let u_id = if self.dropout.is_some() { g.ids[u] } else { 0 };
            for k in 0..heads {
                let p = if finish { e[k] / z[k] } else { e[k] };
                let a = p * factors.of(u_id, k);
                for (o, &hv) in row[k * c..(k + 1) * c]
                    .iter_mut()
                    .zip(&hu[k * c..(k + 1) * c])
                {
                    *o += a * hv.to_acc();
                }
            }
        }
    }

    fn forward<T: Float + Pod>(&mut self, x: Inputs<'_, T>) -> graphloom_tensor::Result<Tensor>
    where
        T::Acc: Element,
    {
        type A<T> = <T as Float>::Acc;
        let (heads, c, w) = (x.heads, x.c, x.width());
        let rows = self.graph().rows;
        let slope = <A<T>>::from_f64(self.att.negative_slope);
        // Per destination: the unnormalised output, which becomes the output in place, and
        // apart (so that the output needs no buffer of its own) the running max and sum per head.
        let mut acc = empty_scratch::<A<T>>(rows * w);
        let mut stats = scratch::<A<T>>(rows * 2 * heads);
        let mut kept: Vec<Option<Message>> =
            (0..self.att.exchange.comm.size()).map(|_| None).collect();
        let keep = self.att.exchange.mode.keeps_halos();
        let halos = self.graph().receives_rows();
        {
            let this = &*self;
            let g = this.graph();
            let own = g.index;
            let ex = &this.att.exchange;
            // Row v's statistics, written by the one task that owns destination v.
            let shared = Shared::new(&mut stats);
            // SAFETY: row `v` of the statistics lies in the buffer, and only the task that
            // holds destination `v`'s output row touches it (destinations are distinct and
            // each belongs to one task's rows).
            let stats_of = |v: usize| unsafe {
                std::slice::from_raw_parts_mut(shared.at(v * 2 * heads), 2 * heads)
            };
            let produce = |to: usize| {
                Ok(if to == own {
                    Message::empty()
                } else {
                    x.pack(&ex.graph.send[to])
                })
            };
            let consume = |from: usize, message: Message| {
                if from == own {
                    // The own part comes first (see `Exchange::pass`), and writes every row
                    // from its self-loop and its in-edges from the own part (the own shard's
                    // destinations are its rows), in the AVX2 copy; normalised there when no
                    // other part's edges follow.
                    let ptr = &g.shards[own].ptr;
                    fill_every_row_with(
                        ptr,
                        w,
                        &mut acc.values,
                        Vec::new,
                        |scores, v, edges, row| {
                            with_simd(
                                #[inline(always)]
                                || {
                                    let mz = stats_of(v);
                                    this.own_row(&x, slope, v, edges, (row, mz), scores, !halos)
                                },
                            )
                        },
                    );
                    return Ok(());
                }
                {
                    let halo = message.values::<T>();
                    let shard = &g.shards[from];
                    for_each_destination(shard, &mut acc, w, |i, row| {
                        with_simd(
                            #[inline(always)]
                            || {
                                let v = shard.dst[i] as usize;
                                let mz = stats_of(v);
                                this.edges_of(
                                    from,
                                    i,
                                    &x,
                                    &halo,
                                    &|_| (),
                                    #[inline(always)]
                                    |u, _, hu, elu| {
                                        this.update(&x, slope, v, (row, mz), u, hu, elu)
                                    },
                                );
                            },
                        )
                    });
                }
                if keep {
                    kept[from] = Some(message);
                }
                Ok(())
            };
            ex.pass(Direction::Out, produce, consume)
                .map_err(comm_error)?;
        }
        // The softmax's denominators, in place, unless the own pass applied them.
        if halos && w > 0 {
            acc.par_chunks_mut(w)
                .zip(stats.par_chunks(2 * heads))
                .for_each(|(row, mz)| {
                    for (k, &z) in mz[heads..].iter().enumerate() {
                        row[k * c..(k + 1) * c].iter_mut().for_each(|a| *a = *a / z);
                    }
                });
        }
        let mut stats_f64 = graphloom_tensor::alloc::with_capacity(rows * heads * 2);
        stats_f64.par_extend(stats.par_chunks(2 * heads).flat_map_iter(|mz| {
            (0..heads).flat_map(move |k| [mz[k].to_f64(), mz[heads + k].to_f64()])
        }));
        self.stats = Some(Tensor::from_vec(stats_f64, &[rows, heads, 2])?);
        *self.kept.get_mut().unwrap_or_else(|e| e.into_inner()) = kept;
        Tensor::from_vec(acc.into_vec(), &[rows, w])?.cast(T::DTYPE)
    }

    fn backward<T: Float + Pod>(
        &self,
        x: Inputs<'_, T>,
        out: &[T],
        grad: &[T],
    ) -> graphloom_tensor::Result<[Tensor; 3]>
    where
        T::Acc: Element,
    {
        let g = self.graph();
        let own = g.index;
        let grads = RefCell::new(Grads::new(self, &x, out, grad)?);
        grads.borrow_mut().own_edges();
        let ex = &self.att.exchange;
        let (rank, size) = (ex.comm.rank(), ex.comm.size());
        if ex.mode == SarMode::Sar {
            // Fetch each halo again; its gradients go back to the owner in the same round, and
            // the gradients of the rows I sent in this round come back.
            let produce = |to: usize| {
                Ok(if to == own {
                    Message::empty()
                } else {
                    x.pack(&g.send[to])
                })
            };
            let consume = |from: usize, halo: Message| {
                if from == own {
                    return Ok(());
                }
                let back = grads.borrow_mut().halo_grads(from, &halo);
                drop(halo);
                let sent_to = (2 * rank + size - from) % size;
                grads
                    .borrow_mut()
                    .add_returned(sent_to, &ex.swap_now(from, sent_to, back)?);
                Ok(())
            };
            ex.pass(Direction::Out, produce, consume)
                .map_err(comm_error)?;
        } else {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            let produce = |to: usize| {
                if to == own {
                    return Ok(Message::empty());
                }
                let halo = kept[to].take().ok_or_else(|| {
                    graphloom_comm::CommError::Invalid(format!("SAR: no halo kept from part {to}"))
                })?;
                Ok(grads.borrow_mut().halo_grads(to, &halo))
            };
            let consume = |from: usize, message: Message| {
                if from != own {
                    grads.borrow_mut().add_returned(from, &message);
                }
                Ok(())
            };
            ex.pass(Direction::Back, produce, consume)
                .map_err(comm_error)?;
        }
        grads.into_inner().into_tensors()
    }

    /// Checks the shapes and returns the width per head.
    fn check(&self, h: &Tensor, el: &Tensor, er: &Tensor) -> graphloom_tensor::Result<usize> {
        let heads = self.att.heads;
        let rows = self.graph().rows;
        check_rows(h.dims2().0, rows)?;
        if heads == 0
            || h.dims2().1 % heads != 0
            || el.dims2() != (rows, heads)
            || er.dims2() != (rows, heads)
        {
            return Err(graphloom_tensor::Error::Autodiff(format!(
                "SAR attention with {heads} heads: h {:?}, el {:?}, er {:?}",
                h.shape(),
                el.shape(),
                er.shape()
            )));
        }
        Ok(h.dims2().1 / heads)
    }
}

impl Op for AttentionOp {
    fn name(&self) -> &'static str {
        "sar_attention"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> graphloom_tensor::Result<Tensor> {
        let (h, el, er) = (inputs[0], inputs[1], inputs[2]);
        let c = self.check(h, el, er)?;
        let heads = self.att.heads;
        with_float!(h.dtype(), "sar_attention", T => {
            let x = Inputs { h: h.as_slice::<T>()?, el: el.as_slice::<T>()?, er: er.as_slice::<T>()?, heads, c };
            self.forward(x)
        })
    }

    fn backward(&self, ctx: &BackwardCtx<'_>) -> graphloom_tensor::Result<Vec<Option<Tensor>>> {
        let (h, el, er) = (ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]);
        let c = self.check(h, el, er)?;
        let heads = self.att.heads;
        let [dh, del, der] = with_float!(h.dtype(), "sar_attention", T => {
            let x = Inputs { h: h.as_slice::<T>()?, el: el.as_slice::<T>()?, er: er.as_slice::<T>()?, heads, c };
            self.backward(x, ctx.output.as_slice::<T>()?, ctx.grad.as_slice::<T>()?)
        })?;
        Ok(vec![Some(dh), Some(del), Some(der)])
    }
}
