//! Link prediction's metrics (`graphloom_nn::link::metrics`, OGB's definitions), for scores
//! computed in Python.

use graphloom_nn::link::metrics;
use pyo3::prelude::*;

use crate::buffers::Held;
use crate::errors::invalid;

/// The area under the ROC curve of positive scores `pos` against negative scores `neg` (ties
/// count one half).
#[pyfunction]
pub(crate) fn auc(py: Python<'_>, pos: &Bound<'_, PyAny>, neg: &Bound<'_, PyAny>) -> PyResult<f64> {
    let (pos, neg) = (Held::<f64>::new(pos, "pos")?, Held::<f64>::new(neg, "neg")?);
    Ok(py.detach(|| metrics::auc(pos.slice(), neg.slice())))
}

/// The share of `pos` scoring strictly above the `k`-th highest of `neg` (1 with fewer than
/// `k` negatives, as OGB's evaluator).
#[pyfunction]
pub(crate) fn hits_at_k(
    py: Python<'_>,
    pos: &Bound<'_, PyAny>,
    neg: &Bound<'_, PyAny>,
    k: usize,
) -> PyResult<f64> {
    let (pos, neg) = (Held::<f64>::new(pos, "pos")?, Held::<f64>::new(neg, "neg")?);
    Ok(py.detach(|| metrics::hits_at_k(pos.slice(), neg.slice(), k)))
}

/// The mean reciprocal rank of each positive `pos[i]` among its own negatives, row `i` of
/// `neg` (`per_positive` scores a row).
#[pyfunction]
pub(crate) fn mrr(
    py: Python<'_>,
    pos: &Bound<'_, PyAny>,
    neg: &Bound<'_, PyAny>,
    per_positive: usize,
) -> PyResult<f64> {
    let (pos, neg) = (Held::<f64>::new(pos, "pos")?, Held::<f64>::new(neg, "neg")?);
    if neg.slice().len() != pos.slice().len() * per_positive {
        return Err(invalid(format!(
            "neg: {} scores for {} positives of {per_positive} negatives each",
            neg.slice().len(),
            pos.slice().len()
        )));
    }
    Ok(py.detach(|| {
        let rows: Vec<Vec<f64>> = neg
            .slice()
            .chunks(per_positive.max(1))
            .map(<[f64]>::to_vec)
            .collect();
        metrics::mrr(pos.slice(), &rows)
    }))
}
