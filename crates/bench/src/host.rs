//! The host a benchmark runs on, recorded in every `graphloom bench` JSON line: the CPU model,
//! its cores, the last-level cache, the transparent-huge-page mode, the state of its memory
//! (free, page cache, and how much of the free memory could back a 2 MiB huge page: a host
//! that has worked for hours has its page cache full and its free memory in small blocks,
//! and fresh buffers are then faulted in 4 KiB pages; `bench/age_memory.py` puts a host in
//! either state) and two short probes (a memcpy's GB/s and a gemm's GFLOP/s, a few hundred
//! milliseconds together). Figures of one
//! commit on two hosts can differ by more than two commits on one host; with the host in each
//! line, figures from different hosts can be told apart and read against their memory and
//! compute speed.

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use graphloom_tensor::kernels::matmul::matmul;
use graphloom_tensor::Tensor;
use rayon::prelude::*;
use serde_json::{json, Map, Value};

/// How long each probe repeats its measurement; the best repetition counts.
const PROBE_TIME: Duration = Duration::from_millis(150);
/// The memcpy probe's buffers: at least this large, and at least twice the last-level cache, so
/// that the copy runs from memory, not from the cache.
const MEMCPY_MIN_BYTES: usize = 64 << 20;
/// ... and at most this large, so that the probe stays small beside a benchmark.
const MEMCPY_MAX_BYTES: usize = 1 << 30;
/// The gemm probe's square size: large enough to run at the kernel's full speed.
const GEMM_SIZE: usize = 1024;

static HOST: OnceLock<Value> = OnceLock::new();

/// `record` (a JSON object) with the host added as `"host"`, probed on the first call with
/// `threads` threads (`None`: all cores) and the same for every later call.
pub(crate) fn with_host(mut record: Value, threads: Option<usize>) -> Value {
    if let Some(fields) = record.as_object_mut() {
        let host = HOST.get_or_init(|| probe(threads));
        fields.insert("host".into(), host.clone());
    }
    record
}

/// Prints `record` with the host added (see [`with_host`]) as one JSON line.
pub(crate) fn print_record(record: &Value, threads: Option<usize>) {
    crate::output::print_json(&with_host(record.clone(), threads));
}

/// Describes this host and measures its memcpy and gemm speed with `threads` threads.
fn probe(threads: Option<usize>) -> Value {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = threads.unwrap_or(cores).max(1);
    let llc = last_level_cache();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build();
    let (memcpy, gemm) = match &pool {
        Ok(pool) => pool.install(|| (memcpy_gbps(llc.map(|(_, b)| b)), gemm_gflops())),
        Err(_) => (None, None),
    };
    let mut host = Map::new();
    host.insert("cpu_model".into(), json!(cpu_model()));
    host.insert("cores".into(), json!(cores));
    host.insert("probe_threads".into(), json!(threads));
    host.insert("llc_level".into(), json!(llc.map(|(level, _)| level)));
    host.insert("llc_bytes".into(), json!(llc.map(|(_, bytes)| bytes)));
    host.insert("memcpy_gbps".into(), json!(memcpy));
    host.insert("gemm_gflops".into(), json!(gemm));
    host.insert(
        "thp_enabled".into(),
        json!(thp_mode("/sys/kernel/mm/transparent_hugepage/enabled")),
    );
    host.insert(
        "thp_defrag".into(),
        json!(thp_mode("/sys/kernel/mm/transparent_hugepage/defrag")),
    );
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    for (key, field) in [
        ("mem_free_bytes", "MemFree"),
        ("cached_bytes", "Cached"),
        ("anon_huge_pages_bytes", "AnonHugePages"),
    ] {
        host.insert(key.into(), json!(meminfo_bytes(&meminfo, field)));
    }
    let buddy = std::fs::read_to_string("/proc/buddyinfo").ok();
    let blocks = buddy.as_deref().map(free_blocks_by_order);
    let (huge, unusable) = blocks.as_deref().map(huge_page_room).unzip();
    host.insert("free_2mib_blocks".into(), json!(huge));
    host.insert("unusable_index_2mib".into(), json!(unusable.flatten()));
    Value::Object(host)
}

