//! File data: reads and writes through the engine (large writes in pieces, with the dirty-data
//! balance), positions, truncation, and each file's range of pages (grown by relocation).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::calls::Call;
use super::engine::Staged;
use super::inode::{Inode, InodeCell};
use super::range::Ranges;
use super::{lock, File, Fs, Ts, NO_RANGE};
use crate::error::{posix, FlacError, Result};
use crate::flac::Xfer;
use crate::pm::log::Tx;
use crate::sys::{HUGE_PAGES, PAGE};

impl Fs {
    /// Give file `n` room for `pages` pages (moving it to a larger range if needed).
    fn ensure_capacity(&self, c: &InodeCell, n: &mut Inode, pages: u64) -> Result<()> {
        if pages <= n.cap_pages() {
            return Ok(());
        }
        let order = Ranges::order_of(pages.max(2 * n.cap_pages()));
        let at = lock(&self.ranges).alloc(order).ok_or_else(|| {
            FlacError::Posix(libc::ENOSPC, format!("inode {}: no free range of {} pages in the FLAC space", c.ino, 1u64 << order))
        })?;
        if n.order != NO_RANGE {
            let used = n.size.div_ceil(PAGE as u64).min(n.cap_pages());
            if used > 0 {
                self.engine.relocate(at, n.vstart, used)?;
                // The moved pages are dirty at their new place (no committed copy there yet):
                // a big file would fill the DRAM cache with pages it may not evict. Commit them
                // now (a data-only transaction: PM-resident pages are remapped, not copied) if
                // they pass the dirty limit.
                let cache = self.engine.cache_bytes() as f64;
                if cache > 0.0 && self.engine.dirty_bytes() as f64 > cache * self.cfg.dirty_ratio {
                    let mut done = 0;
                    while done < used {
                        let k = (used - done).min(self.commit_pages);
                        let mut st = Staged::default();
                        self.engine.stage(&mut st, at + done, k)?;
                        self.engine.commit(st, &Tx::new())?;
                        done += k;
                    }
                }
            }
            let rest = n.cap_pages() - used;
            if rest > 0 {
                self.engine.discard(n.vstart + used, rest)?;
            }
            lock(&self.pending).frees.push((n.vstart, n.order));
            self.counters.relocations.fetch_add(1, Ordering::Relaxed);
        }
        n.vstart = at;
        n.order = order as u8;
        Ok(())
    }

    /// Read up to `len` bytes at `off` into `dst`.
    ///
    /// # Safety
    /// `dst` must be writable for `len` bytes.
    pub unsafe fn pread_raw(&self, f: &File, dst: *mut u8, len: usize, off: u64) -> Result<(usize, Xfer)> {
        let _t = self.call(Call::Read, Some(len as u64));
        if f.flags & libc::O_ACCMODE == libc::O_WRONLY {
            return posix(libc::EBADF, format!("inode {}: not open for reading", f.cell.ino));
        }
        let n = f.cell.read();
        if n.is_dir() {
            return posix(libc::EISDIR, format!("inode {}", f.cell.ino));
        }
        if off >= n.size || len == 0 {
            return Ok((0, Xfer::default()));
        }
        let len = len.min((n.size - off) as usize);
        let x = if n.order == NO_RANGE {
            std::ptr::write_bytes(dst, 0, len);
            Xfer { copied_bytes: len as u64, ..Xfer::default() }
        } else {
            self.engine.read(n.vstart, off, dst, len)?
        };
        drop(n);
        let cn = &self.counters;
        cn.reads.fetch_add(1, Ordering::Relaxed);
        cn.read_bytes.fetch_add(len as u64, Ordering::Relaxed);
        cn.mapped_bytes.fetch_add(x.mapped_bytes, Ordering::Relaxed);
        cn.copied_bytes.fetch_add(x.copied_bytes, Ordering::Relaxed);
        Ok((len, x))
    }

