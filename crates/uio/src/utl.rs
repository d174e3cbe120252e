//! UTL: the device's key-value translation layer, records stored log-structured on flash.
//!
//! As in the document (section 3.4.3): records (see [`crate::record`]) are appended in order
//! to the active flash block, a page is written once and then only read, a block is fixed once
//! all its pages are written; a hash table in device DRAM maps each key to where its newest
//! record lies (block, page and offset, length); a put appends a new record and repoints the
//! key, leaving the old record invalid; garbage collection scans a block from start to end,
//! reads every record's key and keeps (re-appends) a record only if the index still points at
//! it, then erases the block.
//!
//! The flash is ssdlab's open-channel personality ([`Ocssd`]) on the shared NAND media model:
//! a UTL block is one chunk, pages are programmed through vector writes at the chunk's write
//! pointer, blocks are erased through vector resets, so wear, bad blocks and (with timing on)
//! read/program/erase times are the media layer's. Choices the document leaves open (ssdlab's):
//! - the page buffer is double: a put returns once its record is in the device's page buffer,
//!   and waits only when it fills a page while the previous page's program is still running;
//! - records never span blocks (the rest of a block too short for the next record stays
//!   unwritten; the partly filled last page is padded with zeros);
//! - collection runs when fewer than `gc_free_blocks` blocks are free, victim = the closed block
//!   with the fewest live bytes (counted as the index moves), in the foreground: the put that
//!   triggered it waits;
//! - a put is refused (device full) once live record bytes would exceed the usable capacity:
//!   blocks minus the GC reserve, times (1 - `min_spare`).

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use ssdlab_core::ftl::ocssd::{ChunkState, Ocssd, MAX_VECTOR};
use ssdlab_core::ftl::victim::greedy;
use ssdlab_core::Config;

use crate::image::Image;
use crate::layout::Status;
use crate::queues::Store;
use crate::record::{decode, encode, encoded_len, Decoded};

/// Settings of the UTL beside its flash device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UtlConfig {
    /// Collect when fewer blocks than this are free (at least 2: one to relocate into).
    pub gc_free_blocks: u32,
    /// Fraction of the flash kept free of live records, so collection always gains space.
    pub min_spare: f64,
}

impl Default for UtlConfig {
    fn default() -> Self {
        UtlConfig { gc_free_blocks: 2, min_spare: 0.1 }
    }
}

impl UtlConfig {
    pub fn validate(&self) -> Result<()> {
        if self.gc_free_blocks < 2 {
            return Err(UtlError::Config(format!(
                "utl.gc_free_blocks = {}: expected >= 2 (one block to relocate into)",
                self.gc_free_blocks
            )));
        }
        if !(0.0..1.0).contains(&self.min_spare) {
            return Err(UtlError::Config(format!("utl.min_spare = {}: expected a fraction in [0, 1)", self.min_spare)));
        }
        Ok(())
    }
}

/// Where a key's newest record lies: block (chunk), byte offset in the block (its page is
/// `offset / page bytes`), record length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub block: u32,
    pub offset: u32,
    pub len: u32,
}

/// Why a UTL operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UtlError {
    #[error("{0}")]
    Config(String),
    #[error("a record of {0} bytes does not fit one flash block of {1} bytes")]
    TooLarge(usize, u32),
    #[error("device full: {0}")]
    Full(String),
    #[error("flash: {0}")]
    Media(String),
    #[error("corrupt record in block {block} at offset {offset}: {what}")]
    Corrupt { block: u32, offset: u32, what: &'static str },
}

