//! `graphloom bench gather`: random, unsorted gathers from store tables far larger than the
//! last-level cache, for every layout and location, against this machine's memcpy bandwidth
//! measured in the same run with the same threads; the Distributed layout also under mpirun;
//! and the embedding cache's hit rate and speed-up on a power-law id stream.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use graphloom_comm::{Communicator, Local, ReduceData, ReduceOp};
use graphloom_store::{
    Admission, CacheConfig, Embedding, Layout, Location, StoreError, StoreSpec, StoreTensor,
};
use graphloom_tensor::rng::mix64;
use graphloom_tensor::DType;
use serde_json::{json, Value};

/// Arguments of `graphloom bench gather`.
#[derive(Args, Clone)]
pub(crate) struct GatherArgs {
    /// Rows per table: at least this many, and more where needed for the table to be
    /// `--cache-multiple` times the last-level cache.
    #[arg(long, default_value_t = 4 << 20)]
    rows: usize,
    /// How many times the last-level cache each table (and the memcpy buffers) must be at
    /// least.
    #[arg(long, default_value_t = 4)]
    cache_multiple: usize,
    /// Ids gathered per rank per measurement (random, unsorted, with repeats).
    #[arg(long, default_value_t = 1_000_000)]
    ids: usize,
    /// Row sizes in bytes (multiples of 4), comma-separated.
    #[arg(long, default_value = "64,256,512,2048", value_delimiter = ',')]
    row_bytes: Vec<usize>,
    /// Layouts, comma-separated: continuous, chunked, distributed.
    #[arg(
        long,
        default_value = "continuous,chunked,distributed",
        value_delimiter = ','
    )]
    layouts: Vec<String>,
    /// Locations, comma-separated: host, shared, mmap.
    #[arg(long, default_value = "host,shared,mmap", value_delimiter = ',')]
    locations: Vec<String>,
    /// In-process ranks (threads) sharing the table.
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    /// Timed gathers per measurement; the fastest counts.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Folder for the memory-mapped tables [default: the system's temporary folder].
    #[arg(long)]
    mmap_dir: Option<PathBuf>,
    /// MPI processes for the Distributed layout under mpirun (0 skips it; needs a build with
    /// `--features mpi`).
    #[arg(long, default_value_t = 2)]
    mpi_ranks: usize,
    /// Cache size as a fraction of a rank's rows, for the cache measurement.
    #[arg(long, default_value_t = 0.1)]
    cache_ratio: f64,
    /// Run as one rank of the mpirun job this benchmark starts.
    #[arg(long, hide = true)]
    mpi_worker: bool,
    /// Print one JSON object per measurement per line.
    #[arg(long)]
    json: bool,
}

/// The last-level cache of this machine, from sysfs (32 MiB when unknown).
fn last_level_cache_bytes() -> usize {
    let mut best = 0;
    for index in 0..8 {
        let path = format!("/sys/devices/system/cpu/cpu0/cache/index{index}/size");
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        let text = text.trim();
        let (digits, unit) = text.split_at(
            text.find(|c: char| !c.is_ascii_digit())
                .unwrap_or(text.len()),
        );
        let value: usize = digits.parse().unwrap_or(0);
        best = best.max(match unit {
            "K" => value << 10,
            "M" => value << 20,
            "G" => value << 30,
            _ => value,
        });
    }
    if best == 0 {
        32 << 20
    } else {
        best
    }
}

/// `job` names the run, the same on every rank, so all ranks map the same file.
fn parse_location(name: &str, dir: &std::path::Path, job: u32, tag: &str) -> Result<Location> {
    Ok(match name {
        "host" => Location::Host,
        "shared" => Location::SharedHost,
        "mmap" => Location::Mmap {
            path: dir.join(format!("graphloom-bench-{job}-{tag}.bin")),
            writable: true,
        },
        other => bail!("unknown location '{other}' (host, shared, mmap)"),
    })
}

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

struct Measurement {
    gbps: f64,
    memcpy_gbps: f64,
    comm_share: f64,
}