/// Bytes of the `field` of `/proc/meminfo`'s text (given in kB).
fn meminfo_bytes(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        let kib: u64 = (key == field)
            .then(|| value.split_whitespace().next())??
            .parse()
            .ok()?;
        Some(kib * 1024)
    })
}

/// Free blocks of each order (`2^k` pages), summed over the zones of `/proc/buddyinfo`'s
/// text.
fn free_blocks_by_order(text: &str) -> Vec<u64> {
    let mut orders: Vec<u64> = Vec::new();
    for line in text.lines() {
        let counts: Vec<u64> = line
            .split_whitespace()
            .skip(4)
            .filter_map(|c| c.parse().ok())
            .collect();
        if orders.len() < counts.len() {
            orders.resize(counts.len(), 0);
        }
        for (k, c) in counts.into_iter().enumerate() {
            orders[k] += c;
        }
    }
    orders
}

/// The order of a 2 MiB block in 4 KiB pages.
const HUGE_ORDER: usize = 9;

/// How many 2 MiB huge pages the free blocks could back at once, and the unusable-free-space
/// index for 2 MiB (the share of free pages in smaller blocks: 0 when every free page could
/// back a huge page, near 1 on a host whose free memory is in small pieces; `None` with no
/// free page).
fn huge_page_room(orders: &[u64]) -> (u64, Option<f64>) {
    let pages = |from: usize| -> u64 {
        (orders.iter().enumerate())
            .skip(from)
            .map(|(k, &c)| c << k)
            .sum()
    };
    let (free, huge) = (pages(0), pages(HUGE_ORDER));
    let unusable = (free > 0).then(|| 1.0 - huge as f64 / free as f64);
    (huge >> HUGE_ORDER, unusable)
}

/// The first "model name" of `/proc/cpuinfo`.
fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    cpuinfo_model(&text)
}

fn cpuinfo_model(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_string())
    })
}

/// The level and size of the last-level cache of CPU 0, from sysfs.
fn last_level_cache() -> Option<(u32, u64)> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|entry| {
        let path = entry.ok()?.path();
        let read = |name: &str| std::fs::read_to_string(path.join(name)).ok();
        if read("type")?.trim() == "Instruction" {
            return None;
        }
        Some((
            read("level")?.trim().parse().ok()?,
            cache_size(&read("size")?)?,
        ))
    })
    .max()
}

/// Bytes of a sysfs cache size such as `32768K` or `32M`.
fn cache_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => text.split_at(at),
        None => (text, ""),
    };
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// The selected mode of a transparent-huge-page setting (`always [madvise] never` gives
/// `madvise`).
fn thp_mode(path: &str) -> Option<String> {
    selected_mode(&std::fs::read_to_string(path).ok()?)
}

fn selected_mode(text: &str) -> Option<String> {
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(text[start..end].to_string())
}

/// Runs `f` until [`PROBE_TIME`] has passed (at least three times) and returns its shortest
/// time in seconds.
fn fastest(mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    let mut best = f64::INFINITY;
    let mut runs = 0;
    while runs < 3 || start.elapsed() < PROBE_TIME {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
        runs += 1;
    }
    best
}

/// GB/s of a parallel copy between two buffers twice the last-level cache (64 MiB to 1 GiB),
/// counting the bytes read and written, as `bench gather` counts memcpy.
fn memcpy_gbps(llc_bytes: Option<u64>) -> Option<f64> {
    let bytes = usize::try_from(llc_bytes.unwrap_or(0).saturating_mul(2))
        .unwrap_or(usize::MAX)
        .clamp(MEMCPY_MIN_BYTES, MEMCPY_MAX_BYTES);
    let words = bytes / 8;
    let src: Vec<u64> = (0..words as u64).into_par_iter().collect();
    let mut dst = vec![0u64; words];
    // Pieces of 1 MiB, shared out over the threads.
    const PIECE: usize = (1 << 20) / 8;
    let copy = |dst: &mut [u64]| {
        dst.par_chunks_mut(PIECE)
            .zip(src.par_chunks(PIECE))
            .for_each(|(d, s)| d.copy_from_slice(s));
    };
    copy(&mut dst); // faults the destination in
    let seconds = fastest(|| copy(black_box(&mut dst)));
    black_box(&dst);
    Some(2.0 * bytes as f64 / seconds / 1e9)
}

