//! The placement-handle allocator: the one place in the cache that knows about FDP.
//!
//! Engines ask for a handle when they start and tag their writes with it. With FDP enabled on
//! the device (and `cache.fdp_placement` on), each request gets the next free reclaim unit
//! handle of reclaim group 0 as a placement identifier, starting after handle 0, which stays
//! the device's default; when handles run out, or without FDP, an engine gets the default
//! handle (no placement directive), as CacheLib's allocator does.

use serde::{Deserialize, Serialize};
use ssdlab_core::config::Personality;
use ssdlab_core::Device;

/// A placement handle: the FDP placement identifier to put on writes, or none (default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PlacementHandle {
    pub pid: Option<u16>,
}

impl PlacementHandle {
    pub const DEFAULT: PlacementHandle = PlacementHandle { pid: None };
    /// The reclaim unit handle index (0 = default), for reports.
    pub fn ruh(&self) -> u16 {
        self.pid.unwrap_or(0)
    }
}

pub struct PlacementAllocator {
    /// Placement identifiers still free.
    free: Vec<u16>,
}

impl PlacementAllocator {
    pub fn new(dev: &Device, enabled: bool) -> PlacementAllocator {
        let mut free = vec![];
        if enabled && dev.config().personality == Personality::Conventional {
            if let Some(f) = dev.ftl().fdp() {
                // Handles 1.. of reclaim group 0, handed out lowest first.
                free = (1..f.handles).rev().map(|h| f.pid(0, h)).collect();
            }
        }
        PlacementAllocator { free }
    }

    /// Whether handles other than the default can be handed out.
    pub fn fdp(&self) -> bool {
        !self.free.is_empty()
    }

    pub fn allocate(&mut self) -> PlacementHandle {
        PlacementHandle { pid: self.free.pop() }
    }
}
