//! The served disk: contents in a raw image file (or, without one, a memfd: the same thing in
//! memory), the emulated SSD (metadata only) beside it.
//!
//! Every host command goes to both: the bytes to the image, the command to
//! the device, whose FTL maps, garbage-collects and wears exactly as it would with the data
//! inside it, and whose completion time drives the emulated latency. Keeping the contents in
//! a plain raw image makes them cheap (no second copy in memory), readable by any tool
//! (`qemu-img info IMAGE` says "raw"), and durable as soon as the kernel has them.
//!
//! Persistence and crash safety: the device state is saved in `IMAGE.ssdlab-state` (a
//! snapshot, written to a temporary file and renamed) and every command that changes it is
//! appended to `IMAGE.ssdlab-journal` (32-byte records with a CRC) before its reply is sent:
//! records collect in memory as commands execute and [`Backend::commit_journal`] writes them
//! with one `write(2)` (the server calls it before it sends the replies they acknowledge, so
//! the records of all the requests in flight share a system call).
//! A restart loads the snapshot and replays the journal records of the same generation
//! through the device, which is deterministic, so the FTL state (mapping, wear, counters) is
//! exactly what it was; the data itself never needs recovering. A flush or FUA write also
//! fdatasyncs the image and the journal, so it survives power loss too, not just `kill -9`.
//!
//! Beside this file (the backend, its host commands, the `Disk` it is): `journal.rs` the
//! journal's records and replay, `state.rs` the device state file, `image.rs` the image file.

mod image;
mod journal;
mod state;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use serde_json::{json, Value};
use ssdlab_core::config::{Config, Personality, StorageMode};
use ssdlab_core::ftl::zns::{ZoneAction, ZoneState};
use ssdlab_core::metrics::Recorder;
use ssdlab_core::workload::Op;
use ssdlab_core::Device;

use self::image::{anonymous_image, import, punch_hole, write_image, zero_range};
use self::journal::{replay_journal, Journal};
pub use self::journal::{zone_action_code, JOp};
use self::state::{config_difference, read_state, write_state};
use crate::disk::BackendError;

/// The version of the state and journal file formats.
const FORMAT_VERSION: u32 = 1;

type Result<T> = std::result::Result<T, BackendError>;

fn not_zoned() -> BackendError {
    BackendError::msg("not a zoned device")
}

/// What happened when the backend opened its image.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Recovery {
    /// "new", "snapshot", "snapshot+journal", "journal", "imported" or "anonymous".
    pub source: String,
    pub journal_records_replayed: u64,
    pub torn_records_dropped: u64,
    pub imported_bytes: u64,
    pub seconds: f64,
}

/// Where the files of a persistent image live.
pub struct Paths {
    pub image: PathBuf,
    pub state: PathBuf,
    pub journal: PathBuf,
}

impl Paths {
    pub fn of(image: &Path) -> Paths {
        let with = |suffix: &str| {
            let mut s = image.as_os_str().to_owned();
            s.push(suffix);
            PathBuf::from(s)
        };
        Paths { image: image.to_path_buf(), state: with(".ssdlab-state"), journal: with(".ssdlab-journal") }
    }
}

/// Options of [`Backend::open`].
#[derive(Debug, Clone, Default)]
pub struct BackendOptions {
    /// Persistent image file; None = an in-memory image (contents gone when the server stops).
    pub image: Option<PathBuf>,
    /// Take a snapshot (and start a new journal) after this many journal records.
    pub snapshot_every: u64,
    /// Also open ZNS devices (their host must follow the zone rules: the NVMe target's zoned
    /// namespaces). The NBD server, whose clients write anywhere, leaves it off.
    pub zoned: bool,
}

/// The disk the server exports: image + device + journal + measurements.
pub struct Backend {
    cfg: Config,
    dev: Device,
    rec: Recorder,
    image: File,
    paths: Option<Paths>,
    journal: Option<Journal>,
    generation: u64,
    snapshot_every: u64,
    sector: u64,
    logical: u64,
    timing: bool,
    /// Wall-clock origin of simulated time: sim time = origin_ns + elapsed since `started`.
    started: Instant,
    origin_ns: u64,
    pub recovery: Recovery,
}

