//! Large-object cache (LOC): log-structured regions, like CacheLib's BlockCache.
//!
//! Items are appended to an in-memory buffer for the open region; when the next item does not
//! fit, the whole region is written to the device (in `loc_write_bytes` commands) and sealed.
//! A DRAM index maps each key to (region, offset, size). When no clean region is left, a
//! sealed region is evicted whole, FIFO (oldest written) or LRU (least recently read), and its
//! items leave the index; with reinsertion, items hit often enough while on flash are copied
//! into the open region instead of being dropped.
//!
//! In data-backed mode (see [`Loc::enable_data`]) the open region's buffer holds the items'
//! bytes (format in [`crate::item`]) and is written to the device when sealed; a lookup reads
//! the item's sectors back (or parses the open buffer) and asserts the bytes agree with the
//! index entry.

use serde::{Deserialize, Serialize};

use crate::config::RegionEviction;
use crate::error::Result;
use crate::flash::Flash;
use crate::hash::{key_map, KeyMap};
use crate::item::{self, Item, ITEM_HEADER_BYTES};
use crate::placement::PlacementHandle;

const NIL: u32 = u32::MAX;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocStats {
    pub lookups: u64,
    pub hits: u64,
    pub buffer_hits: u64,
    pub inserts: u64,
    pub rejected_too_large: u64,
    pub regions_flushed: u64,
    pub regions_evicted: u64,
    pub items_evicted: u64,
    pub reinserted: u64,
    pub removes: u64,
}

#[derive(Clone, Copy, Serialize, Deserialize)]
struct Entry {
    region: u32,
    offset: u32,
    size: u32,
    expiry_s: u32,
    hits: u32,
}

/// Bytes of an index entry with its key (memory estimates, [`crate::sizing`]).
pub(crate) const INDEX_ENTRY_BYTES: u64 = std::mem::size_of::<(u64, Entry)>() as u64;

#[derive(Serialize, Deserialize)]
pub struct Loc {
    pub start_byte: u64,
    pub regions: u32,
    pub region_bytes: u64,
    write_bytes: u64,
    sector_bytes: u64,
    overhead: u32,
    policy: RegionEviction,
    reinsert_hits: u32,
    pub handle: PlacementHandle,
    index: KeyMap<Entry>,
    /// Keys appended to each region (stale ones are skipped at eviction).
    members: Vec<Vec<u64>>,
    /// Clean regions, used lowest first.
    clean: Vec<u32>,
    /// Sealed regions in eviction order (head = next victim), intrusive list.
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    open: u32,
    fill: u64,
    scratch: Vec<(u64, u32, u32, u64)>,
    pub stats: LocStats,
    /// Buffers of a data-backed LOC (None: metadata-only; not in checkpoints, which are of
    /// metadata-only runs).
    #[serde(skip)]
    data: Option<Box<LocData>>,
}

/// A data-backed LOC's buffers: the open region's bytes and a read buffer.
struct LocData {
    open: Vec<u8>,
    rd: Vec<u8>,
}

