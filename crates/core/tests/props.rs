//! Property tests of the conventional FTL on very small data-backed devices, where garbage
//! collection, wear-levelling and the write buffer all come into play within a few thousand
//! commands:
//!
//! 1. model equivalence: every read returns the model's last write (zeros for never-written or
//!    trimmed sectors), before and after a final flush, and the internal invariants hold;
//! 2. snapshot/restore mid-sequence: the restored device behaves exactly like the original
//!    (same data, same completion times, same counters, same state);
//! 3. rebuild from media: without trims, the mapping rebuilt from OOB alone equals the live one
//!    after every flush;
//! 4. mapped-sector accounting: `mapped_sectors()` equals the model's written sectors after
//!    every command;
//! 5. counter sanity: host counters match the commands, NAND writes cover host writes, the
//!    erase counter is the sum of per-block erase counts, and after a flush every programmed
//!    sector is a host sector, a GC relocation or padding.
//!
//! Runs use a fixed number of cases (`PROPTEST_CASES` overrides it) and a random seed that is
//! printed; `PROPTEST_RNG_SEED=<seed>` replays a run. Failures are shrunk and printed; nothing
//! is persisted to disk.

use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config as PtConfig, RngSeed, TestCaseError, TestError, TestRunner};
use ssdlab_core::config::{Config, GcPolicy, GcStreams, StorageMode};
use ssdlab_core::ftl::BlockDevice;
use ssdlab_core::media::presets::preset;
use ssdlab_core::Device;

// ---------------------------------------------------------------------------------------------
// Device configurations
// ---------------------------------------------------------------------------------------------

/// The knobs a case varies; `config()` turns them into a full config (preset "tiny").
#[derive(Debug, Clone)]
struct DevParams {
    channels: u32,
    dies_per_channel: u32,
    planes_per_die: u32,
    blocks_per_plane: u32,
    pages_per_block: u32,
    page_bytes: u32,
    spare_factor: f64,
    gc_policy: GcPolicy,
    gc_d: u32,
    /// 0 = write-through, 1 = one multi-plane unit, 2 = the preset's 256 KiB.
    buffer: u8,
    timing: bool,
    wl_dynamic: bool,
    wl_static_threshold: u32,
    factory_bad_fraction: f64,
    gc_streams: GcStreams,
    seed: u64,
}

impl DevParams {
    fn config(&self) -> Config {
        let mut c = preset("tiny").unwrap();
        c.seed = self.seed;
        c.storage = StorageMode::Data;
        c.geometry.channels = self.channels;
        c.geometry.dies_per_channel = self.dies_per_channel;
        c.geometry.planes_per_die = self.planes_per_die;
        c.geometry.blocks_per_plane = self.blocks_per_plane;
        c.geometry.pages_per_block = self.pages_per_block;
        c.geometry.page_bytes = self.page_bytes;
        c.timing.enabled = self.timing;
        c.ftl.spare_factor = self.spare_factor;
        c.ftl.gc_policy = self.gc_policy;
        c.ftl.gc_d = self.gc_d;
        c.ftl.write_buffer_bytes = match self.buffer {
            0 => 0,
            1 => self.page_bytes as u64 * self.planes_per_die as u64,
            _ => c.ftl.write_buffer_bytes,
        };
        c.ftl.wl_dynamic = self.wl_dynamic;
        c.ftl.wl_static_threshold = self.wl_static_threshold;
        c.media.factory_bad_fraction = self.factory_bad_fraction;
        c.ftl.gc_streams = self.gc_streams;
        c
    }
}

fn gc_policy() -> impl Strategy<Value = GcPolicy> {
    prop_oneof![Just(GcPolicy::Greedy), Just(GcPolicy::CostBenefit), Just(GcPolicy::Fifo), Just(GcPolicy::DChoices)]
}

