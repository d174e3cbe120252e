//! Open-channel SSD (OCSSD 2.0-style) personality: the host sees the parallelism and manages
//! placement itself. Groups are channels, parallel units (PUs) are dies, a chunk is one block
//! in every plane of a PU, written sequentially at its write pointer in units of `ws_min`
//! sectors (one multi-plane page), and reset (erased) by the host. There is no device mapping
//! and no device GC; each PU has its own timeline, so a host that pins work to PUs sees their
//! isolation in its latencies. This is the substrate of host-side FTLs such as FlashBlox's.
//!
//! Addresses: `lba = ((group * num_pu + pu) * num_chk + chunk) * clba + sector` (a dense
//! numbering; the OCSSD 2.0 wire format packs the same fields into bit fields).
//!
//! Rules and statuses follow the OCSSD 2.0 spec as implemented by QEMU's reference emulator
//! and described by SPDK's definitions: writes at the write pointer in runs of ws_min
//! (else Out of Order Write 0xF2 / Invalid Field), writes to closed or offline chunks get Out
//! of Order Write, resets of free chunks Invalid Reset (0xC1), of offline chunks Offline Chunk
//! (0xC0); like QEMU's default (and most drives, the spec says 0xC1) an open chunk may be
//! reset early. Reads of sectors that hold no data (beyond the write pointer, free or offline
//! chunks) succeed and return zeros, as QEMU does unless the host enables unwritten-block
//! errors.

use serde::{Deserialize, Serialize};

use super::hostlog::{Container, Containers};
use super::{BlockDevice, WriteOpts};
use crate::config::Config;
use crate::error::{Error, Result, Status};
use crate::ftl::sizing::Sizing;
use crate::media::{BlockState, Layout, Media};

/// Most addresses one vector command may carry.
pub const MAX_VECTOR: usize = 64;

/// Bytes of out-of-band metadata a host may attach to each sector of a vector write (OCSSD
/// 2.0 passes a metadata buffer beside the data). This device keeps the metadata of each
/// chunk's first sector: the chunk's OOB record, which host FTLs use to rebuild their maps
/// after a crash (FlashBlox keeps 16 bytes per erase block there). Metadata given for other
/// sectors is accepted and not kept.
pub const OOB_BYTES: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChunkState {
    Free,
    Open,
    Closed,
    Offline,
}

/// Geometry report (the identify data a host reads first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    pub num_grp: u32,
    pub num_pu: u32,
    pub num_chk: u32,
    /// Sectors per chunk.
    pub clba: u64,
    /// Minimum write size and its multiples (sectors): one multi-plane page.
    pub ws_min: u32,
    /// Optimal write size (sectors): one multi-plane page on every PU of a group.
    pub ws_opt: u32,
    /// Sectors that must be written after a sector before it can be read (0: any written
    /// sector can be read; this device buffers writes until a unit is programmed).
    pub mw_cunits: u32,
    /// Max open chunks (0 = no limit).
    pub maxoc: u32,
    pub sector_bytes: u32,
    /// Typical media times (ns): read, program, erase.
    pub trdt_ns: u64,
    pub tprt_ns: u64,
    pub tbet_ns: u64,
}

/// Chunk descriptor (chunk information log page).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkInfo {
    pub slba: u64,
    pub state: ChunkState,
    /// Write pointer (absolute LBA).
    pub wp: u64,
    pub cnlb: u64,
    /// Erase count of the chunk (wear index).
    pub erase_count: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Chunk {
    state: ChunkState,
    written: u64,
    erases: u32,
    /// OOB metadata of the chunk's first sector (zeros until written; dropped by a reset).
    oob: [u8; OOB_BYTES],
}

/// The open-channel device.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ocssd {
    m: Media,
    geo: Geometry,
    chunks: Vec<Chunk>,
}

