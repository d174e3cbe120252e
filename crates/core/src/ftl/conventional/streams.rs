//! Write points ("streams"): host streams take host writes, GC streams relocations. Without
//! FDP there is one of each; with FDP every placement handle of every reclaim group has a host
//! stream, each group a GC stream shared by its initially isolated handles, and each
//! persistently isolated handle a GC stream of its own (the placement component, `ftl/fdp.rs`,
//! says which). `ftl.gc_streams` varies where relocations go: `separate` is the above;
//! `shared` has no GC streams, relocated data going back into the host stream it came from;
//! `by-age` doubles each GC stream, data moved for the first time going to the first (young)
//! and data moved again to the second (old), a split by relocation count.
//!
//! A stream has one way per die of its reclaim group; a way holds one open block in each plane
//! of its die and fills one multi-plane unit (a page in every plane) at a time; consecutive
//! units go to consecutive ways, channels first, so a burst of writes keeps every die busy.

use serde::{Deserialize, Serialize};

use crate::config::GcStreams;
use crate::media::Layout;

/// Handle of streams whose data belongs to no single placement handle.
pub const SHARED: u16 = u16::MAX;

/// Per-stream accounting; per-handle FDP figures are derived from it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamStats {
    pub host_sectors: u64,
    pub units_programmed: u64,
    /// Valid sectors GC moved out of this stream's blocks.
    pub relocated_out_sectors: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Way {
    /// Preferred die of this way.
    pub die: u32,
    /// Open blocks, one per plane (empty when the way has no open blocks).
    pub blocks: Vec<u32>,
    /// Next page to program in each of `blocks`.
    pub page: u32,
    /// Sectors placed in the current unit (0 ..= planes * sectors_per_page), and the same
    /// position as (plane, slot) so the hot path needs no division.
    pub fill: u32,
    plane: u32,
    slot: u32,
    /// Host data may go into the open blocks without a foreground GC check: they were opened
    /// for host data, past the check, or host data already checked. A stream that takes its
    /// own relocations (`gc_streams = "shared"`) gets ways opened by GC, which cannot wait for
    /// GC; its host data checks once per way instead.
    #[serde(default)]
    pub host_checked: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Stream {
    pub ways: Vec<Way>,
    pub cur: usize,
    /// Time at which the data of the unit being filled is available to program.
    pub ready_ns: u64,
    /// Takes host writes (true) or GC relocations (false).
    pub host: bool,
    /// Reclaim group.
    pub rg: u8,
    /// Placement handle whose data this stream holds, or SHARED (GC of initially isolated
    /// handles, or the only streams of a device without FDP).
    pub handle: u16,
    /// Where GC relocates data found in this stream's blocks: a GC stream of the same group,
    /// or this very stream (a host stream with `gc_streams = "shared"`).
    pub gc_dest: usize,
    /// Relocated sectors in the unit being filled (only a stream that is its own `gc_dest`
    /// mixes them with host data): a unit of relocations alone is not a host unit.
    #[serde(default)]
    pub relocated: u32,
}

impl Stream {
    /// Whether this is a GC stream of handle `handle` (or of the shared data, SHARED) in
    /// reclaim group `rg`.
    pub fn is_gc_of(&self, rg: u8, handle: u16) -> bool {
        !self.host && self.rg == rg && self.handle == handle
    }
}

/// What the placement component decides about the streams: reclaim groups and handles, and
/// which handles are persistently isolated (their relocated data gets a GC stream of its own).
pub(super) struct StreamPlan<'a> {
    /// Dies of each reclaim group, in way order.
    pub group_dies: &'a [Vec<u32>],
    /// Host streams per group: one per reclaim unit handle with FDP, else one (handle SHARED).
    pub handles: u32,
    /// Dies each stream stripes over (the first `ways` of its group's dies from a rotating
    /// start); at most the group's dies.
    pub ways: usize,
    pub fdp: bool,
    pub persistently_isolated: &'a dyn Fn(u32) -> bool,
    pub gc_streams: GcStreams,
}