impl Loc {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        start_byte: u64,
        regions: u64,
        region_bytes: u64,
        write_bytes: u64,
        sector_bytes: u64,
        overhead: u32,
        policy: RegionEviction,
        reinsert_hits: u32,
        handle: PlacementHandle,
    ) -> Loc {
        let n = regions.min(u32::MAX as u64 - 1) as u32;
        let mut clean: Vec<u32> = (0..n).rev().collect();
        let open = clean.pop().unwrap_or(NIL);
        Loc {
            start_byte,
            regions: n,
            region_bytes,
            write_bytes,
            sector_bytes,
            overhead,
            policy,
            reinsert_hits,
            handle,
            index: key_map(1024),
            members: vec![Vec::new(); n as usize],
            clean,
            prev: vec![NIL; n as usize],
            next: vec![NIL; n as usize],
            head: NIL,
            tail: NIL,
            open,
            fill: 0,
            scratch: vec![],
            stats: LocStats::default(),
            data: None,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.regions as u64 * self.region_bytes
    }
    pub fn items(&self) -> usize {
        self.index.len()
    }

    fn unlink(&mut self, r: u32) {
        let (p, n) = (self.prev[r as usize], self.next[r as usize]);
        if p != NIL {
            self.next[p as usize] = n
        } else {
            self.head = n
        }
        if n != NIL {
            self.prev[n as usize] = p
        } else {
            self.tail = p
        }
        self.prev[r as usize] = NIL;
        self.next[r as usize] = NIL;
    }

    fn push_back(&mut self, r: u32) {
        self.prev[r as usize] = self.tail;
        self.next[r as usize] = NIL;
        if self.tail != NIL {
            self.next[self.tail as usize] = r;
        } else {
            self.head = r;
        }
        self.tail = r;
    }

    /// Sealed regions, next victim first (tests).
    pub fn eviction_order(&self) -> Vec<u32> {
        let mut out = vec![];
        let mut r = self.head;
        while r != NIL {
            out.push(r);
            r = self.next[r as usize];
        }
        out
    }

    pub fn open_region(&self) -> Option<u32> {
        (self.open != NIL).then_some(self.open)
    }

    /// Look `key` up: Some((item bytes, expiry)) on a hit (from the region buffer without I/O, else one
    /// read of the sectors holding the item).
    pub fn lookup(&mut self, key: u64, now_s: u32, flash: &mut Flash) -> Result<Option<(u32, u32)>> {
        self.stats.lookups += 1;
        let Some(e) = self.index.get_mut(&key) else { return Ok(None) };
        if e.expiry_s != 0 && e.expiry_s <= now_s {
            self.index.remove(&key);
            return Ok(None);
        }
        let e = *e;
        if e.region == self.open {
            self.stats.buffer_hits += 1;
        } else {
            let start = self.start_byte + e.region as u64 * self.region_bytes + e.offset as u64;
            let first = start / self.sector_bytes * self.sector_bytes;
            let end = (start + e.size as u64).div_ceil(self.sector_bytes) * self.sector_bytes;
            flash.read(first, end - first)?;
            if let Some(m) = self.index.get_mut(&key) {
                m.hits = m.hits.saturating_add(1);
            }
            if self.policy == RegionEviction::Lru && self.tail != e.region {
                self.unlink(e.region);
                self.push_back(e.region);
            }
        }
        self.stats.hits += 1;
        Ok(Some((e.size - self.overhead, e.expiry_s)))
    }

    /// Forget `key` (its bytes stay dead in their region until it is evicted). No I/O.
    pub fn remove(&mut self, key: u64) -> bool {
        let r = self.index.remove(&key).is_some();
        self.stats.removes += r as u64;
        r
    }

    fn flush_open(&mut self, flash: &mut Flash) -> Result<()> {
        let base = self.start_byte + self.open as u64 * self.region_bytes;
        let mut off = 0;
        while off < self.region_bytes {
            flash.write(base + off, self.write_bytes, self.handle)?;
            off += self.write_bytes;
        }
        self.stats.regions_flushed += 1;
        self.push_back(self.open);
        self.open = NIL;
        self.fill = 0;
        Ok(())
    }

    /// Evict the next victim region; returns it clean. Reinsertion candidates are left in
    /// `self.scratch`.
    fn evict_one(&mut self) -> u32 {
        let r = self.head;
        assert!(r != NIL, "LOC with no sealed region to evict");
        self.unlink(r);
        self.stats.regions_evicted += 1;
        let mut members = std::mem::take(&mut self.members[r as usize]);
        self.scratch.clear();
        for &k in &members {
            if let Some(e) = self.index.get(&k) {
                if e.region == r {
                    let e = *e;
                    self.index.remove(&k);
                    self.stats.items_evicted += 1;
                    if self.reinsert_hits > 0 && e.hits >= self.reinsert_hits {
                        let at = self.start_byte + r as u64 * self.region_bytes + e.offset as u64;
                        self.scratch.push((k, e.size, e.expiry_s, at));
                    }
                }
            }
        }
        members.clear();
        self.members[r as usize] = members; // keep the allocation
        r
    }

    /// Write every clean region once, as a warm cache would have: the device then holds the
    /// LOC's whole logical range, and those regions (holding no indexed items) are evicted
    /// first. Saves simulating the many device writes a large LOC needs before its first
    /// region is recycled.
    pub fn prefill(&mut self, flash: &mut Flash) -> Result<()> {
        while let Some(r) = self.clean.pop() {
            let base = self.start_byte + r as u64 * self.region_bytes;
            let mut off = 0;
            while off < self.region_bytes {
                flash.write(base + off, self.write_bytes, self.handle)?;
                off += self.write_bytes;
            }
            self.push_back(r);
        }
        Ok(())
    }

    /// Append `key` (`item_bytes` = key + value). Returns false if the item cannot fit a region.
    pub fn insert(&mut self, key: u64, item_bytes: u32, expiry_s: u32, flash: &mut Flash) -> Result<bool> {
        let size = item_bytes as u64 + self.overhead as u64;
        if size > self.region_bytes || self.regions < 2 {
            self.stats.rejected_too_large += 1;
            return Ok(false);
        }
        self.index.remove(&key); // a replacement: the older copy becomes dead space
        if self.fill + size > self.region_bytes || self.open == NIL {
            self.next_region(size, flash)?;
        }
        self.append(key, size as u32, expiry_s);
        self.stats.inserts += 1;
        Ok(true)
    }

    /// Seal the open region (if any) and open the next: a clean one, else the eviction
    /// victim. The victim's popular items are reinserted into it (read back from the device
    /// first) as long as they leave `room` bytes for the item being inserted; the rest are
    /// dropped.
    fn next_region(&mut self, room: u64, flash: &mut Flash) -> Result<()> {
        if self.open != NIL {
            if self.data.is_some() {
                self.flush_open_data(flash)?;
            } else {
                self.flush_open(flash)?;
            }
        }
        let r = match self.clean.pop() {
            Some(r) => r,
            None => self.evict_one(),
        };
        self.open = r;
        self.fill = 0;
        let cands = std::mem::take(&mut self.scratch);
        for &(k, sz, exp, at) in &cands {
            if self.fill + sz as u64 + room > self.region_bytes {
                break; // keep room for the item being inserted
            }
            if self.index.contains_key(&k) {
                continue; // set again meanwhile: the newer copy wins
            }
            if self.data.is_some() {
                // Region r's old contents: on the device, not in the (new) open buffer, which
                // is only written when it is sealed.
                let off = (at - self.start_byte - r as u64 * self.region_bytes) as u32;
                let a = self.fetch(k, r, off, sz, exp, false, flash)?;
                let fill = self.fill as usize;
                let d = self.data.as_mut().expect("data-backed LOC");
                d.open[fill..fill + sz as usize].copy_from_slice(&d.rd[a..a + sz as usize]);
            } else {
                let first = at / self.sector_bytes * self.sector_bytes;
                let end = (at + sz as u64).div_ceil(self.sector_bytes) * self.sector_bytes;
                flash.read(first, end - first)?;
            }
            self.append(k, sz, exp);
            self.stats.reinserted += 1;
        }
        self.scratch = cands;
        Ok(())
    }

    fn append(&mut self, key: u64, size: u32, expiry_s: u32) {
        let r = self.open;
        self.index.insert(key, Entry { region: r, offset: self.fill as u32, size, expiry_s, hits: 0 });
        self.members[r as usize].push(key);
        self.fill += size as u64;
    }
}

