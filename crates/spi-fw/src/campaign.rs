//! A power-cut campaign: littlefs on the emulated chip through a driver, a seeded workload of
//! file writes, appends, renames and deletes, and a power cut at each of many frames spread over
//! the workload's SPI transactions. After each cut the chip powers up (tPUW waited), littlefs
//! mounts it again and every file must hold its content from before or after the operation the
//! cut interrupted (littlefs's promise); the file system must also take a new file.
//!
//! One workload run serves every cut point: the chip is forked at each chosen frame (a copy of
//! it, power cut as that frame begins) and each copy is checked when the operation that was
//! running returns. A dry run first counts the frames so the cut points can be spread over them.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use littlefs2::consts;
use littlefs2::driver::Storage;
use littlefs2::fs::Filesystem;
use littlefs2::io::{Error as FsError, Result as FsResult};
use littlefs2::path::PathBuf;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};
use ssdlab_spi::hal::{self, Shared};
use ssdlab_spi::{part, parts, Flash, Options, TimingMode, WearOut};

use crate::driver::{self, DriverKind, DrvError, Forks, NorDriver};

/// A campaign's settings (a TOML file; every key optional).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub chip: String,
    /// datasheet, max, instant or scale=X (as `ssdlab spi serve --timing`).
    pub timing: String,
    pub driver: DriverKind,
    /// littlefs's size in 4 KiB blocks from address 0: 64, 128 or 256.
    pub fs_blocks: u32,
    /// Operations of the workload (file writes, appends, renames, deletes).
    pub ops: u32,
    /// Distinct file names the workload uses.
    pub files: u32,
    /// Largest file write or append, bytes.
    pub max_write_bytes: u32,
    /// Cut points to try.
    pub cuts: u32,
    pub seed: u64,
    /// What erases past the endurance rating do: counted, erase-fails or bits-stick.
    pub wear_out: String,
    /// Endurance rating override (cycles); none: the part's.
    pub endurance_cycles: Option<u32>,
    /// Replay only the cut at this frame (a failure's replay command).
    pub only_frame: Option<u64>,
    /// Hand littlefs a failed read-back as LFS_ERR_CORRUPT (it relocates the block) rather than
    /// LFS_ERR_IO (it gives up): the glue's choice, worth a campaign of its own.
    pub verify_as_corrupt: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            chip: "W25Q128JV".into(),
            timing: "datasheet".into(),
            driver: DriverKind::W25q32jv,
            fs_blocks: 64,
            ops: 120,
            files: 6,
            max_write_bytes: 3000,
            cuts: 500,
            seed: 1,
            wear_out: "counted".into(),
            endurance_cycles: None,
            only_frame: None,
            verify_as_corrupt: true,
        }
    }
}

impl Config {
    pub fn from_toml(text: &str) -> Result<Config, String> {
        let c: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        c.check()?;
        Ok(c)
    }

    pub fn check(&self) -> Result<(), String> {
        let p = part(&self.chip).ok_or_else(|| format!("chip {:?}: known chips are {}", self.chip, parts::NAMES.join(", ")))?;
        TimingMode::parse(&self.timing).map_err(|e| e.to_string())?;
        WearOut::parse(&self.wear_out).map_err(|e| e.to_string())?;
        if ![64, 128, 256].contains(&self.fs_blocks) {
            return Err(format!("fs_blocks {}: expected 64, 128 or 256", self.fs_blocks));
        }
        if self.fs_blocks * 4096 > p.size_bytes {
            return Err(format!("fs_blocks {}: more than the {}'s {} bytes", self.fs_blocks, p.name, p.size_bytes));
        }
        if self.driver == DriverKind::W25q32jv && !p.name.starts_with("W25Q128") {
            return Err(format!("driver w25q32jv is built for the 128 Mbit W25Q128JV, not the {}: use driver = \"minimal\"", p.name));
        }
        if self.ops == 0 || self.files == 0 || self.max_write_bytes == 0 {
            return Err("ops, files and max_write_bytes must be > 0".into());
        }
        if self.max_write_bytes > 64 * 1024 {
            return Err(format!("max_write_bytes {}: at most 65536", self.max_write_bytes));
        }
        Ok(())
    }

    fn chip(&self) -> Result<Flash, String> {
        let opts = Options {
            timing: TimingMode::parse(&self.timing).map_err(|e| e.to_string())?,
            power_seed: self.seed,
            wear_out: WearOut::parse(&self.wear_out).map_err(|e| e.to_string())?,
            endurance_cycles: self.endurance_cycles,
            ..Options::default()
        };
        Flash::new(part(&self.chip).expect("checked"), None, opts).map_err(|e| e.to_string())
    }
}