impl Ocssd {
    pub fn new(cfg: &Config) -> Result<Ocssd> {
        let lay = Layout::new(&cfg.geometry);
        let ws_min = lay.planes_per_die * lay.sectors_per_page;
        let geo = Geometry {
            num_grp: lay.channels,
            num_pu: lay.dies_per_channel,
            num_chk: lay.blocks_per_plane,
            clba: (lay.planes_per_die * lay.sectors_per_block) as u64,
            ws_min,
            ws_opt: ws_min * lay.dies_per_channel,
            mw_cunits: 0,
            maxoc: 0,
            sector_bytes: lay.sector_bytes,
            trdt_ns: cfg.timing.page_read_ns,
            tprt_ns: cfg.timing.page_program_ns,
            tbet_ns: cfg.timing.block_erase_ns,
        };
        let n = (lay.dies * lay.blocks_per_plane) as usize;
        let mut oc = Ocssd {
            m: Media::new(cfg),
            geo,
            chunks: (0..n).map(|_| Chunk { state: ChunkState::Free, written: 0, erases: 0, oob: [0; OOB_BYTES] }).collect(),
        };
        // A chunk holding a factory bad block is offline from the start (the chunk
        // information log says so; hosts skip such chunks).
        for c in 0..n {
            if oc.chunk_blocks(c).any(|b| oc.m.is_bad(b)) {
                oc.chunks[c].state = ChunkState::Offline;
            }
        }
        assert_eq!(n as u64 * oc.geo.clba, lay.physical_sectors, "chunks cover the media exactly");
        assert!(oc.geo.clba.is_multiple_of(ws_min as u64), "a chunk is whole units of ws_min");
        Ok(oc)
    }

    /// Size a device of `cfg` (see [`crate::sizing`]): nothing to check beyond the config.
    pub fn sizing(cfg: &Config) -> Result<Sizing> {
        let lay = Layout::new(&cfg.geometry);
        let logical = lay.physical_sectors;
        let chunks = (lay.dies * lay.blocks_per_plane) as u64 * std::mem::size_of::<Chunk>() as u64;
        Ok(Sizing {
            logical_bytes: logical * lay.sector_bytes as u64,
            physical_bytes: lay.physical_sectors * lay.sector_bytes as u64,
            good_blocks: Media::good_blocks_of(cfg),
            memory_bytes: Media::memory_bytes_of(cfg) + chunks,
            data_bytes_max: Media::data_bytes_of(cfg, logical),
            reserve_blocks: None,
            spare_blocks: None,
            reserve_steady_blocks: None,
            spare_factor: None,
            effective: None,
        })
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// LBA of (group, pu, chunk, sector).
    pub fn lba(&self, grp: u32, pu: u32, chk: u32, sec: u64) -> u64 {
        ((grp as u64 * self.geo.num_pu as u64 + pu as u64) * self.geo.num_chk as u64 + chk as u64) * self.geo.clba + sec
    }

    /// (chunk index, sector in chunk) of an LBA.
    fn split(&self, lba: u64) -> Result<(usize, u64)> {
        let c = lba / self.geo.clba;
        if c >= self.chunks.len() as u64 {
            return Err(Error::nvme(Status::LbaOutOfRange, format!("LBA {lba} is beyond the last chunk")));
        }
        Ok((c as usize, lba % self.geo.clba))
    }

    /// Die of chunk `c` (chunks are numbered group, PU, chunk; PU = die of the group).
    fn die_of(&self, c: usize) -> u32 {
        debug_assert!(c < self.chunks.len(), "chunk {c} beyond the device");
        (c / self.geo.num_chk as usize) as u32
    }

    /// The blocks of chunk `c`: one in each plane of its die.
    fn chunk_blocks(&self, c: usize) -> impl Iterator<Item = u32> + '_ {
        let die = self.die_of(c);
        let idx = (c % self.geo.num_chk as usize) as u32;
        (0..self.m.lay.planes_per_die).map(move |p| die * self.m.lay.blocks_per_die + p * self.m.lay.blocks_per_plane + idx)
    }

    /// Physical sector of sector `s` of chunk `c`: sector runs fill a page in each plane in
    /// turn (a multi-plane unit), then the next page.
    fn psa(&self, c: usize, s: u64) -> u32 {
        debug_assert!(s < self.geo.clba, "sector {s} past the end of chunk {c}");
        let spp = self.m.lay.sectors_per_page as u64;
        let unit = spp * self.m.lay.planes_per_die as u64;
        let (page, r) = (s / unit, s % unit);
        let (plane, slot) = ((r / spp) as u32, (r % spp) as u32);
        let die = self.die_of(c);
        let idx = (c % self.geo.num_chk as usize) as u32;
        let b = die * self.m.lay.blocks_per_die + plane * self.m.lay.blocks_per_plane + idx;
        b * self.m.lay.sectors_per_block + page as u32 * self.m.lay.sectors_per_page + slot
    }

