//! The measurements of `graphloom bench gather`: timed gathers from one table against the
//! memcpy baseline timed between them, and the embedding cache on a power-law id stream.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use graphloom_comm::{Communicator, ReduceData, ReduceOp};
use graphloom_store::{
    Admission, CacheConfig, Embedding, Layout, Location, StoreError, StoreSpec, StoreTensor,
};
use graphloom_tensor::rng::mix64;
use graphloom_tensor::DType;
use serde_json::{json, Value};

use super::{last_level_cache_bytes, GatherArgs};

/// `count` pseudo-random ids in `0..rows`, different per rank.
fn random_ids(rows: usize, count: usize, seed: u64) -> Vec<i64> {
    (0..count as u64)
        .map(|i| (mix64(seed.wrapping_mul(0x9E37_79B9) ^ i) % rows as u64) as i64)
        .collect()
}

/// A power-law (Zipf-like, exponent 1) stream: id = rows^u - 1 for uniform u, scattered over
/// the table by a multiplicative permutation so the hot rows belong to every rank.
fn power_law_ids(rows: usize, count: usize, seed: u64) -> Vec<i64> {
    let step = scatter_step(rows as u64);
    (0..count as u64)
        .map(|i| {
            let u = (mix64(seed ^ i.wrapping_mul(0xD1B5_4A32_D192_ED03)) >> 11) as f64
                / (1u64 << 53) as f64;
            let rank = ((rows as f64).powf(u) - 1.0) as u64;
            ((u128::from(rank) * u128::from(step)) % rows as u128) as i64
        })
        .collect()
}

/// A step coprime with `rows` near `rows` / golden ratio: `k * step mod rows` is then a
/// permutation of `0..rows` that spreads consecutive `k` over the whole table (a fixed prime
/// would not: 2^31 - 1 is -1 modulo every power of two up to 2^31, which put every hot row in
/// the last rank's part).
fn scatter_step(rows: u64) -> u64 {
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let mut step = (rows as f64 * 0.618_033_988_749_895) as u64;
    while gcd(step.max(1), rows) != 1 {
        step += 1;
    }
    step.max(1)
}

/// Seconds of the slowest rank.
fn slowest(comm: &dyn Communicator, seconds: f64) -> Result<f64> {
    let mut x = [seconds];
    comm.all_reduce(ReduceData::F64(&mut x), ReduceOp::Max)?;
    Ok(x[0])
}

/// The memcpy baseline: every rank copies its own buffer at once, with the same threads as
/// the gathers, timed between the gathers so that both see the same state of a shared machine.
struct Memcpy {
    src: Vec<u8>,
    dst: Vec<u8>,
    best: f64,
}

impl Memcpy {
    /// Buffers as large as one gather of `row_bytes` rows writes on a rank (at most 512 MiB),
    /// and together at least `--cache-multiple` times the last-level cache: a smaller copy runs
    /// partly in caches (a virtual machine may report less cache than its host has) and
    /// measures them rather than memory.
    fn new(comm: &dyn Communicator, args: &GatherArgs, row_bytes: usize) -> Memcpy {
        let bytes = (args.cache_multiple * last_level_cache_bytes() / comm.size())
            .max((args.ids * row_bytes).min(512 << 20))
            .max(64 << 20);
        Memcpy {
            src: vec![1u8; bytes],
            dst: vec![0u8; bytes],
            best: f64::INFINITY,
        }
    }

    /// Times one copy on every rank (the slowest rank counts) and keeps the fastest.
    fn time(&mut self, comm: &dyn Communicator) -> Result<()> {
        use rayon::prelude::*;
        comm.barrier()?;
        let start = Instant::now();
        self.dst
            .par_chunks_mut(4 << 20)
            .zip(self.src.par_chunks(4 << 20))
            .for_each(|(d, s)| d.copy_from_slice(s));
        self.best = self.best.min(slowest(comm, start.elapsed().as_secs_f64())?);
        std::hint::black_box(&self.dst);
        Ok(())
    }

    /// GB/s of bytes copied by all ranks in the fastest copy.
    fn gbps(&self, comm: &dyn Communicator) -> f64 {
        (self.src.len() * comm.size()) as f64 / self.best / 1e9
    }
}

/// One gather measurement: GB/s of rows gathered by all ranks, the memcpy baseline's GB/s
/// beside it, and the share of the gathers' time spent communicating.
pub(super) struct Measurement {
    pub(super) gbps: f64,
    pub(super) memcpy_gbps: f64,
    pub(super) comm_share: f64,
}

