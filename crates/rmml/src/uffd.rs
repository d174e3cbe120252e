//! The few userfaultfd calls the paging runtime needs (Linux's userfaultfd(2) ABI, from
//! <linux/userfaultfd.h>): create, handshake, register a range for missing-page faults,
//! read fault events, resolve them with a copy or a zero page.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const UFFDIO: u64 = 0xAA;
const UFFD_API: u64 = 0xAA;
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;

const fn iowr(nr: u64, size: usize) -> u64 {
    (3 << 30) | ((size as u64) << 16) | (UFFDIO << 8) | nr
}
const fn ior(nr: u64, size: usize) -> u64 {
    (2 << 30) | ((size as u64) << 16) | (UFFDIO << 8) | nr
}

#[repr(C)]
struct Api {
    api: u64,
    features: u64,
    ioctls: u64,
}
#[repr(C)]
#[derive(Clone, Copy)]
struct Range {
    start: u64,
    len: u64,
}
#[repr(C)]
struct Register {
    range: Range,
    mode: u64,
    ioctls: u64,
}
#[repr(C)]
struct Copy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}
#[repr(C)]
struct Zeropage {
    range: Range,
    mode: u64,
    zeropage: i64,
}
#[repr(C)]
struct Msg {
    event: u8,
    _r1: u8,
    _r2: u16,
    _r3: u32,
    arg: [u64; 3],
}

const UFFDIO_API: u64 = iowr(0x3F, std::mem::size_of::<Api>());
const UFFDIO_REGISTER: u64 = iowr(0x00, std::mem::size_of::<Register>());
const UFFDIO_UNREGISTER: u64 = ior(0x01, std::mem::size_of::<Range>());
const UFFDIO_COPY: u64 = iowr(0x03, std::mem::size_of::<Copy>());
const UFFDIO_ZEROPAGE: u64 = iowr(0x04, std::mem::size_of::<Zeropage>());

pub struct Uffd {
    fd: OwnedFd,
}

fn ioctl<T>(fd: &OwnedFd, req: u64, arg: &mut T) -> io::Result<()> {
    // SAFETY: `arg` is the #[repr(C)] struct the request names, valid for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg as *mut T) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Uffd {
    /// A non-blocking userfaultfd. Without the privilege for kernel-mode faults (root or
    /// vm.unprivileged_userfaultfd = 1), user-mode faults only, which is all the runtime needs.
    pub fn new() -> io::Result<Uffd> {
        let open = |extra: libc::c_int| {
            // SAFETY: userfaultfd(2) takes flags and returns a new descriptor or -1.
            let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK | extra) };
            if fd < 0 {
                Err(io::Error::last_os_error())
            } else {
                // SAFETY: a descriptor we own from here on.
                Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
            }
        };
        let fd =
            open(0).or_else(|e| if e.raw_os_error() == Some(libc::EPERM) { open(UFFD_USER_MODE_ONLY) } else { Err(e) }).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("userfaultfd: {e} (needs Linux 4.3+, and root or vm.unprivileged_userfaultfd for some kernels)"),
                )
            })?;
        let mut api = Api { api: UFFD_API, features: 0, ioctls: 0 };
        ioctl(&fd, UFFDIO_API, &mut api)?;
        Ok(Uffd { fd })
    }

    pub fn register(&self, start: u64, len: u64) -> io::Result<()> {
        let mut r = Register { range: Range { start, len }, mode: UFFDIO_REGISTER_MODE_MISSING, ioctls: 0 };
        ioctl(&self.fd, UFFDIO_REGISTER, &mut r)
    }

    pub fn unregister(&self, start: u64, len: u64) -> io::Result<()> {
        let mut r = Range { start, len };
        ioctl(&self.fd, UFFDIO_UNREGISTER, &mut r)
    }

    /// Map a copy of `src` (whole pages) at `dst` and wake the faulting thread.
    pub fn copy(&self, dst: u64, src: &[u8]) -> io::Result<()> {
        let mut c = Copy { dst, src: src.as_ptr() as u64, len: src.len() as u64, mode: 0, copy: 0 };
        ioctl(&self.fd, UFFDIO_COPY, &mut c)
    }

    /// Map zero pages at `dst` and wake the faulting thread.
    pub fn zeropage(&self, dst: u64, len: u64) -> io::Result<()> {
        let mut z = Zeropage { range: Range { start: dst, len }, mode: 0, zeropage: 0 };
        ioctl(&self.fd, UFFDIO_ZEROPAGE, &mut z)
    }

    /// Wait up to `timeout_ms` for a page fault; returns its address.
    pub fn next_fault(&self, timeout_ms: i32) -> io::Result<Option<u64>> {
        let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd, valid for the call.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted { Ok(None) } else { Err(e) };
        }
        if r == 0 {
            return Ok(None);
        }
        let mut m = std::mem::MaybeUninit::<Msg>::uninit();
        // SAFETY: reading at most one message into a buffer of its size.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), m.as_mut_ptr() as *mut libc::c_void, std::mem::size_of::<Msg>()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock { Ok(None) } else { Err(e) };
        }
        if n as usize != std::mem::size_of::<Msg>() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("userfaultfd message of {n} bytes")));
        }
        // SAFETY: the kernel filled the whole message.
        let m = unsafe { m.assume_init() };
        Ok((m.event == UFFD_EVENT_PAGEFAULT).then_some(m.arg[1]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_sizes() {
        assert_eq!(std::mem::size_of::<Api>(), 24);
        assert_eq!(std::mem::size_of::<Register>(), 32);
        assert_eq!(std::mem::size_of::<Copy>(), 40);
        assert_eq!(std::mem::size_of::<Zeropage>(), 32);
        assert_eq!(std::mem::size_of::<Msg>(), 32);
        // The values <linux/userfaultfd.h> gives on x86-64.
        assert_eq!(UFFDIO_API, 0xc018aa3f);
        assert_eq!(UFFDIO_REGISTER, 0xc020aa00);
        assert_eq!(UFFDIO_COPY, 0xc028aa03);
        assert_eq!(UFFDIO_ZEROPAGE, 0xc020aa04);
    }
}
