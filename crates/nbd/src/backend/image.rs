//! The image file holding the contents: the in-memory image (a memfd), importing a raw image
//! into the device, writes in folio-friendly pieces, holes and zeroed ranges.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

use ssdlab_core::Device;

use super::{BackendError, Result};

/// Contents without a file: a memfd (shared memory behind a file descriptor, allocated as
/// written, holes punched on trim), so the in-memory and the file image share one code path.
pub(super) fn anonymous_image(len: u64) -> Result<File> {
    // SAFETY: memfd_create with a valid C string; the result is checked.
    let fd = unsafe { libc::memfd_create(c"ssdlab-image".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(BackendError::msg(format!("cannot create the in-memory image (memfd_create): {}", std::io::Error::last_os_error())));
    }
    use std::os::unix::io::FromRawFd;
    // SAFETY: fd is a fresh descriptor nothing else owns.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(len)?;
    Ok(f)
}

/// A raw image without device state: write its data extents through the device once, so the
/// FTL maps what the image holds (as if it had been copied onto the SSD).
pub(super) fn import(dev: &mut Device, image: &File, logical: u64, sector: u64) -> Result<u64> {
    let fd = image.as_raw_fd();
    let mut pos = 0u64;
    let mut bytes = 0u64;
    const STEP: u64 = 1 << 20;
    while pos < logical {
        // SAFETY: lseek on our own descriptor; results checked.
        let d = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
        if d < 0 {
            break;
        }
        let h = unsafe { libc::lseek(fd, d as libc::off_t, libc::SEEK_HOLE) };
        let (a, b) = ((d as u64) / sector * sector, (if h < 0 { logical } else { h as u64 }).min(logical).div_ceil(sector) * sector);
        let mut o = a;
        while o < b {
            let n = (b - o).min(STEP);
            dev.write_placed_len(o, n, false, None)?;
            o += n;
        }
        bytes += b - a;
        pos = b.max(pos + sector);
    }
    dev.flush()?;
    Ok(bytes)
}

/// Largest single pwrite into the image. The page cache gives a buffered write a folio as large
/// as the write; a later 4 KiB write into a large folio makes ext4 walk every buffer head of it
/// (`ext4_block_write_begin` took 84% of the server's time for random 4 KiB writes after a fill
/// in 1 MiB writes), so big writes go in pieces that keep folios small.
const IMAGE_WRITE_CHUNK: usize = 16 * 1024;

/// Write `data` at `offset` of the image in folio-friendly pieces (see [`IMAGE_WRITE_CHUNK`]),
/// each inside one aligned chunk of the file.
pub(super) fn write_image(f: &File, data: &[u8], offset: u64) -> std::io::Result<()> {
    let chunk = IMAGE_WRITE_CHUNK as u64;
    let (mut at, mut rest) = (offset, data);
    while !rest.is_empty() {
        let n = ((chunk - at % chunk) as usize).min(rest.len());
        f.write_all_at(&rest[..n], at)?;
        at += n as u64;
        rest = &rest[n..];
    }
    Ok(())
}

/// Deallocate a range of the image file (reads back zeros).
pub(super) fn punch_hole(f: &File, offset: u64, len: u64) -> Result<()> {
    fallocate_or_zero(f, libc::FALLOC_FL_PUNCH_HOLE, offset, len)
}

/// Zero a range of the image file, keeping it allocated.
pub(super) fn zero_range(f: &File, offset: u64, len: u64) -> Result<()> {
    fallocate_or_zero(f, libc::FALLOC_FL_ZERO_RANGE, offset, len)
}

/// fallocate(mode) on the range; on file systems without it, write zeros instead.
fn fallocate_or_zero(f: &File, mode: libc::c_int, offset: u64, len: u64) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: fallocate on our own descriptor with a valid range; the result is checked.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode | libc::FALLOC_FL_KEEP_SIZE, offset as libc::off_t, len as libc::off_t) };
    if r == 0 {
        return Ok(());
    }
    write_zeros(f, offset, len)
}

fn write_zeros(f: &File, offset: u64, len: u64) -> Result<()> {
    let z = vec![0u8; len.min(1 << 20) as usize];
    let mut o = offset;
    while o < offset + len {
        let n = (offset + len - o).min(z.len() as u64) as usize;
        f.write_all_at(&z[..n], o)?;
        o += n as u64;
    }
    Ok(())
}