    /// Chunk information for every chunk of (group, pu), or all chunks.
    pub fn chunk_info(&self, pu: Option<(u32, u32)>) -> Vec<ChunkInfo> {
        let range = match pu {
            Some((g, p)) => {
                let first = self.lba(g, p, 0, 0) / self.geo.clba;
                first as usize..first as usize + self.geo.num_chk as usize
            }
            None => 0..self.chunks.len(),
        };
        range
            .filter(|&c| c < self.chunks.len())
            .map(|c| {
                let ch = &self.chunks[c];
                let slba = c as u64 * self.geo.clba;
                ChunkInfo { slba, state: ch.state, wp: slba + ch.written, cnlb: self.geo.clba, erase_count: ch.erases }
            })
            .collect()
    }

    /// Number of chunks (every group, PU and chunk).
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Chunk information of chunk number `c` (`slba / clba`), without building a list.
    pub fn chunk(&self, c: usize) -> ChunkInfo {
        let ch = &self.chunks[c];
        let slba = c as u64 * self.geo.clba;
        ChunkInfo { slba, state: ch.state, wp: slba + ch.written, cnlb: self.geo.clba, erase_count: ch.erases }
    }

    /// The OOB record of the chunk starting at `chunk_lba`: the metadata written with its first
    /// sector, or None while the chunk holds no data (free, or offline). Reading it costs what
    /// reading the first sector costs (the host issues that read; this accessor is untimed).
    pub fn chunk_oob(&self, chunk_lba: u64) -> Result<Option<[u8; OOB_BYTES]>> {
        let (c, s) = self.split(chunk_lba)?;
        if s != 0 {
            return Err(Error::nvme(Status::InvalidField, format!("LBA {chunk_lba} is not a chunk start")));
        }
        let ch = &self.chunks[c];
        Ok((ch.state != ChunkState::Offline && ch.written > 0).then_some(ch.oob))
    }

    /// The host's present: no operation is placed before it, so the timelines forget idle
    /// time that has passed (optional; see `Timelines::set_now`).
    pub fn set_now(&mut self, now: u64) {
        self.m.tl.set_now(now);
    }

    /// Erase counts summed per channel (group) and per die (PU): wear-levelling inputs.
    pub fn wear(&self) -> (Vec<u64>, Vec<u64>) {
        let mut per_die = vec![0u64; self.m.lay.dies as usize];
        for (c, ch) in self.chunks.iter().enumerate() {
            per_die[self.die_of(c) as usize] += ch.erases as u64;
        }
        let per_ch = (0..self.m.lay.channels)
            .map(|g| per_die[(g * self.m.lay.dies_per_channel) as usize..((g + 1) * self.m.lay.dies_per_channel) as usize].iter().sum())
            .collect();
        (per_ch, per_die)
    }

    fn check_vector(n: usize) -> Result<()> {
        if n == 0 || n > MAX_VECTOR {
            return Err(Error::nvme(Status::InvalidField, format!("a vector command carries 1 to {MAX_VECTOR} addresses, not {n}")));
        }
        Ok(())
    }

    /// Vector write: each LBA must be its chunk's write pointer (in list order), and each
    /// chunk must receive a multiple of ws_min sectors. `data` holds one sector per LBA.
    /// Returns the completion time.
    pub fn vector_write(&mut self, lbas: &[u64], data: Option<&[u8]>, now: u64) -> Result<u64> {
        self.vector_write_oob(lbas, data, None, now)
    }