/// Every stream of the FTL and the host stream of each (reclaim group, handle).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct WritePoints {
    pub streams: Vec<Stream>,
    /// Host stream of each (reclaim group, reclaim unit handle): `rg * handles + handle`.
    host_streams: Vec<usize>,
    handles: u32,
    /// Per-stream accounting (FDP per-handle figures are derived from it).
    pub stats: Vec<StreamStats>,
    /// Relocated sectors programmed in host streams (`gc_streams = "shared"`) not yet counted
    /// as whole relocated pages (less than a page).
    #[serde(default)]
    pub relocated_carry: u32,
}

impl WritePoints {
    /// Host streams (group-major), then per group a shared GC stream and one GC stream per
    /// persistently isolated handle (each a young and an old one with `by-age`; none with
    /// `shared`). With fewer ways than dies, the streams of a group start at successive dies,
    /// so together they cover all of them.
    pub fn new(plan: &StreamPlan, planes: usize) -> WritePoints {
        let mut turn = vec![0usize; plan.group_dies.len()];
        let mut mk = |dies: &[u32], host: bool, rg: usize, handle: u16| Stream {
            ways: {
                let n = dies.len();
                let w = plan.ways.clamp(1, n);
                let first = turn[rg];
                turn[rg] = (first + w) % n;
                (0..w)
                    .map(|i| Way {
                        die: dies[(first + i) % n],
                        blocks: Vec::with_capacity(planes),
                        page: 0,
                        fill: 0,
                        plane: 0,
                        slot: 0,
                        host_checked: false,
                    })
                    .collect()
            },
            cur: 0,
            ready_ns: 0,
            host,
            rg: rg as u8,
            handle,
            gc_dest: usize::MAX,
            relocated: 0,
        };
        let mut streams = Vec::new();
        let mut host_streams = Vec::new();
        for (g, dies) in plan.group_dies.iter().enumerate() {
            for h in 0..plan.handles {
                host_streams.push(streams.len());
                streams.push(mk(dies, true, g, if plan.fdp { h as u16 } else { SHARED }));
            }
        }
        // The GC stream(s) of `handle` in group `g`; returns where data moved out of a host
        // stream goes (the young stream with `by-age`).
        let mut gc_streams = |streams: &mut Vec<Stream>, dies: &[u32], g: usize, handle: u16| {
            let first = streams.len();
            streams.push(mk(dies, false, g, handle));
            streams[first].gc_dest = first;
            if plan.gc_streams == GcStreams::ByAge {
                let old = streams.len();
                streams.push(mk(dies, false, g, handle));
                streams[first].gc_dest = old;
                streams[old].gc_dest = old;
            }
            first
        };
        for (g, dies) in plan.group_dies.iter().enumerate() {
            let handles = g * plan.handles as usize..(g + 1) * plan.handles as usize;
            if plan.gc_streams == GcStreams::Shared {
                for &hs in &host_streams[handles] {
                    streams[hs].gc_dest = hs;
                }
                continue;
            }
            let shared = gc_streams(&mut streams, dies, g, SHARED);
            for h in 0..plan.handles {
                let hs = host_streams[handles.start + h as usize];
                if plan.fdp && (plan.persistently_isolated)(h) {
                    streams[hs].gc_dest = gc_streams(&mut streams, dies, g, h as u16);
                } else {
                    streams[hs].gc_dest = shared;
                }
            }
        }
        let n = streams.len();
        for (i, st) in streams.iter().enumerate() {
            let dest = &streams[st.gc_dest];
            assert_eq!(dest.rg, st.rg, "GC relocates within the reclaim group");
            assert!(!dest.host || st.gc_dest == i, "GC relocates into a GC stream, or (shared) into the stream the data came from");
            assert!(st.host || !dest.host, "data GC moved once stays in GC streams");
            assert!(dest.handle == st.handle || dest.handle == SHARED, "GC keeps a handle's data in its own or a shared stream");
        }
        WritePoints { streams, host_streams, handles: plan.handles, stats: vec![StreamStats::default(); n], relocated_carry: 0 }
    }

    /// Host stream of (reclaim group, reclaim unit handle).
    #[inline]
    pub fn host_stream(&self, rg: usize, handle: usize) -> usize {
        debug_assert!(handle < self.handles as usize, "placement handle {handle} out of range");
        self.host_streams[rg * self.handles as usize + handle]
    }