impl Backend {
    /// Open (or create) the image for `cfg` and bring the device to the image's state.
    pub fn open(mut cfg: Config, opts: &BackendOptions) -> Result<Backend> {
        let zoned = matches!(cfg.personality, Personality::Zns);
        let served = matches!(cfg.personality, Personality::Conventional) || (zoned && opts.zoned);
        if !served {
            return Err(BackendError::msg(format!(
                "ssdlab serve exports conventional and FDP devices; personality {:?} has its own host interface (use the Python API)",
                cfg.personality
            )));
        }
        // The image holds the contents: the device needs none.
        cfg.storage = StorageMode::Metadata;
        cfg.validate()?;
        let t0 = Instant::now();
        let cfg_text = serde_json::to_string(&cfg).map_err(|e| BackendError::msg(e.to_string()))?;
        let fresh = Device::new(cfg.clone())?;
        let logical = fresh.logical_bytes();
        let sector = cfg.geometry.sector_bytes as u64;
        let mut recovery = Recovery::default();
        let (image, paths, dev, generation, journal) = match &opts.image {
            None => {
                recovery.source = "anonymous".into();
                (anonymous_image(logical)?, None, fresh, 0, None)
            }
            Some(img) => open_image(img, &cfg_text, fresh, sector, zoned, &mut recovery)?,
        };
        recovery.seconds = t0.elapsed().as_secs_f64();
        let timing = cfg.timing.enabled;
        let rec =
            Recorder::new(dev.block_device(), dev.now_ns(), cfg.metrics.series_interval_ns, if timing { 0 } else { (logical / 50).max(1) });
        let origin_ns = dev.now_ns();
        Ok(Backend {
            cfg,
            dev,
            rec,
            image,
            paths,
            journal,
            generation,
            snapshot_every: if opts.snapshot_every == 0 { 1 << 20 } else { opts.snapshot_every },
            sector,
            logical,
            timing,
            started: Instant::now(),
            origin_ns,
            recovery,
        })
    }

    pub fn logical_bytes(&self) -> u64 {
        self.logical
    }
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn timing(&self) -> bool {
        self.timing
    }
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Wall-clock instant at which simulated time `t_ns` is reached.
    pub fn wall_of(&self, t_ns: u64) -> Instant {
        self.started + std::time::Duration::from_nanos(t_ns.saturating_sub(self.origin_ns))
    }

    /// Simulated time now: the device clock follows the wall clock when timing is on.
    fn now(&mut self) -> u64 {
        if self.timing {
            let t = self.origin_ns + self.started.elapsed().as_nanos() as u64;
            self.dev.advance_to(t);
        }
        self.dev.now_ns()
    }

    /// The whole sectors covering bytes `offset..offset + len`.
    fn covering(&self, offset: u64, len: u64) -> (u64, u64) {
        let a = offset / self.sector * self.sector;
        let b = (offset + len).div_ceil(self.sector) * self.sector;
        (a, b - a)
    }

    /// The whole sectors inside bytes `offset..offset + len` (None if there are none).
    fn inside(&self, offset: u64, len: u64) -> Option<(u64, u64)> {
        let a = offset.div_ceil(self.sector) * self.sector;
        let b = (offset + len) / self.sector * self.sector;
        (b > a).then(|| (a, b - a))
    }

    fn account(&mut self, op: Op, t: u64, done: u64) {
        self.rec.record(op, done.saturating_sub(t));
        self.rec.tick(self.dev.block_device(), t, done);
    }

    /// Write `data` at `offset` (any alignment; the device sees the covering sectors).
    /// Returns the simulated completion time.
    pub fn write(&mut self, offset: u64, data: &[u8], fua: bool, placement: Option<u16>) -> Result<u64> {
        if self.dev.zns().is_some() {
            // A zoned device may refuse the write (not at the write pointer): the image takes
            // the bytes only once the device has.
            let done = self.device_write(offset, data.len() as u64, fua, placement)?;
            write_image(&self.image, data, offset)?;
            return Ok(done);
        }
        write_image(&self.image, data, offset)?;
        self.device_write(offset, data.len() as u64, fua, placement)
    }

    /// Zone Append of `data` (whole sectors) to the zone starting at LBA `zslba`: (the LBA
    /// written, the simulated completion time). Journaled as the write it became.
    pub fn zone_append(&mut self, zslba: u64, data: &[u8], fua: bool) -> Result<(u64, u64)> {
        let t = self.now();
        let n = u32::try_from(data.len() as u64 / self.sector).map_err(|_| BackendError::msg("zone append too large"))?;
        let z = self.dev.zns_mut().ok_or_else(not_zoned)?;
        let (lba, done) = z.write_zone(zslba, n, None, true, fua, t)?;
        let off = lba * self.sector;
        write_image(&self.image, data, off)?;
        self.account(Op::Write, t, done);
        if let Some(j) = self.journal.as_mut() {
            j.append(t, JOp::Write, off, data.len() as u64, fua as u8, None)?;
        }
        if fua {
            self.sync()?;
        }
        self.maybe_snapshot()?;
        Ok((lba, done))
    }

