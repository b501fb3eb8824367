//! Where a store tensor's rows live: the [`Layout`] says how they are split over the ranks and
//! who can address them, the [`Location`] which memory holds them, and [`check_support`] which
//! combinations a job can have.

use std::fmt;
use std::path::PathBuf;

use crate::{Result, StoreError};

/// How rows are split over the ranks and who can address them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// One range holding every row, mapped whole by every rank: gathers read it directly.
    Continuous,
    /// Each rank owns a chunk of rows, and every rank maps every chunk: gathers follow a
    /// pointer per chunk.
    Chunked,
    /// Each rank maps only its own chunk: gathers send ids to the owners and get rows back.
    Distributed,
}

impl Layout {
    /// Every layout, for tests and benchmarks that cover them all.
    pub const ALL: [Layout; 3] = [Layout::Continuous, Layout::Chunked, Layout::Distributed];

    /// The lower-case name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Continuous => "continuous",
            Layout::Chunked => "chunked",
            Layout::Distributed => "distributed",
        }
    }

    /// Parses [`Layout::name`].
    pub fn parse(name: &str) -> Option<Layout> {
        Layout::ALL.into_iter().find(|l| l.name() == name)
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which memory holds the rows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Location {
    /// Memory private to the process.
    Host,
    /// Memory shared by the processes of one machine: an anonymous memory file (memfd) whose
    /// descriptor the other processes open through `/proc`, so nothing is ever named in
    /// `/dev/shm` and the memory goes away with the last process that maps it. Under the local
    /// backend, one allocation that every rank thread addresses.
    SharedHost,
    /// A file on disk, mapped into memory: for tensors larger than RAM. A `.npy` file is mapped
    /// past its header. The file must not change while it is mapped: a read or write past an
    /// end it was cut to ends the process with an error naming the file
    /// (`graphloom_io::FaultName`).
    Mmap {
        /// The file.
        path: PathBuf,
        /// Whether scatters may write to it (then it is created when missing).
        writable: bool,
    },
}

impl Location {
    /// The lower-case kind of location: `host`, `shared` or `mmap`.
    pub fn kind(&self) -> &'static str {
        match self {
            Location::Host => "host",
            Location::SharedHost => "shared",
            Location::Mmap { .. } => "mmap",
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Mmap { path, writable } => write!(
                f,
                "mmap:{}:{}",
                path.display(),
                if *writable { "rw" } else { "ro" }
            ),
            other => f.write_str(other.kind()),
        }
    }
}

/// What the store needs to know about a job to decide what it supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Ranks in the job.
    pub ranks: usize,
    /// Ranks on this machine.
    pub ranks_on_node: usize,
    /// Whether all ranks live in one process (the local backend, or one MPI process).
    pub one_process: bool,
}

/// Decides whether a tensor with `layout` in `location` can exist on a job of `topology`, with a
/// message that says why not and what to use instead. The constructors and the tests share it.
pub fn check_support(layout: Layout, location: &Location, topology: Topology) -> Result<()> {
    let all_on_node = topology.ranks_on_node == topology.ranks;
    if layout != Layout::Distributed && !all_on_node {
        return Err(StoreError::Unsupported(format!(
            "the {layout} layout maps every row on every rank, so all ranks must run on one \
             machine, but only {} of {} do; use the distributed layout",
            topology.ranks_on_node, topology.ranks
        )));
    }
    if layout != Layout::Distributed && *location == Location::Host && !topology.one_process {
        return Err(StoreError::Unsupported(format!(
            "the {layout} layout lets every rank read every row, but host memory is private to \
             one process and this job has {} processes; use shared host memory, a memory-mapped \
             file or the distributed layout",
            topology.ranks
        )));
    }
    Ok(())
}

/// Which rows each rank owns: contiguous ranges in rank order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowPartition {
    /// `offsets[r]..offsets[r + 1]` are rank `r`'s rows.
    offsets: Vec<usize>,
}

impl RowPartition {
    /// Rows split as evenly as possible: the first `rows % ranks` ranks get one more.
    pub fn even(rows: usize, ranks: usize) -> RowPartition {
        let counts = (0..ranks)
            .map(|r| rows / ranks + usize::from(r < rows % ranks))
            .collect::<Vec<_>>();
        RowPartition::from_counts(&counts)
    }

    /// Rank `r` owns `counts[r]` rows.
    pub fn from_counts(counts: &[usize]) -> RowPartition {
        let mut offsets = Vec::with_capacity(counts.len() + 1);
        offsets.push(0);
        for &c in counts {
            offsets.push(offsets.last().unwrap() + c);
        }
        RowPartition { offsets }
    }

    /// The number of ranks.
    pub fn ranks(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        *self.offsets.last().unwrap()
    }

    /// Rank `rank`'s rows.
    pub fn range(&self, rank: usize) -> std::ops::Range<usize> {
        self.offsets[rank]..self.offsets[rank + 1]
    }

    /// The rank that owns `row` (which must be below [`RowPartition::rows`]).
    #[inline]
    pub fn owner(&self, row: usize) -> usize {
        let bounds = &self.offsets[1..self.offsets.len() - 1];
        if bounds.len() <= 32 {
            // Branch-free for the usual rank counts: a binary search mispredicts on random
            // ids, and each misprediction stalls the other row loads in flight.
            bounds.iter().map(|&o| usize::from(row >= o)).sum()
        } else {
            self.offsets.partition_point(|&o| o <= row) - 1
        }
    }

    /// The row counts, in rank order.
    pub fn counts(&self) -> Vec<usize> {
        self.offsets.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_follow_the_offsets_including_empty_ranks() {
        for counts in [
            vec![3, 0, 4, 1],
            vec![0, 0, 5],
            (0..40).map(|i| i % 3).collect(),
        ] {
            let p = RowPartition::from_counts(&counts);
            for row in 0..p.rows() {
                let owner = p.owner(row);
                assert!(
                    p.range(owner).contains(&row),
                    "{counts:?}: row {row} -> {owner}"
                );
            }
        }
        assert_eq!(RowPartition::even(10, 4).counts(), vec![3, 3, 2, 2]);
    }
}
