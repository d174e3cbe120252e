//! Shared memory between a host and a UIO device: a memfd mapped by both sides, as a PCIe BAR
//! and the host's DMA buffers are shared between a driver and a device. Byte ranges are copied
//! in and out; 32-bit words that order the protocol (doorbells, a completion's phase word) are
//! atomics with release/acquire ordering, so the bytes written before them are seen after them.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// A shared memory region (a memfd, mapped in this process).
pub struct Region {
    ptr: *mut u8,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the region is plain shared memory; every access goes through bounds-checked copies
// or atomics, and the protocol (doorbells, phase tags) orders the two sides.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    /// A new zeroed region of `len` bytes named `name` (for /proc/PID/fd).
    pub fn new(name: &str, len: usize) -> std::io::Result<Region> {
        let cname = CString::new(name).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        // SAFETY: plain libc calls on a fresh descriptor we own.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is new and ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Sealed against shrinking: the peer that maps it can trust its size for good.
        // SAFETY: fcntl on our descriptor.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Region::map(fd, len)
    }

    /// Map a region another process shares (its descriptor, passed over a socket), `len` bytes
    /// as the peer declares. Nothing declared is trusted: the descriptor must hold at least
    /// `len` bytes and be sealed against shrinking (a mapping past the end of its file faults
    /// with SIGBUS on access, and a peer could shrink it after the check).
    pub fn map(fd: OwnedFd, len: usize) -> std::io::Result<Region> {
        let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
        if len == 0 {
            return Err(bad("shared memory of 0 bytes".into()));
        }
        // SAFETY: fstat and fcntl on a descriptor we own, into a zeroed stat.
        let (size, seals) = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            (st.st_size, libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS))
        };
        if size < 0 || (size as u64) < len as u64 {
            return Err(bad(format!("shared memory of {size} bytes where {len} were declared")));
        }
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(bad(
                "shared memory not sealed against shrinking (memfd_create with MFD_ALLOW_SEALING, then F_ADD_SEALS F_SEAL_SHRINK)".into(),
            ));
        }
        // SAFETY: a shared mapping of the whole memfd; unmapped in Drop.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Region { ptr: p as *mut u8, len, fd })
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Whether `len` bytes at `addr` lie inside the region.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        addr.checked_add(len).is_some_and(|end| end <= self.len as u64)
    }

    fn check(&self, addr: u64, len: usize) {
        assert!(self.contains(addr, len as u64), "shared-memory access of {len} bytes at {addr:#x} past {:#x}", self.len);
    }

    pub fn read(&self, addr: u64, out: &mut [u8]) {
        self.check(addr, out.len());
        // SAFETY: bounds checked; the other side's concurrent writes are ordered by the protocol.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(addr as usize), out.as_mut_ptr(), out.len()) }
    }

    pub fn write(&self, addr: u64, data: &[u8]) {
        self.check(addr, data.len());
        // SAFETY: as for read.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(addr as usize), data.len()) }
    }

    fn word(&self, addr: u64) -> &AtomicU32 {
        self.check(addr, 4);
        assert!(addr.is_multiple_of(4), "a 32-bit register at {addr:#x} is not aligned");
        // SAFETY: in bounds, aligned, and only ever accessed as an atomic at this address.
        unsafe { &*(self.ptr.add(addr as usize) as *const AtomicU32) }
    }

    /// Load a 32-bit word (acquire: what was written before its release store is visible).
    pub fn load32(&self, addr: u64) -> u32 {
        self.word(addr).load(Ordering::Acquire)
    }
    /// Store a 32-bit word (release).
    pub fn store32(&self, addr: u64, v: u32) {
        self.word(addr).store(v, Ordering::Release)
    }
    pub fn load64(&self, addr: u64) -> u64 {
        self.load32(addr) as u64 | (self.load32(addr + 4) as u64) << 32
    }
    pub fn store64(&self, addr: u64, v: u64) {
        self.store32(addr, v as u32);
        self.store32(addr + 4, (v >> 32) as u32);
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A memfd of `len` bytes, sealed against shrinking or not.
    fn memfd(len: i64, seal: bool) -> OwnedFd {
        // SAFETY: plain libc calls on a fresh descriptor owned at once.
        unsafe {
            let fd = libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING);
            assert!(fd >= 0);
            let fd = OwnedFd::from_raw_fd(fd);
            assert_eq!(libc::ftruncate(fd.as_raw_fd(), len), 0);
            if seal {
                assert_eq!(libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK), 0);
            }
            fd
        }
    }

    #[test]
    fn a_peers_memory_shorter_than_declared_or_unsealed_is_refused_not_mapped() {
        let e = Region::map(memfd(0, true), 65536).err().expect("refused").to_string();
        assert!(e.contains("0 bytes where 65536 were declared"), "{e}");
        let e = Region::map(memfd(4096, true), 65536).err().expect("refused").to_string();
        assert!(e.contains("4096 bytes where 65536"), "{e}");
        let e = Region::map(memfd(65536, false), 65536).err().expect("refused").to_string();
        assert!(e.contains("not sealed against shrinking"), "{e}");
        assert!(Region::map(memfd(65536, true), 0).is_err());
        let r = Region::map(memfd(65536, true), 65536).unwrap();
        r.write(65532, &[1, 2, 3, 4]);
        let mut out = [0u8; 4];
        r.read(65532, &mut out);
        assert_eq!(out, [1, 2, 3, 4]);
        // A region made here cannot be shrunk under its peer's mapping.
        let mine = Region::new("t", 8192).unwrap();
        // SAFETY: ftruncate on the region's own descriptor; refused by the seal.
        assert_ne!(unsafe { libc::ftruncate(mine.fd().as_raw_fd(), 0) }, 0);
    }
}