fn dev_params() -> impl Strategy<Value = DevParams> {
    (
        (1u32..=2, 1u32..=2, 1u32..=2),
        (16u32..=32, 8u32..=16, prop_oneof![Just(4096u32), Just(8192), Just(16384)]),
        (0.2f64..0.35, gc_policy(), 1u32..=8),
        (0u8..=2, any::<bool>(), any::<bool>(), prop_oneof![2 => Just(0u32), 1 => 1u32..=4]),
        (
            prop_oneof![5 => Just(0.0f64), 1 => Just(0.03)],
            prop_oneof![2 => Just(GcStreams::Separate), 1 => Just(GcStreams::Shared), 1 => Just(GcStreams::ByAge)],
            0u64..=i64::MAX as u64, // TOML integers are i64
        ),
    )
        .prop_map(|((ch, dpc, planes), (bpp, ppb, page), (sf, pol, d), (buf, timing, wld, wls), (bad, gcs, seed))| DevParams {
            channels: ch,
            dies_per_channel: dpc,
            planes_per_die: planes,
            blocks_per_plane: bpp,
            pages_per_block: ppb,
            page_bytes: page,
            spare_factor: sf,
            gc_policy: pol,
            gc_d: d,
            buffer: buf,
            timing,
            wl_dynamic: wld,
            wl_static_threshold: wls,
            factory_bad_fraction: bad,
            gc_streams: gcs,
            seed,
        })
}

// ---------------------------------------------------------------------------------------------
// Host commands
// ---------------------------------------------------------------------------------------------

/// Sectors of the overwrite-heavy hot range at the start of the device.
const HOT_SECTORS: u64 = 48;

#[derive(Debug, Clone, Copy)]
enum Addr {
    /// A sector of the hot range.
    Hot(u16),
    /// Anywhere on the device (reduced modulo its size).
    Any(u32),
}

#[derive(Debug, Clone)]
enum Op {
    /// `content` 0 writes zeros; otherwise each sector gets its own pattern derived from it.
    Write {
        at: Addr,
        len: u8,
        fua: bool,
        content: u64,
    },
    Read {
        at: Addr,
        len: u8,
    },
    Trim {
        at: Addr,
        len: u8,
    },
    Flush,
    /// Let the device idle for a while (background GC when timing is on).
    Idle {
        us: u32,
    },
}

fn addr() -> impl Strategy<Value = Addr> {
    prop_oneof![3 => any::<u16>().prop_map(Addr::Hot), 2 => any::<u32>().prop_map(Addr::Any)]
}

fn op(trims: bool) -> impl Strategy<Value = Op> {
    let write = (addr(), 1u8..=8, prop::bool::weighted(0.1), prop_oneof![1 => Just(0u64), 30 => any::<u64>()])
        .prop_map(|(at, len, fua, content)| Op::Write { at, len, fua, content });
    let read = (addr(), 1u8..=8).prop_map(|(at, len)| Op::Read { at, len });
    let trim = (addr(), 1u8..=16).prop_map(|(at, len)| Op::Trim { at, len });
    let idle = (1u32..=20_000).prop_map(|us| Op::Idle { us });
    prop_oneof![
        60 => write,
        15 => read,
        if trims { 8 } else { 0 } => trim,
        3 => Just(Op::Flush),
        2 => idle,
    ]
}

fn ops(trims: bool) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(trims), 1..=3000)
}

fn span(at: Addr, len: u8, logical: u64) -> (u64, u64) {
    let len = (len as u64).min(logical);
    let lba = match at {
        Addr::Hot(i) => (i as u64 % HOT_SECTORS.min(logical)).min(logical - len),
        Addr::Any(x) => x as u64 % (logical - len + 1),
    };
    (lba, len)
}

/// Per-sector content tag of a write: 0 = zeros.
fn tag_of(content: u64, lba: u64) -> u64 {
    if content == 0 {
        return 0;
    }
    let mut x = content ^ lba.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 29;
    x | 1
}

