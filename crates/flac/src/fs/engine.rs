//! Data paths of the library file systems. The namespace, inodes, descriptors and commits are
//! one piece of code ([`super::Fs`]); what differs is how file data moves, behind [`Engine`]:
//!
//! - [`FlacEngine`] (FlacFS): data lives in the FLAC space; reads and writes attach pages
//!   (zero-copy) when the transfer is page-aligned and large enough, and copy otherwise; a
//!   flush takes the dirty frames under the file's lock and copies them to PM without it.
//! - [`super::pagecache::PageCacheEngine`]: a DRAM page cache; every read and write copies
//!   between the application and the cache, a miss copies from PM, and write-back copies to
//!   PM holding the file's lock (as kernel page caches do with their page locks).
//! - [`super::dax::DaxEngine`]: no cache; every read and write copies straight between the
//!   application and PM.
//!
//! All three keep file data in the same PM image through the same persistent page table and
//! metadata log, so they differ only in data movement.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::flac::{AttachMode, Flac, PflushHandle, Xfer};
use crate::pm::log::Tx;
use crate::sys::PAGE;

/// Which data path a file system uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Flac,
    Pagecache,
    Dax,
}

impl EngineKind {
    pub fn parse(s: &str) -> Option<EngineKind> {
        match s {
            "flac" | "flacfs" => Some(EngineKind::Flac),
            "pagecache" | "page-cache" | "cache" => Some(EngineKind::Pagecache),
            "dax" => Some(EngineKind::Dax),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Flac => "flac",
            EngineKind::Pagecache => "pagecache",
            EngineKind::Dax => "dax",
        }
    }
}

/// What a flush has collected under the files' locks, to commit without them.
#[derive(Default)]
pub struct Staged {
    pub handle: Option<PflushHandle>,
    /// Page-table updates (the baselines' new frames).
    pub tx: Tx,
    /// PM frames the commit hands to the page table (references dropped after it).
    pub frames: Vec<u32>,
    /// The baselines' staged page-table changes, which their overlay answers look-ups with
    /// until the commit ([`super::blocks::Overlay::committed`]).
    pub pt: Vec<(u64, Option<u32>)>,
    pub pages: u64,
}

pub trait Engine: Send + Sync {
    fn kind(&self) -> EngineKind;
    /// Read `len` bytes at file offset `off` of the file whose pages start at `vpn`.
    ///
    /// # Safety
    /// `dst` must be writable for `len` bytes.
    unsafe fn read(&self, vpn: u64, off: u64, dst: *mut u8, len: usize) -> Result<Xfer>;
    /// Write `len` bytes at file offset `off`.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes.
    unsafe fn write(&self, vpn: u64, off: u64, src: *const u8, len: usize) -> Result<Xfer>;
    /// Make bytes `from..to` of the file read as zeros (truncation).
    fn zero(&self, vpn: u64, from: u64, to: u64) -> Result<()>;
    /// Forget pages `vpn..vpn+pages` (freed; their PM frames are unmapped by the next commit).
    fn discard(&self, vpn: u64, pages: u64) -> Result<()>;
    /// Make pages `to..` hold what pages `from..` hold (a file moving to a larger range).
    fn relocate(&self, to: u64, from: u64, pages: u64) -> Result<()>;
    /// Collect the dirty pages of `vpn..vpn+pages` for a flush (called under the file's lock).
    fn stage(&self, st: &mut Staged, vpn: u64, pages: u64) -> Result<()>;
    /// Commit what was staged with `meta` as one transaction.
    fn commit(&self, st: Staged, meta: &Tx) -> Result<()>;
    /// Whether `commit` must run with the files' locks still held (a copying flush).
    fn lock_through_commit(&self) -> bool;
    fn dirty_bytes(&self) -> u64;
    /// DRAM cache size (bytes; 0 for no cache).
    fn cache_bytes(&self) -> u64;
    /// Drop clean cached pages (a cold cache).
    fn drop_caches(&self) -> Result<()>;
    /// Direct address of page `vpn` (FlacFS: the FLAC space), for mapping files.
    fn view_addr(&self, vpn: u64) -> Option<usize>;
    fn stats(&self) -> serde_json::Value;
}

