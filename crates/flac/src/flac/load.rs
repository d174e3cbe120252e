//! Asynchronous load: pages served from PM are queued, and a loader thread migrates them to
//! DRAM in runs (up to 2 MiB) while they stay unchanged.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::table::{ent_kind, K_COMMITTED, LOADING};
use super::{Core, Flac, Inner, Loc};
use crate::error::Result;
use crate::sys::{self, HUGE_PAGES, PAGE};

impl Flac {
    /// Queue pages for the loader (asynchronous load) — a no-op when loads are synchronous
    /// (read_partial's copy from PM is the load's only cost then, as in a DAX read).
    pub(super) fn queue_load(&self, c: &mut Core, vpn: u64, n: u64) {
        if !self.cfg.async_load {
            return;
        }
        for v in vpn..vpn + n {
            c.vpt[v as usize] |= LOADING;
        }
        self.loadq.lock().unwrap().runs.push_back((vpn, n));
    }

    pub(super) fn kick_loader(&self) {
        if self.cfg.async_load && !self.loadq.lock().unwrap().runs.is_empty() {
            self.loadcv.notify_one();
        }
    }

    /// Wait until the loader has nothing queued or in progress.
    pub fn wait_loads(&self) {
        let mut q = self.loadq.lock().unwrap();
        while !q.runs.is_empty() || q.busy > 0 {
            self.loadcv.notify_all();
            q = self.loadcv.wait_timeout(q, std::time::Duration::from_millis(1)).unwrap().0;
        }
    }
}

impl Inner {
    pub(super) fn loader_main(self: Arc<Inner>) {
        loop {
            let run = {
                let mut q = self.loadq.lock().unwrap();
                loop {
                    if q.stop {
                        return;
                    }
                    if let Some(r) = q.runs.pop_front() {
                        q.busy += 1;
                        break r;
                    }
                    q = self.loadcv.wait(q).unwrap();
                }
            };
            let (vpn, n) = run;
            let mut v = vpn;
            while v < vpn + n {
                let k = (vpn + n - v).min(HUGE_PAGES as u64);
                if let Err(e) = self.load_run(v, k) {
                    // DRAM full of dirty pages: the pages stay in PM (served from there).
                    let _ = e;
                }
                v += k;
            }
            self.loadq.lock().unwrap().busy -= 1;
            self.loadcv.notify_all();
        }
    }

    /// Migrate the committed pages `vpn..vpn+n` still marked for loading from PM to DRAM.
    fn load_run(&self, vpn: u64, n: u64) -> Result<()> {
        let mut c = self.lock();
        let mut cand: Vec<(u64, u32)> = Vec::new();
        for v in vpn..vpn + n {
            let e = c.vpt[v as usize];
            if e & LOADING == 0 {
                continue;
            }
            let committed = self.pm.state().ppt(v);
            match (ent_kind(e), committed) {
                (K_COMMITTED, Some(p)) => {
                    self.pm.incref(p);
                    cand.push((v, p));
                }
                _ => c.vpt[v as usize] &= !LOADING,
            }
        }
        if cand.is_empty() {
            return Ok(());
        }
        let huge = cand.len() == HUGE_PAGES && cand[0].0.is_multiple_of(HUGE_PAGES as u64);
        let frames = match self.alloc_dram(&mut c, cand.len(), huge) {
            Ok(f) => f,
            Err(e) => {
                for &(v, p) in &cand {
                    c.vpt[v as usize] &= !LOADING;
                    self.pm.decref(p);
                }
                return Err(e);
            }
        };
        drop(c);
        let t = self.pm.lanes.read((cand.len() * PAGE) as u64);
        for (&(_, p), &f) in cand.iter().zip(&frames) {
            // SAFETY: p is held (reference above), f is fresh.
            unsafe { sys::copy(self.dram.frame_ptr(f), self.pm.frame_ptr(p), PAGE) };
        }
        self.pm.lanes.wait(t);
        let mut c = self.lock();
        let mut installed = 0;
        for (&(v, p), &f) in cand.iter().zip(&frames) {
            let e = c.vpt[v as usize];
            if e & LOADING != 0 && ent_kind(e) == K_COMMITTED && self.pm.state().ppt(v) == Some(p) {
                c.vpt[v as usize] &= !LOADING;
                self.set_current(&mut c, v, Some((Loc::Dram(f), false)));
                self.view_invalidate(&mut c, v, 1)?;
                installed += 1;
            } else {
                c.vpt[v as usize] &= !LOADING;
                self.decref(&mut c, Loc::Dram(f));
            }
            self.pm.decref(p);
        }
        self.stats.loads_async.fetch_add(installed, Ordering::Relaxed);
        Ok(())
    }
}
