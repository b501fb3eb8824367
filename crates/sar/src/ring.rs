//! [`RingAggregation`]: a linear aggregation over a graph split into parts, one halo at a time.

use std::sync::Arc;

use graphloom_comm::Communicator;
use graphloom_graph::parts::{Part, Shard};
use graphloom_nn::kernels::aggregate::LinearAggregation;
use graphloom_tensor::{BackwardCtx, DType, Op, Tape, Tensor, Var};

/// The tag of the halo and gradient messages (forward and backward rounds run one after the
/// other, and messages between two ranks with one tag arrive in order).
const RING_TAG: u16 = 7_001;

/// How a destination's sum is normalised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Normalisation {
    /// The plain sum.
    Sum,
    /// The mean over the destination's in-edges (its full in-degree, known locally because a
    /// part holds all in-edges of its nodes); 0 without in-edges.
    Mean,
    /// GCN's `D^-1/2 (A + I) D^-1/2`, a self-loop added where a node has none. Each owner
    /// scales its rows by its own `degree^-1/2` before sending them, so no part needs another
    /// part's degrees.
    Gcn,
}

/// What a worker knows of the graph: its in-edges by source part, and which of its rows each
/// part needs.
#[derive(Debug)]
pub struct PartGraph {
    /// Local rows.
    pub rows: usize,
    /// `shards[q]`: in-edges from part `q`.
    pub shards: Vec<Shard>,
    /// `send[q]`: local rows part `q` needs, in the order it receives them.
    pub send: Vec<Vec<u32>>,
    /// Rows received from each part (the length of that part's send list to this one).
    pub halo_rows: Vec<usize>,
    /// Full in-degree of each local row.
    pub in_degree: Vec<i64>,
    /// Whether each local row has a self-loop among its in-edges.
    pub has_loop: Vec<bool>,
}

impl PartGraph {
    /// The graph of a loaded part.
    pub fn new(part: &Part) -> PartGraph {
        let halo_rows = part
            .shards
            .iter()
            .map(|s| s.src.iter().max().map_or(0, |&m| m as usize + 1))
            .collect();
        let rows = part.orig_ids.len();
        // A self-loop is an edge of the own shard whose source row is its destination.
        let mut has_loop = vec![false; rows];
        let own = &part.shards[part.index];
        for (i, &dst) in own.dst.iter().enumerate() {
            for k in own.ptr[i] as usize..own.ptr[i + 1] as usize {
                if part.send[part.index][own.src[k] as usize] == dst {
                    has_loop[dst as usize] = true;
                }
            }
        }
        PartGraph {
            has_loop,
            rows,
            shards: part.shards.clone(),
            send: part.send.clone(),
            halo_rows,
            in_degree: part.in_degree.clone(),
        }
    }
}

/// A sum or mean aggregation over the parts of a graph, computed in ring rounds. Every worker
/// must apply it at the same points, since each round exchanges messages with two peers.
#[derive(Clone)]
pub struct RingAggregation {
    comm: Arc<dyn Communicator>,
    graph: Arc<PartGraph>,
    norm: Normalisation,
}

impl RingAggregation {
    /// The aggregation of this worker (`comm.rank()` is its part) over `graph`.
    pub fn new(comm: Arc<dyn Communicator>, graph: Arc<PartGraph>, norm: Normalisation) -> Self {
        RingAggregation { comm, graph, norm }
    }
}

impl LinearAggregation for RingAggregation {
    fn apply(&self, tape: &mut Tape, x: &Var) -> graphloom_nn::Result<Var> {
        Ok(tape.apply(RingOp(self.clone()), &[x])?)
    }
}

struct RingOp(RingAggregation);

fn comm_error(e: graphloom_comm::CommError) -> graphloom_tensor::Error {
    graphloom_tensor::Error::Autodiff(format!("SAR exchange: {e}"))
}

/// Reads `rows` rows of `cols` values out of a received message.
fn values(bytes: &[u8], dtype: DType) -> Vec<f64> {
    match dtype {
        DType::F64 => bytemuck::pod_collect_to_vec::<u8, f64>(bytes),
        _ => bytemuck::pod_collect_to_vec::<u8, f32>(bytes)
            .into_iter()
            .map(f64::from)
            .collect(),
    }
}

/// The message of `rows` rows of `data` (f64 accumulators) in `dtype`.
fn message(data: &[f64], dtype: DType) -> Vec<u8> {
    match dtype {
        DType::F64 => bytemuck::cast_slice(data).to_vec(),
        _ => {
            let v: Vec<f32> = data.iter().map(|&x| x as f32).collect();
            bytemuck::cast_slice(&v).to_vec()
        }
    }
}

impl RingAggregation {
    /// The factor of destination row `v`'s sum.
    fn scale(&self, v: usize) -> f64 {
        match self.norm {
            Normalisation::Sum => 1.0,
            Normalisation::Mean => match self.graph.in_degree[v] {
                0 => 0.0,
                d => 1.0 / d as f64,
            },
            Normalisation::Gcn => self.gcn_dinv(v),
        }
    }

    /// GCN's `degree^-1/2` of row `v`, the added self-loop counted.
    fn gcn_dinv(&self, v: usize) -> f64 {
        let loops = usize::from(!self.graph.has_loop[v]) as f64;
        1.0 / (self.graph.in_degree[v] as f64 + loops).sqrt()
    }

