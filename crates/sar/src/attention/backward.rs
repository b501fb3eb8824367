//! The backward pass's sums of [`RingAttention`](super::RingAttention): the own part's edges
//! by source, a halo's edges by groups of heads, each task adding to entries no other touches.

use std::ops::Range;

use bytemuck::Pod;
use graphloom_nn::balanced_chunks;
use graphloom_nn::kernels::aggregate::PREFETCH_DISTANCE;
use graphloom_nn::kernels::gat::{dot, leaky};
use graphloom_tensor::kernels::simd::with_simd;
use graphloom_tensor::prefetch::{prefetch, prefetch_at, prefetch_bytes};
use graphloom_tensor::{Element, Float, Real, Tensor};
use rayon::prelude::*;

use super::{AttentionOp, Inputs};
use crate::exchange::Message;
use crate::graph::for_each_destination;
use crate::{scratch, Scratch};

/// A buffer of sums that parallel tasks add to at once, each to entries no other task touches
/// (a head group's heads, a range of sources' rows and edges' slots, a destination's
/// statistics): a raw pointer, since one task's entries interleave with another's.
pub(super) struct Shared<A>(*mut A);

impl<A> Clone for Shared<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for Shared<A> {}
// SAFETY: every use writes only entries that no other thread touches (see Grads::edge).
unsafe impl<A: Send> Send for Shared<A> {}
// SAFETY: as above.
unsafe impl<A: Send> Sync for Shared<A> {}

impl<A> Shared<A> {
    pub(super) fn new(values: &mut [A]) -> Shared<A> {
        Shared(values.as_mut_ptr())
    }

    /// The buffer from element `i` on.
    ///
    /// # Safety
    /// `i` is within the buffer.
    pub(super) unsafe fn offset(self, i: usize) -> Shared<A> {
        // SAFETY: forwarded to the caller.
        Shared(unsafe { self.0.add(i) })
    }

    /// Element `i`.
    ///
    /// # Safety
    /// `i` is within the buffer, and no other thread uses that element meanwhile.
    pub(super) unsafe fn at(self, i: usize) -> *mut A {
        // SAFETY: forwarded to the caller.
        unsafe { self.0.add(i) }
    }
}

/// The backward pass's sums: the gradient of `er` by destination, and those of `h` and `el`
/// for the own rows, apart, so that each becomes its gradient tensor in place.
pub(super) struct Grads<'a, T: Float> {
    op: &'a AttentionOp,
    x: &'a Inputs<'a, T>,
    grad: &'a [T],
    /// The forward pass's max score and softmax denominator per (node, head).
    stats: &'a [f64],
    /// `c_v = g_v . out_v` per head.
    cv: Scratch<T::Acc>,
    der: Scratch<T::Acc>,
    /// `[rows, width]`.
    dh: Scratch<T::Acc>,
    /// `[rows, heads]`.
    del: Scratch<T::Acc>,
}

impl<'a, T: Float + Pod> Grads<'a, T> {
    pub(super) fn new(
        op: &'a AttentionOp,
        x: &'a Inputs<'a, T>,
        out: &[T],
        grad: &'a [T],
    ) -> graphloom_tensor::Result<Self> {
        let stats = op.stats.as_ref().ok_or_else(|| {
            graphloom_tensor::Error::Autodiff("sar_attention: backward before forward".into())
        })?;
        let (heads, c, w) = (x.heads, x.c, x.width());
        let rows = op.graph().rows;
        let mut cv = scratch::<T::Acc>(rows * heads);
        cv.par_chunks_mut(heads.max(1))
            .enumerate()
            .for_each(|(v, cvs)| {
                for (k, cvk) in cvs.iter_mut().enumerate() {
                    let r = v * w + k * c..v * w + (k + 1) * c;
                    *cvk = dot::<T>(&grad[r.clone()], &out[r]);
                }
            });
        let der = scratch::<T::Acc>(rows * heads);
        let dh = scratch::<T::Acc>(rows * w);
        let del = scratch::<T::Acc>(rows * heads);
        Ok(Grads {
            op,
            x,
            stats: stats.as_slice::<f64>()?,
            grad,
            cv,
            der,
            dh,
            del,
        })
    }

