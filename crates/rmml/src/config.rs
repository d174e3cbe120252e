//! What an RMML is made of: block and group geometry, codec, DPU cache, links and the DPU's
//! modelled costs. Every key has a default; `validate` names the key that is out of range.

use serde::{Deserialize, Serialize};

use crate::cache::CachePolicy;
use crate::codec::Codec;
use crate::device::PAGE_BYTES;
use crate::error::{Error, Result};
use crate::link::Link;

/// What a DPU-cache miss fetches (see `RmmlConfig::fetch_unit`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FetchUnit {
    Block,
    #[default]
    Page,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RmmlConfig {
    /// Size of the swap device the host sees (bytes; a multiple of `block_bytes`).
    pub capacity_bytes: u64,
    /// Remote block size: the unit of mapping, compression and caching (the source document's
    /// 1 MiB).
    pub block_bytes: u64,
    /// Logical blocks per block group (N); a group's blocks live packed in one contiguous
    /// remote region.
    pub group_blocks: u32,
    /// The unit compressed, stored, fetched on a miss and cached on the DPU: `block` (a whole
    /// block) or `page` (runs of `page_run` 4 KiB pages, each compressed alone and packed with
    /// its header into its group's region, so a miss reads only its own compressed bytes).
    pub fetch_unit: FetchUnit,
    /// Pages per unit when `fetch_unit = "page"` (a power of two, up to a block).
    pub page_run: u32,
    pub codec: Codec,
    /// zstd's level when `codec = "zstd"`.
    pub zstd_level: i32,
    /// DPU memory used as a cache of remote blocks (bytes; at least one block).
    pub cache_bytes: u64,
    pub cache_policy: CachePolicy,
    /// Host <-> DPU.
    pub pcie: Link,
    /// DPU <-> remote memory node.
    pub rdma: Link,
    /// DPU cores that compress and decompress (BlueField-2: 8 Arm A72).
    pub dpu_cores: u32,
    /// Per-request DPU software cost: map lookup, cache bookkeeping (ns).
    pub dpu_request_ns: u64,
    /// Modelled codec speeds on one DPU core (bytes of raw data per second).
    pub lz4_compress_bytes_per_s: f64,
    pub lz4_decompress_bytes_per_s: f64,
    pub zstd_compress_bytes_per_s: f64,
    pub zstd_decompress_bytes_per_s: f64,
    /// Room left in a group's region when it is (re)allocated, as a fraction of its live bytes.
    pub region_slack: f64,
    /// Compact a group when its garbage (overwritten records) exceeds this fraction of its region.
    pub reclaim_garbage_fraction: f64,
    /// Move a group when the nodes' used fractions differ by more than this.
    pub balance_threshold: f64,
}

impl Default for RmmlConfig {
    fn default() -> Self {
        RmmlConfig {
            capacity_bytes: 1 << 30,
            block_bytes: 1 << 20,
            group_blocks: 8,
            fetch_unit: FetchUnit::Page,
            page_run: 1,
            codec: Codec::Lz4,
            zstd_level: 1,
            cache_bytes: 64 << 20,
            cache_policy: CachePolicy::Lru,
            pcie: Link::PCIE,
            rdma: Link::RDMA,
            dpu_cores: 8,
            dpu_request_ns: 200,
            // lz4 on one Arm Cortex-A72 core (BlueField-2's cores): lz4 1.8.3 under lzbench on
            // an AWS a1 instance (Graviton, A72 at 2.3 GHz), the medians over the six Silesia
            // files reported in lz4 pull request #707 (compress 148-406 MB/s, decompress
            // 1238-1686 MB/s). zstd -1 is not measured on that core: the zstd README's desktop
            // x86 figures (510 / 1550 MB/s) scaled by the same Arm-to-x86 ratio as lz4's.
            lz4_compress_bytes_per_s: 0.21e9,
            lz4_decompress_bytes_per_s: 1.34e9,
            zstd_compress_bytes_per_s: 0.14e9,
            zstd_decompress_bytes_per_s: 0.42e9,
            region_slack: 0.25,
            reclaim_garbage_fraction: 0.5,
            balance_threshold: 0.10,
        }
    }
}