fn fill_sector(tag: u64, out: &mut [u8]) {
    if tag == 0 {
        out.fill(0);
        return;
    }
    for (i, w) in out.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&(tag ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93)).to_le_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// Device under test plus its model
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq)]
struct HostTally {
    write_cmds: u64,
    read_cmds: u64,
    trim_cmds: u64,
    flush_cmds: u64,
    write_sectors: u64,
    read_sectors: u64,
    trim_sectors: u64,
}

/// The model: per logical sector, the content tag of its last write (None = unmapped).
#[derive(Clone)]
struct Model {
    sectors: Vec<Option<u64>>,
    mapped: u64,
    tally: HostTally,
}

impl Model {
    fn new(logical: u64) -> Model {
        Model { sectors: vec![None; logical as usize], mapped: 0, tally: HostTally::default() }
    }
    fn expected(&self, lba: u64, out: &mut [u8]) {
        fill_sector(self.sectors[lba as usize].unwrap_or(0), out)
    }
}

struct Harness {
    dev: Device,
    model: Model,
    sb: usize,
    logical: u64,
    timing: bool,
    buf: Vec<u8>,
    exp: Vec<u8>,
}

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

impl Harness {
    fn new(dev: Device) -> Harness {
        let sb = dev.config().geometry.sector_bytes as usize;
        let logical = dev.ftl().logical_sectors();
        let timing = dev.config().timing.enabled;
        Harness { dev, model: Model::new(logical), sb, logical, timing, buf: Vec::new(), exp: Vec::new() }
    }

    /// Run one command on device and model; returns its completion time (reads are checked).
    fn apply(&mut self, i: usize, op: &Op) -> Result<u64, TestCaseError> {
        let sb = self.sb;
        let done = match *op {
            Op::Write { at, len, fua, content } => {
                let (lba, n) = span(at, len, self.logical);
                self.buf.resize(n as usize * sb, 0);
                for k in 0..n {
                    let tag = tag_of(content, lba + k);
                    fill_sector(tag, &mut self.buf[k as usize * sb..(k as usize + 1) * sb]);
                    let slot = &mut self.model.sectors[(lba + k) as usize];
                    if slot.is_none() {
                        self.model.mapped += 1;
                    }
                    *slot = Some(tag);
                }
                self.model.tally.write_cmds += 1;
                self.model.tally.write_sectors += n;
                self.dev.write(lba * sb as u64, &self.buf, fua).map_err(|e| fail(format!("op {i} {op:?}: write failed: {e}")))?
            }
            Op::Read { at, len } => {
                let (lba, n) = span(at, len, self.logical);
                self.read_and_check(lba, n, &format!("op {i} {op:?}"))?
            }
            Op::Trim { at, len } => {
                let (lba, n) = span(at, len, self.logical);
                for k in lba..lba + n {
                    if self.model.sectors[k as usize].take().is_some() {
                        self.model.mapped -= 1;
                    }
                }
                self.model.tally.trim_cmds += 1;
                self.model.tally.trim_sectors += n;
                self.dev.trim(lba * sb as u64, n * sb as u64).map_err(|e| fail(format!("op {i} {op:?}: trim failed: {e}")))?
            }
            Op::Flush => {
                self.model.tally.flush_cmds += 1;
                self.dev.flush().map_err(|e| fail(format!("op {i} {op:?}: flush failed: {e}")))?
            }
            Op::Idle { us } => {
                let t = self.dev.now_ns() + us as u64 * 1000;
                self.dev.advance_to(t);
                self.dev.ftl_mut().idle(t);
                t
            }
        };
        // Queue depth 1: the next command is submitted when this one completes.
        if self.timing {
            self.dev.advance_to(done);
        }
        // Property 4, after every command.
        let mapped = self.dev.ftl().mapped_sectors();
        if mapped != self.model.mapped {
            return Err(fail(format!("after op {i} {op:?}: mapped_sectors() = {mapped}, model holds {}", self.model.mapped)));
        }
        Ok(done)
    }

