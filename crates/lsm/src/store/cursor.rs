//! A cursor over a run of tables' entries, for scans and compactions.

use std::sync::Arc;

use super::LsmStats;
use crate::error::Result;
use crate::format::{decode_entry, open_block, EntryPos, Kind};
use crate::sst::Table;
use crate::zonefs::ZoneFs;

/// A cursor over the entries of a run of tables (one L0 table, or a level's tables in key
/// order), reading blocks through the device as it goes (or the whole file at once for a
/// compaction).
pub(super) struct Cursor {
    tables: Vec<Arc<Table>>,
    ti: usize,
    prefetch: bool,
    /// The current table's data region (prefetch mode).
    data: Vec<u8>,
    block: usize,
    /// The current block's entries when they had to be copied (compressed or read alone).
    buf: Vec<u8>,
    /// The current block's entries as a range of `data` (prefetch mode, raw block).
    in_data: Option<(usize, usize)>,
    cur: Option<EntryPos>,
}

impl Cursor {
    pub(super) fn new(tables: Vec<Arc<Table>>, prefetch: bool) -> Cursor {
        Cursor { tables, ti: 0, prefetch, data: vec![], block: 0, buf: vec![], in_data: None, cur: None }
    }

    fn bytes(&self) -> &[u8] {
        match self.in_data {
            Some((a, b)) => &self.data[a..b],
            None => &self.buf,
        }
    }

    pub(super) fn entry(&self) -> Option<(&[u8], u64, Kind, &[u8])> {
        let e = self.cur?;
        let b = self.bytes();
        Some((e.key(b), e.seq, e.kind, e.value(b)))
    }

    fn load_table(&mut self, fs: &mut ZoneFs, stats: &mut LsmStats, t: &mut u64) -> Result<()> {
        if self.prefetch {
            let table = &self.tables[self.ti];
            self.data.resize(table.data_bytes() as usize, 0);
            let issued = *t;
            *t = (*t).max(fs.read(table.id, 0, &mut self.data, issued)?);
            stats.compaction_read_bytes += table.data_bytes();
        }
        Ok(())
    }

    fn load_block(&mut self, fs: &mut ZoneFs, stats: &mut LsmStats, t: &mut u64) -> Result<()> {
        let table = self.tables[self.ti].clone();
        let e = &table.index[self.block];
        let (off, len) = (e.offset as usize, e.len as usize);
        if self.prefetch {
            match open_block(&self.data[off..off + len])? {
                std::borrow::Cow::Borrowed(b) => {
                    let start = b.as_ptr() as usize - self.data.as_ptr() as usize;
                    self.in_data = Some((start, start + b.len()));
                }
                std::borrow::Cow::Owned(v) => {
                    self.buf = v;
                    self.in_data = None;
                }
            }
        } else {
            let mut raw = vec![0u8; len];
            *t = fs.read(table.id, off as u64, &mut raw, *t)?;
            stats.block_reads += 1;
            self.buf = open_block(&raw)?.into_owned();
            self.in_data = None;
        }
        Ok(())
    }

    fn decode_at(&mut self, pos: usize) -> Result<()> {
        self.cur = if pos < self.bytes().len() { Some(decode_entry(self.bytes(), pos)?) } else { None };
        Ok(())
    }

    pub(super) fn seek_first(&mut self, fs: &mut ZoneFs, stats: &mut LsmStats, t: &mut u64) -> Result<()> {
        self.ti = 0;
        self.block = 0;
        self.load_table(fs, stats, t)?;
        self.load_block(fs, stats, t)?;
        self.decode_at(0)
    }

    /// Position at the first entry with key >= `key`.
    pub(super) fn seek(&mut self, fs: &mut ZoneFs, stats: &mut LsmStats, key: &[u8], t: &mut u64) -> Result<()> {
        self.ti = self.tables.partition_point(|x| x.largest.as_slice() < key);
        if self.ti >= self.tables.len() {
            self.cur = None;
            return Ok(());
        }
        self.load_table(fs, stats, t)?;
        self.block = self.tables[self.ti].block_for(key).unwrap_or(0);
        self.load_block(fs, stats, t)?;
        self.decode_at(0)?;
        while let Some((k, _, _, _)) = self.entry() {
            if k >= key {
                break;
            }
            self.advance(fs, stats, t)?;
        }
        Ok(())
    }

    pub(super) fn advance(&mut self, fs: &mut ZoneFs, stats: &mut LsmStats, t: &mut u64) -> Result<()> {
        let Some(e) = self.cur else { return Ok(()) };
        let next = e.next as usize;
        if next < self.bytes().len() {
            return self.decode_at(next);
        }
        self.block += 1;
        if self.block >= self.tables[self.ti].index.len() {
            self.ti += 1;
            self.block = 0;
            if self.ti >= self.tables.len() {
                self.cur = None;
                return Ok(());
            }
            self.load_table(fs, stats, t)?;
        }
        self.load_block(fs, stats, t)?;
        self.decode_at(0)
    }
}