/// Data-backed mode: the same log and index as above, with the items' bytes in the open
/// region's buffer and on the device.
impl Loc {
    /// Keep real items from now on (the LOC must be empty; `prefill` is for simulations):
    /// per-item header of [`ITEM_HEADER_BYTES`], one region buffer in memory.
    pub fn enable_data(&mut self) {
        assert!(self.index.is_empty(), "enable_data on a LOC holding items");
        self.overhead = ITEM_HEADER_BYTES;
        self.data = Some(Box::new(LocData { open: vec![0; self.region_bytes as usize], rd: vec![] }));
    }

    pub fn data_backed(&self) -> bool {
        self.data.is_some()
    }

    /// Whether the index holds `hash` (no I/O, expiry ignored; tests).
    pub fn holds(&self, hash: u64) -> bool {
        self.index.contains_key(&hash)
    }

    /// Bring the item at region `region`, byte `offset`, `size` bytes into view: from the open
    /// buffer (`in_open`), or read from the device into the read buffer. Returns where it
    /// starts, after checking it against the index entry.
    #[allow(clippy::too_many_arguments)]
    fn fetch(&mut self, hash: u64, region: u32, offset: u32, size: u32, expiry_s: u32, in_open: bool, flash: &mut Flash) -> Result<usize> {
        let at = if in_open {
            offset as usize
        } else {
            let start = self.start_byte + region as u64 * self.region_bytes + offset as u64;
            let first = start / self.sector_bytes * self.sector_bytes;
            let end = (start + size as u64).div_ceil(self.sector_bytes) * self.sector_bytes;
            let d = self.data.as_mut().expect("data-backed LOC");
            d.rd.resize((end - first) as usize, 0);
            flash.read_into(first, &mut d.rd)?;
            (start - first) as usize
        };
        let d = self.data.as_ref().expect("data-backed LOC");
        let buf = if in_open { &d.open } else { &d.rd };
        let v = match item::decode(&buf[at..]) {
            Ok(v) => v,
            Err(e) => panic!("LOC region {region} offset {offset}: device bytes do not parse: {e}"),
        };
        assert!(
            v.hash == hash && v.stored_bytes() == size as u64 && v.expiry_s == expiry_s,
            "LOC region {region} offset {offset}: bytes (hash {:#x}, {} B, expiry {}) != index (hash {hash:#x}, {size} B, expiry {expiry_s})",
            v.hash, v.stored_bytes(), v.expiry_s
        );
        Ok(at)
    }