/// One workload operation.
#[derive(Debug, Clone, Serialize)]
pub enum Op {
    Write(String, Vec<u8>),
    Append(String, Vec<u8>),
    Rename(String, String),
    Delete(String),
}

impl Op {
    fn describe(&self) -> String {
        match self {
            Op::Write(p, d) => format!("write {p} ({} B)", d.len()),
            Op::Append(p, d) => format!("append {p} (+{} B)", d.len()),
            Op::Rename(a, b) => format!("rename {a} -> {b}"),
            Op::Delete(p) => format!("delete {p}"),
        }
    }
}

/// Files by name.
type Tree = BTreeMap<String, Vec<u8>>;

/// The seeded workload, and the tree after each operation.
fn workload(c: &Config) -> Vec<Op> {
    let mut rng = Pcg64Mcg::seed_from_u64(c.seed ^ 0x6c66_7377);
    let mut tree = Tree::new();
    let name = |i: u32| format!("/f{i}");
    let mut ops = Vec::new();
    for _ in 0..c.ops {
        let existing: Vec<String> = tree.keys().cloned().collect();
        let pick = rng.gen_range(0..100);
        let data = |rng: &mut Pcg64Mcg| {
            let n = rng.gen_range(1..=c.max_write_bytes as usize);
            (0..n).map(|_| rng.gen::<u8>()).collect::<Vec<u8>>()
        };
        let op = if existing.is_empty() || pick < 45 {
            Op::Write(name(rng.gen_range(0..c.files)), data(&mut rng))
        } else if pick < 70 {
            let p = existing[rng.gen_range(0..existing.len())].clone();
            let d = data(&mut rng);
            Op::Append(p, d[..d.len().min(c.max_write_bytes as usize / 2 + 1)].to_vec())
        } else if pick < 85 {
            let p = existing[rng.gen_range(0..existing.len())].clone();
            let to = name(rng.gen_range(0..c.files));
            if to == p {
                Op::Delete(p)
            } else {
                Op::Rename(p, to)
            }
        } else {
            Op::Delete(existing[rng.gen_range(0..existing.len())].clone())
        };
        apply(&mut tree, &op);
        ops.push(op);
    }
    ops
}

fn apply(tree: &mut Tree, op: &Op) {
    match op {
        Op::Write(p, d) => {
            tree.insert(p.clone(), d.clone());
        }
        Op::Append(p, d) => tree.entry(p.clone()).or_default().extend_from_slice(d),
        Op::Rename(a, b) => {
            if let Some(v) = tree.remove(a) {
                tree.insert(b.clone(), v);
            }
        }
        Op::Delete(p) => {
            tree.remove(p);
        }
    }
}

/// littlefs's view of the chip: `B` blocks of 4 KiB from address 0, through a driver.
struct Dev<'a, const B: usize> {
    drv: Box<dyn NorDriver + 'a>,
    verify_as_corrupt: bool,
    /// The first driver error since the last look (littlefs only sees a code).
    err: Option<String>,
}

impl<const B: usize> Dev<'_, B> {
    /// A failed read-back is LFS_ERR_CORRUPT, littlefs's "this block is bad" (it relocates the
    /// data, as after a cut that left a page half programmed); anything else is LFS_ERR_IO.
    fn io<T>(&mut self, r: Result<T, DrvError>) -> FsResult<T> {
        r.map_err(|e| {
            let code = if e == DrvError::Verify && self.verify_as_corrupt { FsError::CORRUPTION } else { FsError::IO };
            self.err.get_or_insert(e.to_string());
            code
        })
    }
}

/// A littlefs error with its code.
fn fs_err(e: FsError) -> String {
    let name = match e {
        FsError::IO => "LFS_ERR_IO",
        FsError::CORRUPTION => "LFS_ERR_CORRUPT",
        FsError::NO_SUCH_ENTRY => "LFS_ERR_NOENT",
        FsError::NO_SPACE => "LFS_ERR_NOSPC",
        FsError::INVALID => "LFS_ERR_INVAL",
        _ => "littlefs error",
    };
    format!("{name} ({})", e.code())
}

