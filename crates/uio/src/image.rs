//! A device's flash kept in a file, so a device process killed and started again serves what
//! it acknowledged (`ssdlab uio device --data DIR`).
//!
//! `DIR/flash.img`, mapped shared into the device process: a header, then one 8-byte sequence
//! number per block (the block's out-of-band area: the order in which blocks were opened, 0 for
//! a free block), then every block's bytes at `block x block_bytes`. The UTL writes a record's
//! bytes here when it appends it, before the put is acknowledged, so the image holds the page
//! buffer's unprogrammed tail too (a device's DRAM buffer with power-loss protection; here the
//! kernel's page cache outlives the killed process). Erasing a block zeroes its bytes, then its
//! sequence number. Recovery (FlashBlox-style, from the flash's own records) scans the blocks in
//! sequence order, each from its start until padding or a torn record, and rebuilds the UTL's
//! index: a key's newest record is the last one met. See [`crate::utl::Utl::open`].

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

const MAGIC: &[u8; 8] = b"UIOFLSH1";
/// Header: magic, block count (u64), block bytes (u64), reserved to 64 bytes.
const HEADER_BYTES: usize = 64;

/// The mapped image. See the module docs.
pub struct Image {
    ptr: *mut u8,
    len: usize,
    blocks: usize,
    block_bytes: usize,
    _file: File,
}

// SAFETY: the mapping is owned by one Image, reached only through &self / &mut self.
unsafe impl Send for Image {}

impl Image {
    /// Open (or create) `dir/flash.img` for `blocks` blocks of `block_bytes`. A file made for
    /// another geometry is refused. Returns the image and whether it already existed.
    pub fn open(dir: &Path, blocks: usize, block_bytes: usize) -> io::Result<(Image, bool)> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("flash.img");
        let len = HEADER_BYTES + 8 * blocks + blocks * block_bytes;
        let existed = path.exists();
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
        // One device per image: a second process (or a second open) is refused while the first
        // holds it; the kernel releases the lock when its holder dies, however it dies.
        // SAFETY: flock on an open descriptor.
        if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("{}: in use by another device ({e})", path.display())));
        }
        let have = file.metadata()?.len() as usize;
        if existed && have != 0 && have != len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {have} bytes, not the {len} of this device's flash ({blocks} blocks of {block_bytes} bytes)", path.display()),
            ));
        }
        // Sparse: only written blocks take disk space.
        file.set_len(len as u64)?;
        // SAFETY: a shared read/write mapping of a file of `len` bytes, unmapped on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut img = Image { ptr: ptr.cast(), len, blocks, block_bytes, _file: file };
        let fresh = !existed || have == 0 || img.bytes()[..8] != *MAGIC;
        if fresh {
            if existed && have != 0 && img.bytes()[..8].iter().any(|&b| b != 0) {
                return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{}: not a UIO flash image", path.display())));
            }
            let h = &mut img.bytes_mut()[..HEADER_BYTES];
            h[8..16].copy_from_slice(&(blocks as u64).to_le_bytes());
            h[16..24].copy_from_slice(&(block_bytes as u64).to_le_bytes());
            // The magic last: an image whose header was never completed reads as fresh.
            h[..8].copy_from_slice(MAGIC);
        } else {
            let h = &img.bytes()[..HEADER_BYTES];
            let (b, bb) = (u64::from_le_bytes(h[8..16].try_into().unwrap()), u64::from_le_bytes(h[16..24].try_into().unwrap()));
            if (b, bb) != (blocks as u64, block_bytes as u64) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: made for {b} blocks of {bb} bytes, this device has {blocks} of {block_bytes}", path.display()),
                ));
            }
        }
        Ok((img, !fresh))
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: ptr maps len bytes for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as bytes(), and &mut self makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    pub fn blocks(&self) -> usize {
        self.blocks
    }

    fn seq_at(&self, block: usize) -> usize {
        assert!(block < self.blocks, "block {block} of {}", self.blocks);
        HEADER_BYTES + 8 * block
    }

    fn data_at(&self, block: usize) -> usize {
        assert!(block < self.blocks, "block {block} of {}", self.blocks);
        HEADER_BYTES + 8 * self.blocks + block * self.block_bytes
    }

    /// The block's sequence number (0: free).
    pub fn seq(&self, block: usize) -> u64 {
        let at = self.seq_at(block);
        u64::from_le_bytes(self.bytes()[at..at + 8].try_into().unwrap())
    }

    pub fn set_seq(&mut self, block: usize, seq: u64) {
        let at = self.seq_at(block);
        self.bytes_mut()[at..at + 8].copy_from_slice(&seq.to_le_bytes());
    }

    /// The block's bytes.
    pub fn block(&self, block: usize) -> &[u8] {
        let at = self.data_at(block);
        &self.bytes()[at..at + self.block_bytes]
    }

    /// Write `bytes` at `offset` in `block`.
    pub fn write(&mut self, block: usize, offset: usize, bytes: &[u8]) {
        assert!(offset + bytes.len() <= self.block_bytes, "write past block {block}'s end");
        let at = self.data_at(block) + offset;
        self.bytes_mut()[at..at + bytes.len()].copy_from_slice(bytes);
    }

    /// Erase: zero the block's bytes, then mark it free.
    pub fn erase(&mut self, block: usize) {
        let at = self.data_at(block);
        let n = self.block_bytes;
        self.bytes_mut()[at..at + n].fill(0);
        self.set_seq(block, 0);
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: unmapping what open() mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
