//! The kernels' thread pool, started before any work. Left to rayon, the pool starts on its
//! first use, and a thread that cannot start then (the address-space limit spent on the
//! stacks) panics inside rayon; started here, the failure is an error that says so.

use anyhow::Result;

/// The most kernel threads a run may ask for: far more than any machine's cores, few enough
/// that starting them cannot exhaust the process's threads.
pub(crate) const MAX_THREADS: usize = 1024;

/// Starts rayon's global pool with `threads` threads (all cores when `None`).
pub(crate) fn start(threads: Option<usize>) -> Result<()> {
    if let Some(t) = threads {
        if t == 0 || t > MAX_THREADS {
            anyhow::bail!("--threads must be in 1..={MAX_THREADS}, not {t}");
        }
        if let Some(why) = graphloom_plan::threads_beyond_address_space(t as u64) {
            anyhow::bail!("--threads {t}: {why}: give fewer");
        }
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .spawn_handler(graphloom_tensor::threads::spawn_pool_thread)
        .build_global()
        .map_err(|e| anyhow::anyhow!("cannot start the kernels' threads: {e}"))
}