impl<const B: usize> Storage for Dev<'_, B> {
    const READ_SIZE: usize = 16;
    const WRITE_SIZE: usize = 256;
    const BLOCK_SIZE: usize = 4096;
    const BLOCK_COUNT: usize = B;
    const BLOCK_CYCLES: isize = 100;
    type CACHE_SIZE = consts::U256;
    type LOOKAHEAD_SIZE = consts::U8;

    fn read(&mut self, off: usize, buf: &mut [u8]) -> FsResult<usize> {
        let r = self.drv.read(off as u32, buf);
        self.io(r).map(|_| buf.len())
    }
    fn write(&mut self, off: usize, data: &[u8]) -> FsResult<usize> {
        let r = self.drv.program(off as u32, data);
        self.io(r).map(|_| data.len())
    }
    fn erase(&mut self, off: usize, len: usize) -> FsResult<usize> {
        for b in (off..off + len).step_by(4096) {
            let r = self.drv.erase_sector((b / 4096) as u32);
            self.io(r)?;
        }
        Ok(len)
    }
}

fn path(p: &str) -> PathBuf {
    PathBuf::try_from(p).expect("workload paths are short ASCII")
}

fn run_op<S: Storage>(fs: &Filesystem<'_, S>, op: &Op) -> FsResult<()> {
    match op {
        Op::Write(p, d) => fs.write(&path(p), d),
        Op::Append(p, d) => {
            fs.open_file_with_options_and_then(|o| o.write(true).create(true).append(true), &path(p), |f| f.write(d).map(|_| ()))
        }
        Op::Rename(a, b) => fs.rename(&path(a), &path(b)),
        Op::Delete(p) => fs.remove(&path(p)),
    }
}

/// The files on a mounted file system (the workload keeps them in the root).
fn read_tree<S: Storage>(fs: &Filesystem<'_, S>) -> FsResult<Tree> {
    let names = fs.read_dir_and_then(&path("/"), |dir| {
        let mut v = Vec::new();
        for e in dir {
            let e = e?;
            if e.file_type().is_file() {
                v.push(format!("/{}", e.file_name()));
            }
        }
        Ok(v)
    })?;
    let mut tree = Tree::new();
    for n in names {
        let data = fs.open_file_and_then(&path(&n), |f| {
            let mut v = vec![0u8; f.len()?];
            let mut at = 0;
            while at < v.len() {
                let k = f.read(&mut v[at..])?;
                if k == 0 {
                    break;
                }
                at += k;
            }
            v.truncate(at);
            Ok(v)
        })?;
        tree.insert(n, data);
    }
    Ok(tree)
}

/// A cut point that broke littlefs's promise.
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    pub frame: u64,
    /// The operation that was running (index into the workload) and what it was.
    pub op: usize,
    pub op_desc: String,
    /// What the cut interrupted on the chip ("program", "erase", "" ...) and how far it was.
    pub interrupted: String,
    pub fraction: f64,
    pub what: String,
}

/// A campaign's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub config: Config,
    pub frames_total: u64,
    pub cut_points: u64,
    /// Cut points by what they interrupted on the chip.
    pub interrupted: BTreeMap<String, u64>,
    pub violations: Vec<Violation>,
    /// Workload operations that failed without any cut (a driver or file-system error).
    pub workload_errors: Vec<String>,
    /// Simulated time of the workload and wall time of the whole campaign.
    pub simulated_ns: u64,
    pub wall_s: f64,
    /// Wear of the file system's sectors at the end of the workload.
    pub max_erase_count: u32,
    pub mean_erase_count: f64,
    pub sectors_beyond_endurance: usize,
    pub endurance_cycles: u32,
    pub page_programs: u64,
    pub sector_erases: u64,
}

impl Report {
    fn unusable(c: &Config, why: String, t0: Instant) -> Report {
        Report {
            config: c.clone(),
            frames_total: 0,
            cut_points: 0,
            interrupted: BTreeMap::new(),
            violations: Vec::new(),
            workload_errors: vec![why],
            simulated_ns: 0,
            wall_s: t0.elapsed().as_secs_f64(),
            max_erase_count: 0,
            mean_erase_count: 0.0,
            sectors_beyond_endurance: 0,
            endurance_cycles: 0,
            page_programs: 0,
            sector_erases: 0,
        }
    }

    /// Did littlefs keep its promise at every cut, with no error outside the cuts?
    pub fn clean(&self) -> bool {
        self.violations.is_empty() && self.workload_errors.is_empty()
    }
}

/// Run a campaign. `progress` is told (cut points checked, of how many) now and then.
pub fn run(c: &Config, progress: &mut dyn FnMut(u64, u64)) -> Result<Report, String> {
    c.check()?;
    match c.fs_blocks {
        64 => run_on::<64>(c, progress),
        128 => run_on::<128>(c, progress),
        _ => run_on::<256>(c, progress),
    }
}