    fn view(&self, in_open: bool, at: usize) -> item::ItemView<'_> {
        let d = self.data.as_ref().expect("data-backed LOC");
        item::decode(if in_open { &d.open[at..] } else { &d.rd[at..] }).expect("checked by fetch")
    }

    /// Look `key` (hash `hash`) up: the item if the index holds it with this very key and it
    /// has not expired (from the open buffer, else a read of its sectors).
    pub fn lookup_item(&mut self, hash: u64, key: &[u8], now_s: u32, flash: &mut Flash) -> Result<Option<Item>> {
        self.stats.lookups += 1;
        let Some(e) = self.index.get(&hash) else { return Ok(None) };
        if e.expiry_s != 0 && e.expiry_s <= now_s {
            self.index.remove(&hash);
            return Ok(None);
        }
        let e = *e;
        let in_open = e.region == self.open;
        let at = self.fetch(hash, e.region, e.offset, e.size, e.expiry_s, in_open, flash)?;
        if !in_open {
            if let Some(m) = self.index.get_mut(&hash) {
                m.hits = m.hits.saturating_add(1);
            }
            if self.policy == RegionEviction::Lru && self.tail != e.region {
                self.unlink(e.region);
                self.push_back(e.region);
            }
        }
        let v = self.view(in_open, at);
        if v.key != key {
            return Ok(None); // another key with the same hash
        }
        let it = v.to_item();
        if in_open {
            self.stats.buffer_hits += 1;
        }
        self.stats.hits += 1;
        Ok(Some(it))
    }

    fn flush_open_data(&mut self, flash: &mut Flash) -> Result<()> {
        let base = self.start_byte + self.open as u64 * self.region_bytes;
        let (h, wb, fill) = (self.handle, self.write_bytes as usize, self.fill as usize);
        let d = self.data.as_mut().expect("data-backed LOC");
        d.open[fill..].fill(0); // no bytes of an earlier region go to the device
        for (i, chunk) in d.open.chunks(wb).enumerate() {
            flash.write_data(base + (i * wb) as u64, chunk, h)?;
        }
        self.stats.regions_flushed += 1;
        self.push_back(self.open);
        self.open = NIL;
        self.fill = 0;
        Ok(())
    }

    /// Append `it` under `hash`. Returns false if it cannot fit a region.
    pub fn insert_item(&mut self, hash: u64, it: &Item, flash: &mut Flash) -> Result<bool> {
        let size = it.stored_bytes();
        if size > self.region_bytes || self.regions < 2 {
            self.stats.rejected_too_large += 1;
            return Ok(false);
        }
        self.index.remove(&hash);
        if self.fill + size > self.region_bytes || self.open == NIL {
            self.next_region(size, flash)?;
        }
        let fill = self.fill as usize;
        let d = self.data.as_mut().expect("data-backed LOC");
        item::encode(hash, it, &mut d.open[fill..fill + size as usize]);
        self.append(hash, size as u32, it.expiry_s);
        self.stats.inserts += 1;
        Ok(true)
    }

    /// Read every indexed item back and check it against the index. Returns the items seen.
    pub fn verify_data(&mut self, flash: &mut Flash) -> Result<u64> {
        let entries: Vec<(u64, Entry)> = self.index.iter().map(|(&k, &e)| (k, e)).collect();
        for &(k, e) in &entries {
            self.fetch(k, e.region, e.offset, e.size, e.expiry_s, e.region == self.open, flash)?;
        }
        Ok(entries.len() as u64)
    }
}
