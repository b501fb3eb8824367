//! A mapped file that shrinks under a run: reading or writing a mapped page past the file's new
//! end raises SIGBUS, which would kill the process without a word. Each mapping of a file is
//! named here ([`FaultName`]), and a SIGBUS handler installed with the first name turns a fault
//! inside a named range into a one-line error naming the file and exit status
//! [`FAULT_EXIT_CODE`], the status the `graphloom` command ends with on any error. A fault
//! outside every named range, or a SIGBUS sent by another process, goes to the handler that was
//! there before, or to the default action, so genuine faults still end the process by signal.
//!
//! A handler may run at any point of any thread, even inside `malloc` or while a lock is held,
//! so it only loads atomics, reads memory written before it was published, and calls `write`,
//! `_exit`, `sigaction` and `raise` (all async-signal-safe). Names live in a fixed table of
//! atomic slots, each holding a boxed range and its message line formatted at registration; a
//! box is freed only once no handler is running, so a handler never reads a freed one.

use std::ffi::c_void;
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::SeqCst};
use std::sync::{Once, OnceLock};

/// The exit status of a process whose named mapping faulted: 1, the `graphloom` command's
/// status for any error.
pub const FAULT_EXIT_CODE: i32 = 1;

/// How many mappings can be named at once; a run maps tens of files. Mappings past it are left
/// unnamed, and a fault in one ends the process by signal as without this module.
const SLOTS: usize = 1024;
const _: () = assert!(SLOTS <= u16::MAX as usize);

/// One named range: bytes `start..start + len` of this process's address space, and the line
/// to print when they fault.
struct Named {
    start: usize,
    len: usize,
    message: Box<[u8]>,
}

/// The names, each a leaked `Box<Named>` or null.
static NAMES: [AtomicPtr<Named>; SLOTS] = [const { AtomicPtr::new(ptr::null_mut()) }; SLOTS];

/// Handlers running now: a box taken out of `NAMES` is freed only when this is zero, since a
/// handler may have loaded its pointer before it was taken out.
static HANDLING: AtomicUsize = AtomicUsize::new(0);

/// The SIGBUS action before ours, read before ours was installed.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

static INSTALL: Once = Once::new();

/// The name of one mapped file's range for the SIGBUS handler, held while the mapping lives
/// and dropped before it is unmapped (so a range mapped again later never names this file).
#[must_use = "the range is named only while its FaultName lives"]
pub struct FaultName {
    /// The slot in `NAMES`, small so that types holding many names stay small.
    slot: Option<u16>,
}

impl FaultName {
    /// Names `mapped`, the bytes of a map of the file at `path`, installing the SIGBUS handler
    /// on first use. An empty range, or one past the table's room, is left unnamed.
    pub fn register(mapped: &[u8], path: &Path) -> FaultName {
        if mapped.is_empty() {
            return FaultName { slot: None };
        }
        INSTALL.call_once(install);
        let named = Box::into_raw(Box::new(Named {
            start: mapped.as_ptr() as usize,
            len: mapped.len(),
            message: message(path).into_boxed_slice(),
        }));
        let slot = NAMES
            .iter()
            .position(|slot| {
                slot.compare_exchange(ptr::null_mut(), named, SeqCst, SeqCst)
                    .is_ok()
            })
            .map(|slot| slot as u16);
        if slot.is_none() {
            // SAFETY: `named` came from Box::into_raw just above and was never published.
            drop(unsafe { Box::from_raw(named) });
        }
        FaultName { slot }
    }
}

impl Drop for FaultName {
    fn drop(&mut self) {
        let Some(slot) = self.slot else { return };
        let named = NAMES[usize::from(slot)].swap(ptr::null_mut(), SeqCst);
        // A handler that loaded the pointer before the swap counted itself in HANDLING first.
        // One that finds its fault named never returns (it ends the process), so this waits
        // only for handlers on their way to another handler.
        while HANDLING.load(SeqCst) != 0 {
            std::thread::yield_now();
        }
        // SAFETY: the pointer came from Box::into_raw in `register`, only this value's slot
        // held it, and no handler can still be reading it.
        drop(unsafe { Box::from_raw(named) });
    }
}