    /// [`Ocssd::vector_write`] with out-of-band metadata: `oob` holds [`OOB_BYTES`] per LBA;
    /// the bytes of an LBA that starts a chunk become the chunk's OOB record (see
    /// [`Ocssd::chunk_oob`]), programmed with its first unit.
    pub fn vector_write_oob(&mut self, lbas: &[u64], data: Option<&[u8]>, oob: Option<&[u8]>, now: u64) -> Result<u64> {
        Self::check_vector(lbas.len())?;
        let sb = self.m.lay.sector_bytes as usize;
        if let (Some(d), true) = (data, self.m.data.is_some()) {
            if d.len() != lbas.len() * sb {
                return Err(Error::Command(format!("{} addresses but {} bytes of data", lbas.len(), d.len())));
            }
        }
        if let Some(m) = oob {
            if m.len() != lbas.len() * OOB_BYTES {
                return Err(Error::Command(format!("{} addresses but {} bytes of metadata (need {OOB_BYTES} each)", lbas.len(), m.len())));
            }
        }
        // Validate the whole command first: it is applied entirely or not at all. Runs per
        // chunk: (chunk, next sector expected, sectors in this command); a command names at
        // most MAX_VECTOR chunks, and consecutive LBAs mostly stay in one.
        let mut runs = [(0usize, 0u64, 0u64); MAX_VECTOR];
        let (mut nruns, mut last) = (0usize, 0usize);
        for &lba in lbas {
            let (c, s) = self.split(lba)?;
            let i = if nruns > 0 && runs[last].0 == c {
                last
            } else if let Some(i) = runs[..nruns].iter().position(|r| r.0 == c) {
                i
            } else {
                let ch = &self.chunks[c];
                match ch.state {
                    ChunkState::Offline => {
                        return Err(Error::nvme(Status::OutOfOrderWrite, format!("chunk at LBA {} is offline", c as u64 * self.geo.clba)))
                    }
                    ChunkState::Closed => {
                        return Err(Error::nvme(
                            Status::OutOfOrderWrite,
                            format!("chunk at LBA {} is closed (written to its end)", c as u64 * self.geo.clba),
                        ))
                    }
                    _ => {}
                }
                runs[nruns] = (c, ch.written, 0);
                nruns += 1;
                nruns - 1
            };
            let expect = runs[i].1;
            if s != expect {
                return Err(Error::nvme(
                    Status::OutOfOrderWrite,
                    format!("LBA {lba} is sector {s} of its chunk, whose write pointer is at sector {expect}"),
                ));
            }
            runs[i].1 += 1;
            runs[i].2 += 1;
            last = i;
        }
        if let Some(&(c, _, n)) = runs[..nruns].iter().find(|r| r.2 % self.geo.ws_min as u64 != 0) {
            return Err(Error::nvme(
                Status::InvalidField,
                format!(
                    "{n} sectors for the chunk at LBA {}: writes come in multiples of ws_min = {}",
                    c as u64 * self.geo.clba,
                    self.geo.ws_min
                ),
            ));
        }
        let t = now + self.m.tl.command_overhead_ns();
        let mut done = t;
        let unit = self.geo.ws_min as u64;
        for (i, &lba) in lbas.iter().enumerate() {
            let (c, s) = self.split(lba)?;
            let psa = self.psa(c, s);
            if let (Some(store), Some(d)) = (self.m.data.as_mut(), data) {
                store.put(psa, &d[i * sb..(i + 1) * sb]);
            }
            let ch = &mut self.chunks[c];
            debug_assert!(
                ch.written == s && matches!(ch.state, ChunkState::Free | ChunkState::Open),
                "chunk {c}: validated write not at its pointer"
            );
            if let (0, Some(m)) = (s, oob) {
                ch.oob.copy_from_slice(&m[i * OOB_BYTES..(i + 1) * OOB_BYTES]);
            }
            ch.state = ChunkState::Open;
            ch.written = s + 1;
            if (s + 1) % unit == 0 {
                done = done.max(self.program(c, s + 1 - unit, t));
            }
            if self.chunks[c].written == self.geo.clba {
                self.chunks[c].state = ChunkState::Closed;
            }
        }
        debug_assert!(runs[..nruns].iter().all(|r| self.chunks[r.0].written.is_multiple_of(unit)), "a chunk left with a partial unit");
        self.m.c.host_write_cmds += 1;
        self.m.c.host_write_bytes += (lbas.len() * sb) as u64;
        Ok(if self.m.tl.enabled { done } else { now })
    }

    /// Program the multi-plane unit of chunk `c` starting at sector `s`.
    fn program(&mut self, c: usize, s: u64, t: u64) -> u64 {
        let planes = self.m.lay.planes_per_die;
        let psa = self.psa(c, s);
        let b0 = psa / self.m.lay.sectors_per_block;
        let page = (psa % self.m.lay.sectors_per_block) / self.m.lay.sectors_per_page;
        for p in 0..planes {
            let m = &mut self.m.blocks[(b0 + p * self.m.lay.blocks_per_plane) as usize];
            debug_assert_eq!(m.programmed_pages as u32, page, "chunk {c}: pages program in order");
            debug_assert_ne!(m.state, BlockState::Bad, "program of a bad block in chunk {c}");
            m.programmed_pages = (page + 1) as u16;
            m.valid += self.m.lay.sectors_per_page;
            m.state = if page + 1 == self.m.lay.pages_per_block { BlockState::Full } else { BlockState::Open };
        }
        let earliest = t.max(self.m.blocks[b0 as usize].ready_ns);
        self.m.program(self.die_of(c), planes, earliest)
    }

