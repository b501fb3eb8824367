//! Starting threads under an address-space limit (`ulimit -v`) as an error, never an abort.
//!
//! The standard library maps a thread's stack before the thread starts, and a failure there is
//! the error `spawn` returns; but each new thread then maps its own alternative signal stack
//! (for stack-overflow reports), and a failure there aborts the process. [`builder`] first
//! makes sure the address space has room for both, by mapping as much and unmapping it, so a
//! limit the thread would reach is an error its caller handles (a full-batch run planned under
//! a limit 12 KiB too tight aborted in the plan's probe thread).

use std::io;

/// The stack of a thread whose builder sets none: `RUST_MIN_STACK`, else Rust's 2 MiB.
fn default_stack_bytes() -> usize {
    std::env::var("RUST_MIN_STACK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2 << 20)
}

/// Room for the alternative signal stack (16 KiB on x86-64 Linux, up to the processor's
/// `AT_MINSIGSTKSZ`) and the guard pages of both stacks, with margin.
const SIGNAL_STACK_ROOM: usize = 256 << 10;

/// Fails with the system's error unless the address space has room for a thread of
/// `stack_bytes` (the default stack when `None`) and its signal stack.
pub fn room_for_thread(stack_bytes: Option<usize>) -> io::Result<()> {
    let bytes = stack_bytes
        .unwrap_or_else(default_stack_bytes)
        .saturating_add(SIGNAL_STACK_ROOM);
    // SAFETY: a fresh private mapping that nothing else refers to, unmapped at once; PROT_NONE
    // counts against the address-space limit as the stacks will, without committing memory.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        libc::munmap(p, bytes);
    }
    Ok(())
}

/// A thread builder, once the address space has room for a thread of the default stack
/// ([`room_for_thread`]).
pub fn builder() -> io::Result<std::thread::Builder> {
    room_for_thread(None)?;
    Ok(std::thread::Builder::new())
}

/// Starts one of a rayon pool's threads, checked as [`builder`] checks: the pools' spawn
/// handler (`ThreadPoolBuilder::spawn_handler`).
pub fn spawn_pool_thread(thread: rayon::ThreadBuilder) -> io::Result<()> {
    room_for_thread(thread.stack_size())?;
    let mut b = std::thread::Builder::new();
    if let Some(name) = thread.name() {
        b = b.name(name.to_owned());
    }
    if let Some(size) = thread.stack_size() {
        b = b.stack_size(size);
    }
    b.spawn(|| thread.run())?;
    Ok(())
}
