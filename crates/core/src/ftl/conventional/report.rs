//! The FDP host commands of the device (log pages, reclaim unit handle status and update), and
//! the `fdp` section of metrics.json: per-handle host and media bytes, DLWA, RU switches and
//! the valid-data distribution of each handle's blocks.

use serde_json::{json, Value};

use super::super::fdp::{Event, EventType, Fdp, FdpStatistics, RuhStatus};
use super::{Conventional, StreamStats, SHARED};
use crate::error::{Error, Result, Status};
use crate::media::BlockState;

impl Conventional {
    fn fdp_ref(&self) -> Result<&Fdp> {
        self.fdp.as_ref().ok_or_else(|| Error::Nvme(Status::FdpDisabled, "FDP is not enabled on this device (fdp.enabled = false)".into()))
    }

    /// The FDP state, if FDP is enabled.
    pub fn fdp(&self) -> Option<&Fdp> {
        self.fdp.as_ref()
    }

    /// FDP Configurations log page.
    pub fn fdp_configurations(&self) -> Result<Value> {
        Ok(self.fdp_ref()?.configurations())
    }

    /// Reclaim Unit Handle Usage log page.
    pub fn ruh_usage(&self) -> Result<Vec<&'static str>> {
        Ok(self.fdp_ref()?.usage())
    }

    /// FDP Statistics log page.
    pub fn fdp_statistics(&self) -> Result<FdpStatistics> {
        Ok(self.fdp_ref()?.statistics(&self.m.c, &self.m.lay))
    }

    /// FDP Events log page (most recent last; at most `fdp.max_events`).
    pub fn fdp_events(&self) -> Result<Vec<Event>> {
        Ok(self.fdp_ref()?.events().cloned().collect())
    }

    /// Reclaim Unit Handle Status (I/O Management Receive).
    pub fn ruh_status(&self) -> Result<Vec<RuhStatus>> {
        Ok(self.fdp_ref()?.ruh_status())
    }

    /// Reclaim Unit Handle Update (I/O Management Send): each listed placement identifier's
    /// handle moves to a new, empty RU. An RU left partly written raises an "RU not fully
    /// written" event.
    pub fn ruh_update(&mut self, pids: &[u16], now: u64) -> Result<()> {
        let f = self.fdp_ref()?;
        let mut targets = vec![];
        for &pid in pids {
            let (rg, h) = f.decode(pid).ok_or_else(|| {
                Error::Nvme(
                    Status::InvalidPlacementHandleList,
                    format!("placement identifier {pid:#06x} names no reclaim group and handle of this device"),
                )
            })?;
            targets.push((pid, rg, h));
        }
        for (pid, rg, h) in targets {
            let s = self.points.host_stream(rg, h);
            debug_assert!(self.points.streams[s].host && self.points.streams[s].rg as usize == rg, "({rg}, {h}) maps to stream {s}");
            self.end_reclaim_unit(s);
            let f = self.fdp.as_mut().expect("checked above");
            if f.end_ru(rg, h) {
                f.push_event(EventType::RuNotFullyWritten, Some(pid), rg as u16, now);
            }
        }
        Ok(())
    }

    /// Per-stream counters now (the baseline of a measured run).
    pub fn stream_stats(&self) -> Vec<StreamStats> {
        self.points.stats.clone()
    }

    /// The `fdp` section of metrics.json: per-handle host and media bytes and DLWA since
    /// `base`, shared GC streams, RU switches, events, and the valid-data distribution of each
    /// handle's full blocks.
    pub fn fdp_metrics(&self, base: &[StreamStats]) -> Option<Value> {
        let f = self.fdp.as_ref()?;
        let lay = &self.m.lay;
        let unit_bytes = lay.page_bytes as u64 * lay.planes_per_die as u64;
        let sb = lay.sector_bytes as u64;
        let d = |s: usize| {
            let (a, b) = (&self.points.stats[s], base.get(s).cloned().unwrap_or_default());
            (a.host_sectors - b.host_sectors, a.units_programmed - b.units_programmed, a.relocated_out_sectors - b.relocated_out_sectors)
        };
        // Valid fraction of full blocks, by the stream that wrote them (10 bins).
        let mut hist = vec![[0u64; 10]; self.points.streams.len()];
        for m in &self.m.blocks {
            if m.state == BlockState::Full {
                let bin = ((m.valid as u64 * 10) / lay.sectors_per_block as u64).min(9) as usize;
                hist[m.stream as usize][bin] += 1;
            }
        }
        // Valid fraction of each completed reclaim unit of the host streams, over its blocks
        // still on the media (10 bins).
        let mut ru_fill: std::collections::BTreeMap<(usize, u32), (u64, u64)> = Default::default();
        for m in &self.m.blocks {
            let st = &self.points.streams[m.stream as usize];
            if m.state == BlockState::Full && st.host && m.ru < f.ru_serial(st.rg as usize, st.handle as usize) {
                let e = ru_fill.entry((m.stream as usize, m.ru)).or_default();
                e.0 += m.valid as u64;
                e.1 += lay.sectors_per_block as u64;
            }
        }
        let mut ru_hist = vec![[0u64; 10]; self.points.streams.len()];
        for (&(s, _), &(valid, cap)) in &ru_fill {
            debug_assert!(valid <= cap, "stream {s}: a reclaim unit holds more valid sectors than its blocks");
            ru_hist[s][((valid * 10) / cap).min(9) as usize] += 1;
        }
        let mut handles = vec![];
        let mut shared = vec![];
        for (s, st) in self.points.streams.iter().enumerate() {
            let (host, units, moved) = d(s);
            let nand = units * unit_bytes;
            if st.host {
                let h = st.handle as u32;
                // Media bytes for a handle: its host stream's programs plus the relocations of
                // its data out of its own blocks (for persistently isolated handles, out of its
                // own GC streams' blocks too: one, or a young and an old one with `by-age`).
                // Data of initially isolated handles that GC has already moved once lives in
                // the shared GC streams and is counted there. With `gc_streams = "shared"` the
                // relocations are programs of the host stream itself, counted in `nand`.
                let moved_again: u64 =
                    (0..self.points.streams.len()).filter(|&i| self.points.streams[i].is_gc_of(st.rg, st.handle)).map(|i| d(i).2).sum();
                let relocations_elsewhere = if st.gc_dest == s { 0 } else { moved + moved_again };
                let media = nand + relocations_elsewhere * sb;
                handles.push(json!({
                    "pid": f.phndl.iter().position(|&r| r as u32 == h).map(|ph| f.pid(st.rg as u32, ph as u32)),
                    "reclaim_group": st.rg,
                    "handle": h,
                    "type": f.types[h as usize],
                    "host_write_bytes": host * sb,
                    "media_write_bytes": media,
                    "gc_relocated_out_bytes": (moved + moved_again) * sb,
                    "dlwa": if host == 0 { 0.0 } else { (media as f64 / (host * sb) as f64 * 1e6).round() / 1e6 },
                    "ru_switches": f.ru_switches[st.rg as usize * f.handles as usize + h as usize],
                    "full_block_valid_fraction_histogram": hist[s].to_vec(),
                    "ru_valid_fraction_histogram": ru_hist[s].to_vec(),
                }));
            } else if st.handle == SHARED {
                shared.push(json!({
                    "reclaim_group": st.rg,
                    "media_write_bytes": nand,
                    "gc_relocated_out_bytes": moved * sb,
                    "full_block_valid_fraction_histogram": hist[s].to_vec(),
                }));
            }
        }
        Some(json!({
            "enabled": true,
            "configuration": f.configuration,
            "reclaim_groups": f.groups,
            "handles_per_group": f.handles,
            "ru_bytes": f.ru_bytes,
            "handles": handles,
            "shared_gc_streams": shared,
            "events_total": f.events_total,
        }))
    }
}