    /// Adds edge `u -> v`'s gradients for heads `ks` (source rows `hu`, `elu`): its score's,
    /// which is `er`'s, into the row `score` (`heads` long), `h`'s into the row `into_h`
    /// (`width` long) and `el`'s into the row `into_el` (`heads` long).
    ///
    /// # Safety
    /// `into_h`, `into_el` and `score` point at such rows, and no other thread touches the
    /// entries of heads `ks` in any of them during the call.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn edge(
        &self,
        ks: Range<usize>,
        v: usize,
        u: i64,
        hu: &[T],
        elu: &[T],
        (into_h, into_el): (Shared<T::Acc>, Shared<T::Acc>),
        score: Shared<T::Acc>,
    ) {
        let (heads, c, w) = (self.x.heads, self.x.c, self.x.width());
        let slope = T::Acc::from_f64(self.op.att.negative_slope);
        let st = self.stats;
        let factors = self.op.factors_of::<T::Acc>(self.op.graph().ids[v]);
        for k in ks {
            let pre = elu[k].to_acc() + self.x.er[v * heads + k].to_acc();
            let (mv, zv) = (st[(v * heads + k) * 2], st[(v * heads + k) * 2 + 1]);
            let alpha = (leaky(pre, slope) - T::Acc::from_f64(mv)).exp() / T::Acc::from_f64(zv);
            let d = factors.of(u, k);
            let gk = &self.grad[v * w + k * c..v * w + (k + 1) * c];
            let da = dot::<T>(gk, &hu[k * c..(k + 1) * c]) * d;
            let dleaky = if pre > T::Acc::ZERO {
                T::Acc::ONE
            } else {
                slope
            };
            let ds = alpha * (da - self.cv[v * heads + k]) * dleaky;
            let a = alpha * d;
            // SAFETY: head k's entries are this caller's alone (the contract above).
            unsafe {
                *score.at(k) += ds;
                *into_el.at(k) += ds;
                let out = std::slice::from_raw_parts_mut(into_h.at(k * c), c);
                for (o, &gv) in out.iter_mut().zip(gk) {
                    *o += a * gv.to_acc();
                }
            }
        }
    }

    /// Prefetches the entries of heads `ks` in row `row` of a buffer of `[h | el]` sums.
    #[inline(always)]
    fn prefetch_heads(&self, rows: Shared<T::Acc>, row: usize, ks: &Range<usize>) {
        let (heads, c) = (self.x.heads, self.x.c);
        let width = self.x.width();
        let start = rows.0.cast_const().wrapping_add(row * (width + heads));
        let size = std::mem::size_of::<T::Acc>();
        prefetch_bytes(start.wrapping_add(ks.start * c).cast(), ks.len() * c * size);
        prefetch_bytes(start.wrapping_add(width + ks.start).cast(), ks.len() * size);
    }

    /// Runs `f` once per group of heads, the groups in parallel: each group's call adds the
    /// gradients of its heads only, so no two write the same entry.
    fn by_head_groups(&self, f: impl Fn(Range<usize>) + Sync) {
        let heads = self.x.heads;
        let groups = rayon::current_num_threads().clamp(1, heads.max(1));
        (0..groups)
            .into_par_iter()
            .for_each(|i| f(i * heads / groups..(i + 1) * heads / groups));
    }

    /// Adds the gradients of every edge whose source is an own row (self-loops included).
    /// First by source, each task owning its sources' rows of `dh` and `del`: the added self-loop's
    /// gradients, then each edge's, its score gradient kept in the edge's slot of a scratch.
    /// Then by destination, the slots summed into `der` (the shard's own self-loops are
    /// skipped by source, so theirs stay zero). Every sum runs in the order of the edges by
    /// destination, the self-loop first, so the bits do not depend on the thread count.
    pub(super) fn own_edges(&mut self) {
        let g = self.op.graph();
        let (heads, w) = (self.x.heads, self.x.width());
        let by_source = g.own_out_edges();
        let shard = &g.shards[g.index];
        let mut score = scratch::<T::Acc>(shard.src.len() * heads);
        {
            let scores = Shared::new(&mut score);
            let (dh, del) = (Shared::new(&mut self.dh), Shared::new(&mut self.del));
            let der = Shared::new(&mut self.der);
            let this = &*self;
            let x = this.x;
            let bounds = balanced_chunks(&by_source.ptr, rayon::current_num_threads() * 4);
            bounds.par_windows(2).for_each(|range| {
                with_simd(
                    #[inline(always)]
                    || {
                        for u in range[0]..range[1] {
                            let (hu, elu) =
                                (&x.h[u * w..(u + 1) * w], &x.el[u * heads..(u + 1) * heads]);
                            let (u_id, edges) = (
                                g.ids[u],
                                by_source.ptr[u] as usize..by_source.ptr[u + 1] as usize,
                            );
                            // SAFETY: row u of `dh`, `del` and `der` are this task's: it owns
                            // source u.
                            let into = unsafe { (dh.offset(u * w), del.offset(u * heads)) };
                            unsafe {
                                this.edge(0..heads, u, u_id, hu, elu, into, der.offset(u * heads))
                            };
                            for j in edges {
                                if let Some(&ahead) = by_source.dst.get(j + PREFETCH_DISTANCE) {
                                    prefetch(
                                        &this.grad[ahead as usize * w..(ahead as usize + 1) * w],
                                    );
                                    // The destination's node id, for the dropout mask.
                                    if this.op.dropout.is_some() {
                                        prefetch_at(&g.ids, ahead as usize);
                                    }
                                }
                                let (v, e) =
                                    (by_source.dst[j] as usize, by_source.edge[j] as usize);
                                // The shard's own self-loops are skipped: the attention adds
                                // its own, above.
                                if v == u {
                                    continue;
                                }
                                // SAFETY: edge e's scores are written by its source's task only.
                                unsafe {
                                    this.edge(
                                        0..heads,
                                        v,
                                        u_id,
                                        hu,
                                        elu,
                                        into,
                                        scores.offset(e * heads),
                                    )
                                };
                            }
                        }
                    },
                )
            });
        }
        for_each_destination(shard, &mut self.der, heads, |i, der| {
            for e in shard.ptr[i] as usize..shard.ptr[i + 1] as usize {
                for (d, &s) in der.iter_mut().zip(&score[e * heads..(e + 1) * heads]) {
                    *d += s;
                }
            }
        });
    }

    /// The gradients of the halo of part `from`, as a message to its owner.
    pub(super) fn halo_grads(&mut self, from: usize, halo: &Message) -> Message {
        let halo = halo.values::<T>();
        let row_width = self.x.width() + self.x.heads;
        let mut out = scratch::<T::Acc>(self.op.graph().halo_rows(from) * row_width);
        {
            let rows = Shared::new(&mut out);
            let der = Shared::new(&mut self.der);
            let this = &*self;
            this.by_head_groups(|ks| {
                let ahead = |row: usize| this.prefetch_heads(rows, row, &ks);
                this.op
                    .for_each_edge(from, this.x, &halo, &ahead, |v, u, src, hu, elu| {
                        // SAFETY: row src of the halo's gradients; this group's heads only.
                        unsafe {
                            this.edge(
                                ks.clone(),
                                v,
                                u,
                                hu,
                                elu,
                                (
                                    rows.offset(src * row_width),
                                    rows.offset(src * row_width + this.x.width()),
                                ),
                                der.offset(v * this.x.heads),
                            )
                        };
                    });
            });
        }
        Message::of_values(out.len(), out.iter().map(|&a| T::from_acc(a)))
    }

    /// Adds the gradients part `from` computed for the rows this worker sent it (rows of
    /// `[h | el]`, as the messages carry them).
    pub(super) fn add_returned(&mut self, from: usize, message: &Message) {
        let values = message.values::<T>();
        let (heads, w) = (self.x.heads, self.x.width());
        for (j, &row) in self.op.graph().send[from].iter().enumerate() {
            let row = row as usize;
            let returned = &values[j * (w + heads)..(j + 1) * (w + heads)];
            let dh = &mut self.dh[row * w..(row + 1) * w];
            let del = &mut self.del[row * heads..(row + 1) * heads];
            for (d, &v) in dh.iter_mut().chain(del).zip(returned) {
                *d += v.to_acc();
            }
        }
    }

    /// The gradients of `h`, `el` and `er`: the sums themselves, in the inputs' dtype.
    pub(super) fn into_tensors(self) -> graphloom_tensor::Result<[Tensor; 3]>
    where
        T::Acc: Element,
    {
        let (heads, w) = (self.x.heads, self.x.width());
        let rows = self.op.graph().rows;
        let Grads { dh, del, der, .. } = self;
        Ok([
            Tensor::from_vec(dh.into_vec(), &[rows, w])?.cast(T::DTYPE)?,
            Tensor::from_vec(del.into_vec(), &[rows, heads])?.cast(T::DTYPE)?,
            Tensor::from_vec(der.into_vec(), &[rows, heads])?.cast(T::DTYPE)?,
        ])
    }
}