    /// Write `len` bytes from `src` at `off` (at the end with O_APPEND); returns the offset
    /// written at and what moved.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes.
    pub unsafe fn pwrite_raw(&self, f: &File, src: *const u8, len: usize, off: Option<u64>) -> Result<(u64, Xfer)> {
        let _t = self.call(Call::Write, Some(len as u64));
        if f.flags & libc::O_ACCMODE == libc::O_RDONLY {
            return posix(libc::EBADF, format!("inode {}: not open for writing", f.cell.ino));
        }
        // A write larger than the DRAM cache can take at once goes in pieces, each followed by
        // the dirty-data balance (which may commit to PM and so free frames to evict): a single
        // allocation of more frames than the cache has would fail. The pieces are contiguous
        // (an O_APPEND write takes its offset once) but, unlike Linux's, not one atomic step
        // for concurrent readers of the same range.
        let piece = self.write_piece_bytes();
        let mut at = off;
        let mut total = Xfer::default();
        let mut first = None;
        let mut done = 0;
        loop {
            let k = (len - done).min(piece);
            // SAFETY: src..src+len is readable (the caller's contract); done + k <= len.
            let piece_write = || unsafe { self.pwrite_piece(f, src.add(done), k, at, first.is_none()) };
            let (o, x) = match piece_write() {
                // Frames short while a flush holds some (the background flusher's copy to PM)
                // or dirty pages hold the rest: commit (which waits for flushes in flight) and
                // write again; a write of the same bytes at the same place is idempotent.
                Err(FlacError::NoSpace(_)) => {
                    self.counters.throttled.fetch_add(1, Ordering::Relaxed);
                    self.sync()?;
                    piece_write()?
                }
                r => r?,
            };
            first.get_or_insert(o);
            total.add(x);
            done += k;
            if done >= len {
                return Ok((first.unwrap_or(0), total));
            }
            at = Some(o + k as u64);
        }
    }

    /// The largest piece of a write: a quarter of what the dirty limit leaves of the DRAM cache
    /// (whole 2 MiB runs where that is at least one, so large aligned writes still attach
    /// huge pages), or everything without a cache.
    fn write_piece_bytes(&self) -> usize {
        let cache = self.engine.cache_bytes() as f64;
        if cache == 0.0 {
            return usize::MAX;
        }
        let b = (cache * (1.0 - self.cfg.dirty_ratio) / 4.0) as usize;
        let huge = HUGE_PAGES * PAGE;
        if b >= huge {
            b / huge * huge
        } else {
            (b / PAGE).max(1) * PAGE
        }
    }

    /// # Safety
    /// `src..src+len` must be readable.
    unsafe fn pwrite_piece(&self, f: &File, src: *const u8, len: usize, off: Option<u64>, first: bool) -> Result<(u64, Xfer)> {
        let mut n = f.cell.write();
        if n.is_dir() {
            return posix(libc::EISDIR, format!("inode {}", f.cell.ino));
        }
        let off = if first && f.flags & libc::O_APPEND != 0 { n.size } else { off.unwrap_or(0) };
        if len == 0 {
            return Ok((off, Xfer::default()));
        }
        let end = off.checked_add(len as u64).ok_or_else(|| FlacError::Posix(libc::EFBIG, "write past 2^64".into()))?;
        self.ensure_capacity(&f.cell, &mut n, end.div_ceil(PAGE as u64))?;
        let x = self.engine.write(n.vstart, off, src, len)?;
        n.size = n.size.max(end);
        let now = Ts::now();
        n.mtime = now;
        n.ctime = now;
        drop(n);
        self.queue_data(&f.cell);
        self.queue_meta(&mut lock(&self.pending), &f.cell);
        let cn = &self.counters;
        cn.writes.fetch_add(1, Ordering::Relaxed);
        cn.write_bytes.fetch_add(len as u64, Ordering::Relaxed);
        cn.mapped_bytes.fetch_add(x.mapped_bytes, Ordering::Relaxed);
        cn.copied_bytes.fetch_add(x.copied_bytes, Ordering::Relaxed);
        self.balance_dirty()?;
        Ok((off, x))
    }

    /// Writers flush themselves when dirty data passes `dirty_ratio` of the cache, and wake
    /// the background flusher above `dirty_background_ratio`.
    fn balance_dirty(&self) -> Result<()> {
        let cache = self.engine.cache_bytes() as f64;
        if cache == 0.0 {
            return Ok(());
        }
        let dirty = self.engine.dirty_bytes() as f64;
        if dirty > cache * self.cfg.dirty_ratio {
            self.counters.throttled.fetch_add(1, Ordering::Relaxed);
            self.sync()?;
        } else if dirty > cache * self.cfg.dirty_background_ratio {
            self.kick.notify_one();
        }
        Ok(())
    }

    pub fn read(&self, f: &File, buf: &mut [u8]) -> Result<usize> {
        let mut pos = lock(&f.pos);
        // SAFETY: buf is writable for its length.
        let (n, _) = unsafe { self.pread_raw(f, buf.as_mut_ptr(), buf.len(), *pos)? };
        *pos += n as u64;
        Ok(n)
    }

