//! Commits: queueing work for the next commit, `sync` (data and metadata in one transaction,
//! or data-only transactions first when the data is large), early metadata commits, and the
//! background flusher.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLockWriteGuard};
use std::time::Duration;

use super::calls::Call;
use super::engine::Staged;
use super::inode::{ikey, Inode, InodeCell};
use super::{lock, File, Fs, Pending, NO_RANGE};
use crate::error::Result;
use crate::pm::log::Tx;

impl Fs {
    pub(super) fn queue_meta(&self, p: &mut Pending, c: &Arc<InodeCell>) {
        if !c.meta_queued.swap(true, Ordering::AcqRel) {
            p.meta.push(c.clone());
        }
    }

    pub(super) fn queue_data(&self, c: &Arc<InodeCell>) {
        if !c.data_queued.swap(true, Ordering::AcqRel) {
            lock(&self.pending).data.push(c.clone());
        }
    }

    /// Flush all dirty data and commit all pending metadata (one transaction, or data-only
    /// transactions first and the metadata with the last when the data is large).
    pub fn sync(&self) -> Result<()> {
        let _s = lock(&self.sync_lock);
        let (files, metas, ops, frees) = {
            let mut p = lock(&self.pending);
            (std::mem::take(&mut p.data), std::mem::take(&mut p.meta), std::mem::take(&mut p.ops), std::mem::take(&mut p.frees))
        };
        let through = self.engine.lock_through_commit();
        let mut st = Staged::default();
        let mut held: Vec<RwLockWriteGuard<'_, Inode>> = Vec::new();
        // The inodes whose metadata this sync commits, and their records. A record is taken
        // under the inode's lock with its queue mark cleared at that moment: a writer changes
        // an inode under the lock and queues it afterwards, so whatever a record misses is
        // queued again for the next sync. (Clearing the mark after encoding lost such changes:
        // a file's last writes, when they slipped in between, never reached PM.) Only inodes
        // of this sync's list are cleared: one queued since is in the next list and must stay
        // marked, or a later write would queue it twice.
        let ours: HashSet<u64> = metas.iter().map(|c| c.ino).collect();
        let mut records: HashMap<u64, Vec<u8>> = HashMap::new();
        for c in &files {
            c.data_queued.store(false, Ordering::Release);
            let g = c.write();
            if c.deleted.load(Ordering::Acquire) || g.order == NO_RANGE {
                continue;
            }
            // The whole range, not only up to the size: pages a truncate zeroed past the
            // size are changes to commit too (their old frames go).
            let pages = g.cap_pages();
            let mut at = 0;
            while at < pages {
                let k = (pages - at).min(self.commit_pages);
                self.engine.stage(&mut st, g.vstart + at, k)?;
                at += k;
                if st.pages >= self.commit_pages {
                    // A data-only transaction: pages past a file's committed size or not yet
                    // in any committed file are invisible until the metadata commits.
                    self.engine.commit(std::mem::take(&mut st), &Tx::new())?;
                }
            }
            if ours.contains(&c.ino) && !records.contains_key(&c.ino) {
                c.meta_queued.store(false, Ordering::Release);
                records.insert(c.ino, g.encode());
            }
            if through {
                held.push(g);
            }
        }
        let mut meta = Tx::new();
        let pm = self.pm();
        for &(vpn, order) in &frees {
            for v in vpn..vpn + (1u64 << order) {
                if pm.state().ppt(v).is_some() {
                    meta.pt_set(v, None);
                }
            }
        }
        meta.extend(&ops);
        for c in &metas {
            // Inodes this sync holds (lock through commit) all have their records by now.
            let rec = match records.get(&c.ino) {
                Some(r) => r.clone(),
                None => {
                    let g = c.read();
                    c.meta_queued.store(false, Ordering::Release);
                    let r = g.encode();
                    records.insert(c.ino, r.clone());
                    r
                }
            };
            if c.deleted.load(Ordering::Acquire) {
                continue;
            }
            meta.put(&ikey(c.ino), &rec);
        }
        self.engine.commit(st, &meta)?;
        drop(held);
        let mut r = lock(&self.ranges);
        for (vpn, order) in frees {
            r.free(vpn, order as usize);
        }
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Commit pending metadata early when it grows large (namespace-heavy work between syncs).
    pub(super) fn maybe_commit_meta(&self) -> Result<()> {
        let big = lock(&self.pending).ops.body_len() as u64 > self.pm().geometry().log_bytes / 4;
        if big {
            self.sync()?;
        }
        Ok(())
    }

    /// `fsync`: a full commit (FlacFS commits all pending work together).
    pub fn fsync(&self, _f: &File) -> Result<()> {
        let _t = self.call(Call::Other, None);
        self.sync()
    }

    /// Drop clean cached data (experiments: a cold cache).
    pub fn drop_caches(&self) -> Result<()> {
        self.sync()?;
        self.engine.drop_caches()
    }
}

pub(super) fn flusher_main(fs: std::sync::Weak<Fs>) {
    loop {
        let Some(f) = fs.upgrade() else { return };
        let period = Duration::from_millis(f.cfg.flush_interval_ms);
        {
            let stop = lock(&f.stop);
            if *stop {
                return;
            }
            let (stop, _) = f.kick.wait_timeout(stop, period).unwrap_or_else(|e| e.into_inner());
            if *stop {
                return;
            }
        }
        f.counters.flusher_runs.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = f.sync() {
            eprintln!("flacfs: background flush failed: {e}");
        }
    }
}