    /// Read `n` sectors at `lba` and compare them with the model.
    fn read_and_check(&mut self, lba: u64, n: u64, what: &str) -> Result<u64, TestCaseError> {
        let sb = self.sb;
        self.model.tally.read_cmds += 1;
        self.model.tally.read_sectors += n;
        self.buf.resize(n as usize * sb, 0);
        self.buf.fill(0xA5); // the device must overwrite every byte
        let done = self.dev.read(lba * sb as u64, &mut self.buf).map_err(|e| fail(format!("{what}: read failed: {e}")))?;
        self.exp.resize(sb, 0);
        for k in 0..n {
            let l = lba + k;
            self.model.expected(l, &mut self.exp);
            let got = &self.buf[k as usize * sb..(k as usize + 1) * sb];
            if got != &self.exp[..] {
                let first = u64::from_le_bytes(got[..8].try_into().unwrap());
                return Err(fail(format!(
                    "{what}: sector {l} reads wrong data: expected tag {:?} (None = never written / trimmed), got first word {first:#018x}{}",
                    self.model.sectors[l as usize],
                    if got.iter().all(|&b| b == 0) { " (all zeros)" } else { "" }
                )));
            }
        }
        Ok(done)
    }

    /// Read the whole device back and compare with the model.
    fn check_all_sectors(&mut self, what: &str) -> Result<(), TestCaseError> {
        let mut lba = 0;
        while lba < self.logical {
            let n = 64.min(self.logical - lba);
            self.read_and_check(lba, n, what)?;
            lba += n;
        }
        Ok(())
    }

    fn check_invariants(&self, what: &str) -> Result<(), TestCaseError> {
        let ftl = self.dev.ftl();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ftl.check_invariants())).map_err(|e| {
            let msg = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            fail(format!("{what}: check_invariants failed: {msg}"))
        })
    }

    /// Property 5 (counter sanity); `flushed` = nothing is waiting in the write buffers.
    fn check_counters(&self, flushed: bool) -> Result<(), TestCaseError> {
        let ftl = self.dev.ftl();
        let c = ftl.counters().clone();
        let sb = self.sb as u64;
        let lay = ftl.layout();
        let t = &self.model.tally;
        prop_assert_eq!(c.host_write_cmds, t.write_cmds);
        prop_assert_eq!(c.host_read_cmds, t.read_cmds);
        prop_assert_eq!(c.host_trim_cmds, t.trim_cmds);
        prop_assert_eq!(c.host_flush_cmds, t.flush_cmds);
        prop_assert_eq!(c.host_write_bytes, t.write_sectors * sb);
        prop_assert_eq!(c.host_read_bytes, t.read_sectors * sb);
        prop_assert_eq!(c.host_trim_bytes, t.trim_sectors * sb);
        let erases: u64 = ftl.blocks().iter().map(|b| b.erase_count as u64).sum();
        prop_assert_eq!(c.nand_erase_count, erases, "nand_erase_count != sum of per-block erase counts");
        prop_assert_eq!(c.nand_write_bytes, c.nand_page_programs * lay.page_bytes as u64);
        prop_assert_eq!(c.nand_read_bytes, c.nand_page_reads * lay.page_bytes as u64);
        let nand_sectors = c.nand_write_bytes / sb;
        prop_assert!(
            c.gc_relocated_sectors <= nand_sectors,
            "gc_relocated_sectors {} > NAND writes {} sectors",
            c.gc_relocated_sectors,
            nand_sectors
        );
        prop_assert!(c.gc_relocated_pages <= c.nand_page_programs);
        // Every victim picked is finished in the foreground or background, moved by static
        // wear-levelling, or still being collected.
        prop_assert_eq!(c.gc_events, c.gc_foreground_events + c.gc_background_events + c.wl_static_moves + ftl.gc_in_progress() as u64);
        if flushed {
            if c.host_write_bytes > 0 {
                prop_assert!(
                    c.nand_write_bytes >= c.host_write_bytes,
                    "nand_write_bytes {} < host_write_bytes {}",
                    c.nand_write_bytes,
                    c.host_write_bytes
                );
            }
            // Relocated sectors still in the GC buffer are programmed by now.
            prop_assert!(c.gc_relocated_sectors <= c.gc_relocated_pages * lay.sectors_per_page as u64);
            // Every programmed sector slot holds a host sector (possibly overwritten while
            // buffered and programmed as padding), a GC relocation, or flush/FUA padding.
            prop_assert_eq!(
                nand_sectors,
                t.write_sectors + c.pad_sectors + c.gc_relocated_sectors,
                "programmed sectors != host + pad + relocated ({:?})",
                c
            );
        }
        Ok(())
    }

    /// End-of-case checks shared by every property: invariants, whole-device read-back before
    /// and after a final flush, accounting and counters.
    fn finish(&mut self) -> Result<(), TestCaseError> {
        self.check_invariants("end of sequence")?;
        self.check_all_sectors("final read-back")?;
        self.check_counters(false)?;
        self.model.tally.flush_cmds += 1;
        self.dev.flush().map_err(|e| fail(format!("final flush failed: {e}")))?;
        self.check_invariants("after final flush")?;
        self.check_all_sectors("read-back after final flush")?;
        prop_assert_eq!(self.dev.ftl().mapped_sectors(), self.model.mapped);
        self.check_counters(true)?;
        Ok(())
    }
}

