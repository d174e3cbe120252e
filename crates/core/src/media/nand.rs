//! [`Media`]: the NAND array of one device and everything that is physically true of it, held
//! once for every personality: the geometry, per-block state (wear, bad blocks, what is
//! programmed), the per-die and per-channel timelines, the contents of a data-backed device,
//! the counters, and the wear-out policy (factory bad blocks at format, retirement at the P/E
//! limit or on an erase failure).
//!
//! Personalities decide what to program, read and erase; `Media` carries it out and accounts
//! for it, so a page read, a program or an erase costs and counts the same on a conventional,
//! FDP, ZNS or open-channel device.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};

use super::store::DataStore;
use super::{BlockMeta, BlockState, Counters, Layout};
use crate::config::{Config, StorageMode};
use crate::engine::Timelines;

/// What an erase did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Erased {
    /// Completion time (the `earliest` given when timing is off).
    pub done_ns: u64,
    /// A block reached its P/E limit or failed the erase and is now bad (grown bad).
    pub retired: bool,
}

/// The NAND state of a device. See the module docs.
///
/// Fields are public so the personalities' hot paths can borrow them side by side; the
/// operations that must behave the same everywhere (program, read, erase, retirement) are
/// methods here and nowhere else.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Media {
    pub lay: Layout,
    #[serde(deserialize_with = "super::mem::presized")]
    pub blocks: Vec<BlockMeta>,
    pub tl: Timelines,
    /// Contents per physical sector, for data-backed devices.
    pub data: Option<DataStore>,
    pub c: Counters,
    /// The device's random stream: factory bad blocks at format, then erase failures and the
    /// personality's own random choices (d-choices GC victims), in the order they happen.
    pub rng: Pcg64Mcg,
    pe_limit: u32,
    grown_bad_probability: f64,
    max_erase: u32,
}

impl Media {
    /// Format the media of a validated config: blocks erased, factory bad blocks drawn with
    /// the seed.
    pub fn new(cfg: &Config) -> Media {
        Self::build(cfg, true)
    }

    /// The media without its data store (sizing a config: the store is the one large part).
    pub fn without_data(cfg: &Config) -> Media {
        Self::build(cfg, false)
    }

    fn build(cfg: &Config, with_data: bool) -> Media {
        let lay = Layout::new(&cfg.geometry);
        let mut rng = Self::rng(cfg);
        let mut blocks = super::mem::filled(lay.blocks as usize, BlockMeta::new());
        for (b, bad) in blocks.iter_mut().zip(Self::factory_bad(cfg, &mut rng)) {
            if bad {
                b.state = BlockState::Bad;
                b.factory_bad = true;
            }
        }
        assert!(lay.physical_sectors < u32::MAX as u64, "validated geometry: physical sector addresses fit in 32 bits");
        assert!(cfg.media.pe_limit > 0, "validated media: a block survives at least one erase");
        Media {
            lay,
            blocks,
            tl: Timelines::new(&cfg.timing, lay.channels, lay.dies_per_channel),
            data: match cfg.storage {
                StorageMode::Data if with_data => Some(DataStore::new(lay.physical_sectors, lay.sector_bytes)),
                _ => None,
            },
            c: Counters::default(),
            rng,
            pe_limit: cfg.media.pe_limit,
            grown_bad_probability: cfg.media.grown_bad_probability,
            max_erase: 0,
        }
    }

    fn rng(cfg: &Config) -> Pcg64Mcg {
        Pcg64Mcg::seed_from_u64(cfg.seed ^ 0x5eed_f7a1)
    }

    /// Whether each block (in address order) is bad from the factory, drawn from the device's
    /// random stream.
    fn factory_bad<'a>(cfg: &'a Config, rng: &'a mut Pcg64Mcg) -> impl Iterator<Item = bool> + 'a {
        let f = cfg.media.factory_bad_fraction;
        (0..Layout::new(&cfg.geometry).blocks).map(move |_| f > 0.0 && rng.gen::<f64>() < f)
    }

    /// Good blocks a device of `cfg` will have after format, without building it.
    pub fn good_blocks_of(cfg: &Config) -> u64 {
        let mut rng = Self::rng(cfg);
        Self::factory_bad(cfg, &mut rng).filter(|&bad| !bad).count() as u64
    }

    /// Bytes of simulator memory the media of `cfg` takes when formatted: block metadata,
    /// timelines, and for a data-backed device its sector index.
    pub fn memory_bytes_of(cfg: &Config) -> u64 {
        let lay = Layout::new(&cfg.geometry);
        let blocks = lay.blocks as u64 * std::mem::size_of::<BlockMeta>() as u64;
        let lanes = Timelines::memory_bytes(lay.channels, lay.dies_per_channel);
        let index = match cfg.storage {
            StorageMode::Data => lay.physical_sectors * 4,
            StorageMode::Metadata => 0,
        };
        blocks + lanes + index
    }

    /// Bytes the contents of a data-backed device of `cfg` take once `logical_sectors` hold
    /// non-zero data (0 for metadata-only devices): they grow as the host writes.
    pub fn data_bytes_of(cfg: &Config, logical_sectors: u64) -> u64 {
        match cfg.storage {
            StorageMode::Data => logical_sectors * cfg.geometry.sector_bytes as u64,
            StorageMode::Metadata => 0,
        }
    }

    /// Whether time is modelled.
    #[inline(always)]
    pub fn timing(&self) -> bool {
        self.tl.enabled
    }