impl From<ssdlab_core::Error> for UtlError {
    fn from(e: ssdlab_core::Error) -> Self {
        UtlError::Media(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, UtlError>;

/// What the UTL has done.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UtlStats {
    pub puts: u64,
    pub gets: u64,
    /// Record bytes appended for puts.
    pub put_record_bytes: u64,
    /// Bytes programmed to flash (whole pages, padding included).
    pub flash_write_bytes: u64,
    pub gc_victims: u64,
    pub gc_scanned_records: u64,
    pub gc_kept_records: u64,
    pub gc_kept_bytes: u64,
    pub blocks_erased: u64,
    /// Zero bytes programmed to fill the last page of a block.
    pub pad_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    Free,
    Open,
    Closed,
    /// Bad (factory or worn out): never used.
    Offline,
}

/// The UTL of one device. See the module docs.
pub struct Utl {
    dev: Ocssd,
    cfg: UtlConfig,
    /// Bytes of one write unit (a page of every plane of a die).
    unit: usize,
    ws_min: u64,
    clba: u64,
    block_bytes: u32,
    index: HashMap<Box<[u8]>, Loc>,
    state: Vec<Use>,
    /// Bytes appended to each block.
    used: Vec<u32>,
    /// Bytes of records the index points at, per block.
    live: Vec<u32>,
    live_bytes: u64,
    capacity_bytes: u64,
    free: VecDeque<u32>,
    /// The open block and its unprogrammed tail (less than one unit).
    open: Option<u32>,
    buf: Vec<u8>,
    /// Completion of the last page program (the double buffer).
    prog_done: u64,
    record: Vec<u8>,
    stats: UtlStats,
    /// The flash kept in a file (`--data`), and the sequence number of the last block opened.
    image: Option<Image>,
    seq: u64,
}

/// What [`Utl::open`] found in an existing image.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovered {
    /// Blocks holding records (the open one included) and the records scanned in them.
    pub blocks: u64,
    pub records: u64,
    /// Keys in the rebuilt index.
    pub keys: u64,
}

impl Utl {
    /// A UTL on a fresh open-channel device of `dev_cfg` (its personality must be `ocssd` and
    /// its storage `data`: the UTL reads its records back).
    pub fn new(dev_cfg: &Config, cfg: UtlConfig) -> Result<Utl> {
        use ssdlab_core::config::{Personality, StorageMode};
        if dev_cfg.personality != Personality::Ocssd || dev_cfg.storage != StorageMode::Data {
            return Err(UtlError::Config(
                "the UTL needs an open-channel device that keeps data (personality = \"ocssd\", storage = \"data\")".into(),
            ));
        }
        cfg.validate()?;
        dev_cfg.validate()?;
        let dev = Ocssd::new(dev_cfg)?;
        let g = dev.geometry().clone();
        let n = dev.chunks();
        let unit = (g.ws_min * g.sector_bytes) as usize;
        let block_bytes = u32::try_from(g.clba * g.sector_bytes as u64).map_err(|_| UtlError::Media("flash blocks over 4 GiB".into()))?;
        let state: Vec<Use> = (0..n).map(|c| if dev.chunk(c).state == ChunkState::Offline { Use::Offline } else { Use::Free }).collect();
        // Free blocks taken in turn from every die (chunk numbers run die-major).
        let per_die = g.num_chk as usize;
        let dies = n / per_die;
        let free: VecDeque<u32> = (0..per_die)
            .flat_map(|i| (0..dies).map(move |d| d * per_die + i))
            .filter(|&c| state[c] == Use::Free)
            .map(|c| c as u32)
            .collect();
        let usable = free.len().saturating_sub(cfg.gc_free_blocks as usize + 1) as u64;
        let capacity_bytes = (usable as f64 * block_bytes as f64 * (1.0 - cfg.min_spare)) as u64;
        if capacity_bytes == 0 {
            return Err(UtlError::Config(format!(
                "{} good blocks leave no room beside the GC reserve of {}",
                free.len(),
                cfg.gc_free_blocks
            )));
        }
        Ok(Utl {
            dev,
            cfg,
            unit,
            ws_min: g.ws_min as u64,
            clba: g.clba,
            block_bytes,
            index: HashMap::new(),
            state,
            used: vec![0; n],
            live: vec![0; n],
            live_bytes: 0,
            capacity_bytes,
            free,
            open: None,
            buf: Vec::with_capacity(unit),
            prog_done: 0,
            record: Vec::new(),
            stats: UtlStats::default(),
            image: None,
            seq: 0,
        })
    }

    /// A UTL whose flash lives in `dir/flash.img` (see [`crate::image`]): an image left by an
    /// earlier run (killed or stopped) is recovered: its blocks are programmed again onto this
    /// run's flash in the order they were opened, the open block's unprogrammed tail goes back
    /// into the page buffer, and the index is rebuilt from the records themselves, the last
    /// record of a key being its newest.
    pub fn open(dev_cfg: &Config, cfg: UtlConfig, dir: &std::path::Path) -> Result<(Utl, Recovered)> {
        let mut u = Utl::new(dev_cfg, cfg)?;
        let (img, existed) = Image::open(dir, u.state.len(), u.block_bytes as usize).map_err(|e| UtlError::Media(e.to_string()))?;
        let rec = if existed {
            u.recover(img)?
        } else {
            u.image = Some(img);
            Recovered::default()
        };
        Ok((u, rec))
    }

