//! The `stats` command and its groups (settings, items, slabs, reset, ...): memcached's
//! general fields, then ssdlab's cache and device figures; the final summary as JSON.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Map, Value};
use ssdlab_server::Stats;

use super::{line, ratio, unix_now_s, Ops, Server, VERSION};
use crate::proto::KEY_BYTES_MAX;

impl Server {
    /// The `stats` reply: memcached's general fields, then ssdlab's cache and device figures.
    pub fn stats(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = vec![];
        let mut put = |k: &str, v: String| out.push((k.to_string(), v));
        let core = &self.core;
        put("pid", std::process::id().to_string());
        put("uptime", self.started.elapsed().as_secs().to_string());
        put("time", unix_now_s().to_string());
        put("version", VERSION.to_string());
        put("pointer_size", (8 * std::mem::size_of::<usize>()).to_string());
        put("curr_connections", Stats::get(&core.connections_active).to_string());
        put("total_connections", Stats::get(&core.connections_total).to_string());
        put("rejected_connections", Stats::get(&core.refused).to_string());
        put("evicted_connections", Stats::get(&core.evicted).to_string());
        put("abandoned_connections", Stats::get(&core.abandoned).to_string());
        put("idle_kicks", Stats::get(&core.idle_timeouts).to_string());
        put("request_timeouts", Stats::get(&core.request_timeouts).to_string());
        put("max_connections", self.opts.listen.max_connections.to_string());
        let st = self.state();
        let c = &st.cache;
        let s = c.stats;
        let o = st.ops;
        put("cmd_get", o.cmd_get.to_string());
        put("cmd_set", o.cmd_set.to_string());
        put("cmd_flush", o.cmd_flush.to_string());
        put("cmd_touch", o.cmd_touch.to_string());
        put("get_hits", o.get_hits.to_string());
        put("get_misses", o.get_misses.to_string());
        put("delete_misses", o.delete_misses.to_string());
        put("delete_hits", o.delete_hits.to_string());
        put("incr_misses", o.incr_misses.to_string());
        put("incr_hits", o.incr_hits.to_string());
        put("decr_misses", o.decr_misses.to_string());
        put("decr_hits", o.decr_hits.to_string());
        put("cas_misses", o.cas_misses.to_string());
        put("cas_hits", o.cas_hits.to_string());
        put("cas_badval", o.cas_badval.to_string());
        put("touch_hits", o.touch_hits.to_string());
        put("touch_misses", o.touch_misses.to_string());
        put("store_too_large", o.store_too_large.to_string());
        put("bytes_read", self.bytes_read.load(Ordering::Relaxed).to_string());
        put("bytes_written", self.bytes_written.load(Ordering::Relaxed).to_string());
        put("limit_maxbytes", (c.cfg.dram_bytes + c.soc.bytes() + c.loc.bytes()).to_string());
        put("item_size_max", self.max_value_bytes.to_string());
        let (dram_items, soc_items, loc_items) = c.item_counts();
        put("curr_items", (dram_items + soc_items + loc_items).to_string());
        put("total_items", o.total_items.to_string());
        put("evictions", (c.soc.stats.evictions + c.loc.stats.items_evicted + s.admission_rejected + s.dropped_too_large).to_string());
        put("server_errors", o.server_errors.to_string());
        put("protocol_errors", Stats::get(&core.protocol_errors).to_string());
        // ssdlab: the tiers.
        put("dram_items", dram_items.to_string());
        put("soc_items", soc_items.to_string());
        put("loc_items", loc_items.to_string());
        put("dram_bytes_used", c.dram.used_bytes().to_string());
        put("dram_bytes", c.cfg.dram_bytes.to_string());
        put("soc_bytes", c.soc.bytes().to_string());
        put("loc_bytes", c.loc.bytes().to_string());
        put("dram_hits", s.dram_hits.to_string());
        put("nvm_hits", s.nvm_hits.to_string());
        put("hit_ratio", ratio(s.dram_hits + s.nvm_hits, s.gets).to_string());
        put("dram_hit_ratio", ratio(s.dram_hits, s.gets).to_string());
        put("nvm_hit_ratio", ratio(s.nvm_hits, s.gets - s.dram_hits).to_string());
        put("flash_items_admitted", s.flash_items.to_string());
        put("flash_item_bytes", s.flash_item_bytes.to_string());
        put("admission_rejected", s.admission_rejected.to_string());
        put("soc_bucket_reads", c.soc.stats.bucket_reads.to_string());
        put("soc_bucket_writes", c.soc.stats.bucket_writes.to_string());
        put("soc_evictions", c.soc.stats.evictions.to_string());
        put("loc_regions_flushed", c.loc.stats.regions_flushed.to_string());
        put("loc_regions_evicted", c.loc.stats.regions_evicted.to_string());
        put("loc_items_evicted", c.loc.stats.items_evicted.to_string());
        // ssdlab: the device. ALWA = device host writes / item bytes admitted to flash;
        // DLWA = media writes / host writes, overall and per reclaim unit handle.
        let dev = &c.flash.dev;
        let cn = dev.block_device().counters();
        put("alwa", ratio(cn.host_write_bytes, s.flash_item_bytes).to_string());
        put("dlwa", ratio(cn.nand_write_bytes, cn.host_write_bytes).to_string());
        put("soc_handle", c.soc.handle.ruh().to_string());
        put("loc_handle", c.loc.handle.ruh().to_string());
        if dev.config().personality == ssdlab_core::config::Personality::Conventional {
            if let Some(f) = dev.ftl().fdp_metrics(&st.streams0) {
                for h in f["handles"].as_array().into_iter().flatten() {
                    if h["reclaim_group"].as_u64() == Some(0) && h["host_write_bytes"].as_u64().unwrap_or(0) > 0 {
                        put(&format!("dlwa_handle_{}", h["handle"]), h["dlwa"].to_string());
                    }
                }
            }
        }
        put("device_host_write_bytes", cn.host_write_bytes.to_string());
        put("device_media_write_bytes", cn.nand_write_bytes.to_string());
        put("device_host_read_bytes", cn.host_read_bytes.to_string());
        put("device_gc_events", cn.gc_events.to_string());
        put("device_erases", cn.nand_erase_count.to_string());
        put("device_logical_bytes", dev.logical_bytes().to_string());
        put("device_fdp", (c.soc.handle.pid.is_some()).to_string());
        put("device_time_ns", dev.now_ns().to_string());
        drop(st);
        out
    }

