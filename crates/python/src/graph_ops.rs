//! WholeGraph's neighbour sampling over a CSR held in store tables: the Python side gathers
//! each centre's range of the column array from the row-pointer table, this draws positions in
//! those ranges (uniform k-subsets by Floyd's algorithm, or weighted without replacement by
//! A-Res, graph's own choosers), and the Python side gathers the columns at the positions.

use graphloom_graph::sample::{uniform_positions, weighted_positions};
use graphloom_store::DlpackView;
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::Tensor;
use pyo3::prelude::*;
use rayon::prelude::*;

use crate::buffers::{ids, Held};
use crate::errors::invalid;
use crate::view::View;

/// The purpose of these draws within a seed, apart from every other draw keyed by it.
const PURPOSE: u64 = 0x5747_5f53_414d_504c; // "WG_SAMPL"

/// Positions drawn in each centre's range `starts[i]..ends[i]` of a CSR's column array: up to
/// `max_sample_count` of them without replacement (all when the range is shorter, or when the
/// count is negative), uniform, or with probability proportional to `weights` (f32: the
/// weights of every range, one after the other). A centre's draws are keyed by `seed` and its
/// id in `centers`, so a centre given twice gets the same neighbours. Returns the offsets of
/// each centre's positions (int32, `len(centers) + 1`), the positions (int64, increasing
/// within a centre) and each position's centre index in `centers` (int32).
#[pyfunction]
#[pyo3(signature = (centers, starts, ends, max_sample_count, seed, weights=None))]
pub(crate) fn sample_ranges(
    py: Python<'_>,
    centers: &Bound<'_, PyAny>,
    starts: &Bound<'_, PyAny>,
    ends: &Bound<'_, PyAny>,
    max_sample_count: i64,
    seed: u64,
    weights: Option<&Bound<'_, PyAny>>,
) -> PyResult<(View, View, View)> {
    let centers = ids(centers, "center_nodes_tensor")?;
    let starts = ids(starts, "csr_row_ptr")?;
    let ends = ids(ends, "csr_row_ptr")?;
    if starts.len() != centers.len() || ends.len() != centers.len() {
        return Err(invalid(format!(
            "{} centres with {} range starts and {} ends",
            centers.len(),
            starts.len(),
            ends.len()
        )));
    }
    if let Some(i) = (0..centers.len()).find(|&i| starts[i] < 0 || ends[i] < starts[i]) {
        return Err(invalid(format!(
            "csr_row_ptr: centre {} has the range {}..{}: the row pointers must not decrease",
            centers[i], starts[i], ends[i]
        )));
    }
    let weights = weights
        .map(|w| Held::<f32>::new(w, "weights"))
        .transpose()?;
    // Where each centre's weights begin in `weights`.
    let mut weight_starts = Vec::with_capacity(centers.len() + 1);
    weight_starts.push(0usize);
    for i in 0..centers.len() {
        let last = weight_starts[i];
        weight_starts.push(last + (ends[i] - starts[i]) as usize);
    }
    if let Some(w) = &weights {
        if w.slice().len() != weight_starts[centers.len()] {
            return Err(invalid(format!(
                "weights: {} for ranges of {} edges",
                w.slice().len(),
                weight_starts[centers.len()]
            )));
        }
    }
    let k = usize::try_from(max_sample_count).unwrap_or(usize::MAX);
    let key = RngKey::new(seed, 0, PURPOSE);
    let chosen: Vec<Vec<u32>> = py.detach(|| {
        (0..centers.len())
            .into_par_iter()
            .map_init(Vec::new, |scratch, i| {
                let degree = (ends[i] - starts[i]) as usize;
                let draws = key.row(centers[i] as u64);
                let mut out = Vec::with_capacity(degree.min(k));
                match &weights {
                    Some(w) => {
                        let row = &w.slice()[weight_starts[i]..weight_starts[i + 1]];
                        weighted_positions(row, k, draws, scratch, &mut out);
                    }
                    None => uniform_positions(degree, k, draws, &mut out),
                }
                out
            })
            .collect()
    });
    let total: usize = chosen.iter().map(Vec::len).sum();
    if i32::try_from(total).is_err() {
        return Err(invalid(format!(
            "{total} sampled neighbours: WholeGraph's int32 offsets hold at most 2^31 - 1; \
             sample fewer centres at once"
        )));
    }
    let mut offsets = Vec::with_capacity(centers.len() + 1);
    let mut positions = Vec::with_capacity(total);
    let mut center_local = Vec::with_capacity(total);
    offsets.push(0i32);
    for (i, picks) in chosen.iter().enumerate() {
        positions.extend(picks.iter().map(|&p| starts[i] + i64::from(p)));
        center_local.extend(std::iter::repeat_n(i as i32, picks.len()));
        offsets.push(positions.len() as i32);
    }
    let view = |t: Tensor| View::new(DlpackView::of_tensor(t));
    Ok((
        view(Tensor::from_vec(offsets, &[centers.len() + 1]).expect("length matches")),
        view(Tensor::from_vec(positions, &[total]).expect("length matches")),
        view(Tensor::from_vec(center_local, &[total]).expect("length matches")),
    ))
}
