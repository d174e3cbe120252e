#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use ssdlab_flac::{Flac, FlacConfig, Format, PmCost};

/// A temporary directory on tmpfs when there is one (PM images behave like PM there).
pub fn tmpdir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::Builder::new().prefix("flac-test-").tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

pub fn config(dir: &Path, pm_mb: u64, dram_mb: u64) -> FlacConfig {
    FlacConfig {
        pm_path: dir.join("pm.img"),
        format: Some(Format { pm_bytes: pm_mb << 20, space_bytes: 0, log_bytes: 1 << 20, kv_bytes: 1 << 20 }),
        dram_bytes: dram_mb << 20,
        cost: PmCost::off(),
        ..FlacConfig::default()
    }
}

pub fn open(dir: &Path, pm_mb: u64, dram_mb: u64) -> Arc<Flac> {
    Flac::init(config(dir, pm_mb, dram_mb)).unwrap()
}

/// Anonymous page-aligned memory that is not FLAC's (an application's own buffer).
pub struct Anon {
    pub ptr: *mut u8,
    pub len: usize,
}

impl Anon {
    pub fn new(len: usize) -> Anon {
        // SAFETY: a fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        assert_ne!(p, libc::MAP_FAILED);
        Anon { ptr: p.cast(), len }
    }

    #[allow(clippy::mut_from_ref)]
    pub fn slice(&self) -> &mut [u8] {
        // SAFETY: the mapping made in new.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Anon {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Read `len` bytes of the FLAC space at `addr` by copying.
pub fn read_space(f: &Flac, addr: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    f.copy_from_flac(v.as_mut_ptr(), addr, len).unwrap();
    v
}

pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2654435761).wrapping_add(seed as u32 * 7919) as u8 ^ seed).collect()
}
