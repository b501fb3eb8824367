//! `graphloom bench gather`: random, unsorted gathers from store tables far larger than the
//! last-level cache, for every layout and location, against this machine's memcpy bandwidth
//! measured in the same run with the same threads; the Distributed layout also under mpirun;
//! and the embedding cache's hit rate and speed-up on a power-law id stream.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use graphloom_comm::{Communicator, Local};
use graphloom_store::{Layout, Location};
use serde_json::{json, Value};

use measure::{measure, measure_cache};

mod measure;

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
    let exe = crate::peers::graphloom_program()?;
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