    /// Blocks that are not bad (factory or grown).
    pub fn good_blocks(&self) -> u64 {
        self.blocks.iter().filter(|b| b.state != BlockState::Bad).count() as u64
    }

    /// Whether block `b` is bad (factory or grown).
    #[inline]
    pub fn is_bad(&self, b: u32) -> bool {
        self.blocks[b as usize].state == BlockState::Bad
    }

    /// The highest erase count of any block so far.
    pub fn max_erase(&self) -> u32 {
        self.max_erase
    }

    /// Program `pages` pages on `die` in one multi-plane operation (a page in each of `pages`
    /// planes), their data ready at `earliest`; returns the completion time.
    #[inline]
    pub fn program(&mut self, die: u32, pages: u32, earliest: u64) -> u64 {
        debug_assert!(die < self.lay.dies, "program on die {die} of {}", self.lay.dies);
        debug_assert!(
            pages > 0 && pages <= self.lay.planes_per_die,
            "a multi-plane program spans 1 to {} planes, not {pages}",
            self.lay.planes_per_die
        );
        let bytes = pages as u64 * self.lay.page_bytes as u64;
        self.c.nand_page_programs += pages as u64;
        self.c.nand_write_bytes += bytes;
        if self.tl.enabled {
            self.tl.program(die, bytes, earliest)
        } else {
            earliest
        }
    }

    /// A host read of one page on `die`, `bytes` of it transferred out (read priority and
    /// suspend apply); returns the completion time.
    #[inline]
    pub fn read(&mut self, die: u32, bytes: u64, earliest: u64) -> u64 {
        debug_assert!(bytes <= self.lay.page_bytes as u64, "a page read transfers at most a page");
        self.count_page_read();
        if self.tl.enabled {
            self.tl.read(die, bytes, earliest)
        } else {
            earliest
        }
    }

    /// A read of one page in issue order (garbage collection, copies); returns the completion
    /// time.
    #[inline]
    pub fn read_queued(&mut self, die: u32, bytes: u64, earliest: u64) -> u64 {
        debug_assert!(bytes <= self.lay.page_bytes as u64, "a page read transfers at most a page");
        self.count_page_read();
        if self.tl.enabled {
            self.tl.read_queued(die, bytes, earliest)
        } else {
            earliest
        }
    }

    #[inline(always)]
    fn count_page_read(&mut self) {
        self.c.nand_page_reads += 1;
        self.c.nand_read_bytes += self.lay.page_bytes as u64;
    }

    /// Erase block `b`, no earlier than `earliest`.
    #[inline]
    pub fn erase(&mut self, b: u32, earliest: u64) -> Erased {
        self.erase_group(&[b], earliest)
    }

    /// Erase `blocks`, all on one die, in one multi-plane operation (one erase time). Each
    /// block's contents are dropped and its erase counted; a block that reaches the P/E limit,
    /// or whose erase fails (`media.grown_bad_probability`), is retired: its state becomes
    /// `Bad` and `grown_bad_blocks` counts it. The others are `Free`.
    pub fn erase_group(&mut self, blocks: &[u32], earliest: u64) -> Erased {
        let die = self.lay.die_of_block(blocks[0]);
        let done_ns = if self.tl.enabled { self.tl.erase(die, earliest) } else { earliest };
        let mut retired = false;
        let spb = self.lay.sectors_per_block;
        for &b in blocks {
            assert_eq!(self.lay.die_of_block(b), die, "a multi-plane erase stays on one die");
            assert_ne!(self.blocks[b as usize].state, BlockState::Bad, "erase of bad block {b}");
            if let Some(d) = self.data.as_mut() {
                let first = b * spb;
                for psa in first..first + spb {
                    d.discard(psa);
                }
            }
            self.c.nand_erase_count += 1;
            let m = &mut self.blocks[b as usize];
            debug_assert!(m.erase_count < self.pe_limit, "block {b} erased past its P/E limit without being retired");
            m.erase_count += 1;
            m.valid = 0;
            m.programmed_pages = 0;
            let ec = m.erase_count;
            self.max_erase = self.max_erase.max(ec);
            if self.tl.enabled {
                self.blocks[b as usize].ready_ns = done_ns;
            }
            let failed = self.grown_bad_probability > 0.0 && self.rng.gen::<f64>() < self.grown_bad_probability;
            if ec >= self.pe_limit || failed {
                self.blocks[b as usize].state = BlockState::Bad;
                self.c.grown_bad_blocks += 1;
                retired = true;
            } else {
                self.blocks[b as usize].state = BlockState::Free;
            }
        }
        assert!(!self.tl.enabled || done_ns >= earliest, "an erase completes before it may start");
        Erased { done_ns, retired }
    }

    /// Assert what is true of the media whatever the personality: the grown-bad counter
    /// matches the blocks marked bad after format, and no bad block holds valid data.
    pub fn check_invariants(&self) {
        let grown = self.blocks.iter().filter(|b| b.state == BlockState::Bad && !b.factory_bad).count() as u64;
        assert_eq!(grown, self.c.grown_bad_blocks, "grown-bad counter != blocks retired");
        assert!(self.c.consistent(self.lay.page_bytes), "counters disagree: {:?}", self.c);
        for (b, m) in self.blocks.iter().enumerate() {
            if m.state == BlockState::Bad {
                assert_eq!(m.valid, 0, "bad block {b} holds valid sectors");
            }
            assert!(m.erase_count <= self.max_erase, "block {b}: erase count above the maximum");
        }
    }
}