    /// Zone Management Send on the zone starting at `zslba` (or every zone, `all`). A zone
    /// that is reset or taken offline reads zeros afterwards: its bytes leave the image.
    pub fn zone_action(&mut self, zslba: u64, action: ZoneAction, all: bool) -> Result<u64> {
        let t = self.now();
        let clears = matches!(action, ZoneAction::Reset | ZoneAction::Offline);
        let before = if clears { self.dev.zns().ok_or_else(not_zoned)?.report(0, None, usize::MAX)? } else { vec![] };
        let done = self.dev.zns_mut().ok_or_else(not_zoned)?.zone_action(zslba, action, all, t)?;
        if clears {
            let after = self.dev.zns().expect("zoned").report(0, None, usize::MAX)?;
            for (b, a) in before.iter().zip(&after) {
                let emptied = a.state == ZoneState::Empty && b.state != ZoneState::Empty;
                let offlined = a.state == ZoneState::Offline && b.state != ZoneState::Offline;
                // Where the zone's data ends: its write pointer, or its capacity when the report
                // gives none (full, read-only and offline zones).
                let end = if b.wp == u64::MAX { b.zslba + b.zcap } else { b.wp };
                if (emptied || offlined) && end > b.zslba {
                    punch_hole(&self.image, b.zslba * self.sector, (end - b.zslba) * self.sector)?;
                }
            }
        }
        if let Some(j) = self.journal.as_mut() {
            j.append(t, JOp::ZoneAction, zslba, all as u64, zone_action_code(action), None)?;
        }
        self.maybe_snapshot()?;
        Ok(done)
    }

    /// The device side of a write whose bytes are already in the image: the covering sectors
    /// go to the FTL, the command to the journal; FUA syncs.
    fn device_write(&mut self, offset: u64, len: u64, fua: bool, placement: Option<u16>) -> Result<u64> {
        let t = self.now();
        let (a, n) = self.covering(offset, len);
        let done = self.dev.write_placed_len(a, n, fua, placement)?;
        self.account(Op::Write, t, done);
        if let Some(j) = self.journal.as_mut() {
            j.append(t, JOp::Write, a, n, fua as u8, placement)?;
        }
        if fua {
            self.sync()?;
        }
        self.maybe_snapshot()?;
        Ok(done)
    }

    /// Read into `out` from `offset`; returns the simulated completion time.
    pub fn read(&mut self, offset: u64, out: &mut [u8]) -> Result<u64> {
        self.image.read_exact_at(out, offset)?;
        let t = self.now();
        let (a, n) = self.covering(offset, out.len() as u64);
        let done = self.dev.read_len(a, n)?;
        self.account(Op::Read, t, done);
        Ok(done)
    }

    /// Deallocate (the whole sectors inside the range are unmapped; the image range reads
    /// back as zeros).
    pub fn trim(&mut self, offset: u64, len: u64, fua: bool) -> Result<u64> {
        punch_hole(&self.image, offset, len)?;
        let t = self.now();
        let mut done = t;
        if let Some((a, n)) = self.inside(offset, len) {
            done = self.dev.trim(a, n)?;
            self.account(Op::Trim, t, done);
            if let Some(j) = self.journal.as_mut() {
                j.append(t, JOp::Trim, a, n, 0, None)?;
            }
        }
        if fua {
            self.sync()?;
        }
        self.maybe_snapshot()?;
        Ok(done)
    }

    /// Write zeros: with `no_hole` the device programs them; otherwise whole sectors are
    /// deallocated (as SSDs implement Write Zeroes with deallocation) and partial sectors at
    /// the edges are written.
    pub fn write_zeroes(&mut self, offset: u64, len: u64, no_hole: bool, fua: bool, placement: Option<u16>) -> Result<u64> {
        if no_hole {
            zero_range(&self.image, offset, len)?;
            return self.device_write(offset, len, fua, placement);
        }
        punch_hole(&self.image, offset, len)?;
        let mut done = self.now();
        match self.inside(offset, len) {
            Some((a, n)) => {
                done = done.max(self.trim(a, n, false)?);
                for (o, l) in [(offset, a - offset), (a + n, offset + len - (a + n))] {
                    if l > 0 {
                        done = done.max(self.device_write(o, l, false, placement)?);
                    }
                }
            }
            None => done = done.max(self.device_write(offset, len, false, placement)?),
        }
        if fua {
            self.sync()?;
        }
        Ok(done)
    }