/// One pass of the workload: fork the chip at `cuts` (frames) and hand each fork, as it is
/// taken, to `on_fork` with the index of the operation it interrupted.
struct Pass<'a> {
    chip: Shared,
    forks: Rc<RefCell<Forks<'a>>>,
    /// Frame count when the file system was formatted and mounted (cuts start after).
    formatted_at: u64,
    errors: Vec<String>,
}

fn pass<'a, const B: usize>(
    c: &Config,
    ops: &[Op],
    cuts: Vec<u64>,
    on_fork: Option<&'a mut dyn FnMut(usize, u64, Flash)>,
) -> Result<Pass<'a>, String> {
    let chip = hal::shared(c.chip()?);
    let op_now = Rc::new(std::cell::Cell::new(0usize));
    let hook: Option<driver::ForkHook<'a>> = on_fork.map(|f| {
        let op_now = op_now.clone();
        Box::new(move |frame: u64, fork: Flash| f(op_now.get(), frame, fork)) as driver::ForkHook<'a>
    });
    let forks = Rc::new(RefCell::new(Forks { commands: cuts.is_empty().then(Vec::new), hook, ..Forks::default() }));
    let mut dev = Dev::<B> { drv: driver::open(c.driver, &chip, forks.clone()), verify_as_corrupt: c.verify_as_corrupt, err: None };
    Filesystem::format(&mut dev).map_err(|e| format!("littlefs format: {}: {}", fs_err(e), dev.err.take().unwrap_or_default()))?;
    let formatted_at = chip.borrow().frames_begun();
    let mut pending = cuts;
    pending.sort_unstable_by(|a, b| b.cmp(a));
    forks.borrow_mut().pending = pending;
    let mut alloc = Filesystem::allocate();
    let mut errors = Vec::new();
    {
        let fs = Filesystem::mount(&mut alloc, &mut dev).map_err(|e| format!("littlefs mount after format: {}", fs_err(e)))?;
        for (i, op) in ops.iter().enumerate() {
            op_now.set(i);
            if let Err(e) = run_op(&fs, op) {
                errors.push(format!("op {i} ({}): {}", op.describe(), fs_err(e)));
            }
        }
    }
    Ok(Pass { chip, forks, formatted_at, errors })
}

fn run_on<const B: usize>(c: &Config, progress: &mut dyn FnMut(u64, u64)) -> Result<Report, String> {
    let t0 = Instant::now();
    let ops = workload(c);
    // Dry run: how many frames the workload takes. A driver that cannot even format and mount
    // is reported as such (no cut points).
    let dry = match pass::<B>(c, &ops, Vec::new(), None) {
        Ok(p) => p,
        Err(e) => return Ok(Report::unusable(c, e, t0)),
    };
    let total = dry.chip.borrow().frames_begun();
    let first = dry.formatted_at + 1;
    let cuts: Vec<u64> = match c.only_frame {
        Some(f) => vec![f],
        None => {
            // Half the cut points uniform over all frames (so over time while the driver polls a
            // busy chip), half over the frames that carry a command (the moments between
            // commands: after WREN, before a program's CS# rises, between operations).
            let commands: Vec<u64> =
                dry.forks.borrow_mut().commands.take().unwrap_or_default().into_iter().filter(|&f| f >= first).collect();
            let mut rng = Pcg64Mcg::seed_from_u64(c.seed ^ 0x6375_7473);
            let mut set = std::collections::BTreeSet::new();
            let span = total.saturating_sub(first) + 1;
            let want = (c.cuts as u64).min(span) as usize;
            let mut tries = 0u64;
            while set.len() < want && tries < 20 * want as u64 + 100 {
                let f = if tries % 2 == 1 && !commands.is_empty() {
                    commands[rng.gen_range(0..commands.len())]
                } else {
                    rng.gen_range(first..=total.max(first))
                };
                set.insert(f);
                tries += 1;
            }
            set.into_iter().collect()
        }
    };
    let n_cuts = cuts.len() as u64;
    // The trees before and after each operation.
    let mut trees = vec![Tree::new()];
    for op in &ops {
        let mut t = trees.last().expect("one").clone();
        apply(&mut t, op);
        trees.push(t);
    }
    let mut violations = Vec::new();
    let mut interrupted: BTreeMap<String, u64> = BTreeMap::new();
    let mut done = 0u64;
    let mut on_fork = |i: usize, frame: u64, fork: Flash| {
        let cut = fork.last_power_cut().cloned();
        let kind = cut.as_ref().map(|r| if r.interrupted.is_empty() { "idle chip" } else { r.interrupted }).unwrap_or("?");
        *interrupted.entry(kind.to_string()).or_default() += 1;
        if let Err(what) = check::<B>(c, fork, &ops[i], &trees[i], &trees[i + 1]) {
            violations.push(Violation {
                frame,
                op: i,
                op_desc: ops[i].describe(),
                interrupted: cut.as_ref().map(|r| r.interrupted.to_string()).unwrap_or_default(),
                fraction: cut.as_ref().map(|r| r.fraction).unwrap_or(0.0),
                what,
            });
        }
        done += 1;
        if done.is_multiple_of(50) {
            progress(done, n_cuts);
        }
    };
    let real = pass::<B>(c, &ops, cuts, Some(&mut on_fork))?;
    let (chip, errors) = (real.chip.clone(), real.errors.clone());
    drop(real);
    progress(done, n_cuts);
    let chip = chip.borrow();
    let sectors = &chip.erase_counts()[..B];
    let s = chip.stats();
    Ok(Report {
        config: c.clone(),
        frames_total: total,
        cut_points: n_cuts,
        interrupted,
        violations,
        workload_errors: errors,
        simulated_ns: chip.now_ns(),
        wall_s: t0.elapsed().as_secs_f64(),
        max_erase_count: sectors.iter().copied().max().unwrap_or(0),
        mean_erase_count: sectors.iter().map(|&x| x as f64).sum::<f64>() / B as f64,
        sectors_beyond_endurance: chip.sectors_beyond_endurance(),
        endurance_cycles: chip.endurance(),
        page_programs: s.programs,
        sector_erases: s.sector_erases,
    })
}