/// Creates one table, fills it, and times `repeats` gathers of `ids` random rows on every rank.
/// `None` when the layout cannot live in that location on this job.
pub(super) fn measure(
    comm: &Arc<dyn Communicator>,
    args: &GatherArgs,
    layout: Layout,
    location: Location,
    rows: usize,
    row_bytes: usize,
) -> Result<Option<Measurement>> {
    let spec = StoreSpec::new(&[rows, row_bytes / 4], DType::F32, layout, location.clone());
    let mut table = match StoreTensor::new(comm.clone(), spec) {
        Ok(t) => t,
        Err(StoreError::Unsupported(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    // Touch every page, so the gathers read memory rather than fault it in.
    table.local_bytes_mut()?.fill(0x3c);
    table.barrier()?;
    let ids = random_ids(rows, args.ids, 1 + comm.rank() as u64);
    let mut out = vec![0u8; ids.len() * row_bytes];
    let mut memcpy = Memcpy::new(comm.as_ref(), args, row_bytes);
    table.gather_into(&ids, &mut out)?; // warm-up
    memcpy.time(comm.as_ref())?; // warm-up: faults the destination in
    let before = table.stats();
    let mut best = f64::INFINITY;
    for _ in 0..args.repeats {
        comm.barrier()?;
        let start = Instant::now();
        table.gather_into(&ids, &mut out)?;
        best = best.min(slowest(comm.as_ref(), start.elapsed().as_secs_f64())?);
        memcpy.time(comm.as_ref())?;
    }
    let after = table.stats();
    let share = if after.seconds > before.seconds {
        (after.comm_seconds - before.comm_seconds) / (after.seconds - before.seconds)
    } else {
        0.0
    };
    std::hint::black_box(&out);
    drop(out);
    drop(table);
    if let Location::Mmap { path, .. } = &location {
        comm.barrier()?;
        if comm.rank() == 0 {
            let _ = std::fs::remove_file(path);
        }
    }
    let gbps = (args.ids * comm.size() * row_bytes) as f64 / best / 1e9;
    Ok(Some(Measurement {
        gbps,
        memcpy_gbps: memcpy.gbps(comm.as_ref()),
        comm_share: share,
    }))
}

/// Refresh periods a frequency cache runs before it is timed.
const WARM_REFRESHES: usize = 8;

/// The cache measurement: a frozen Distributed table, a power-law stream, gathers with and
/// without a frequency-admitted cache, alternating once the cache is warm, the cache's summed
/// over 8 gathers or `--repeats`, whichever is more.
pub(super) fn measure_cache(
    comm: &Arc<dyn Communicator>,
    args: &GatherArgs,
    rows: usize,
    row_bytes: usize,
) -> Result<Value> {
    let spec = StoreSpec::new(
        &[rows, row_bytes / 4],
        DType::F32,
        Layout::Distributed,
        Location::Host,
    );
    let mut plain = Embedding::frozen(StoreTensor::new(comm.clone(), spec.clone())?);
    plain.init_uniform(1, 1.0)?;
    let mut cached = Embedding::frozen(StoreTensor::new(comm.clone(), spec)?);
    cached.init_uniform(1, 1.0)?;
    let refresh_every = 2;
    let mut cached = cached.with_cache(CacheConfig {
        ratio: args.cache_ratio,
        admission: Admission::Frequency { refresh_every },
    })?;
    // The cache's time includes its refreshes, so it is summed over whole refresh periods, and
    // over enough gathers that one slow moment of a shared machine does not decide it.
    let timed = args.repeats.max(4 * refresh_every);
    let stream = |k: usize| power_law_ids(rows, args.ids, (comm.rank() * 1000 + k) as u64);
    // The cache fills over its first refreshes (each admits the rows counted since the last),
    // so it is timed once warm: after WARM_REFRESHES refresh periods, as in a long training run.
    let warm_up = WARM_REFRESHES * refresh_every;
    for k in 0..warm_up {
        let ids = stream(k);
        cached.gather(&ids)?;
        if k < 2 {
            plain.gather(&ids)?;
        }
    }
    let warm = cached.cache_stats().expect("cache");
    let mut memcpy = Memcpy::new(comm.as_ref(), args, row_bytes);
    memcpy.time(comm.as_ref())?; // warm-up: faults the destination in
    let (mut t_plain, mut t_cached) = (0.0, 0.0);
    for k in warm_up..warm_up + timed {
        let ids = stream(k);
        comm.barrier()?;
        let start = Instant::now();
        std::hint::black_box(plain.gather(&ids)?);
        t_plain += slowest(comm.as_ref(), start.elapsed().as_secs_f64())?;
        comm.barrier()?;
        let start = Instant::now();
        std::hint::black_box(cached.gather(&ids)?);
        t_cached += slowest(comm.as_ref(), start.elapsed().as_secs_f64())?;
        memcpy.time(comm.as_ref())?;
    }
    let stats = cached.cache_stats().expect("cache");
    let hits = stats.hits - warm.hits;
    let misses = stats.misses - warm.misses;
    let memcpy = memcpy.gbps(comm.as_ref());
    let gbps = (args.ids * comm.size() * row_bytes * timed) as f64 / t_cached / 1e9;
    Ok(json!({
        "kind": "cache",
        "layout": "distributed",
        "location": "host",
        "backend": comm.backend(),
        "ranks": comm.size(),
        "row_bytes": row_bytes,
        "gbps": gbps,
        "memcpy_gbps": memcpy,
        "ratio": gbps / memcpy,
        "cache_ratio": args.cache_ratio,
        "cache_hit_rate": hits as f64 / (hits + misses).max(1) as f64,
        "cache_speedup": t_plain / t_cached,
        "cache_fill": stats.rows as f64 / stats.capacity.max(1) as f64,
        "warm_up_gathers": warm_up,
    }))
}

#[cfg(test)]
mod tests {
    use super::scatter_step;

    #[test]
    fn scatter_step_permutes_and_spreads_the_hot_rows() {
        for rows in [1u64, 2, 7, 1000, 1 << 12, 3 * 5 * 7 * 11 * 13] {
            let step = scatter_step(rows);
            let mut seen: Vec<u64> = (0..rows).map(|k| k * step % rows).collect();
            seen.sort_unstable();
            assert!(
                seen.iter().copied().eq(0..rows),
                "not a permutation of {rows}"
            );
        }
        // The 1000 hottest rows of a power-of-two table fall evenly into its two halves.
        let rows = 1u64 << 22;
        let step = scatter_step(rows);
        let low = (0..1000u64).filter(|k| k * step % rows < rows / 2).count();
        assert!(
            (450..=550).contains(&low),
            "{low} of 1000 in the lower half"
        );
    }
}