/// FlacFS's data path.
pub struct FlacEngine {
    pub flac: Arc<Flac>,
    /// Transfers of at least this many bytes of whole pages attach; smaller ones copy.
    pub zcopy_min_bytes: usize,
    /// Flush without holding the file's lock while copying to PM (FLAC); false = the
    /// copying-flush ablation.
    pub lockfree_flush: bool,
}

impl FlacEngine {
    fn aligned_pages(dst: usize, off: u64, len: usize) -> usize {
        if dst % PAGE != off as usize % PAGE {
            return 0;
        }
        let head = (PAGE - dst % PAGE) % PAGE;
        len.saturating_sub(head) / PAGE * PAGE
    }
}

impl Engine for FlacEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Flac
    }

    unsafe fn read(&self, vpn: u64, off: u64, dst: *mut u8, len: usize) -> Result<Xfer> {
        let from = self.flac.addr(vpn) + off as usize;
        if Self::aligned_pages(dst as usize, off, len) >= self.zcopy_min_bytes.max(PAGE) {
            self.flac.zcopy_from_flac(dst, from, len, AttachMode::Cow)
        } else {
            self.flac.copy_from_flac(dst, from, len)
        }
    }

    unsafe fn write(&self, vpn: u64, off: u64, src: *const u8, len: usize) -> Result<Xfer> {
        let to = self.flac.addr(vpn) + off as usize;
        if Self::aligned_pages(src as usize, off, len) >= self.zcopy_min_bytes.max(PAGE) {
            self.flac.zcopy_to_flac(to, src, len)
        } else {
            self.flac.copy_to_flac(to, src, len)
        }
    }

    fn zero(&self, vpn: u64, from: u64, to: u64) -> Result<()> {
        if to <= from {
            return Ok(());
        }
        // Whole pages become holes, partial ones are zero-filled.
        let first_full = from.div_ceil(PAGE as u64);
        let last_full = to / PAGE as u64;
        let head_end = (first_full * PAGE as u64).min(to);
        let zeros = vec![0u8; PAGE];
        if head_end > from {
            self.flac.copy_to_flac(self.flac.addr(vpn) + from as usize, zeros.as_ptr(), (head_end - from) as usize)?;
        }
        if last_full > first_full {
            self.flac.pzero(self.flac.addr(vpn + first_full), ((last_full - first_full) as usize) * PAGE)?;
        }
        let tail_start = (last_full * PAGE as u64).max(head_end);
        if to > tail_start {
            self.flac.copy_to_flac(self.flac.addr(vpn) + tail_start as usize, zeros.as_ptr(), (to - tail_start) as usize)?;
        }
        Ok(())
    }

    fn discard(&self, vpn: u64, pages: u64) -> Result<()> {
        self.flac.pdiscard(self.flac.addr(vpn), pages as usize * PAGE)
    }

    fn relocate(&self, to: u64, from: u64, pages: u64) -> Result<()> {
        self.flac.attach(self.flac.addr(to), self.flac.addr(from), pages as usize * PAGE, AttachMode::Cow)?;
        self.flac.pdiscard(self.flac.addr(from), pages as usize * PAGE)
    }

    fn stage(&self, st: &mut Staged, vpn: u64, pages: u64) -> Result<()> {
        let h = st.handle.get_or_insert_with(|| self.flac.pflush_handle());
        st.pages += self.flac.pflush_add(h, self.flac.addr(vpn), pages as usize * PAGE)? as u64;
        Ok(())
    }

    fn commit(&self, st: Staged, meta: &Tx) -> Result<()> {
        let mut tx = st.tx;
        tx.extend(meta);
        match st.handle {
            Some(h) => self.flac.pflush_commit(h, &tx).map(|_| ()),
            None => self.flac.commit_meta(&tx).map(|_| ()),
        }
    }

    fn lock_through_commit(&self) -> bool {
        !self.lockfree_flush
    }

    fn dirty_bytes(&self) -> u64 {
        self.flac.dirty_pages() * PAGE as u64
    }

    fn cache_bytes(&self) -> u64 {
        self.flac.config().dram_bytes
    }

    fn drop_caches(&self) -> Result<()> {
        self.flac.wait_loads();
        self.flac.drop_clean_cache().map(|_| ())
    }

    fn view_addr(&self, vpn: u64) -> Option<usize> {
        Some(self.flac.addr(vpn))
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::to_value(self.flac.stats()).unwrap()
    }
}