/// Build the device; configs the FTL rejects are skipped (rare, see `most_configs_are_valid`).
fn device(p: &DevParams) -> Result<Device, TestCaseError> {
    let dev = Device::new(p.config());
    prop_assume!(dev.is_ok(), "config rejected: {}", dev.as_ref().err().unwrap());
    Ok(dev.unwrap())
}

/// Commands between two `check_invariants()` calls within a sequence.
const CHECK_INVARIANTS_EVERY: usize = 500;

// ---------------------------------------------------------------------------------------------
// Runner
// ---------------------------------------------------------------------------------------------

/// Run `test` over `cases` inputs from `strategy` with a printed, replayable seed; panic with
/// the shrunk input on failure.
fn run_prop<S: Strategy>(name: &str, cases: u32, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    let seed = std::env::var("PROPTEST_RNG_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        t.as_nanos() as u64 ^ ((std::process::id() as u64) << 32)
    });
    eprintln!("{name}: {cases} cases, PROPTEST_RNG_SEED={seed}");
    let config = PtConfig {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        max_global_rejects: cases * 4,
        max_shrink_iters: 1_000_000,
        max_shrink_time: std::env::var("PROPTEST_MAX_SHRINK_TIME").ok().and_then(|v| v.parse().ok()).unwrap_or(120_000),
        ..PtConfig::default()
    };
    let mut runner = TestRunner::new(config);
    match runner.run(&strategy, test) {
        Ok(()) => {}
        Err(TestError::Fail(reason, value)) => {
            panic!("{name} failed (PROPTEST_RNG_SEED={seed}): {reason}\nminimal failing input:\n{value:#?}")
        }
        Err(e) => panic!("{name}: {e} (PROPTEST_RNG_SEED={seed})"),
    }
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