    pub fn write(&self, f: &File, buf: &[u8]) -> Result<usize> {
        let mut pos = lock(&f.pos);
        // SAFETY: buf is readable for its length.
        let (at, _) = unsafe { self.pwrite_raw(f, buf.as_ptr(), buf.len(), Some(*pos))? };
        *pos = at + buf.len() as u64;
        Ok(buf.len())
    }

    pub fn pread(&self, f: &File, buf: &mut [u8], off: u64) -> Result<usize> {
        // SAFETY: buf is writable for its length.
        unsafe { self.pread_raw(f, buf.as_mut_ptr(), buf.len(), off).map(|r| r.0) }
    }

    pub fn pwrite(&self, f: &File, buf: &[u8], off: u64) -> Result<usize> {
        // SAFETY: buf is readable for its length.
        unsafe { self.pwrite_raw(f, buf.as_ptr(), buf.len(), Some(off)).map(|_| buf.len()) }
    }

    /// The file position (for read/write without offsets), under its lock.
    pub fn with_pos<T>(&self, f: &File, op: impl FnOnce(&mut u64) -> Result<T>) -> Result<T> {
        let mut pos = lock(&f.pos);
        op(&mut pos)
    }

    /// `lseek`: SEEK_SET, SEEK_CUR, SEEK_END, SEEK_DATA, SEEK_HOLE.
    pub fn seek(&self, f: &File, off: i64, whence: i32) -> Result<u64> {
        let _t = self.call(Call::Seek, None);
        let mut pos = lock(&f.pos);
        let size = f.cell.read().size;
        let new = match whence {
            libc::SEEK_SET => off,
            libc::SEEK_CUR => *pos as i64 + off,
            libc::SEEK_END => size as i64 + off,
            libc::SEEK_DATA => {
                if off < 0 || off as u64 >= size {
                    return posix(libc::ENXIO, "SEEK_DATA past the end");
                }
                off
            }
            libc::SEEK_HOLE => {
                if off < 0 || off as u64 > size {
                    return posix(libc::ENXIO, "SEEK_HOLE past the end");
                }
                size as i64
            }
            _ => return posix(libc::EINVAL, format!("lseek whence {whence}")),
        };
        if new < 0 {
            return posix(libc::EINVAL, "lseek to a negative offset");
        }
        *pos = new as u64;
        Ok(*pos)
    }

    pub fn ftruncate(&self, f: &File, len: u64) -> Result<()> {
        let _t = self.call(Call::Other, None);
        if f.flags & libc::O_ACCMODE == libc::O_RDONLY {
            return posix(libc::EBADF, format!("inode {}: not open for writing", f.cell.ino));
        }
        self.truncate_cell(&f.cell, len)
    }

    pub fn truncate(&self, path: &[u8], len: u64) -> Result<()> {
        let _t = self.call(Call::Other, None);
        let ino = self.found(path, true)?;
        let c = self.cell(&lock(&self.ns), ino)?;
        self.truncate_cell(&c, len)
    }

    fn truncate_cell(&self, c: &Arc<InodeCell>, len: u64) -> Result<()> {
        let mut n = c.write();
        if n.is_dir() {
            return posix(libc::EISDIR, format!("inode {}", c.ino));
        }
        if !n.is_reg() {
            return posix(libc::EINVAL, format!("inode {}", c.ino));
        }
        if len < n.size && n.order != NO_RANGE {
            // Bytes beyond the size are zeros: clear what the file held past `len`.
            let held = (n.cap_pages() * PAGE as u64).min(n.size.div_ceil(PAGE as u64) * PAGE as u64);
            self.engine.zero(n.vstart, len, held)?;
        } else if len > n.size {
            self.ensure_capacity(c, &mut n, len.div_ceil(PAGE as u64))?;
        }
        n.size = len;
        let now = Ts::now();
        n.mtime = now;
        n.ctime = now;
        drop(n);
        self.queue_data(c);
        self.queue_meta(&mut lock(&self.pending), c);
        Ok(())
    }

    /// The file's pages in the FLAC space (FlacFS only): a direct, read-only view of its
    /// data, valid until the file grows (it may move to a larger range then).
    pub fn file_view(&self, f: &File) -> Option<(usize, u64)> {
        let n = f.cell.read();
        if n.order == NO_RANGE {
            return None;
        }
        let a = self.engine.view_addr(n.vstart)?;
        if let Some(fl) = self.flac() {
            fl.use_view();
        }
        Some((a, n.size))
    }
}
