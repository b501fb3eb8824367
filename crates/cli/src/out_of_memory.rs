//! Running out of memory ends a run with an error, not an abort.
//!
//! Every size a run takes is checked against the memory this process may use before it is
//! allocated, but that figure cannot see everything: thread stacks and the allocator's own
//! reservations count against an address-space limit (`ulimit -v`) too. An allocation that
//! still fails would, by Rust's default, print "memory allocation of N bytes failed" and abort
//! (SIGABRT, a core dump). The command's allocator wraps the system's instead, and when it
//! returns nothing writes a one-line error naming the size and the limit, then exits with the
//! status of every other error. What a run writes goes to temporary names first, so nothing
//! half-written is left under a final name; the next run removes the temporaries.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write;

/// The system allocator, ending the process with an error when it has no memory to give: the
/// `graphloom` binary's global allocator.
pub struct ExitOnOutOfMemory;

// SAFETY: every call goes to the system allocator with the same arguments; only a null result
// is acted on, and then the process ends.
unsafe impl GlobalAlloc for ExitOnOutOfMemory {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, which is `System.alloc`'s.
        given(unsafe { System.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        given(unsafe { System.alloc_zeroed(layout) }, layout.size())
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `realloc`'s contract, which is `System.realloc`'s.
        given(unsafe { System.realloc(ptr, layout, new_size) }, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `dealloc`'s contract, which is `System.dealloc`'s.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// `ptr`, an allocation of `bytes` bytes, unless it is null: then the process ends.
#[inline]
fn given(ptr: *mut u8, bytes: usize) -> *mut u8 {
    if ptr.is_null() {
        out_of_memory(bytes);
    }
    ptr
}

/// Under an address-space limit, keeps glibc's allocator to one arena. It would otherwise give
/// each new thread an arena of its own, reserving 64 MiB of address space apiece, and a run
/// that holds tens of MiB fails under a limit of hundreds.
pub(crate) fn fit_allocator_to_limit() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if address_space_limit_kib().is_some() {
        // SAFETY: mallopt only sets a tunable of the allocator; it is called before any other
        // thread starts.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    }
}

/// Writes the error for a failed allocation of `bytes` bytes and exits with status 1. Nothing
/// here allocates: the message is formatted into a buffer on the stack.
#[cold]
fn out_of_memory(bytes: usize) -> ! {
    let mut message = StackText::default();
    let _ = write!(
        message,
        "error: out of memory: allocating {} KiB failed",
        bytes.div_ceil(1024)
    );
    if let Some(kib) = address_space_limit_kib() {
        let _ = write!(
            message,
            " under an address-space limit of {kib} KiB (ulimit -v)"
        );
    }
    let _ = writeln!(
        message,
        ": give the run more memory, or plan it within less with --memory-gib"
    );
    let text = message.as_bytes();
    // SAFETY: `write` reads `text.len()` bytes of a live buffer; `_exit` ends the process
    // without running anything that could allocate.
    unsafe {
        libc::write(libc::STDERR_FILENO, text.as_ptr().cast(), text.len());
        libc::_exit(1)
    }
}

/// The process's address-space limit (`RLIMIT_AS`) in KiB, if it has one.
fn address_space_limit_kib() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given and has no other preconditions.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } == 0;
    (known && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur / 1024)
}

/// Text written into a fixed buffer; what does not fit is dropped.
struct StackText {
    bytes: [u8; 256],
    len: usize,
}

impl Default for StackText {
    fn default() -> StackText {
        StackText {
            bytes: [0; 256],
            len: 0,
        }
    }
}

impl StackText {
    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl Write for StackText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = self.bytes.len() - self.len;
        let taken = s.len().min(room);
        self.bytes[self.len..self.len + taken].copy_from_slice(&s.as_bytes()[..taken]);
        self.len += taken;
        Ok(())
    }
}
