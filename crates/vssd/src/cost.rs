//! What the vSSD layer costs the simulator per sector, against the open-channel device driven
//! directly with the same commands: every superblock (a chunk on each die of a channel)
//! written whole in 64-address vector writes striped over its chunks, then reset. Used by
//! `make bench` and the reproduction (wall-clock figures: they vary with the machine and its
//! load).

use std::time::Instant;

use serde::{Deserialize, Serialize};
use ssdlab_core::ftl::ocssd::{Ocssd, MAX_VECTOR};
use ssdlab_core::Config;

use crate::config::FlashBloxConfig;
use crate::error::Result;
use crate::flashblox::FlashBlox;
use crate::resources::{Isolation, Placement};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LayerCost {
    /// Sectors written per pass (the whole device).
    pub sectors: u64,
    pub raw_ns_per_sector: f64,
    pub vssd_ns_per_sector: f64,
    /// vSSD / raw.
    pub ratio: f64,
}

/// One pass of the raw device with the commands a striping host issues: for each channel and
/// chunk index, the chunks of that index on the channel's dies written unit by unit
/// round-robin in 64-address vector writes (a superblock, as the vSSD layer writes it), then
/// every chunk reset. The device does the same work as under the layer; only the layer's own
/// bookkeeping (maps, allocation, OOB records, per-die queues) differs.
fn raw_pass(oc: &mut Ocssd) -> u64 {
    let g = oc.geometry().clone();
    let (ws, units) = (g.ws_min as u64, g.clba / g.ws_min as u64);
    let mut lbas = Vec::with_capacity(MAX_VECTOR);
    let mut sectors = 0;
    for grp in 0..g.num_grp {
        for k in 0..g.num_chk {
            let starts: Vec<u64> = (0..g.num_pu).map(|pu| oc.lba(grp, pu, k, 0)).collect();
            let n = starts.len() as u64;
            lbas.clear();
            for u in 0..units * n {
                let lba0 = starts[(u % n) as usize] + (u / n) * ws;
                lbas.extend(lba0..lba0 + ws);
                if lbas.len() + ws as usize > MAX_VECTOR || u + 1 == units * n {
                    oc.vector_write(&lbas, None, 0).expect("vector write");
                    sectors += lbas.len() as u64;
                    lbas.clear();
                }
            }
        }
    }
    let chunks: Vec<u64> = (0..oc.chunks() as u64).map(|c| c * g.clba).collect();
    for batch in chunks.chunks(MAX_VECTOR) {
        oc.vector_reset(batch, 0).expect("vector reset");
    }
    sectors
}

/// One pass through the vSSD layer: one channel-isolated vSSD per channel, every block
/// allocated, written whole in one `write_data` and freed.
fn vssd_pass(fb: &mut FlashBlox, ids: &[u32]) -> u64 {
    let mut sectors = 0;
    for &v in ids {
        let (n, bs) = {
            let x = fb.vssd(v).expect("vSSD");
            (x.blocks, x.block_sectors(fb.geo()))
        };
        let blocks: Vec<u32> = (0..n).map(|_| fb.alloc_block(v).expect("block")).collect();
        for &b in &blocks {
            fb.write_data(v, b, 0, bs, None, 0).expect("write");
            sectors += bs as u64;
        }
        for &b in &blocks {
            fb.free_block(v, b, 0).expect("free");
        }
    }
    sectors
}

/// Time `rounds` passes of each, interleaved (best pass of each counts).
pub fn measure(dev: &Config, rounds: u32) -> Result<LayerCost> {
    let mut d = dev.clone();
    d.timing.enabled = false;
    let mut oc = Ocssd::new(&d)?;
    let mut fb = FlashBlox::new(&d, FlashBloxConfig::default())?;
    let ids: Vec<u32> = (0..fb.geo().channels)
        .map(|c| fb.alloc_virtual_ssd(Isolation::Channel, 0, 1, &Placement { channels: vec![c], spread: false }))
        .collect::<Result<_>>()?;
    // Warm-up passes (the raw device writes every chunk; the layer leaves its 1% reserve).
    raw_pass(&mut oc);
    vssd_pass(&mut fb, &ids);
    let (mut raw, mut lay) = (f64::MAX, f64::MAX);
    let mut sectors = 0;
    for _ in 0..rounds.max(1) {
        let t = Instant::now();
        let s = raw_pass(&mut oc);
        raw = raw.min(t.elapsed().as_secs_f64() * 1e9 / s as f64);
        let t = Instant::now();
        sectors = vssd_pass(&mut fb, &ids);
        lay = lay.min(t.elapsed().as_secs_f64() * 1e9 / sectors as f64);
    }
    Ok(LayerCost { sectors, raw_ns_per_sector: raw, vssd_ns_per_sector: lay, ratio: lay / raw })
}
