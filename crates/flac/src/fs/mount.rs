//! Mounting and unmounting: opening the store and engine, loading the metadata and repairing
//! what a crash left behind, starting and stopping the background flusher.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};

use super::engine::{Engine, EngineKind, FlacEngine};
use super::inode::{ikey, new_cell, unsafe_id, Inode, NEXT_INO_KEY};
use super::range::Ranges;
use super::sync::flusher_main;
use super::{dax, lock, pagecache, Counters, Fs, FsConfig, Ns, Pending, Store, Ts, NO_RANGE, ROOT};
use crate::error::{FlacError, Result};
use crate::flac::Flac;
use crate::pm::log::Tx;
use crate::pm::Pm;
use crate::sys::PAGE;

impl Fs {
    /// Mount (creating or recovering the image): loads the metadata, repairs what a crash
    /// left behind (orphaned files, pages no file refers to), starts the background flusher.
    pub fn mount(cfg: FsConfig) -> Result<Arc<Fs>> {
        if !(cfg.dirty_ratio > 0.0
            && cfg.dirty_ratio <= 1.0
            && cfg.dirty_background_ratio > 0.0
            && cfg.dirty_background_ratio <= cfg.dirty_ratio)
        {
            return Err(FlacError::Invalid("dirty ratios must satisfy 0 < dirty_background_ratio <= dirty_ratio <= 1".into()));
        }
        let kernel_cost = cfg.kernel_cost;
        let (store, engine): (Store, Box<dyn Engine>) = match cfg.engine {
            EngineKind::Flac => {
                let flac = Flac::init(cfg.flac.clone())?;
                let e = FlacEngine { flac: flac.clone(), zcopy_min_bytes: cfg.zcopy_min_bytes, lockfree_flush: cfg.lockfree_flush };
                (Store::Flac(flac), Box::new(e))
            }
            kind => {
                let f = &cfg.flac;
                let pm = Arc::new(Pm::open(&f.pm_path, f.format.as_ref(), f.cost.clone(), f.lock_wait_ms)?);
                let e: Box<dyn Engine> = match kind {
                    EngineKind::Pagecache => Box::new(pagecache::PageCacheEngine::new(pm.clone(), f.dram_bytes, f.prefault)?),
                    _ => Box::new(dax::DaxEngine::new(pm.clone())),
                };
                (Store::Pm(pm), e)
            }
        };
        let pm = match &store {
            Store::Flac(f) => &f.pm,
            Store::Pm(p) => &**p,
        };
        let geo = *pm.geometry();
        let dev = crc32fast::hash(pm.path().as_os_str().as_encoded_bytes()) as u64 | 0x5100_0000_0000;
        let commit_pages = ((geo.log_bytes as usize / 2) / 17).max(64) as u64;
        let fs = Arc::new(Fs {
            cfg,
            store,
            engine,
            ns: Mutex::new(Ns { inodes: HashMap::new(), dirs: HashMap::new(), parents: HashMap::new(), next_ino: ROOT + 1 }),
            ranges: Mutex::new(Ranges::new(geo.space_pages)),
            pending: Mutex::new(Pending::default()),
            sync_lock: Mutex::new(()),
            counters: Counters::default(),
            calls: super::calls::Calls::new(kernel_cost),
            dev,
            stop: Mutex::new(false),
            kick: Condvar::new(),
            flusher: Mutex::new(None),
            flusher_id: Mutex::new(None),
            commit_pages,
        });
        fs.load()?;
        if fs.cfg.flush_interval_ms > 0 {
            let weak = Arc::downgrade(&fs);
            let h = std::thread::Builder::new()
                .name("flacfs-flusher".into())
                .spawn(move || flusher_main(weak))
                .map_err(|e| FlacError::io("starting the flusher thread", e))?;
            *lock(&fs.flusher_id) = Some(h.thread().id());
            *lock(&fs.flusher) = Some(h);
        }
        Ok(fs)
    }