    /// `stats settings`: the limits.
    fn settings(&self) -> Vec<(String, String)> {
        let secs = |d: Option<Duration>| d.map_or("0".into(), |d| d.as_secs_f64().to_string());
        vec![
            ("maxbytes".into(), self.with_cache(|c| c.cfg.dram_bytes + c.soc.bytes() + c.loc.bytes()).to_string()),
            ("maxconns".into(), self.opts.listen.max_connections.to_string()),
            ("tcpport".into(), self.opts.listen.port().to_string()),
            ("evictions".into(), "on".into()),
            ("cas_enabled".into(), "yes".into()),
            ("flush_enabled".into(), "yes".into()),
            ("binding_protocol".into(), "ascii".into()),
            ("item_size_max".into(), self.max_value_bytes.to_string()),
            ("key_max_length".into(), KEY_BYTES_MAX.to_string()),
            ("max_line_bytes".into(), self.opts.max_line_bytes.to_string()),
            ("idle_timeout".into(), secs(self.opts.listen.idle_timeout)),
            ("evict_idle_after".into(), secs(self.opts.listen.evict_idle_after)),
            ("listen".into(), self.opts.listen.address.clone()),
        ]
    }

    /// `stats items`: memcached's per-slab-class lines, one class per tier (1 DRAM, 2 SOC,
    /// 3 LOC).
    fn items(&self) -> Vec<(String, String)> {
        let st = self.state();
        let c = &st.cache;
        let (d, s, l) = c.item_counts();
        let mut v = vec![];
        for (id, n, ev) in [(1, d, 0), (2, s, c.soc.stats.evictions), (3, l, c.loc.stats.items_evicted)] {
            if n > 0 || ev > 0 {
                v.push((format!("items:{id}:number"), n.to_string()));
                v.push((format!("items:{id}:evicted"), ev.to_string()));
            }
        }
        v
    }

    /// `stats slabs`: one "slab class" per tier, with its size.
    fn slabs(&self) -> Vec<(String, String)> {
        let st = self.state();
        let c = &st.cache;
        let (d, s, l) = c.item_counts();
        let mut v = vec![];
        let tiers = [
            (1, c.soc.bucket_bytes as u64, c.cfg.dram_bytes, d),
            (2, c.soc.bucket_bytes as u64, c.soc.bytes(), s),
            (3, c.loc.region_bytes, c.loc.bytes(), l),
        ];
        for (id, chunk, bytes, n) in tiers {
            v.push((format!("{id}:chunk_size"), chunk.to_string()));
            v.push((format!("{id}:total_bytes"), bytes.to_string()));
            v.push((format!("{id}:used_chunks"), n.to_string()));
        }
        v.push(("active_slabs".into(), "3".into()));
        v.push(("total_malloced".into(), (c.cfg.dram_bytes + c.soc.bytes() + c.loc.bytes()).to_string()));
        v
    }

    /// The stats as JSON (numbers where they are numbers): the final summary.
    pub fn summary(&self) -> Value {
        let mut m = Map::new();
        for (k, v) in self.stats() {
            let j = if let Ok(i) = v.parse::<u64>() {
                json!(i)
            } else if let Ok(f) = v.parse::<f64>() {
                json!(f)
            } else if let Ok(b) = v.parse::<bool>() {
                json!(b)
            } else {
                json!(v)
            };
            m.insert(k, j);
        }
        Value::Object(m)
    }

    /// `stats [group [arg]]`: the general stats or a group's lines, then END.
    pub(super) fn stats_command(&self, group: Option<&[u8]>, arg: Option<&[u8]>, out: &mut Vec<u8>) {
        let list = match group {
            None => self.stats(),
            Some(b"settings") => self.settings(),
            Some(b"items") => self.items(),
            Some(b"slabs") => self.slabs(),
            Some(b"sizes") => vec![("sizes_status".into(), "disabled".into())],
            Some(b"conns") => vec![],
            Some(b"reset") => {
                let mut st = self.state();
                st.ops = Ops::default();
                st.cache.stats = Default::default();
                drop(st);
                self.bytes_read.store(0, Ordering::Relaxed);
                self.bytes_written.store(0, Ordering::Relaxed);
                return line(out, "RESET");
            }
            Some(b"detail") => {
                return match arg {
                    Some(b"on") | Some(b"off") => line(out, "OK"),
                    Some(b"dump") => line(out, "END"),
                    _ => line(out, "CLIENT_ERROR usage: stats detail on|off|dump"),
                };
            }
            Some(b"cachedump") => return line(out, "CLIENT_ERROR stats cachedump not allowed"),
            // memcached answers an unknown group (`stats noreply` too) with ERROR.
            Some(_) => return line(out, "ERROR"),
        };
        for (k, v) in list {
            line(out, &format!("STAT {k} {v}"));
        }
        line(out, "END");
    }
}