    fn recover(&mut self, mut img: Image) -> Result<Recovered> {
        let mut blocks: Vec<(u64, usize)> = (0..img.blocks()).filter(|&b| img.seq(b) > 0).map(|b| (img.seq(b), b)).collect();
        blocks.sort_unstable();
        let last = blocks.last().map(|&(_, b)| b);
        let mut found = Recovered::default();
        let unit = self.unit;
        for &(seq, b) in &blocks {
            if self.state[b] != Use::Free {
                return Err(UtlError::Corrupt { block: b as u32, offset: 0, what: "the image holds records in a bad block" });
            }
            let data = img.block(b);
            let mut recs: Vec<(Box<[u8]>, Loc)> = vec![];
            let mut off = 0usize;
            while off < data.len() {
                match decode(&data[off..]) {
                    Decoded::Record(r) => {
                        recs.push((r.key.into(), Loc { block: b as u32, offset: off as u32, len: r.len() as u32 }));
                        off += r.len();
                    }
                    // Padding, or a record torn by the kill: never acknowledged.
                    Decoded::End | Decoded::Corrupt(_) => break,
                }
            }
            let open = Some(b) == last;
            if off == 0 && !open {
                // Opened and erased again before its number was cleared: free.
                img.erase(b);
                continue;
            }
            if open && off < data.len() {
                // Whatever a torn record left after the last whole one goes.
                let rest = data.len() - off;
                img.write(b, off, &vec![0u8; rest]);
            }
            let data = img.block(b);
            let units = if open { off / unit } else { off.div_ceil(unit) };
            for i in 0..units {
                let first = self.slba(b as u32) + i as u64 * self.ws_min;
                let lbas: Vec<u64> = (first..first + self.ws_min).collect();
                self.dev.vector_write(&lbas, Some(&data[i * unit..(i + 1) * unit]), 0)?;
            }
            self.free.retain(|&x| x as usize != b);
            self.used[b] = off as u32;
            if open {
                self.state[b] = Use::Open;
                self.open = Some(b as u32);
                self.buf.clear();
                self.buf.extend_from_slice(&data[units * unit..off]);
            } else {
                self.state[b] = Use::Closed;
            }
            found.blocks += 1;
            found.records += recs.len() as u64;
            for (k, loc) in recs {
                let old = self.index.get(&k).copied();
                self.repoint(&k, old, loc);
            }
            self.seq = seq;
        }
        found.keys = self.index.len() as u64;
        assert!(self.live_bytes <= self.used.iter().map(|&x| x as u64).sum::<u64>());
        self.image = Some(img);
        Ok(found)
    }

    pub fn stats(&self) -> &UtlStats {
        &self.stats
    }

    /// The flash device (counters, wear, timelines).
    pub fn device(&self) -> &Ocssd {
        &self.dev
    }

    /// Keys stored.
    pub fn keys(&self) -> usize {
        self.index.len()
    }

    /// Bytes of live records, and the most the UTL accepts.
    pub fn live_bytes(&self) -> (u64, u64) {
        (self.live_bytes, self.capacity_bytes)
    }

    /// Where `key`'s record lies.
    pub fn locate(&self, key: &[u8]) -> Option<Loc> {
        self.index.get(key).copied()
    }

    /// Store `key` = `value` at simulated time `now`; returns when the put completes.
    pub fn put(&mut self, key: &[u8], value: &[u8], now: u64) -> Result<u64> {
        let len = encoded_len(key.len(), value.len());
        if len > self.block_bytes as usize {
            return Err(UtlError::TooLarge(len, self.block_bytes));
        }
        let old = self.index.get(key).copied();
        let after = self.live_bytes - old.map_or(0, |l| l.len as u64) + len as u64;
        if after > self.capacity_bytes {
            return Err(UtlError::Full(format!("{after} bytes of live records would exceed the capacity of {}", self.capacity_bytes)));
        }
        let mut done = now;
        while self.free.len() < self.cfg.gc_free_blocks as usize {
            match self.collect_one(done)? {
                Some(t) => done = t,
                None => break,
            }
        }
        let mut rec = std::mem::take(&mut self.record);
        rec.clear();
        encode(key, value, &mut rec);
        let r = self.append(&rec, done);
        self.record = rec;
        let (loc, t) = r?;
        self.repoint(key, old, loc);
        self.stats.puts += 1;
        self.stats.put_record_bytes += len as u64;
        Ok(t)
    }