    /// Flush: the device's write buffer, then the image and journal to stable storage.
    pub fn flush(&mut self) -> Result<u64> {
        let t = self.now();
        let done = self.dev.flush()?;
        if let Some(j) = self.journal.as_mut() {
            j.append(t, JOp::Flush, 0, 0, 0, None)?;
        }
        self.sync()?;
        Ok(done)
    }

    fn sync(&mut self) -> Result<()> {
        if self.paths.is_some() {
            self.image.sync_data()?;
            if let Some(j) = self.journal.as_mut() {
                j.commit()?;
                j.file.sync_data()?;
            }
        }
        Ok(())
    }

    /// Write the journal records of the commands executed so far (before their replies go
    /// out). Cheap when there are none.
    /// FDP Reclaim Unit Handle Update of `pids` (journaled, one record each, so a restart
    /// finds the handles in the RUs they moved to); returns the simulated completion time.
    pub fn ruh_update(&mut self, pids: &[u16]) -> Result<u64> {
        let t = self.now();
        self.dev.ftl_mut().ruh_update(pids, t)?;
        if let Some(j) = self.journal.as_mut() {
            for &pid in pids {
                j.append(t, JOp::RuhUpdate, 0, 0, 0, Some(pid))?;
            }
        }
        self.maybe_snapshot()?;
        Ok(t)
    }

    pub fn commit_journal(&mut self) -> Result<()> {
        match self.journal.as_mut() {
            Some(j) => j.commit(),
            None => Ok(()),
        }
    }

    /// Allocation status of `offset..offset + len` from the image's holes: (length, is hole).
    pub fn extents(&self, offset: u64, len: u64, max: usize) -> Result<Vec<(u64, bool)>> {
        let fd = self.image.as_raw_fd();
        let end = offset + len;
        let mut out: Vec<(u64, bool)> = vec![];
        let mut pos = offset;
        while pos < end && out.len() < max {
            // SAFETY: lseek on a file descriptor we own; errors are checked.
            let data = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
            let (is_hole, next) = if data < 0 || data as u64 > pos {
                // A hole up to the next data (or the end).
                let nd = if data < 0 { end } else { (data as u64).min(end) };
                (true, nd)
            } else {
                let h = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_HOLE) };
                (false, if h < 0 { end } else { (h as u64).min(end) })
            };
            let next = next.max(pos + 1);
            match out.last_mut() {
                Some((l, h)) if *h == is_hole => *l += next - pos,
                _ => out.push((next - pos, is_hole)),
            }
            pos = next;
        }
        Ok(out)
    }

    /// metrics.json as of now (since the server started), with the recovery report.
    pub fn metrics(&mut self) -> Value {
        self.now();
        let mut m = self.rec.finish(self.dev.block_device(), &self.cfg, false);
        m["recovery"] = json!(self.recovery);
        // The figures above count from this server's start; these since the device was new.
        let c = self.dev.block_device().counters();
        m["device_lifetime"] = json!({
            "host_write_bytes": c.host_write_bytes,
            "host_read_bytes": c.host_read_bytes,
            "nand_write_bytes": c.nand_write_bytes,
            "nand_erase_count": c.nand_erase_count,
            "gc_events": c.gc_events,
            "dlwa": if c.host_write_bytes == 0 { 0.0 } else { c.nand_write_bytes as f64 / c.host_write_bytes as f64 },
            "sim_time_ns": self.dev.now_ns(),
        });
        m
    }

    pub fn series_csv(&self) -> String {
        self.rec.series_csv()
    }

    fn maybe_snapshot(&mut self) -> Result<()> {
        if self.journal.as_ref().is_some_and(|j| j.records >= self.snapshot_every) {
            self.snapshot()?;
        }
        Ok(())
    }

    /// Save the device state and start a new journal (clean shutdown, or a long journal).
    pub fn snapshot(&mut self) -> Result<()> {
        if self.paths.is_none() {
            return Ok(());
        }
        // The records in flight go to the old journal first (their replies may be pending).
        self.commit_journal()?;
        let Some(paths) = &self.paths else { return Ok(()) };
        self.image.sync_data()?;
        let cfg_text = serde_json::to_string(&self.cfg).map_err(|e| BackendError::msg(e.to_string()))?;
        self.generation += 1;
        write_state(&paths.state, self.generation, &cfg_text, &self.dev)?;
        let path = self.journal.as_ref().map(|j| j.path.clone()).unwrap_or_else(|| paths.journal.clone());
        self.journal = Some(Journal::create(&path, self.generation, self.logical)?);
        Ok(())
    }
}