    /// Vector read. Returns the completion time; `out` receives one sector per LBA (zeros for
    /// sectors holding no data, which cost no media read). Host reads: with
    /// `timing.read_priority` they go ahead of work queued on their PU.
    pub fn vector_read(&mut self, lbas: &[u64], out: Option<&mut [u8]>, now: u64) -> Result<u64> {
        self.read_vector(lbas, out, now, false)
    }

    /// [`Ocssd::vector_read`] in issue order behind the work queued on each PU, as background
    /// copies (wear-levelling migrations) read, so host reads keep their priority over them.
    pub fn vector_read_queued(&mut self, lbas: &[u64], out: Option<&mut [u8]>, now: u64) -> Result<u64> {
        self.read_vector(lbas, out, now, true)
    }

    fn read_vector(&mut self, lbas: &[u64], mut out: Option<&mut [u8]>, now: u64, queued: bool) -> Result<u64> {
        Self::check_vector(lbas.len())?;
        let sb = self.m.lay.sector_bytes as usize;
        for &lba in lbas {
            self.split(lba)?;
        }
        let t = now + self.m.tl.command_overhead_ns();
        let mut done = t;
        // Consecutive sectors of one page are sensed once and transferred together.
        let mut run: Option<(u32, u32, u64)> = None; // (die, page, sectors)
        for (i, &lba) in lbas.iter().enumerate() {
            let (c, s) = self.split(lba)?;
            let psa = self.psa(c, s);
            let ch = &self.chunks[c];
            let readable = ch.state != ChunkState::Offline && s < ch.written;
            if let Some(o) = out.as_deref_mut() {
                let dst = &mut o[i * sb..(i + 1) * sb];
                match &self.m.data {
                    Some(store) if readable => store.get(psa, dst),
                    _ => dst.fill(0),
                }
            }
            if !readable {
                continue;
            }
            // Writes are whole units, so a sector below the write pointer is on the media.
            debug_assert!(
                (psa % self.m.lay.sectors_per_block) / self.m.lay.sectors_per_page
                    < self.m.blocks[(psa / self.m.lay.sectors_per_block) as usize].programmed_pages as u32,
                "chunk {c}: sector {s} below the write pointer but not programmed"
            );
            let page = psa / self.m.lay.sectors_per_page;
            match run.as_mut() {
                Some((_, p, n)) if *p == page => *n += 1,
                _ => {
                    if let Some((die, _, n)) = run.take() {
                        done = done.max(self.sense(die, n * sb as u64, t, queued));
                    }
                    run = Some((self.die_of(c), page, 1));
                }
            }
        }
        if let Some((die, _, n)) = run {
            done = done.max(self.sense(die, n * sb as u64, t, queued));
        }
        self.m.c.host_read_cmds += 1;
        self.m.c.host_read_bytes += (lbas.len() * sb) as u64;
        Ok(if self.m.tl.enabled { done } else { now })
    }

    #[inline]
    fn sense(&mut self, die: u32, bytes: u64, t: u64, queued: bool) -> u64 {
        if queued {
            self.m.read_queued(die, bytes, t)
        } else {
            self.m.read(die, bytes, t)
        }
    }