/// Power back on a forked chip, mount, compare with the trees before and after the operation the
/// cut interrupted, and write one more file.
/// littlefs commits a new file's name when the file is opened (`lfs_file_open` with
/// `LFS_O_CREAT` writes the directory entry), and its data when it is closed: a cut in between
/// leaves the file, empty. For the operation that created `n` that is a third acceptable state.
fn check<const B: usize>(c: &Config, mut chip: Flash, op: &Op, before: &Tree, after: &Tree) -> Result<(), String> {
    chip.power_up();
    // The board waits tPUW before it lets firmware write (the datasheet's power-up timing).
    let t = chip.part().power_up_write_ns;
    chip.advance(TimingMode::parse(&c.timing).map_err(|e| e.to_string())?.apply(t));
    let chip = hal::shared(chip);
    let forks = Rc::new(RefCell::new(Forks::default()));
    let mut dev = Dev::<B> { drv: driver::open(c.driver, &chip, forks), verify_as_corrupt: c.verify_as_corrupt, err: None };
    let mut alloc = Filesystem::allocate();
    let fs = Filesystem::mount(&mut alloc, &mut dev).map_err(|e| format!("does not mount: {}", fs_err(e)))?;
    let got = read_tree(&fs).map_err(|e| format!("cannot read the tree back: {}", fs_err(e)))?;
    let names: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).chain(got.keys()).collect();
    for n in names {
        let g = got.get(n);
        let created = matches!(op, Op::Write(p, _) | Op::Append(p, _) if p == n) && !before.contains_key(n);
        let empty_new = created && g.is_some_and(|v| v.is_empty());
        if g != before.get(n) && g != after.get(n) && !empty_new {
            let show = |v: Option<&Vec<u8>>| v.map(|v| format!("{} B", v.len())).unwrap_or_else(|| "absent".into());
            return Err(format!("{n}: {} on flash; {} before the operation, {} after", show(g), show(before.get(n)), show(after.get(n))));
        }
    }
    fs.write(&path("/after-cut"), b"the file system takes writes again")
        .map_err(|e| format!("mounted, but a new file cannot be written: {}", fs_err(e)))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_is_seeded() {
        let c = Config::default();
        let a = format!("{:?}", workload(&c));
        assert_eq!(a, format!("{:?}", workload(&c)));
        assert_ne!(a, format!("{:?}", workload(&Config { seed: 2, ..c.clone() })));
    }

    #[test]
    fn bad_settings_are_refused_with_what_is_valid() {
        for (toml, want) in [
            ("chip = \"nope\"", "known chips"),
            ("fs_blocks = 100", "64, 128 or 256"),
            ("driver = \"w25q32jv\"\nchip = \"W25Q16JV\"", "minimal"),
            ("timing = \"fast\"", "datasheet"),
            ("cutz = 3", "unknown field"),
        ] {
            let e = Config::from_toml(toml).unwrap_err();
            assert!(e.contains(want), "{toml}: {e}");
        }
    }
}