/// Creates one table, fills it, and times `repeats` gathers of `ids` random rows on every rank.
/// `None` when the layout cannot live in that location on this job.
fn measure(
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
fn measure_cache(
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

/// Runs every requested measurement on `comm`; rank 0 prints each as it completes.
fn run_on(comm: Arc<dyn Communicator>, args: &GatherArgs) -> Result<()> {
    let dir = args.mmap_dir.clone().unwrap_or_else(std::env::temp_dir);
    let job =
        graphloom_comm::CommunicatorExt::broadcast_typed(comm.as_ref(), 0, &[std::process::id()])?
            [0];
    let llc = last_level_cache_bytes();
    let layouts = args
        .layouts
        .iter()
        .map(|l| Layout::parse(l).with_context(|| format!("unknown layout '{l}'")))
        .collect::<Result<Vec<_>>>()?;
    for &row_bytes in &args.row_bytes {
        if row_bytes == 0 || row_bytes % 4 != 0 {
            bail!("row size {row_bytes} is not a positive multiple of 4 bytes");
        }
        let rows = args.rows.max(args.cache_multiple * llc / row_bytes);
        for &layout in &layouts {
            for name in &args.locations {
                let location = parse_location(name, &dir, job, &format!("{layout}-{row_bytes}"))?;
                let Some(m) = measure(&comm, args, layout, location.clone(), rows, row_bytes)?
                else {
                    continue;
                };
                if comm.rank() == 0 {
                    report(
                        args.json,
                        &json!({
                            "kind": "gather",
                            "layout": layout.name(),
                            "location": location.kind(),
                            "backend": comm.backend(),
                            "ranks": comm.size(),
                            "row_bytes": row_bytes,
                            "rows": rows,
                            "ids_per_rank": args.ids,
                            "gbps": m.gbps,
                            "memcpy_gbps": m.memcpy_gbps,
                            "ratio": m.gbps / m.memcpy_gbps,
                            "comm_share": m.comm_share,
                        }),
                    );
                }
            }
        }
    }
    if layouts.contains(&Layout::Distributed) && comm.size() > 1 {
        let row_bytes = 512;
        let rows = args.rows.max(args.cache_multiple * llc / row_bytes);
        let record = measure_cache(&comm, args, rows, row_bytes)?;
        if comm.rank() == 0 {
            report(args.json, &record);
        }
    }
    Ok(())
}

/// Prints one measurement: a JSON line, or a table row.
fn report(as_json: bool, record: &Value) {
    if as_json {
        crate::host::print_record(record, None);
        return;
    }
    let f = |k: &str| record[k].as_f64().unwrap_or(0.0);
    let extra = if record["kind"] == "cache" {
        format!(
            "  cache hit rate {:.1}%, speed-up {:.2}x",
            100.0 * f("cache_hit_rate"),
            f("cache_speedup")
        )
    } else if record["layout"] == "distributed" {
        format!("  communication {:.0}%", 100.0 * f("comm_share"))
    } else {
        String::new()
    };
    println!(
        "{:<5} {:<11} {:<6} {:>2} ranks {:>5} B rows: {:>6.2} GB/s, memcpy {:>6.2} GB/s, ratio {:.2}{extra}",
        record["backend"].as_str().unwrap_or(""),
        record["layout"].as_str().unwrap_or(""),
        record["location"].as_str().unwrap_or(""),
        record["ranks"],
        record["row_bytes"],
        f("gbps"),
        f("memcpy_gbps"),
        f("ratio"),
    );
}

/// Runs the Distributed layout as an mpirun job of `args.mpi_ranks` processes and relays its
/// lines.
fn run_under_mpirun(args: &GatherArgs) -> Result<()> {
    let exe = std::env::current_exe()?;
    let mut command = graphloom_comm::launch::mpirun(args.mpi_ranks);
    command
        .arg(exe)
        .args([
            "bench",
            "gather",
            "--mpi-worker",
            "--json",
            "--layouts",
            "distributed",
        ])
        .arg("--rows")
        .arg(args.rows.to_string())
        .arg("--ids")
        .arg(args.ids.to_string())
        .arg("--repeats")
        .arg(args.repeats.to_string())
        .arg("--cache-multiple")
        .arg(args.cache_multiple.to_string())
        .arg("--cache-ratio")
        .arg(args.cache_ratio.to_string())
        .arg("--row-bytes")
        .arg(
            args.row_bytes
                .iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(","),
        )
        .arg("--locations")
        .arg(args.locations.join(","));
    if let Some(dir) = &args.mmap_dir {
        command.arg("--mmap-dir").arg(dir);
    }
    // Each process gets its share of the cores, so the job uses as many threads as the
    // in-process runs.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    command.env(
        "RAYON_NUM_THREADS",
        (cores / args.mpi_ranks).max(1).to_string(),
    );
    let output = command.output().context("starting mpirun")?;
    if !output.status.success() {
        bail!(
            "the mpirun job failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        if let Ok(record) = serde_json::from_str::<Value>(line) {
            report(args.json, &record);
        }
    }
    Ok(())
}

pub(crate) fn run(args: GatherArgs) -> Result<()> {
    // Every timed gather returns a new output of the same size; as in a training loop's steady
    // state, it lands in a buffer the previous one freed, so the time is the gather's and not
    // the kernel's zeroing of fresh pages (the outputs of two ranks alone can pass 1 GiB).
    graphloom_tensor::alloc::set_cache_limit(usize::MAX);
    if args.mpi_worker {
        #[cfg(feature = "mpi")]
        {
            graphloom_comm::mpi::run_rank(|comm| run_on(comm, &args))?;
            return Ok(());
        }
        #[cfg(not(feature = "mpi"))]
        bail!("this graphloom was built without MPI (build with --features mpi)");
    }
    if args.ranks == 0 {
        bail!("--ranks must be at least 1");
    }
    if !args.json {
        println!(
            "random gathers of {} ids per rank; tables at least {}x the {} MiB last-level cache",
            args.ids,
            args.cache_multiple,
            last_level_cache_bytes() >> 20
        );
    }
    for result in Local::run(args.ranks, |comm| run_on(comm, &args)) {
        result?;
    }
    let wants_distributed = args.layouts.iter().any(|l| l == "distributed");
    if args.mpi_ranks > 0 && wants_distributed {
        if !cfg!(feature = "mpi") {
            eprintln!("skipping the mpirun measurements: built without --features mpi");
        } else if !graphloom_comm::launch::mpirun_available() {
            eprintln!("skipping the mpirun measurements: mpirun not found");
        } else {
            run_under_mpirun(&args)?;
        }
    }
    Ok(())
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