    /// The factor a row is multiplied by before it is sent (GCN's source normalisation), and
    /// whether it adds itself to its own sum (GCN's added self-loop).
    fn source(&self, v: usize) -> (f64, bool) {
        match self.norm {
            Normalisation::Gcn => (self.gcn_dinv(v), !self.graph.has_loop[v]),
            _ => (1.0, false),
        }
    }

    /// Rounds r = 0..N: send my rows that part (rank + r) needs, receive the halo of part
    /// (rank - r), add it into the destinations, drop it.
    fn forward(&self, x: &Tensor) -> graphloom_tensor::Result<Tensor> {
        let (rows, cols) = x.dims2();
        let dtype = x.dtype();
        let mut xs = x.to_vec_f64();
        let mut acc = vec![0f64; rows * cols];
        for v in 0..rows {
            let (s, self_loop) = self.source(v);
            let row = &mut xs[v * cols..(v + 1) * cols];
            row.iter_mut().for_each(|a| *a *= s);
            if self_loop {
                acc[v * cols..(v + 1) * cols].copy_from_slice(row);
            }
        }
        let (rank, size) = (self.comm.rank(), self.comm.size());
        let g = &self.graph;
        for r in 0..size {
            let to = (rank + r) % size;
            let from = (rank + size - r) % size;
            let mine: Vec<f64> = g.send[to]
                .iter()
                .flat_map(|&i| {
                    xs[i as usize * cols..(i as usize + 1) * cols]
                        .iter()
                        .copied()
                })
                .collect();
            let halo = if r == 0 {
                mine
            } else {
                let sent = self
                    .comm
                    .isend(to, RING_TAG, message(&mine, dtype))
                    .map_err(comm_error)?;
                let halo = values(&self.comm.recv(from, RING_TAG).map_err(comm_error)?, dtype);
                sent.wait().map_err(comm_error)?;
                halo
            };
            let shard = &g.shards[from];
            for (i, &dst) in shard.dst.iter().enumerate() {
                let out = &mut acc[dst as usize * cols..(dst as usize + 1) * cols];
                for k in shard.ptr[i] as usize..shard.ptr[i + 1] as usize {
                    let src = shard.src[k] as usize;
                    for (o, &h) in out.iter_mut().zip(&halo[src * cols..(src + 1) * cols]) {
                        *o += h;
                    }
                }
            }
        }
        for v in 0..rows {
            let s = self.scale(v);
            acc[v * cols..(v + 1) * cols]
                .iter_mut()
                .for_each(|a| *a *= s);
        }
        Tensor::from_f64(&acc, &[rows, cols], dtype)
    }

    /// Rounds in the same order: the gradient of the halo of part (rank - r) is computed from
    /// the output gradient and sent back to it; part (rank + r)'s gradient for my rows arrives
    /// and is added in. No halo is fetched again.
    fn backward(&self, grad: &Tensor) -> graphloom_tensor::Result<Tensor> {
        let (rows, cols) = grad.dims2();
        let dtype = grad.dtype();
        let mut gs = grad.to_vec_f64();
        for v in 0..rows {
            let s = self.scale(v);
            gs[v * cols..(v + 1) * cols]
                .iter_mut()
                .for_each(|a| *a *= s);
        }
        let (rank, size) = (self.comm.rank(), self.comm.size());
        let g = &self.graph;
        let mut grad_x = vec![0f64; rows * cols];
        for r in 0..size {
            let to = (rank + size - r) % size;
            let from = (rank + r) % size;
            let shard = &g.shards[to];
            let mut halo_grad = vec![0f64; g.halo_rows[to] * cols];
            for (i, &dst) in shard.dst.iter().enumerate() {
                let gd = &gs[dst as usize * cols..(dst as usize + 1) * cols];
                for k in shard.ptr[i] as usize..shard.ptr[i + 1] as usize {
                    let src = shard.src[k] as usize;
                    for (h, &v) in halo_grad[src * cols..(src + 1) * cols].iter_mut().zip(gd) {
                        *h += v;
                    }
                }
            }
            let mine = if r == 0 {
                halo_grad
            } else {
                let sent = self
                    .comm
                    .isend(to, RING_TAG, message(&halo_grad, dtype))
                    .map_err(comm_error)?;
                let got = values(&self.comm.recv(from, RING_TAG).map_err(comm_error)?, dtype);
                sent.wait().map_err(comm_error)?;
                got
            };
            // `mine` holds the gradients of my rows that part `from` received, in its order.
            for (j, &row) in g.send[from].iter().enumerate() {
                let dst = &mut grad_x[row as usize * cols..(row as usize + 1) * cols];
                for (d, &v) in dst.iter_mut().zip(&mine[j * cols..(j + 1) * cols]) {
                    *d += v;
                }
            }
        }
        for v in 0..rows {
            let (s, self_loop) = self.source(v);
            let row = &mut grad_x[v * cols..(v + 1) * cols];
            if self_loop {
                for (d, &g) in row.iter_mut().zip(&gs[v * cols..(v + 1) * cols]) {
                    *d += g;
                }
            }
            row.iter_mut().for_each(|a| *a *= s);
        }
        Tensor::from_f64(&grad_x, &[rows, cols], dtype)
    }
}

impl Op for RingOp {
    fn name(&self) -> &'static str {
        "sar_aggregate"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> graphloom_tensor::Result<Tensor> {
        self.0.forward(inputs[0])
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> graphloom_tensor::Result<Vec<Option<Tensor>>> {
        Ok(vec![Some(self.0.backward(ctx.grad)?)])
    }
}