    /// The value of `key` at simulated time `now` and when the read completes (None: not
    /// stored; the lookup costs no flash read).
    pub fn get(&mut self, key: &[u8], now: u64) -> Result<(Option<Vec<u8>>, u64)> {
        self.stats.gets += 1;
        let Some(loc) = self.index.get(key).copied() else { return Ok((None, now)) };
        let (bytes, done) = self.read(loc, now, false)?;
        match decode(&bytes) {
            Decoded::Record(r) if r.key == key => Ok((Some(r.value.to_vec()), done)),
            Decoded::Record(_) => Err(UtlError::Corrupt { block: loc.block, offset: loc.offset, what: "another key's record" }),
            Decoded::End => Err(UtlError::Corrupt { block: loc.block, offset: loc.offset, what: "no record" }),
            Decoded::Corrupt(what) => Err(UtlError::Corrupt { block: loc.block, offset: loc.offset, what }),
        }
    }

    fn repoint(&mut self, key: &[u8], old: Option<Loc>, loc: Loc) {
        if let Some(o) = old {
            self.live[o.block as usize] -= o.len;
            self.live_bytes -= o.len as u64;
            *self.index.get_mut(key).expect("key indexed") = loc;
        } else {
            self.index.insert(key.into(), loc);
        }
        self.live[loc.block as usize] += loc.len;
        self.live_bytes += loc.len as u64;
    }

    fn slba(&self, block: u32) -> u64 {
        block as u64 * self.clba
    }

    /// Append one record to the open block (opening the next free block when it does not fit).
    fn append(&mut self, rec: &[u8], now: u64) -> Result<(Loc, u64)> {
        let len = rec.len() as u32;
        let block = match self.open {
            Some(b) if self.used[b as usize] + len <= self.block_bytes => b,
            _ => {
                self.close_open(now)?;
                let b = self.free.pop_front().ok_or_else(|| UtlError::Full("no free flash block".into()))?;
                self.state[b as usize] = Use::Open;
                self.open = Some(b);
                if let Some(img) = &mut self.image {
                    self.seq += 1;
                    img.set_seq(b as usize, self.seq);
                }
                b
            }
        };
        let loc = Loc { block, offset: self.used[block as usize], len };
        if let Some(img) = &mut self.image {
            // In the image before the put is acknowledged.
            img.write(block as usize, loc.offset as usize, rec);
        }
        let mut done = now;
        let mut rest = rec;
        while !rest.is_empty() {
            let take = (self.unit - self.buf.len()).min(rest.len());
            self.buf.extend_from_slice(&rest[..take]);
            self.used[block as usize] += take as u32;
            rest = &rest[take..];
            if self.buf.len() == self.unit {
                done = done.max(self.program_unit(now)?);
            }
        }
        Ok((loc, done))
    }

    /// Program the full page buffer of the open block; returns when the put that filled it
    /// may go on (the previous program has finished: its buffer is free again).
    fn program_unit(&mut self, now: u64) -> Result<u64> {
        let block = self.open.expect("open block");
        let unit_index = (self.used[block as usize] as u64 - self.buf.len() as u64) / self.unit as u64;
        let first = self.slba(block) + unit_index * self.ws_min;
        let lbas: Vec<u64> = (first..first + self.ws_min).collect();
        let wait = self.prog_done;
        self.prog_done = self.dev.vector_write(&lbas, Some(&self.buf), now)?;
        self.stats.flash_write_bytes += self.unit as u64;
        self.buf.clear();
        Ok(now.max(wait))
    }

    /// Close the open block: pad and program its partly filled page.
    fn close_open(&mut self, now: u64) -> Result<()> {
        let Some(b) = self.open else { return Ok(()) };
        if !self.buf.is_empty() {
            let pad = self.unit - self.buf.len();
            self.buf.resize(self.unit, 0);
            // The padding is not part of `used`: scans stop at the last record.
            self.used[b as usize] += pad as u32;
            self.program_unit(now)?;
            self.used[b as usize] -= pad as u32;
            self.stats.pad_bytes += pad as u64;
        }
        self.state[b as usize] = Use::Closed;
        self.open = None;
        Ok(())
    }

