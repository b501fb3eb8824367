//! Asking the kernel to read pages of a mapped file ahead, many at once: a random read of a
//! mapped file blocks its thread for a disk round trip, so a few threads reading one page at a
//! time leave a disk that serves tens of thousands of reads per second nearly idle.

use std::ops::Range;

/// The page size the runs are aligned to.
pub const PAGE: usize = 4096;

/// The byte ranges `ranges` as sorted, merged runs of whole pages.
pub fn page_runs(ranges: impl IntoIterator<Item = Range<usize>>) -> Vec<Range<usize>> {
    let mut pages: Vec<Range<usize>> = ranges
        .into_iter()
        .filter(|r| r.end > r.start)
        .map(|r| (r.start / PAGE) * PAGE..r.end.div_ceil(PAGE) * PAGE)
        .collect();
    pages.sort_unstable_by_key(|r| r.start);
    let mut runs: Vec<Range<usize>> = Vec::with_capacity(pages.len());
    for r in pages {
        match runs.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => runs.push(r),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_become_merged_page_runs() {
        let runs = page_runs([5000..5001, 0..10, 4095..4097, 20000..20000, 12288..12290]);
        assert_eq!(runs, vec![0..8192, 12288..16384]);
    }
}