impl RmmlConfig {
    pub fn validate(&self) -> Result<()> {
        let bad = |k: &str, v: String, want: &str| Err(Error::Config(format!("rmml.{k} = {v}: expected {want}")));
        if !self.block_bytes.is_power_of_two() || !(16 * PAGE_BYTES..=64 << 20).contains(&self.block_bytes) {
            return bad("block_bytes", self.block_bytes.to_string(), "a power of two from 64 KiB to 64 MiB");
        }
        if self.capacity_bytes == 0 || !self.capacity_bytes.is_multiple_of(self.block_bytes) || self.capacity_bytes > 1 << 44 {
            return bad("capacity_bytes", self.capacity_bytes.to_string(), "a positive multiple of block_bytes, at most 16 TiB");
        }
        if !(1..=256).contains(&self.group_blocks) {
            return bad("group_blocks", self.group_blocks.to_string(), "1..=256");
        }
        if self.group_blocks as u64 * self.block_bytes > 64 << 20 {
            return bad("group_blocks", self.group_blocks.to_string(), "group_blocks x block_bytes at most 64 MiB (one remote region)");
        }
        if !self.page_run.is_power_of_two() || self.page_run as u64 > self.pages_per_block() {
            return bad("page_run", self.page_run.to_string(), "a power of two, at most a block's pages");
        }
        if self.cache_bytes < self.unit_bytes() {
            return bad("cache_bytes", self.cache_bytes.to_string(), "at least one unit (the DPU's working buffer)");
        }
        if !(1..=256).contains(&self.dpu_cores) {
            return bad("dpu_cores", self.dpu_cores.to_string(), "1..=256");
        }
        if !(-7..=22).contains(&self.zstd_level) {
            return bad("zstd_level", self.zstd_level.to_string(), "-7..=22");
        }
        for (k, v) in [
            ("lz4_compress_bytes_per_s", self.lz4_compress_bytes_per_s),
            ("lz4_decompress_bytes_per_s", self.lz4_decompress_bytes_per_s),
            ("zstd_compress_bytes_per_s", self.zstd_compress_bytes_per_s),
            ("zstd_decompress_bytes_per_s", self.zstd_decompress_bytes_per_s),
        ] {
            if !(v >= 1e6 && v.is_finite()) {
                return bad(k, v.to_string(), "at least 1e6");
            }
        }
        if !(0.0..=4.0).contains(&self.region_slack) {
            return bad("region_slack", self.region_slack.to_string(), "0..=4");
        }
        if !(0.05..=1.0).contains(&self.reclaim_garbage_fraction) {
            return bad("reclaim_garbage_fraction", self.reclaim_garbage_fraction.to_string(), "0.05..=1");
        }
        if !(0.0..=1.0).contains(&self.balance_threshold) {
            return bad("balance_threshold", self.balance_threshold.to_string(), "0..=1");
        }
        self.pcie.validate("rmml.pcie")?;
        self.rdma.validate("rmml.rdma")
    }

    pub fn blocks(&self) -> u64 {
        self.capacity_bytes / self.block_bytes
    }
    pub fn pages_per_block(&self) -> u64 {
        self.block_bytes / PAGE_BYTES
    }
    /// Bytes of the unit compressed, stored, fetched and cached.
    pub fn unit_bytes(&self) -> u64 {
        match self.fetch_unit {
            FetchUnit::Block => self.block_bytes,
            FetchUnit::Page => self.page_run as u64 * PAGE_BYTES,
        }
    }
    pub fn units(&self) -> u64 {
        self.capacity_bytes / self.unit_bytes()
    }
    pub fn pages_per_unit(&self) -> u64 {
        self.unit_bytes() / PAGE_BYTES
    }
    /// Units per block group.
    pub fn group_units(&self) -> u64 {
        self.group_blocks as u64 * self.block_bytes / self.unit_bytes()
    }
    pub fn cache_slots(&self) -> usize {
        (self.cache_bytes / self.unit_bytes()) as usize
    }
    /// Modelled (compress, decompress) speeds of a codec, bytes/s.
    pub fn codec_speed(&self, c: Codec) -> (f64, f64) {
        match c {
            // Storing raw is a copy: memory bandwidth, not a codec.
            Codec::None => (10e9, 10e9),
            Codec::Lz4 => (self.lz4_compress_bytes_per_s, self.lz4_decompress_bytes_per_s),
            Codec::Zstd => (self.zstd_compress_bytes_per_s, self.zstd_decompress_bytes_per_s),
        }
    }
}
