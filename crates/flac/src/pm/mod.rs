//! The emulated persistent memory device: a file mapped shared (DAX is not available here; on
//! tmpfs, stores reach the file immediately and survive the process, like PMDK's emulation on
//! /dev/shm), with PM's cost modelled ([`cost`]) and FLAC's persistent structures laid out in it:
//!
//! ```text
//!  0        superblock (geometry, checksummed; applied sequence and key-value state words)
//!  4 KiB    metadata log slot ([`log`])
//!           persistent page table: one u32 per FLAC page, PM frame + 1 (0 = none)
//!           key-value areas A and B ([`kv`]): file-system metadata
//!  2 MiB-aligned: data frames (4 KiB each; 2 MiB groups are huge pages on a huge tmpfs)
//! ```
//!
//! The persistent page table is the only record of which PM frames are in use: after a crash
//! the frame reference counts are recounted from it, so a frame allocated by a flush that never
//! committed is simply free again. A crash model here is `kill -9` (power loss would also need
//! cache-line write-back ordering, which a DRAM-backed file cannot show).

pub mod cost;
pub mod kv;
pub mod log;

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::error::{FlacError, Result};
use crate::frames::FrameAlloc;
use crate::sys::{self, HUGE, PAGE};
use cost::{Lanes, PmCost};
use kv::Kv;
use log::{Rec, Tx};

const MAGIC: &[u8; 8] = b"SSDLFLAC";
const VERSION: u32 = 1;
const SB_STATIC: usize = 88;
const APPLIED_AT: usize = 512;
const KVSTATE_AT: usize = 520;

/// Sizes chosen when a PM image is created.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Format {
    /// Size of the PM image (bytes).
    pub pm_bytes: u64,
    /// Size of the FLAC virtual space (bytes); 0 = 4 x the data area.
    pub space_bytes: u64,
    /// Size of the metadata log slot (bytes): bounds one transaction.
    pub log_bytes: u64,
    /// Size of each of the two key-value areas (bytes): bounds the file-system metadata.
    pub kv_bytes: u64,
}

impl Default for Format {
    fn default() -> Self {
        Format { pm_bytes: 1 << 30, space_bytes: 0, log_bytes: 4 << 20, kv_bytes: 16 << 20 }
    }
}

/// Where everything is in the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Geometry {
    pub pm_bytes: u64,
    pub space_pages: u64,
    pub log_off: u64,
    pub log_bytes: u64,
    pub ppt_off: u64,
    pub kv_off: u64,
    pub kv_bytes: u64,
    pub data_off: u64,
    pub data_frames: u64,
}

impl Geometry {
    fn plan(f: &Format) -> Result<Geometry> {
        let page = PAGE as u64;
        let huge = HUGE as u64;
        if f.log_bytes < 64 << 10 || !f.log_bytes.is_multiple_of(page) {
            return Err(FlacError::Invalid(format!("log_bytes must be a multiple of 4096 and at least 64 KiB, got {}", f.log_bytes)));
        }
        if f.kv_bytes < 64 << 10 || !f.kv_bytes.is_multiple_of(page) {
            return Err(FlacError::Invalid(format!("kv_bytes must be a multiple of 4096 and at least 64 KiB, got {}", f.kv_bytes)));
        }
        if !f.space_bytes.is_multiple_of(page) {
            return Err(FlacError::Invalid(format!("space_bytes must be a multiple of 4096, got {}", f.space_bytes)));
        }
        let log_off = page;
        // The page table's size depends on the space, which by default depends on the data
        // area: size the data area first assuming a 4x space, then fix the space.
        let fixed = log_off + f.log_bytes + 2 * f.kv_bytes;
        let est_frames = f.pm_bytes.saturating_sub(fixed + huge) / page;
        let space_pages = if f.space_bytes > 0 { f.space_bytes / page } else { (est_frames * 4).next_multiple_of(512).max(512) };
        if space_pages > u32::MAX as u64 {
            return Err(FlacError::Invalid(format!("space_bytes too large: at most {} pages", u32::MAX)));
        }
        let ppt_off = log_off + f.log_bytes;
        let kv_off = (ppt_off + space_pages * 4).next_multiple_of(page);
        let data_off = (kv_off + 2 * f.kv_bytes).next_multiple_of(huge);
        if f.pm_bytes < data_off + huge {
            return Err(FlacError::Invalid(format!(
                "pm_bytes {} is too small: metadata needs {} bytes plus at least 2 MiB of data frames",
                f.pm_bytes, data_off
            )));
        }
        let data_frames = (f.pm_bytes - data_off) / page;
        if data_frames >= u32::MAX as u64 {
            return Err(FlacError::Invalid("pm_bytes too large: at most 2^32 - 2 frames".into()));
        }
        Ok(Geometry {
            pm_bytes: f.pm_bytes,
            space_pages,
            log_off,
            log_bytes: f.log_bytes,
            ppt_off,
            kv_off,
            kv_bytes: f.kv_bytes,
            data_off,
            data_frames,
        })
    }