/// GFLOP/s of an f32 product of two 1024 x 1024 matrices with GraphLoom's own gemm.
fn gemm_gflops() -> Option<f64> {
    let n = GEMM_SIZE;
    let values: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 * 0.25).collect();
    let a = Tensor::from_vec(values, &[n, n]).ok()?;
    matmul(&a, &a, false, false).ok()?; // warm-up
    let mut failed = false;
    let seconds = fastest(|| failed |= black_box(matmul(&a, &a, false, false)).is_err());
    (!failed).then(|| 2.0 * (n * n * n) as f64 / seconds / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_text_is_parsed() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14\n";
        assert_eq!(cpuinfo_model(cpuinfo).as_deref(), Some("AMD EPYC 9R14"));
        assert_eq!(cpuinfo_model("processor : 0\n"), None);
        assert_eq!(cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(cache_size("480M"), Some(480 << 20));
        assert_eq!(cache_size("512"), Some(512));
        assert_eq!(cache_size("12Q"), None);
        assert_eq!(
            selected_mode("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        assert_eq!(selected_mode("always madvise never"), None);
        let meminfo = "MemTotal:       24683908 kB\nMemFree:         1234 kB\nCached: 10 kB\n";
        assert_eq!(meminfo_bytes(meminfo, "MemFree"), Some(1234 * 1024));
        assert_eq!(meminfo_bytes(meminfo, "Cached"), Some(10 * 1024));
        assert_eq!(meminfo_bytes(meminfo, "AnonHugePages"), None);
    }

    #[test]
    fn huge_page_room_counts_free_blocks_of_2_mib_and_more() {
        // Two zones: order 0..=10 counts. Zone 1 holds 4 order-0 pages and one order-10
        // block (two huge pages); zone 2 two order-9 blocks and 4 order-1 blocks.
        let text = "Node 0, zone DMA32 4 0 0 0 0 0 0 0 0 0 1\n\
                    Node 0, zone Normal 0 4 0 0 0 0 0 0 0 2 0\n";
        let orders = free_blocks_by_order(text);
        assert_eq!(orders, [4, 4, 0, 0, 0, 0, 0, 0, 0, 2, 1]);
        let (huge, unusable) = huge_page_room(&orders);
        assert_eq!(huge, 4);
        // 12 of 4 + 8 + 1024 + 1024 = 2060 free pages are in small blocks.
        let expected = 12.0 / 2060.0;
        assert!((unusable.unwrap() - expected).abs() < 1e-12);
        assert_eq!(huge_page_room(&[]), (0, None));
    }

    #[test]
    fn every_record_carries_the_same_host() {
        let a = with_host(json!({"system": "graphloom"}), Some(1));
        let b = with_host(json!({"system": "dgl"}), Some(2));
        let host = &a["host"];
        assert_eq!(host, &b["host"], "probed once per process");
        assert!(host["cores"].as_u64().unwrap() >= 1);
        assert_eq!(host["probe_threads"], json!(1));
        assert!(host["memcpy_gbps"].as_f64().unwrap() > 0.0);
        assert!(host["gemm_gflops"].as_f64().unwrap() > 0.0);
        assert!(host["mem_free_bytes"].as_u64().unwrap() > 0);
        // Null where /proc/buddyinfo cannot be read (some containers).
        if let Some(unusable) = host["unusable_index_2mib"].as_f64() {
            assert!((0.0..=1.0).contains(&unusable), "{unusable}");
        }
        // Only objects take a host.
        assert_eq!(with_host(json!([1]), None), json!([1]));
    }
}
