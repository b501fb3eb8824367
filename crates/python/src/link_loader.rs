//! The link-neighbour loader's batches ([`link_neighbor_loader`], PyG's `LinkNeighborLoader`):
//! each takes `batch_size` supervision pairs, draws their negatives as the command line's
//! link training does (`graphloom_nn::link::negatives`: binary negatives draw both ends, as
//! PyG's binary sampling does; triplet negatives keep their positive's source and draw a
//! destination; every draw comes from seed, epoch, the pair's index and its number, so any
//! rank count draws the same ones), samples the neighbourhood of every node of the pairs, and
//! returns the pairs over the neighbourhood's local ids.

use std::sync::Arc;

use graphloom_graph::sample::Sampler;
use graphloom_graph::NodeId;
use graphloom_nn::batches::DEFAULT_QUEUE_DEPTH;
use graphloom_nn::link::{exclude_pairs, pair_batches, NegativeSampling, PairBatch};
use graphloom_store::DlpackView;
use graphloom_tensor::Tensor;
use pyo3::prelude::*;

use crate::buffers::Held;
use crate::dataset::Dataset;
use crate::epochs::{check_rank, EpochPlan, Epochs};
use crate::errors::{self, invalid};
use crate::loader::{Batches, Batching, IntoBatch, Loader, Made};
use crate::neighbourhood::{i64_tensor, stacked, Neighbourhood, Sampled, Source};
use crate::table::Table;
use crate::view::View;

/// How a batch's pairs come with negatives (PyG's `NegativeSampling` modes).
#[derive(Clone, Copy, PartialEq)]
enum Negatives {
    /// The positives alone.
    None,
    /// `ceil(amount * P)` uniform pairs (both ends drawn) after a batch's `P` positives,
    /// scored with them: `edge_label_index` and `edge_label` (1 for a positive, 0 for a
    /// negative). The amount may be a fraction, as PyG's.
    Binary(f64),
    /// `amount` negative destinations per positive's source: `src_index`, `dst_pos_index`,
    /// `dst_neg_index`.
    Triplet(usize),
}

impl Negatives {
    /// The negatives of `positives` pairs and which ends they draw.
    fn of(self, positives: usize) -> (usize, NegativeSampling) {
        match self {
            Negatives::None => (0, NegativeSampling::Both),
            Negatives::Binary(amount) => (
                (positives as f64 * amount).ceil() as usize,
                NegativeSampling::Both,
            ),
            Negatives::Triplet(k) => (positives * k, NegativeSampling::Dst),
        }
    }
}

/// What every batch of a loader is made with.
struct Settings {
    source: Source,
    /// The supervision pairs.
    src: Vec<NodeId>,
    dst: Vec<NodeId>,
    negatives: Negatives,
    exclude: bool,
    batching: Batching,
}

/// One batch, built by the producer.
struct BatchData {
    sampled: Sampled,
    /// Each positive's index among the supervision pairs.
    input_id: Tensor,
    /// Binary and none: the pairs over local ids, `[2, P]`, and their labels.
    edge_label_index: Option<Tensor>,
    edge_label: Option<Tensor>,
    /// Triplet: sources, positive destinations and negative destinations over local ids.
    triplet: Option<(Tensor, Tensor, Tensor)>,
}

fn to_i64(rows: &[usize]) -> Vec<i64> {
    rows.iter().map(|&r| r as i64).collect()
}