    fn encode(&self) -> [u8; SB_STATIC + 4] {
        let mut b = [0u8; SB_STATIC + 4];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(PAGE as u32).to_le_bytes());
        for (i, v) in [
            self.pm_bytes,
            self.space_pages,
            self.log_off,
            self.log_bytes,
            self.ppt_off,
            self.kv_off,
            self.kv_bytes,
            self.data_off,
            self.data_frames,
        ]
        .iter()
        .enumerate()
        {
            b[16 + i * 8..24 + i * 8].copy_from_slice(&v.to_le_bytes());
        }
        let c = crc32fast::hash(&b[..SB_STATIC]);
        b[SB_STATIC..].copy_from_slice(&c.to_le_bytes());
        b
    }

    fn decode(b: &[u8], path: &Path) -> Result<Geometry> {
        let bad = |why: &str| FlacError::Corrupt(format!("{}: not a FLAC PM image ({why})", path.display()));
        if &b[0..8] != MAGIC {
            return Err(bad("no FLAC superblock"));
        }
        if u32::from_le_bytes(b[SB_STATIC..SB_STATIC + 4].try_into().unwrap()) != crc32fast::hash(&b[..SB_STATIC]) {
            return Err(bad("superblock checksum mismatch"));
        }
        let v = u32::from_le_bytes(b[8..12].try_into().unwrap());
        if v != VERSION {
            return Err(bad(&format!("version {v}, this build reads {VERSION}")));
        }
        let u = |i: usize| u64::from_le_bytes(b[16 + i * 8..24 + i * 8].try_into().unwrap());
        Ok(Geometry {
            pm_bytes: u(0),
            space_pages: u(1),
            log_off: u(2),
            log_bytes: u(3),
            ppt_off: u(4),
            kv_off: u(5),
            kv_bytes: u(6),
            data_off: u(7),
            data_frames: u(8),
        })
    }
}

/// Volatile state derived from PM: frame reference counts and a copy of the page table (read
/// on every access; PM reads would be charged, and the kernel keeps its page tables in DRAM).
pub struct PmState {
    pub alloc: FrameAlloc,
    ppt: Vec<u32>,
}

impl PmState {
    /// The PM frame page `vpn` is persisted in.
    #[inline]
    pub fn ppt(&self, vpn: u64) -> Option<u32> {
        self.ppt[vpn as usize].checked_sub(1)
    }
}

struct Meta {
    seq: u64,
    kv: Kv,
}

/// What opening the image found and did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Recovery {
    pub created: bool,
    /// Sequence number of a committed transaction that was replayed.
    pub replayed_seq: Option<u64>,
    pub frames_used: u64,
    pub kv_pairs: u64,
}

pub struct Pm {
    path: PathBuf,
    file: File,
    base: *mut u8,
    geo: Geometry,
    pub lanes: Lanes,
    state: Mutex<PmState>,
    meta: Mutex<Meta>,
    pub recovery: Recovery,
    pub on_tmpfs: bool,
}