    /// Vector reset: erase each listed chunk (by its start LBA). Free chunks cannot be reset
    /// (Invalid Reset: this device has no multiple-reset capability); offline chunks cannot be
    /// reset (Offline Chunk).
    pub fn vector_reset(&mut self, chunk_lbas: &[u64], now: u64) -> Result<u64> {
        Self::check_vector(chunk_lbas.len())?;
        let mut cs = vec![];
        for &lba in chunk_lbas {
            let (c, s) = self.split(lba)?;
            if s != 0 {
                return Err(Error::nvme(Status::InvalidField, format!("LBA {lba} is not a chunk start")));
            }
            match self.chunks[c].state {
                ChunkState::Offline => return Err(Error::nvme(Status::OfflineChunk, format!("chunk at LBA {lba} is offline"))),
                ChunkState::Free => return Err(Error::nvme(Status::InvalidReset, format!("chunk at LBA {lba} is free"))),
                // Reset once, it is free: a second reset in the same vector is Invalid Reset,
                // refused before anything is erased.
                _ if cs.contains(&c) => return Err(Error::nvme(Status::InvalidReset, format!("chunk at LBA {lba} is listed twice"))),
                _ => cs.push(c),
            }
        }
        let t = now + self.m.tl.command_overhead_ns();
        let mut done = t;
        for c in cs {
            // One multi-plane erase of the chunk's blocks; a chunk whose block wears out (or
            // fails its erase) goes offline.
            let blocks: Vec<u32> = self.chunk_blocks(c).collect();
            let e = self.m.erase_group(&blocks, t);
            done = done.max(e.done_ns);
            let ch = &mut self.chunks[c];
            ch.erases += 1;
            ch.written = 0;
            ch.oob = [0; OOB_BYTES];
            ch.state = if e.retired { ChunkState::Offline } else { ChunkState::Free };
            assert!(
                e.retired || blocks.iter().all(|&b| self.m.blocks[b as usize].state == BlockState::Free),
                "chunk {c} is free but its blocks are not erased"
            );
        }
        self.m.c.host_trim_cmds += 1;
        Ok(if self.m.tl.enabled { done } else { now })
    }

    /// Copy every written sector of chunk `src` to the free chunk `dst` (on any PU), as a
    /// host-driven wear-levelling or isolation migration does; returns the completion time.
    pub fn copy_chunk(&mut self, src_lba: u64, dst_lba: u64, now: u64) -> Result<u64> {
        let (s, s0) = self.split(src_lba)?;
        let (d, d0) = self.split(dst_lba)?;
        if s0 != 0 || d0 != 0 {
            return Err(Error::nvme(Status::InvalidField, "copy names chunks by their start LBAs"));
        }
        if self.chunks[d].state != ChunkState::Free {
            return Err(Error::nvme(Status::OutOfOrderWrite, format!("destination chunk at LBA {dst_lba} is not free")));
        }
        let n = self.chunks[s].written;
        let sb = self.m.lay.sector_bytes as usize;
        let mut t = now;
        let mut k = 0u64;
        while k < n {
            let m = (n - k).min(MAX_VECTOR as u64 / self.geo.ws_min as u64 * self.geo.ws_min as u64);
            let src: Vec<u64> = (k..k + m).map(|i| src_lba + i).collect();
            let dst: Vec<u64> = (k..k + m).map(|i| dst_lba + i).collect();
            let mut buf = vec![0u8; m as usize * sb];
            let r = self.vector_read(&src, Some(&mut buf), t)?;
            let data = self.m.data.is_some().then_some(&buf[..]);
            t = self.vector_write(&dst, data, r)?;
            k += m;
        }
        debug_assert_eq!(self.chunks[d].written, n, "the copy wrote as much as the source chunk holds");
        Ok(t)
    }

    /// Mark a chunk offline (failure injection).
    pub fn set_offline(&mut self, chunk_lba: u64) -> Result<()> {
        let (c, _) = self.split(chunk_lba)?;
        self.chunks[c].state = ChunkState::Offline;
        Ok(())
    }
}

/// Consecutive LBAs `lba..lba + sectors` as vector commands of at most MAX_VECTOR addresses:
/// (offset of the first address in the run, the addresses).
fn vector_runs(lba: u64, sectors: u32) -> impl Iterator<Item = (usize, Vec<u64>)> {
    (0..sectors as u64)
        .step_by(MAX_VECTOR)
        .map(move |k| (k as usize, (lba + k..lba + (k + MAX_VECTOR as u64).min(sectors as u64)).collect()))
}