/// Properties 1, 4 and 5: reads always return the model's contents.
#[test]
fn reads_match_model_and_accounting_holds() {
    let run = AtomicU64::new(0);
    let with_gc = AtomicU64::new(0);
    run_prop("model equivalence", 96, (dev_params(), ops(true)), |(p, ops)| {
        let dev = device(&p)?;
        let mut h = Harness::new(dev);
        for (i, op) in ops.iter().enumerate() {
            h.apply(i, op)?;
            if (i + 1) % CHECK_INVARIANTS_EVERY == 0 {
                h.check_invariants(&format!("after op {i}"))?;
            }
        }
        h.finish()?;
        run.fetch_add(1, Ordering::Relaxed);
        if h.dev.ftl().counters().gc_events > 0 {
            with_gc.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    });
    let (run, with_gc) = (run.into_inner(), with_gc.into_inner());
    eprintln!("model equivalence: {with_gc} of {run} passing cases ran GC");
    // The property is only worth something if GC runs in a good share of the cases.
    assert!(with_gc * 3 >= run, "only {with_gc} of {run} cases ran garbage collection");
}

/// Property 2: snapshot at a random point, restore, and run the rest on both devices.
#[test]
fn restored_snapshot_behaves_like_the_original() {
    let n = AtomicU64::new(0);
    run_prop("snapshot/restore", 48, (dev_params(), ops(true), any::<prop::sample::Index>()), |(p, ops, cut)| {
        let dev = device(&p)?;
        let cut = cut.index(ops.len() + 1);
        let mut a = Harness::new(dev);
        for (i, op) in ops[..cut].iter().enumerate() {
            a.apply(i, op)?;
        }
        let path = std::env::temp_dir().join(format!("ssdlab-props-{}-{}.snap", std::process::id(), n.fetch_add(1, Ordering::Relaxed)));
        let snap = a.dev.snapshot(&path);
        let restored = Device::restore(&path);
        let _ = std::fs::remove_file(&path);
        snap.map_err(|e| fail(format!("snapshot after {cut} ops failed: {e}")))?;
        let restored = restored.map_err(|e| fail(format!("restore after {cut} ops failed: {e}")))?;
        let mut b = Harness {
            dev: restored,
            model: a.model.clone(),
            sb: a.sb,
            logical: a.logical,
            timing: a.timing,
            buf: Vec::new(),
            exp: Vec::new(),
        };
        prop_assert_eq!(b.dev.now_ns(), a.dev.now_ns());
        prop_assert_eq!(b.dev.config(), a.dev.config());
        prop_assert_eq!(b.dev.ftl().counters(), a.dev.ftl().counters());
        prop_assert_eq!(b.dev.ftl().l2p(), a.dev.ftl().l2p());
        b.check_invariants("restored device")?;
        for (i, op) in ops.iter().enumerate().skip(cut) {
            let ta = a.apply(i, op).map_err(|e| fail(format!("original device: {e}")))?;
            let tb = b.apply(i, op).map_err(|e| fail(format!("restored device (snapshot after {cut} ops): {e}")))?;
            prop_assert_eq!(ta, tb, "op {} {:?}: completion times differ (original vs restored)", i, op);
        }
        prop_assert_eq!(a.dev.ftl().counters(), b.dev.ftl().counters(), "counters differ at the end");
        prop_assert_eq!(a.dev.now_ns(), b.dev.now_ns());
        prop_assert!(
            bincode::serialize(&a.dev).unwrap() == bincode::serialize(&b.dev).unwrap(),
            "device states differ at the end (snapshot after {} ops)",
            cut
        );
        a.finish().map_err(|e| fail(format!("original device: {e}")))?;
        b.finish().map_err(|e| fail(format!("restored device: {e}")))?;
        prop_assert_eq!(a.dev.ftl().counters(), b.dev.ftl().counters(), "counters differ after the final flush");
        Ok(())
    });
}

/// Property 3: without trims, after every flush the mapping rebuilt from the media alone
/// (OOB addresses and page sequence numbers) equals the live mapping.
#[test]
fn mapping_rebuilt_from_media_matches_after_flush() {
    run_prop("rebuild from media", 96, (dev_params(), ops(false)), |(p, ops)| {
        let dev = device(&p)?;
        let mut h = Harness::new(dev);
        let check = |h: &Harness, what: &str| -> Result<(), TestCaseError> {
            let ftl = h.dev.ftl();
            let rebuilt = ftl.rebuild_l2p_from_media();
            let live = ftl.l2p();
            prop_assert_eq!(rebuilt.len(), live.len());
            let wrong: Vec<usize> = (0..live.len()).filter(|&l| rebuilt[l] != live[l]).collect();
            if let Some(&l) = wrong.first() {
                return Err(fail(format!(
                    "{what}: {} of {} sectors rebuilt wrong; first: sector {l} live psa {:#x}, rebuilt {:#x}",
                    wrong.len(),
                    live.len(),
                    live[l],
                    rebuilt[l]
                )));
            }
            Ok(())
        };
        for (i, op) in ops.iter().enumerate() {
            h.apply(i, op)?;
            if matches!(op, Op::Flush) {
                check(&h, &format!("after op {i} (flush)"))?;
            }
        }
        h.finish()?;
        check(&h, "after the final flush")?;
        Ok(())
    });
}

/// Regression (found by the properties above): a host write whose own command triggers paced
/// GC, when that GC picks the block the write has just closed (d-choices with d = 1 picks any
/// full block), relocates the new sector before its data is stored; the data is then stored at
/// the old, erased location and lost (the sector reads zeros), and the stray copy later trips
/// the data store's "relocation onto a non-erased sector" assertion.
#[test]
fn write_relocated_by_its_own_gc_keeps_its_data() {
    // Also where GC writes into the host stream itself (shared) or into two GC streams.
    for gc_streams in [GcStreams::Separate, GcStreams::Shared, GcStreams::ByAge] {
        let p = DevParams {
            channels: 1,
            dies_per_channel: 1,
            planes_per_die: 1,
            blocks_per_plane: 22,
            pages_per_block: 8,
            page_bytes: 4096,
            // The second GC stream of by-age holds one more block open.
            spare_factor: if gc_streams == GcStreams::ByAge { 0.36 } else { 0.32 },
            gc_policy: GcPolicy::DChoices,
            gc_d: 1,
            buffer: 0,
            timing: false,
            wl_dynamic: false,
            wl_static_threshold: 0,
            factory_bad_fraction: 0.0,
            gc_streams,
            seed: 0,
        };
        let mut h = Harness::new(Device::new(p.config()).unwrap());
        // Single-sector overwrites cycling over the whole device, each read back at once.
        let logical = h.logical as u32;
        for i in 0..5000u32 {
            let at = Addr::Any(i % logical);
            h.apply(i as usize, &Op::Write { at, len: 1, fua: false, content: i as u64 + 1 }).unwrap();
            h.apply(i as usize, &Op::Read { at, len: 1 }).unwrap_or_else(|e| panic!("{gc_streams:?}: {e}"));
        }
        h.finish().unwrap_or_else(|e| panic!("{gc_streams:?}: {e}"));
    }
}

/// Rejected configs are skipped with `prop_assume`-style rejection; make sure that is rare,
/// so the properties above really run on the configs they generate.
#[test]
fn most_configs_are_valid() {
    let mut runner = TestRunner::deterministic();
    let strategy = dev_params();
    let total = 2000;
    let mut ok = 0;
    let mut reasons = std::collections::BTreeMap::<String, u32>::new();
    for _ in 0..total {
        let p = strategy.new_tree(&mut runner).unwrap().current();
        match Device::new(p.config()) {
            Ok(_) => ok += 1,
            Err(e) => {
                if reasons.is_empty() {
                    eprintln!("first rejection: {e} ({p:?})");
                }
                *reasons.entry(e.to_string().split(':').next().unwrap_or("").to_string()).or_default() += 1
            }
        }
    }
    eprintln!("{ok} of {total} generated configs are valid; rejections: {reasons:?}");
    assert!(ok * 100 >= total * 80, "only {ok} of {total} generated configs are valid: {reasons:?}");
}