/// The line printed for a fault in a map of `path`, in the form of the command's errors.
fn message(path: &Path) -> Vec<u8> {
    format!(
        "error: {} changed while in use: it is mapped and was truncated, or its storage failed \
         (a dataset's files, and a run's own, must not change while the run uses them)\n",
        path.display()
    )
    .into_bytes()
}

/// The message of the named range holding `address`, if any. Async-signal-safe; the caller
/// counts itself in `HANDLING` for as long as it uses the answer.
fn find(address: usize) -> Option<&'static [u8]> {
    NAMES.iter().find_map(|slot| {
        let named = slot.load(SeqCst);
        // SAFETY: a non-null slot holds a live box, freed only when no handler runs.
        let named = unsafe { named.as_ref() }?;
        (address.wrapping_sub(named.start) < named.len).then_some(&*named.message)
    })
}

/// Installs `on_sigbus` for SIGBUS, remembering the action it replaces.
fn install() {
    // SAFETY: sigaction reads and writes only the structs passed; a zeroed sigaction is a
    // valid value to be overwritten.
    unsafe {
        let mut previous: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, ptr::null(), &mut previous) != 0 {
            return;
        }
        let _ = PREVIOUS.set(previous);
        let mut ours: libc::sigaction = std::mem::zeroed();
        ours.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
        // SA_ONSTACK: a fault deep in a thread's stack still has room to run the handler.
        ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut ours.sa_mask);
        libc::sigaction(libc::SIGBUS, &ours, ptr::null_mut());
    }
}

extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    HANDLING.fetch_add(1, SeqCst);
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let (code, address) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // A positive code is a fault the kernel raised, whose si_addr is the faulting address; a
    // signal sent by a process has no address.
    if code > 0 {
        if let Some(message) = find(address) {
            write_stderr(message);
            // SAFETY: _exit is async-signal-safe and ends the process at once.
            unsafe { libc::_exit(FAULT_EXIT_CODE) };
        }
    }
    HANDLING.fetch_sub(1, SeqCst);
    // SAFETY: passes on what the kernel passed this handler.
    unsafe { chain(signal, info, context, code > 0) };
}

/// Hands a SIGBUS that names no mapped file to the action before ours: its handler, or the
/// default (ending the process by signal: a fault is raised again when this handler returns,
/// a sent signal is raised anew).
///
/// # Safety
///
/// Called from the SIGBUS handler with the arguments it received.
unsafe fn chain(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut c_void,
    fault: bool,
) {
    let previous = PREVIOUS.get();
    let handler = previous.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
    if handler == libc::SIG_IGN && !fault {
        return;
    }
    if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
        let siginfo = previous.is_some_and(|p| p.sa_flags & libc::SA_SIGINFO != 0);
        // SAFETY: the previous action's handler has the signature its flags declare.
        unsafe {
            if siginfo {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                    std::mem::transmute(handler);
                f(signal, info, context);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
                f(signal);
            }
        }
        return;
    }
    // SAFETY: resetting a disposition and raising are async-signal-safe. The raised signal
    // is blocked until this handler returns, then ends the process.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGBUS, &default, ptr::null_mut());
        if !fault {
            libc::raise(libc::SIGBUS);
        }
    }
}

/// Writes all of `bytes` to stderr, as far as it takes them. Async-signal-safe.
fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length are those of a live slice.
        let n = unsafe { libc::write(libc::STDERR_FILENO, bytes.as_ptr().cast(), bytes.len()) };
        match n {
            n if n > 0 => bytes = &bytes[n as usize..],
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_range_is_found_until_its_name_is_dropped() {
        let bytes = [0u8; 100];
        let path = Path::new("/data/set/node_feat.npy");
        let name = FaultName::register(&bytes[10..60], path);
        let start = bytes.as_ptr() as usize;
        let line = find(start + 10).expect("the first byte is named");
        let line = std::str::from_utf8(line).unwrap();
        assert!(line.starts_with("error: /data/set/node_feat.npy changed while in use"));
        assert!(line.ends_with('\n') && line.lines().count() == 1, "{line}");
        assert!(find(start + 59).is_some());
        assert!(find(start + 9).is_none() && find(start + 60).is_none());
        drop(name);
        assert!(find(start + 10).is_none());
        assert!(FaultName::register(&[], path).slot.is_none());
    }
}