/// The batch of the supervision pairs `index` (this rank's slice of the global batch
/// `global`) with the draws of (`seed`, `epoch`).
fn build(
    s: &Settings,
    sampler: &mut Sampler,
    index: &[usize],
    global: &[usize],
    seed: u64,
    epoch: u64,
) -> PyResult<BatchData> {
    let num_nodes = s.source.dataset.meta.num_nodes;
    let src = index.iter().map(|&i| s.src[i]).collect();
    let dst = index.iter().map(|&i| s.dst[i]).collect();
    let (count, sampling) = s.negatives.of(index.len());
    let pairs = PairBatch::of_positives(src, dst, index, num_nodes, count, sampling, seed, epoch);
    let seeds = pairs.nodes();
    let sampled = s.source.sample(sampler, &seeds, seed, epoch, |blocks| {
        if s.exclude {
            // Every rank hides the whole global batch's positives: any rank count samples the
            // same neighbourhoods.
            let hidden: Vec<(NodeId, NodeId)> =
                global.iter().map(|&i| (s.src[i], s.dst[i])).collect();
            exclude_pairs(blocks, &hidden);
        }
    })?;
    // The seeds are the first rows of the neighbourhood, in order.
    let (src_rows, dst_rows) = pairs.rows_of(&seeds);
    let positives = index.len();
    let mut out = BatchData {
        sampled,
        input_id: i64_tensor(to_i64(index), &[positives]),
        edge_label_index: None,
        edge_label: None,
        triplet: None,
    };
    match s.negatives {
        Negatives::None | Negatives::Binary(_) => {
            let labels: Vec<f32> = pairs.labels.iter().map(|&l| l as f32).collect();
            let n = labels.len();
            out.edge_label_index = Some(stacked(to_i64(&src_rows), to_i64(&dst_rows)));
            out.edge_label = Some(Tensor::from_vec(labels, &[n]).expect("length matches"));
        }
        Negatives::Triplet(k) => {
            let sources = to_i64(&src_rows[..positives]);
            let pos_dst = to_i64(&dst_rows[..positives]);
            // The negatives follow the positives round by round (draw `r` of every positive,
            // then `r + 1`): row `p` of `[P, k]` takes positive `p`'s draws.
            let negatives = &dst_rows[positives..];
            let neg_dst = (0..positives)
                .flat_map(|p| (0..k).map(move |r| negatives[r * positives + p] as i64))
                .collect();
            out.triplet = Some((
                i64_tensor(sources, &[positives]),
                i64_tensor(pos_dst, &[positives]),
                i64_tensor(neg_dst, &[positives, k]),
            ));
        }
    }
    Ok(out)
}

/// The most negatives per positive a loader draws: the command line's bound
/// (`--neg-ratio`).
const MAX_NEG_AMOUNT: f64 = graphloom_plan::MAX_NEG_RATIO as f64;

/// A loader over `dataset` whose batches gather input rows from `table`; the supervision
/// pairs are `edge_label_index` (int64, `2 * E` values: sources then destinations),
/// `batch_size` of them per global batch, of which this rank takes slice `rank` of
/// `ranks`; `neg_sampling` is "none", "binary" (`amount` negatives per positive, a fraction
/// allowed) or "triplet" (a whole `amount`); `exclude` hides each batch's positive edges
/// (both ways) from its neighbourhood.
#[pyfunction]
#[pyo3(signature = (dataset, table, fanouts, edge_label_index, batch_size, neg_sampling="none",
                    amount=1.0, exclude=false, shuffle=true, seed=0, drop_last=false,
                    queue_depth=DEFAULT_QUEUE_DEPTH, x_dtype="f32", rank=0, ranks=1, workers=0))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments
pub(crate) fn link_neighbor_loader(
    py: Python<'_>,
    dataset: &Dataset,
    table: &Table,
    fanouts: Vec<i64>,
    edge_label_index: &Bound<'_, PyAny>,
    batch_size: usize,
    neg_sampling: &str,
    amount: f64,
    exclude: bool,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
    queue_depth: usize,
    x_dtype: &str,
    rank: usize,
    ranks: usize,
    workers: usize,
) -> PyResult<Loader> {
    let num_nodes = dataset.inner.meta.num_nodes;
    if batch_size == 0 {
        return Err(invalid("batch_size must be positive"));
    }
    check_rank(rank, ranks)?;
    let negatives = match neg_sampling {
        "none" => Negatives::None,
        _ if !(amount > 0.0 && amount <= MAX_NEG_AMOUNT) => {
            return Err(invalid(format!(
                "neg_sampling: amount {amount}; give a number of negatives per positive in \
                 (0, {MAX_NEG_AMOUNT}]"
            )))
        }
        "binary" => Negatives::Binary(amount),
        "triplet" if amount.fract() == 0.0 => Negatives::Triplet(amount as usize),
        "triplet" => {
            return Err(invalid(format!(
                "neg_sampling: amount {amount}; triplet sampling draws a whole number of \
                 negative destinations per positive (as PyG's)"
            )))
        }
        other => {
            return Err(invalid(format!(
                "neg_sampling '{other}': the modes are binary and triplet"
            )))
        }
    };
    let source = Source::new(py, "LinkNeighborLoader", dataset, table, fanouts, x_dtype)?;
    let pairs = Held::<i64>::new(edge_label_index, "edge_label_index")?;
    let values = pairs.slice();
    if values.len() % 2 != 0 {
        return Err(invalid(format!(
            "edge_label_index: {} values; expected shape [2, E]",
            values.len()
        )));
    }
    let n = num_nodes as i64;
    if let Some(&bad) = values.iter().find(|&&v| v < 0 || v >= n) {
        return Err(pyo3::exceptions::PyIndexError::new_err(format!(
            "edge_label_index: node {bad} is not in 0..{n}"
        )));
    }
    let (src, dst) = values.split_at(values.len() / 2);
    // A batch's pairs, its positives with their negatives, are built at once: refused now
    // when they could not fit in memory, as the command line's --neg-ratio is.
    let ratio = match negatives {
        Negatives::None => 0.0,
        Negatives::Binary(amount) => amount,
        Negatives::Triplet(k) => k as f64,
    };
    graphloom_plan::check_step_pairs(
        src.len(),
        Some(batch_size),
        ratio,
        graphloom_plan::PAIR_BYTES,
    )
    .map_err(errors::raise)?;
    let to_nodes = |ends: &[i64]| ends.iter().map(|&v| v as NodeId).collect::<Vec<_>>();
    let epochs = Epochs::new("LinkNeighborLoader", num_nodes, queue_depth, workers)?;
    let settings = Settings {
        source,
        src: to_nodes(src),
        dst: to_nodes(dst),
        negatives,
        exclude,
        batching: Batching {
            items: src.len(),
            batch_size,
            shuffle,
            drop_last,
            seed,
            rank,
            ranks,
        },
    };
    Ok(Loader::new(Arc::new(settings), epochs))
}

