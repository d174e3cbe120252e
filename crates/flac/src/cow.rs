//! Page faults FLAC resolves: a write to a page that is shared copy-on-write (a FLAC buffer
//! page, or a FLAC-space page mapped read-only), and the first touch of a FLAC-space page that
//! is not mapped yet (the space is mapped on demand). Protection is `mprotect`/mapping
//! read-only plus a SIGSEGV handler, which keeps 2 MiB mappings whole (userfaultfd
//! write-protection would split them into 4 KiB entries, which costs ~1 us each on this
//! machine, see docs/case-studies/flac.md).
//!
//! The handler runs on the faulting thread: it finds the [`FaultOwner`] (a FLAC instance)
//! owning the address, which resolves the fault under its lock (FLAC never touches protected
//! memory while holding the lock, which the handler asserts) and returns, and the faulting
//! instruction is retried. Faults on other addresses go to the handler installed before FLAC's.

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Once;

/// What owns a range of protected memory and resolves the faults in it (a FLAC instance).
pub(crate) trait FaultOwner: Sync {
    /// Whether `addr` lies in memory this owner protects or maps on demand.
    fn owns(&self, addr: usize) -> bool;
    /// Resolve a fault at `addr` (`write`: whether the access was a write, when known); false
    /// when it is not one this owner resolves.
    fn on_fault(&self, addr: usize, write: Option<bool>) -> bool;
}

/// A registered owner, boxed: a slot holds a thin pointer, an owner's is a `dyn` one.
struct Registered(*const dyn FaultOwner);

const SLOTS: usize = 64;
static INSTANCES: [AtomicPtr<Registered>; SLOTS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];
static ACTIVE: [AtomicU32; SLOTS] = [const { AtomicU32::new(0) }; SLOTS];
static INSTALL: Once = Once::new();
static mut PREVIOUS: Option<libc::sigaction> = None;

/// Register an owner with the handler; returns its slot. The owner must stay alive until
/// [`unregister`] of that slot returns.
pub(crate) fn register(owner: *const dyn FaultOwner) -> Option<usize> {
    INSTALL.call_once(install);
    let entry = Box::into_raw(Box::new(Registered(owner)));
    for (i, s) in INSTANCES.iter().enumerate() {
        if s.compare_exchange(std::ptr::null_mut(), entry, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            return Some(i);
        }
    }
    // SAFETY: `entry` came from Box::into_raw above and no slot took it.
    drop(unsafe { Box::from_raw(entry) });
    None
}

/// Unregister; returns once no handler is using the owner.
pub(crate) fn unregister(slot: usize) {
    let entry = INSTANCES[slot].swap(std::ptr::null_mut(), Ordering::SeqCst);
    while ACTIVE[slot].load(Ordering::SeqCst) != 0 {
        std::hint::spin_loop();
    }
    if !entry.is_null() {
        // SAFETY: `entry` came from `register`'s Box::into_raw; the slot no longer holds it
        // and no handler is reading it (ACTIVE is 0, and a handler that starts now sees null).
        drop(unsafe { Box::from_raw(entry) });
    }
}

fn install() {
    // SAFETY: installing a SIGSEGV handler; the previous action is kept for chaining. This
    // runs once, before any instance is registered, so the handler never reads PREVIOUS while
    // it is written.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_segv as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
        libc::sigemptyset(&mut sa.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGSEGV, &sa, &mut old) == 0 {
            PREVIOUS = Some(old);
        }
    }
}

/// Whether the faulting access was a write (x86-64: bit 1 of the page-fault error code). On
/// other architectures a fault on a read-only page is taken as a write (a read cannot fault
/// there), and on an unmapped space page as a read.
fn fault_is_write(ctx: *mut libc::c_void) -> Option<bool> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the kernel passes a ucontext_t to SA_SIGINFO handlers.
        let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
        Some(uc.uc_mcontext.gregs[libc::REG_ERR as usize] & 2 != 0)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ctx;
        None
    }
}

extern "C" fn on_segv(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SIGSEGV.
    let addr = unsafe { (*info).si_addr() } as usize;
    let write = fault_is_write(ctx);
    for (i, s) in INSTANCES.iter().enumerate() {
        if s.load(Ordering::Relaxed).is_null() {
            continue;
        }
        ACTIVE[i].fetch_add(1, Ordering::SeqCst);
        let p = s.load(Ordering::SeqCst);
        // SAFETY: a registered entry and its owner stay alive while ACTIVE[i] > 0 (see
        // `unregister`).
        let handled = !p.is_null() && {
            let owner = unsafe { &*(*p).0 };
            owner.owns(addr) && owner.on_fault(addr, write)
        };
        ACTIVE[i].fetch_sub(1, Ordering::SeqCst);
        if handled {
            return;
        }
    }
    chain(sig, info, ctx);
}

fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: PREVIOUS was set before any registration; the handler types match the flags.
    unsafe {
        #[allow(static_mut_refs)]
        let prev = PREVIOUS;
        match prev {
            Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
                if p.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = std::mem::transmute(p.sa_sigaction);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(p.sa_sigaction);
                    f(sig);
                }
            }
            _ => {
                // Default action: restore it and return; the access faults again and the
                // kernel delivers the default (a crash with a core dump, as without FLAC).
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut());
            }
        }
    }
}

/// In a forked child FLAC's state belongs to the parent: a write to a protected page is given
/// a private anonymous copy (never a shared frame), without touching FLAC's state.
///
/// # Safety
/// `page` must be page-aligned and owned by the caller.
pub(crate) unsafe fn private_copy(page: usize) -> bool {
    use crate::sys::PAGE;
    // Only a readable page can be copied (an inaccessible one would fault again in here).
    let mut probe = 0u8;
    let local = libc::iovec { iov_base: (&mut probe as *mut u8).cast(), iov_len: 1 };
    let remote = libc::iovec { iov_base: page as *mut libc::c_void, iov_len: 1 };
    if libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) != 1 {
        return false;
    }
    let tmp = libc::mmap(std::ptr::null_mut(), PAGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
    if tmp == libc::MAP_FAILED {
        return false;
    }
    std::ptr::copy_nonoverlapping(page as *const u8, tmp as *mut u8, PAGE);
    let r = libc::mremap(tmp, PAGE, PAGE, libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, page as *mut libc::c_void);
    r != libc::MAP_FAILED
}