    /// Blocks the streams may hold open at once (one per plane of every way).
    pub fn open_blocks_max(&self, planes: u32) -> u64 {
        self.streams.iter().map(|st| st.ways.len() as u64 * planes as u64).sum()
    }

    /// Whether stream `s`'s current way has open blocks to place into.
    #[inline(always)]
    pub fn ready(&self, s: usize) -> bool {
        let st = &self.streams[s];
        !st.ways[st.cur].blocks.is_empty()
    }

    /// The next sector slot of stream `s`'s open unit (the way must have open blocks): its PSA,
    /// its block, and whether it completes the unit.
    #[inline(always)]
    pub fn next_slot(&mut self, s: usize, lay: &Layout) -> (u32, u32, bool) {
        let st = &mut self.streams[s];
        let spp = lay.sectors_per_page;
        let way = &mut st.ways[st.cur];
        let b = way.blocks[way.plane as usize];
        let psa = b * lay.sectors_per_block + way.page * spp + way.slot;
        way.fill += 1;
        way.slot += 1;
        if way.slot == spp {
            way.slot = 0;
            way.plane += 1;
        }
        (psa, b, way.plane == lay.planes_per_die)
    }

    /// Whether stream `s`'s current unit is complete (every slot of every plane placed).
    pub fn unit_full(&self, s: usize, lay: &Layout) -> bool {
        let st = &self.streams[s];
        st.ways[st.cur].fill == lay.sectors_per_page * lay.planes_per_die
    }

    /// Whether stream `s`'s current unit is partly filled.
    #[inline]
    pub fn partial(&self, s: usize) -> bool {
        let st = &self.streams[s];
        st.ways[st.cur].fill != 0
    }

    /// Give way `w` of stream `s` freshly opened blocks (one per plane); `host_checked`: the
    /// foreground GC check for host data was done.
    pub fn open(&mut self, s: usize, w: usize, blocks: Vec<u32>, host_checked: bool) {
        let way = &mut self.streams[s].ways[w];
        debug_assert!(way.blocks.is_empty());
        way.blocks = blocks;
        way.host_checked = host_checked;
        way.page = 0;
        way.fill = 0;
        way.plane = 0;
        way.slot = 0;
    }

    /// The unit of stream `s` was programmed: start the next unit of its way and move the
    /// stream to its next way. Returns the way if its blocks are now full (to be closed).
    #[inline]
    pub fn unit_done(&mut self, s: usize, pages_per_block: u32) -> Option<usize> {
        let st = &mut self.streams[s];
        let cur = st.cur;
        let way = &mut st.ways[cur];
        way.fill = 0;
        way.plane = 0;
        way.slot = 0;
        way.page += 1;
        debug_assert!(way.page <= pages_per_block, "stream {s}: programmed past the end of its blocks");
        let full = way.page == pages_per_block;
        st.cur = if cur + 1 == st.ways.len() { 0 } else { cur + 1 };
        full.then_some(cur)
    }

    /// Take the open blocks of way `w` of stream `s` (they are being closed).
    pub fn take_blocks(&mut self, s: usize, w: usize) -> Vec<u32> {
        let way = &mut self.streams[s].ways[w];
        way.page = 0;
        way.host_checked = false;
        std::mem::take(&mut way.blocks)
    }

    /// Fill the rest of stream `s`'s partial unit with padding: calls `pad` with the PSA of
    /// each padded slot and returns how many there were (0: no partial unit).
    pub fn pad_unit(&mut self, s: usize, lay: &Layout, mut pad: impl FnMut(u32)) -> u32 {
        let st = &mut self.streams[s];
        let way = &mut st.ways[st.cur];
        let fill = way.fill;
        if fill == 0 {
            return 0;
        }
        let spp = lay.sectors_per_page;
        let unit = spp * lay.planes_per_die;
        debug_assert!(fill < unit, "stream {s}: a full unit waits unprogrammed");
        for f in fill..unit {
            let plane = f / spp;
            pad(way.blocks[plane as usize] * lay.sectors_per_block + way.page * spp + (f - plane * spp));
        }
        way.fill = unit;
        unit - fill
    }
}