// SAFETY: `base` points to a shared file mapping owned by this struct for its lifetime; the
// regions behind it are written under `meta` (log, key-value areas, page table) or through
// frames whose ownership the reference counts in `state` arbitrate.
unsafe impl Send for Pm {}
unsafe impl Sync for Pm {}

impl Drop for Pm {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`; nothing refers to it after drop.
        unsafe { sys::unmap(self.base, self.geo.pm_bytes as usize) };
        sys::release_lock(&self.file);
    }
}

impl Pm {
    /// Open the PM image at `path`, creating it with `format` if it does not exist (or if
    /// `format` is given and the file is empty). Recovers a committed transaction that was not
    /// applied and rebuilds frame reference counts from the page table.
    pub fn open(path: &Path, format: Option<&Format>, cost: PmCost, lock_wait_ms: u64) -> Result<Pm> {
        sys::check_page_size()?;
        cost.validate().map_err(FlacError::Invalid)?;
        let len = match std::fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(FlacError::io(format!("stat {}", path.display()), e)),
        };
        let created = len == 0;
        if created {
            let f = format.ok_or_else(|| FlacError::Io {
                what: format!("opening PM image {}", path.display()),
                source: std::io::Error::from_raw_os_error(libc::ENOENT),
            })?;
            create_image(path, f)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| FlacError::io(format!("opening PM image {}", path.display()), e))?;
        sys::lock_exclusive(&file, lock_wait_ms, &format!("PM image {}", path.display()))?;
        let r = Self::map_and_recover(path, &file, created);
        match r {
            Ok((base, geo, on_tmpfs)) => {
                let mut pm = Pm {
                    path: path.to_path_buf(),
                    file,
                    base,
                    geo,
                    lanes: Lanes::new(cost),
                    state: Mutex::new(PmState { alloc: FrameAlloc::new(0), ppt: Vec::new() }),
                    meta: Mutex::new(Meta { seq: 0, kv: Kv::default() }),
                    recovery: Recovery { created, ..Recovery::default() },
                    on_tmpfs,
                };
                // On failure `pm` is dropped: it unmaps the image and releases the lock.
                pm.recover()?;
                Ok(pm)
            }
            Err(e) => {
                sys::release_lock(&file);
                Err(e)
            }
        }
    }

    /// Check the superblock and map the image (address, geometry, on tmpfs).
    fn map_and_recover(path: &Path, file: &File, created: bool) -> Result<(*mut u8, Geometry, bool)> {
        let len = file.metadata().map_err(|e| FlacError::io(format!("stat {}", path.display()), e))?.len();
        let on_tmpfs = sys::fs_magic(file.as_raw_fd()).map(|m| m == sys::TMPFS_MAGIC).unwrap_or(false);
        let mut sb = [0u8; SB_STATIC + 4];
        std::os::unix::fs::FileExt::read_exact_at(file, &mut sb, 0)
            .map_err(|e| FlacError::io(format!("reading the superblock of {}", path.display()), e))?;
        let geo = Geometry::decode(&sb, path)?;
        if len < geo.pm_bytes {
            return Err(FlacError::Corrupt(format!("{}: {} bytes, the superblock says {}", path.display(), len, geo.pm_bytes)));
        }
        let n = geo.pm_bytes as usize;
        let base = sys::reserve(n, HUGE)?;
        // SAFETY: mapping the image over the reservation just made.
        if let Err(e) = unsafe { sys::map_shared_fixed(base, n, sys::PROT_RW, file.as_raw_fd(), 0) } {
            // SAFETY: the reservation made above.
            unsafe { sys::unmap(base, n) };
            return Err(FlacError::io(format!("mapping PM image {}", path.display()), e));
        }
        sys::advise_huge(base, n);
        if on_tmpfs && created {
            // PM is all there from the start (tmpfs would allocate and clear a page on its
            // first write, inside whichever I/O makes it).
            // SAFETY: the mapping made above.
            unsafe { sys::populate_write(base, n) };
        }
        Ok((base, geo, on_tmpfs))
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        debug_assert!(at.is_multiple_of(8) && at < PAGE);
        // SAFETY: an aligned u64 in the superblock page, inside the mapping.
        unsafe { &*(self.base.add(at) as *const AtomicU64) }
    }

    #[allow(clippy::mut_from_ref)]
    fn bytes_mut(&self, off: u64, len: usize) -> &mut [u8] {
        assert!(off as usize + len <= self.geo.pm_bytes as usize);
        // SAFETY: inside the mapping; callers serialize access to these regions (see `meta`).
        unsafe { std::slice::from_raw_parts_mut(self.base.add(off as usize), len) }
    }

    fn log_slot(&self) -> &mut [u8] {
        self.bytes_mut(self.geo.log_off, self.geo.log_bytes as usize)
    }

    fn kv_area(&self, which: usize) -> &mut [u8] {
        self.bytes_mut(self.geo.kv_off + which as u64 * self.geo.kv_bytes, self.geo.kv_bytes as usize)
    }

    #[allow(clippy::mut_from_ref)]
    fn ppt_pm(&self) -> &mut [u32] {
        // SAFETY: the page table region is inside the mapping and 4-byte aligned.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(self.geo.ppt_off as usize) as *mut u32, self.geo.space_pages as usize) }
    }

    fn recover(&mut self) -> Result<()> {
        let applied = self.word(APPLIED_AT).load(Ordering::SeqCst);
        let st = self.word(KVSTATE_AT).load(Ordering::SeqCst);
        let (gen, active) = ((st >> 1) as u32, (st & 1) as usize);
        let mut kv = Kv::load(self.kv_area(active), gen, active);
        let mut seq = applied;
        if let Some((s, body)) = log::read(self.log_slot()) {
            if s > applied {
                // Committed but not (completely) applied: replay it. Copy the body out first,
                // replaying writes the key-value area, not the log.
                let body = body.to_vec();
                let ppt = self.ppt_pm();
                for r in log::Records::over(&body) {
                    match r? {
                        Rec::Pt { vpn, count, first } => {
                            check_run(&self.geo, vpn, count, first)?;
                            for i in 0..count as u64 {
                                ppt[(vpn + i) as usize] = first.map_or(0, |f| f + 1 + i as u32);
                            }
                        }
                        Rec::Put { key, val } => {
                            self.ensure_kv_room(&mut kv, kv::record_bytes(key.len(), val.len()))?;
                            kv.put(self.kv_area(kv.active), key, val);
                        }
                        Rec::Del { key } => {
                            self.ensure_kv_room(&mut kv, kv::record_bytes(key.len(), 0))?;
                            kv.del(self.kv_area(kv.active), key);
                        }
                    }
                }
                std::sync::atomic::fence(Ordering::SeqCst);
                self.word(APPLIED_AT).store(s, Ordering::SeqCst);
                self.recovery.replayed_seq = Some(s);
            }
            seq = seq.max(s);
        }
        // Frame reference counts from the page table: the only record of frames in use.
        let frames = self.geo.data_frames as usize;
        let mut refs = vec![0u32; frames];
        let ppt = self.ppt_pm().to_vec();
        for (vpn, &e) in ppt.iter().enumerate() {
            if e != 0 {
                let f = (e - 1) as usize;
                if f >= frames {
                    return Err(FlacError::Corrupt(format!("{}: page {vpn} maps frame {f} beyond the data area", self.path.display())));
                }
                refs[f] += 1;
            }
        }
        self.recovery.frames_used = refs.iter().filter(|&&r| r > 0).count() as u64;
        self.recovery.kv_pairs = kv.map.len() as u64;
        *self.state.get_mut().unwrap() = PmState { alloc: FrameAlloc::from_refs(refs), ppt };
        *self.meta.get_mut().unwrap() = Meta { seq, kv };
        Ok(())
    }

    /// Make room for `need` more bytes in the active key-value area, compacting into the other
    /// area if needed.
    fn ensure_kv_room(&self, kv: &mut Kv, need: usize) -> Result<()> {
        let area = self.geo.kv_bytes as usize;
        if kv.fits(need, area) {
            return Ok(());
        }
        if kv.live_bytes() + need > area {
            return Err(FlacError::NoSpace(format!(
                "file-system metadata is full ({} of {} bytes live); create the image with a larger kv_bytes",
                kv.live_bytes(),
                area
            )));
        }
        let other = kv.active ^ 1;
        let n = kv.compact_into(self.kv_area(other));
        self.lanes.write_now(n as u64);
        std::sync::atomic::fence(Ordering::SeqCst);
        self.word(KVSTATE_AT).store(((kv.gen as u64 + 1) << 1) | other as u64, Ordering::SeqCst);
        kv.switched(n);
        Ok(())
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Offset of frame `f` in the image file (for mapping it).
    #[inline]
    pub fn frame_off(&self, f: u32) -> u64 {
        debug_assert!((f as u64) < self.geo.data_frames);
        self.geo.data_off + f as u64 * PAGE as u64
    }

    /// Frame `f` in the image's mapping (the PM window).
    #[inline]
    pub fn frame_ptr(&self, f: u32) -> *mut u8 {
        debug_assert!((f as u64) < self.geo.data_frames);
        // SAFETY: inside the mapping.
        unsafe { self.base.add(self.frame_off(f) as usize) }
    }

    pub fn state(&self) -> MutexGuard<'_, PmState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocate `n` frames for `n` consecutive pages (2 MiB-aligned runs first when
    /// `huge_first`). The caller holds one reference to each.
    pub fn alloc_frames(&self, n: usize, huge_first: bool) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(n);
        if !self.state().alloc.alloc_many(n, huge_first, &mut out) {
            return Err(FlacError::NoSpace(format!("PM is full: {n} frames wanted, {} free", self.state().alloc.nfree())));
        }
        Ok(out)
    }

    pub fn incref(&self, f: u32) {
        self.state().alloc.incref(f);
    }

    pub fn decref(&self, f: u32) {
        self.state().alloc.decref(f);
    }

    /// Commit a transaction: write it to the log, then apply it (page table, key-value
    /// store) and mark it applied. The page table holds a reference to each frame it maps.
    /// Returns the transaction's sequence number.
    pub fn commit(&self, tx: &Tx) -> Result<u64> {
        let mut meta = self.meta.lock().unwrap_or_else(|e| e.into_inner());
        let meta = &mut *meta;
        for r in tx.records() {
            if let Rec::Pt { vpn, count, first } = r? {
                check_run(&self.geo, vpn, count, first)?;
            }
        }
        // Room for the key-value records is made before the commit point: once the log holds
        // the transaction it must apply.
        self.ensure_kv_room(&mut meta.kv, tx.kv_bytes())?;
        let seq = meta.seq + 1;
        let n = log::write(self.log_slot(), seq, tx)?;
        self.lanes.write_now(n as u64);
        meta.seq = seq;
        crate::crash::point("commit.after_log");
        // Apply: the page table first, then the key-value records (a crash in between is
        // the "mid_apply" case recovery replays).
        let mut kv_written = 0;
        let mut pt_written = 0;
        let ppt = self.ppt_pm();
        for r in tx.records() {
            if let Rec::Pt { vpn, count, first } = r? {
                let mut st = self.state();
                for i in 0..count as u64 {
                    let v = (vpn + i) as usize;
                    let new = first.map_or(0, |f| f + 1 + i as u32);
                    let old = st.ppt[v];
                    if new != 0 {
                        st.alloc.incref(new - 1);
                    }
                    if old != 0 {
                        st.alloc.decref(old - 1);
                    }
                    st.ppt[v] = new;
                    ppt[v] = new;
                }
                pt_written += count as u64 * 4;
            }
        }
        crate::crash::point("commit.mid_apply");
        for r in tx.records() {
            match r? {
                Rec::Pt { .. } => {}
                Rec::Put { key, val } => kv_written += meta.kv.put(self.kv_area(meta.kv.active), key, val),
                Rec::Del { key } => kv_written += meta.kv.del(self.kv_area(meta.kv.active), key),
            }
        }
        self.lanes.write_now(pt_written + kv_written as u64);
        std::sync::atomic::fence(Ordering::SeqCst);
        self.word(APPLIED_AT).store(seq, Ordering::SeqCst);
        crate::crash::point("commit.after_apply");
        Ok(seq)
    }

    pub fn kv_get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.meta.lock().unwrap_or_else(|e| e.into_inner()).kv.map.get(key).cloned()
    }

    /// All pairs whose key starts with `prefix`, in key order.
    pub fn kv_scan(&self, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let meta = self.meta.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = meta.kv.map.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(k, v)| (k.clone(), v.clone())).collect();
        v.sort();
        v
    }

    /// Bytes of live metadata and the area size.
    pub fn kv_usage(&self) -> (usize, usize) {
        (self.meta.lock().unwrap_or_else(|e| e.into_inner()).kv.live_bytes(), self.geo.kv_bytes as usize)
    }

    /// Number of pages the persistent page table maps to each frame (for checks).
    pub fn ppt_refcounts(&self) -> Vec<u32> {
        let st = self.state();
        let mut refs = vec![0u32; self.geo.data_frames as usize];
        for &e in &st.ppt {
            if e != 0 {
                refs[(e - 1) as usize] += 1;
            }
        }
        refs
    }

    /// Pages the persistent page table maps (vpn, frame), in order.
    pub fn ppt_mapped(&self) -> Vec<(u64, u32)> {
        let st = self.state();
        st.ppt.iter().enumerate().filter(|(_, &e)| e != 0).map(|(v, &e)| (v as u64, e - 1)).collect()
    }

    /// The volatile page-table copy equals the one in PM.
    pub fn check_invariants(&self) {
        let st = self.state();
        assert_eq!(st.ppt.as_slice(), &*self.ppt_pm(), "page-table copy differs from PM");
        st.alloc.check_invariants();
    }

    /// Copy `len` bytes out of frame `f` at `off`, at PM's read cost.
    ///
    /// # Safety
    /// `dst` must be valid for `len` bytes; the caller holds a reference to `f`.
    pub unsafe fn read_frame(&self, f: u32, off: usize, dst: *mut u8, len: usize) {
        debug_assert!(off + len <= PAGE);
        let t = self.lanes.read(len as u64);
        sys::copy(dst, self.frame_ptr(f).add(off), len);
        self.lanes.wait(t);
    }

    /// Copy `len` bytes into frame `f` at `off`, at PM's write cost.
    ///
    /// # Safety
    /// `src` must be valid for `len` bytes; the caller owns `f` for writing.
    pub unsafe fn write_frame(&self, f: u32, off: usize, src: *const u8, len: usize) {
        debug_assert!(off + len <= PAGE);
        let t = self.lanes.write(len as u64);
        sys::copy(self.frame_ptr(f).add(off), src, len);
        self.lanes.wait(t);
    }
}

/// Create a formatted image at `path` atomically: format a temporary file next to it, then
/// link it into place (a crash leaves no half-formatted image; an empty file at `path` is
/// replaced; if another process created the image meanwhile, its image is kept).
fn create_image(path: &Path, f: &Format) -> Result<()> {
    let geo = Geometry::plan(f)?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.creating-{}", sys::getpid()));
    let io = |what: &str, e: std::io::Error| FlacError::io(format!("{what} {}", tmp.display()), e);
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&tmp).map_err(|e| io("creating", e))?;
    let r = (|| -> Result<()> {
        sys::truncate(&file, geo.pm_bytes, &format!("PM image {}", tmp.display()))?;
        let mut sb = vec![0u8; PAGE];
        sb[..SB_STATIC + 4].copy_from_slice(&geo.encode());
        sb[KVSTATE_AT..KVSTATE_AT + 8].copy_from_slice(&(1u64 << 1).to_le_bytes());
        std::os::unix::fs::FileExt::write_all_at(&file, &sb, 0).map_err(|e| io("writing the superblock of", e))?;
        // The rest is zero (a new sparse file): empty log, page table and key-value areas.
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if std::fs::metadata(path).map(|m| m.len() == 0).unwrap_or(false) {
                    std::fs::rename(&tmp, path).map_err(|e| io("renaming", e))
                } else {
                    Ok(())
                }
            }
            Err(e) => Err(FlacError::io(format!("creating PM image {}", path.display()), e)),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    r
}

fn check_run(geo: &Geometry, vpn: u64, count: u32, first: Option<u32>) -> Result<()> {
    if vpn + count as u64 > geo.space_pages {
        return Err(FlacError::Corrupt(format!("page-table run {vpn}+{count} beyond the space ({} pages)", geo.space_pages)));
    }
    if let Some(f) = first {
        if f as u64 + count as u64 > geo.data_frames {
            return Err(FlacError::Corrupt(format!("page-table run to frames {f}+{count} beyond the data area")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(mb: u64) -> Format {
        Format { pm_bytes: mb << 20, space_bytes: 0, log_bytes: 64 << 10, kv_bytes: 64 << 10 }
    }

    #[test]
    fn create_commit_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pm");
        {
            let pm = Pm::open(&p, Some(&fmt(8)), PmCost::off(), 0).unwrap();
            assert!(pm.recovery.created);
            let frames = pm.alloc_frames(3, false).unwrap();
            let mut tx = Tx::new();
            for (i, &f) in frames.iter().enumerate() {
                tx.pt_set(10 + i as u64, Some(f));
            }
            tx.put(b"inode/1", b"meta");
            pm.commit(&tx).unwrap();
            for &f in &frames {
                pm.decref(f);
                assert_eq!(pm.state().alloc.refs(f), 1, "the page table holds one reference");
            }
            pm.check_invariants();
        }
        let pm = Pm::open(&p, None, PmCost::off(), 0).unwrap();
        assert!(!pm.recovery.created);
        assert_eq!(pm.recovery.frames_used, 3);
        assert_eq!(pm.kv_get(b"inode/1").unwrap(), b"meta");
        assert_eq!(pm.ppt_mapped().len(), 3);
        pm.check_invariants();
    }

    #[test]
    fn image_is_locked_and_validated() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pm");
        let _a = Pm::open(&p, Some(&fmt(8)), PmCost::off(), 0).unwrap();
        assert!(matches!(Pm::open(&p, None, PmCost::off(), 0), Err(FlacError::Busy(_))));
        let q = dir.path().join("junk");
        std::fs::write(&q, vec![7u8; 1 << 20]).unwrap();
        assert!(matches!(Pm::open(&q, None, PmCost::off(), 0), Err(FlacError::Corrupt(_))));
        assert!(matches!(Pm::open(&dir.path().join("small"), Some(&fmt(1)), PmCost::off(), 0), Err(FlacError::Invalid(_))));
    }

    #[test]
    fn kv_compaction_keeps_live_pairs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pm");
        {
            let pm = Pm::open(&p, Some(&fmt(8)), PmCost::off(), 0).unwrap();
            // 64 KiB areas; rewrite 10 keys of 1 KiB many times: needs several compactions.
            for round in 0..40u32 {
                let mut tx = Tx::new();
                for k in 0..10u32 {
                    tx.put(format!("k{k}").as_bytes(), &vec![round as u8; 1000]);
                }
                pm.commit(&tx).unwrap();
            }
        }
        let pm = Pm::open(&p, None, PmCost::off(), 0).unwrap();
        assert_eq!(pm.kv_scan(b"k").len(), 10);
        assert_eq!(pm.kv_get(b"k3").unwrap(), vec![39u8; 1000]);
    }
}