    fn load(&self) -> Result<()> {
        let pm = self.pm();
        let mut ns = lock(&self.ns);
        let mut ranges = lock(&self.ranges);
        let mut fix = Tx::new();
        for (k, v) in pm.kv_scan(b"i") {
            if k.len() != 9 {
                continue;
            }
            let ino = u64::from_be_bytes(k[1..9].try_into().unwrap());
            let node =
                Inode::decode(&v).ok_or_else(|| FlacError::Corrupt(format!("{}: inode {ino}: malformed record", pm.path().display())))?;
            ns.inodes.insert(ino, Arc::new(new_cell(ino, node)));
        }
        for (k, v) in pm.kv_scan(b"d") {
            if k.len() < 9 || v.len() != 8 {
                continue;
            }
            let parent = u64::from_be_bytes(k[1..9].try_into().unwrap());
            let child = u64::from_le_bytes(v[..8].try_into().unwrap());
            let name = k[9..].to_vec();
            if !ns.inodes.contains_key(&child) || !ns.inodes.contains_key(&parent) {
                fix.del(&k);
                continue;
            }
            if ns.inodes[&child].read().is_dir() {
                ns.parents.insert(child, parent);
            }
            ns.dirs.entry(parent).or_default().insert(name, child);
        }
        if let Some(v) = pm.kv_get(NEXT_INO_KEY) {
            ns.next_ino = u64::from_le_bytes(v[..8].try_into().unwrap_or([0; 8]));
        }
        ns.next_ino = ns.next_ino.max(ns.inodes.keys().max().copied().unwrap_or(ROOT) + 1);
        ns.inodes.entry(ROOT).or_insert_with(|| {
            let now = Ts::now();
            let root = Inode {
                mode: libc::S_IFDIR | 0o755,
                nlink: 2,
                uid: unsafe_id().0,
                gid: unsafe_id().1,
                size: 0,
                atime: now,
                mtime: now,
                ctime: now,
                vstart: 0,
                order: NO_RANGE,
                target: Vec::new(),
            };
            fix.put(&ikey(ROOT), &root.encode());
            Arc::new(new_cell(ROOT, root))
        });
        ns.dirs.entry(ROOT).or_default();
        // Orphans (unlinked while open when the process died) go now.
        let orphans: Vec<u64> = ns.inodes.iter().filter(|(&i, c)| i != ROOT && c.read().nlink == 0).map(|(&i, _)| i).collect();
        for ino in orphans {
            ns.inodes.remove(&ino);
            fix.del(&ikey(ino));
        }
        // Ranges in use; pages mapped outside a file's pages are freed.
        let mut live: Vec<(u64, u64)> = Vec::new();
        for (ino, c) in &ns.inodes {
            let n = c.read();
            if n.order != NO_RANGE {
                if !ranges.reserve(n.vstart, n.order as usize) {
                    return Err(FlacError::Corrupt(format!("{}: inode {ino}'s pages overlap another file's", pm.path().display())));
                }
                live.push((n.vstart, n.size.div_ceil(PAGE as u64)));
            }
        }
        live.sort_unstable();
        let mut stray = 0u64;
        for (vpn, _) in pm.ppt_mapped() {
            let i = live.partition_point(|&(s, _)| s <= vpn);
            let inside = i > 0 && vpn < live[i - 1].0 + live[i - 1].1;
            if !inside {
                fix.pt_set(vpn, None);
                stray += 1;
            }
        }
        drop(ranges);
        drop(ns);
        if !fix.is_empty() {
            match &self.store {
                Store::Flac(f) => {
                    // Pages being freed must not linger in FLAC's volatile state (none yet:
                    // nothing was read); commit the repair.
                    f.commit_meta(&fix)?;
                }
                Store::Pm(p) => {
                    p.commit(&fix)?;
                }
            }
        }
        let _ = stray;
        Ok(())
    }

    /// Stop the flusher and commit everything (also done on drop).
    pub fn unmount(&self) -> Result<()> {
        *lock(&self.stop) = true;
        self.kick.notify_all();
        // The flusher may hold the last reference itself (then it is the one unmounting).
        if *lock(&self.flusher_id) != Some(std::thread::current().id()) {
            if let Some(h) = lock(&self.flusher).take() {
                let _ = h.join();
            }
        }
        self.sync()
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        let _ = self.unmount();
    }
}