    /// Read `loc`'s bytes: programmed units from flash, the unprogrammed tail from the page
    /// buffer. `queued`: a background read (GC) behind the die's other work.
    fn read(&mut self, loc: Loc, now: u64, queued: bool) -> Result<(Vec<u8>, u64)> {
        let (start, end) = (loc.offset as u64, loc.offset as u64 + loc.len as u64);
        let unit = self.unit as u64;
        let (u0, u1) = (start / unit, end.div_ceil(unit));
        let programmed =
            if self.open == Some(loc.block) { (self.used[loc.block as usize] as u64 - self.buf.len() as u64) / unit } else { u64::MAX };
        let mut bytes = vec![0u8; ((u1 - u0) * unit) as usize];
        let mut done = now;
        let from_flash = u1.min(programmed).max(u0);
        let per_cmd = (MAX_VECTOR as u64 / self.ws_min).max(1);
        let mut u = u0;
        while u < from_flash {
            let n = per_cmd.min(from_flash - u);
            let first = self.slba(loc.block) + u * self.ws_min;
            let lbas: Vec<u64> = (first..first + n * self.ws_min).collect();
            let at = ((u - u0) * unit) as usize;
            let out = &mut bytes[at..at + (n * unit) as usize];
            let t =
                if queued { self.dev.vector_read_queued(&lbas, Some(out), now)? } else { self.dev.vector_read(&lbas, Some(out), now)? };
            done = done.max(t);
            u += n;
        }
        if from_flash < u1 {
            let at = ((from_flash - u0) * unit) as usize;
            bytes[at..at + self.buf.len()].copy_from_slice(&self.buf);
        }
        let skip = (start - u0 * unit) as usize;
        bytes.drain(..skip);
        bytes.truncate(loc.len as usize);
        Ok((bytes, done))
    }

    /// Collect the closed block with the fewest live bytes: scan it, keep the records the
    /// index points at, erase it. None when no block would give back space.
    fn collect_one(&mut self, now: u64) -> Result<Option<u64>> {
        let victim =
            greedy((0..self.state.len()).filter(|&c| self.state[c] == Use::Closed && self.live[c] < self.used[c]), |c| self.live[c])
                .map(|c| c as u32);
        let Some(v) = victim else { return Ok(None) };
        let used = self.used[v as usize];
        let (bytes, mut done) = self.read(Loc { block: v, offset: 0, len: used }, now, true)?;
        let mut off = 0usize;
        while off < used as usize {
            let r = match decode(&bytes[off..]) {
                Decoded::Record(r) => r,
                Decoded::End => break,
                Decoded::Corrupt(what) => return Err(UtlError::Corrupt { block: v, offset: off as u32, what }),
            };
            let len = r.len();
            self.stats.gc_scanned_records += 1;
            let here = Loc { block: v, offset: off as u32, len: len as u32 };
            if self.index.get(r.key) == Some(&here) {
                let (loc, t) = self.append(&bytes[off..off + len], done)?;
                done = done.max(t);
                self.repoint(r.key, Some(here), loc);
                self.stats.gc_kept_records += 1;
                self.stats.gc_kept_bytes += len as u64;
            }
            off += len;
        }
        debug_assert_eq!(self.live[v as usize], 0, "block {v} still holds live records after its scan");
        if let Some(img) = &mut self.image {
            img.erase(v as usize);
        }
        let t = self.dev.vector_reset(&[self.slba(v)], done)?;
        self.stats.gc_victims += 1;
        self.stats.blocks_erased += 1;
        self.used[v as usize] = 0;
        if self.dev.chunk(v as usize).state == ChunkState::Offline {
            self.state[v as usize] = Use::Offline;
        } else {
            self.state[v as usize] = Use::Free;
            self.free.push_back(v);
        }
        Ok(Some(t))
    }

    /// Check the bookkeeping against the flash: every key's record reads back as that key,
    /// and the per-block live bytes add up (tests).
    pub fn check(&mut self) -> Result<()> {
        let mut live = vec![0u32; self.live.len()];
        let keys: Vec<(Box<[u8]>, Loc)> = self.index.iter().map(|(k, l)| (k.clone(), *l)).collect();
        for (k, l) in keys {
            live[l.block as usize] += l.len;
            let (v, _) = self.get(&k, 0)?;
            assert!(v.is_some());
            self.stats.gets -= 1;
        }
        assert_eq!(live, self.live, "per-block live bytes");
        assert_eq!(live.iter().map(|&x| x as u64).sum::<u64>(), self.live_bytes);
        Ok(())
    }
}

/// The UTL behind the queue interface, untimed (simulated time stays 0: the queues' own
/// wall-clock path, as the bench measures it). Failures answer Internal Error.
impl Store for Utl {
    fn put(&mut self, key: &[u8], value: &[u8]) -> std::result::Result<(), Status> {
        Utl::put(self, key, value, 0).map(|_| ()).map_err(|_| Status::InternalError)
    }
    fn get(&mut self, key: &[u8]) -> std::result::Result<Option<Vec<u8>>, Status> {
        Utl::get(self, key, 0).map(|(v, _)| v).map_err(|_| Status::InternalError)
    }
}