impl Batches for Settings {
    fn count(&self) -> usize {
        self.batching.count()
    }

    fn plan(self: Arc<Self>, drawn: Option<u64>, number: u64) -> EpochPlan<Made> {
        let b = &self.batching;
        let (seed, epoch) = b.seed_and_epoch(drawn, number);
        let global = b.global(
            || pair_batches(b.items, seed, epoch, b.batch_size, 0, 1).0,
            || {
                (0..b.items)
                    .collect::<Vec<_>>()
                    .chunks(b.batch_size)
                    .map(<[usize]>::to_vec)
                    .collect()
            },
        );
        let index = b.rank_slices(&global);
        EpochPlan {
            batches: index.len(),
            make: Box::new(move |sampler, i| {
                let batch = build(&self, sampler, &index[i], &global[i], seed, epoch)?;
                Ok(Box::new(batch) as Made)
            }),
        }
    }
}

/// One batch of pairs: its neighbourhood and its pairs over the neighbourhood's local ids.
#[pyclass(module = "graphloom._graphloom", frozen)]
pub(crate) struct LinkBatch {
    sampled: Py<Neighbourhood>,
    input_id: View,
    edge_label_index: Option<View>,
    edge_label: Option<View>,
    triplet: Option<(View, View, View)>,
}

impl IntoBatch for BatchData {
    fn into_py(self: Box<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let view = |t| View::new(DlpackView::of_tensor(t));
        let b = *self;
        let batch = LinkBatch {
            sampled: Py::new(py, Neighbourhood::new(b.sampled))?,
            input_id: view(b.input_id),
            edge_label_index: b.edge_label_index.map(view),
            edge_label: b.edge_label.map(view),
            triplet: b.triplet.map(|(s, p, n)| (view(s), view(p), view(n))),
        };
        Ok(Py::new(py, batch)?.into_any())
    }
}

#[pymethods]
impl LinkBatch {
    /// The sampled neighbourhood of every node of the batch's pairs.
    #[getter]
    fn sampled(&self, py: Python<'_>) -> Py<Neighbourhood> {
        self.sampled.clone_ref(py)
    }

    /// Each positive's index among the loader's supervision pairs.
    #[getter]
    fn input_id(&self) -> View {
        self.input_id.clone_view()
    }

    /// The pairs over local ids, `[2, P]`: the positives, then their negatives (binary and
    /// no negative sampling).
    #[getter]
    fn edge_label_index(&self) -> Option<View> {
        self.edge_label_index.as_ref().map(View::clone_view)
    }

    /// Their labels, float32: 1 for a positive, 0 for a negative.
    #[getter]
    fn edge_label(&self) -> Option<View> {
        self.edge_label.as_ref().map(View::clone_view)
    }

    /// Triplet sampling: (sources, positive destinations, negative destinations `[B, k]`),
    /// over local ids.
    #[getter]
    fn triplet(&self) -> Option<(View, View, View)> {
        self.triplet
            .as_ref()
            .map(|(s, p, n)| (s.clone_view(), p.clone_view(), n.clone_view()))
    }
}