/// What [`Backend::open`] gets from a persistent image: the image file, its paths, the
/// device in the image's state, the new generation and its journal.
type Opened = (File, Option<Paths>, Device, u64, Option<Journal>);

/// Open (or create) the persistent image `img` and bring `fresh` (a new device of the
/// config whose JSON is `cfg_text`) to its state: the snapshot, then the journal, or an
/// import of a raw image; then start a new generation (a snapshot and a new journal).
fn open_image(img: &Path, cfg_text: &str, fresh: Device, sector: u64, zoned: bool, recovery: &mut Recovery) -> Result<Opened> {
    let logical = fresh.logical_bytes();
    let paths = Paths::of(img);
    if img.is_dir() {
        return Err(BackendError::msg(format!("--image {}: is a directory; give an image file (created if missing)", img.display())));
    }
    let existed = img.exists();
    let named = |e: std::io::Error| BackendError::msg(format!("--image {}: {e}", img.display()));
    let image = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(img).map_err(named)?;
    // Random access: no readahead, which would fill the page cache with large folios
    // (see IMAGE_WRITE_CHUNK).
    // SAFETY: posix_fadvise on our own descriptor; a failure only loses the hint.
    unsafe {
        libc::posix_fadvise(image.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM);
    }
    let meta = image.metadata().map_err(named)?;
    if !meta.file_type().is_file() {
        return Err(BackendError::msg(format!("--image {}: not a regular file", img.display())));
    }
    let len = meta.len();
    if existed && len != logical && len != 0 {
        return Err(BackendError::msg(format!(
            "{}: the image is {len} bytes but this config's device exports {logical}; use the config it was made with, or a new image",
            img.display()
        )));
    }
    image.set_len(logical).map_err(named)?;
    let (mut dev, generation) = match std::fs::read(&paths.state) {
        Ok(bytes) => {
            let st = read_state(&bytes, &paths.state)?;
            if st.config != cfg_text {
                return Err(BackendError::msg(format!(
                    "{}: the image's device was made with another config ({}); serve it with the same config, or use a new image",
                    img.display(),
                    config_difference(&st.config, cfg_text)
                )));
            }
            recovery.source = "snapshot".into();
            (st.device, st.generation)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (fresh, 0),
        Err(e) => return Err(BackendError::msg(format!("{}: {e}", paths.state.display()))),
    };
    let replayed = replay_journal(&mut dev, &paths.journal, generation, logical, recovery)?;
    if recovery.source.is_empty() {
        recovery.source = if replayed {
            "journal".into()
        } else if existed && len > 0 {
            "imported".into()
        } else {
            "new".into()
        };
    } else if replayed {
        recovery.source = "snapshot+journal".into();
    }
    if recovery.source == "imported" && zoned {
        return Err(BackendError::msg(format!(
                "{}: an image without its device state cannot be imported into a zoned device (its zones' write pointers are unknown); use a new image",
                img.display()
            )));
    }
    if recovery.source == "imported" {
        recovery.imported_bytes = import(&mut dev, &image, logical, sector)?;
    }
    // Start a clean generation: snapshot the recovered state, then a new journal.
    let generation = generation + 1;
    write_state(&paths.state, generation, cfg_text, &dev)?;
    let journal = Journal::create(&paths.journal, generation, logical)?;
    Ok((image, Some(paths), dev, generation, Some(journal)))
}

impl crate::disk::Disk for Backend {
    fn logical_bytes(&self) -> u64 {
        self.logical
    }
    fn write(&mut self, offset: u64, data: &[u8], fua: bool, placement: Option<u16>) -> Result<u64> {
        Backend::write(self, offset, data, fua, placement)
    }
    fn read(&mut self, offset: u64, out: &mut [u8]) -> Result<u64> {
        Backend::read(self, offset, out)
    }
    fn device(&self) -> Option<&Device> {
        Some(&self.dev)
    }
    fn ruh_update(&mut self, pids: &[u16]) -> Result<u64> {
        Backend::ruh_update(self, pids)
    }
    fn trim(&mut self, offset: u64, len: u64, fua: bool) -> Result<u64> {
        Backend::trim(self, offset, len, fua)
    }
    fn write_zeroes(&mut self, offset: u64, len: u64, no_hole: bool, fua: bool, placement: Option<u16>) -> Result<u64> {
        Backend::write_zeroes(self, offset, len, no_hole, fua, placement)
    }
    fn flush(&mut self) -> Result<u64> {
        Backend::flush(self)
    }
    fn extents(&self, offset: u64, len: u64, max: usize) -> Result<Vec<(u64, bool)>> {
        Backend::extents(self, offset, len, max)
    }
    fn commit_journal(&mut self) -> Result<()> {
        Backend::commit_journal(self)
    }
    fn snapshot(&mut self) -> Result<()> {
        Backend::snapshot(self)
    }
    fn metrics(&mut self) -> Value {
        Backend::metrics(self)
    }
    fn series_csv(&self) -> String {
        Backend::series_csv(self)
    }
    fn wall_of(&self, t_ns: u64) -> Instant {
        Backend::wall_of(self, t_ns)
    }
    fn describe(&self) -> String {
        let rc = &self.recovery;
        let mut s = format!("{} in {:.3} s", rc.source, rc.seconds);
        if rc.journal_records_replayed > 0 || rc.imported_bytes > 0 {
            s += &format!(
                " ({} journal records replayed, {} torn dropped, {} bytes imported)",
                rc.journal_records_replayed, rc.torn_records_dropped, rc.imported_bytes
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ssdlab_core::error::Status;

    /// A zoned device's writes, appends and resets come back from the journal alone (the
    /// process died: no snapshot at exit), and a reset zone's bytes are gone from the image.
    #[test]
    fn a_zoned_device_recovers_from_its_journal() {
        let dir = std::env::temp_dir().join(format!("ssdlab-zjournal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = ssdlab_core::media::presets::preset("tiny").unwrap();
        c.personality = Personality::Zns;
        c.timing.enabled = false;
        let opts = BackendOptions { image: Some(dir.join("z.img")), snapshot_every: 0, zoned: true };
        let zs;
        {
            let mut b = Backend::open(c.clone(), &opts).unwrap();
            zs = b.device().zns().unwrap().zone_size();
            b.write(0, &[1u8; 8192], false, None).unwrap();
            b.write(zs * 4096, &[2u8; 4096], false, None).unwrap();
            assert_eq!(b.zone_append(zs, &[3u8; 4096], false).unwrap().0, zs + 1);
            b.zone_action(0, ZoneAction::Reset, false).unwrap();
            // A full zone (finished), then every zone reset: the full one's bytes go too.
            b.write(2 * zs * 4096, &[4u8; 4096], false, None).unwrap();
            b.zone_action(2 * zs, ZoneAction::Finish, false).unwrap();
            b.zone_action(0, ZoneAction::Reset, true).unwrap();
            b.write(0, &[1u8; 8192], false, None).unwrap();
            b.write(zs * 4096, &[2u8; 4096], false, None).unwrap();
            assert_eq!(b.zone_append(zs, &[3u8; 4096], false).unwrap().0, zs + 1);
            b.zone_action(0, ZoneAction::Reset, false).unwrap();
            // Not at the write pointer: refused with the device's status, nothing written.
            let e = b.write(zs * 4096 + 4 * 4096, &[9u8; 4096], false, None).unwrap_err();
            assert_eq!(e.status(), Some(Status::ZoneInvalidWrite));
            b.commit_journal().unwrap();
            // Dropped without a snapshot, as a killed process would be.
        }
        let mut b = Backend::open(c, &opts).unwrap();
        assert_eq!(b.recovery.journal_records_replayed, 11);
        let z = b.device().zns().unwrap().report(0, None, 2).unwrap();
        assert_eq!((z[0].wp, z[1].wp), (0, zs + 2));
        let mut out = vec![0u8; 8192];
        b.read(0, &mut out).unwrap();
        assert_eq!(out, vec![0u8; 8192]);
        b.read(zs * 4096, &mut out).unwrap();
        assert_eq!((&out[..4096], &out[4096..]), (&[2u8; 4096][..], &[3u8; 4096][..]));
        b.read(2 * zs * 4096, &mut out).unwrap();
        assert_eq!(out, vec![0u8; 8192], "the finished zone was reset with the others");
        drop(b);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