/// The open-channel device as a plain block device: writes and reads of consecutive LBAs are
/// split into vector commands (so writes must follow the chunk rules), deallocate is accepted
/// and changes nothing, flush has nothing to do (writes are whole units).
impl BlockDevice for Ocssd {
    fn media(&self) -> &Media {
        &self.m
    }
    fn logical_sectors(&self) -> u64 {
        self.chunks.len() as u64 * self.geo.clba
    }
    fn write(&mut self, lba: u64, sectors: u32, data: Option<&[u8]>, _opts: WriteOpts, now: u64) -> Result<u64> {
        let sb = self.m.lay.sector_bytes as usize;
        let mut done = now;
        for (k, lbas) in vector_runs(lba, sectors) {
            let part = data.map(|d| &d[k * sb..(k + lbas.len()) * sb]);
            done = done.max(self.vector_write(&lbas, part, now)?);
        }
        Ok(done)
    }
    fn read(&mut self, lba: u64, sectors: u32, mut out: Option<&mut [u8]>, now: u64) -> Result<u64> {
        let sb = self.m.lay.sector_bytes as usize;
        let mut done = now;
        for (k, lbas) in vector_runs(lba, sectors) {
            let part = out.as_deref_mut().map(|o| &mut o[k * sb..(k + lbas.len()) * sb]);
            done = done.max(self.vector_read(&lbas, part, now)?);
        }
        Ok(done)
    }
    fn trim(&mut self, lba: u64, sectors: u32, now: u64) -> Result<u64> {
        if lba + sectors as u64 > self.logical_sectors() {
            return Err(Error::nvme(Status::LbaOutOfRange, format!("deallocate of {sectors} blocks at {lba} beyond the device")));
        }
        self.m.c.host_trim_bytes += sectors as u64 * self.m.lay.sector_bytes as u64;
        Ok(now)
    }
    fn flush(&mut self, now: u64) -> Result<u64> {
        self.m.c.host_flush_cmds += 1;
        Ok(now)
    }
    fn free_blocks(&self) -> u32 {
        self.chunks.iter().filter(|c| c.state == ChunkState::Free).count() as u32 * self.m.lay.planes_per_die
    }
    fn mapped_sectors(&self) -> u64 {
        self.chunks.iter().filter(|c| c.state != ChunkState::Offline).map(|c| c.written).sum()
    }
    fn check_invariants(&self) {
        self.m.check_invariants();
        for (i, c) in self.chunks.iter().enumerate() {
            if self.chunk_blocks(i).any(|b| self.m.is_bad(b)) {
                assert_eq!(c.state, ChunkState::Offline, "chunk {i} holds a bad block but is not offline");
            }
            assert!(c.written <= self.geo.clba, "chunk {i} written past its end");
            if c.state != ChunkState::Offline {
                assert_eq!(c.written == self.geo.clba, c.state == ChunkState::Closed, "chunk {i}: closed iff full");
            }
            assert_eq!(c.written % self.geo.ws_min as u64, 0, "chunk {i}: partial write unit");
        }
    }
}

/// The open-channel device as the host log (`hostlog.rs`) sees it: a lane per parallel unit,
/// chunks appended in whole write units (ws_min) with vector writes.
impl Containers for Ocssd {
    const NAME: &'static str = "chunk";
    fn lanes(&self) -> usize {
        (self.geo.num_grp * self.geo.num_pu) as usize
    }
    fn lane(&self, lane: usize) -> std::ops::Range<usize> {
        let n = self.geo.num_chk as usize;
        lane * n..(lane + 1) * n
    }
    fn span(&self) -> u64 {
        self.geo.clba
    }
    fn capacity(&self) -> u64 {
        self.geo.clba
    }
    fn write_unit(&self) -> u32 {
        self.geo.ws_min
    }
    fn container(&self, c: usize) -> (Container, u64) {
        let ch = &self.chunks[c];
        let st = match ch.state {
            ChunkState::Free => Container::Free,
            ChunkState::Open => Container::Open,
            ChunkState::Closed => Container::Full,
            ChunkState::Offline => Container::Offline,
        };
        (st, ch.written)
    }
    fn append(&mut self, c: usize, sectors: u32, data: Option<&[u8]>, _fua: bool, now: u64) -> Result<u64> {
        let n = sectors as usize;
        if n > MAX_VECTOR {
            return Err(Error::Command(format!("{n} sectors exceed the {MAX_VECTOR} addresses of a vector write")));
        }
        let start = c as u64 * self.geo.clba + self.chunks[c].written;
        let mut lbas = [0u64; MAX_VECTOR];
        for (i, l) in lbas[..n].iter_mut().enumerate() {
            *l = start + i as u64;
        }
        self.vector_write(&lbas[..n], data, now)
    }
    fn reset(&mut self, c: usize, now: u64) -> Result<u64> {
        self.vector_reset(&[c as u64 * self.geo.clba], now)
    }
}
