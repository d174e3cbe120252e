//! The block-device interface every swap backend offers (RMML, the ZNSwap-like and
//! Infiniswap-like baselines, local memory), in modelled time.
//!
//! Requests are whole 4 KiB pages. Each takes the time it is issued (`now_ns`, the host's
//! modelled clock) and returns when it completes; background work a backend starts (the RMML's
//! write-back, ZNS reclaim) occupies its resources without delaying that completion.

use crate::error::{Error, Result};

pub const PAGE_BYTES: u64 = 4096;

pub trait SwapDevice: Send {
    /// "dpuswap", "infiniswap", "znswap", "local".
    fn kind(&self) -> &'static str;
    fn capacity_bytes(&self) -> u64;
    fn write(&mut self, offset: u64, data: &[u8], now_ns: u64) -> Result<u64>;
    fn read(&mut self, offset: u64, out: &mut [u8], now_ns: u64) -> Result<u64>;
    /// The pages are free (a swap slot released, a TRIM): their contents need not be kept.
    fn discard(&mut self, offset: u64, len: u64, now_ns: u64) -> Result<u64>;
    /// Whether discarded pages read back as zeros (otherwise their old contents may remain).
    fn discard_zeroes(&self) -> bool {
        false
    }
    /// Make every completed write durable in the backend's store (the RMML writes its dirty
    /// cached blocks back to remote memory).
    fn flush(&mut self, now_ns: u64) -> Result<u64> {
        Ok(now_ns)
    }
    /// Counters and figures of the run so far (JSON object).
    fn stats(&mut self) -> serde_json::Value;
}

/// Check a request: page-aligned, inside a device of `capacity` bytes.
pub fn check(capacity: u64, offset: u64, len: u64) -> Result<()> {
    if !offset.is_multiple_of(PAGE_BYTES) || !len.is_multiple_of(PAGE_BYTES) {
        return Err(Error::Request(format!("bytes {offset}+{len}: requests are whole {PAGE_BYTES}-byte pages")));
    }
    if offset.checked_add(len).is_none_or(|e| e > capacity) {
        return Err(Error::Request(format!("bytes {offset}+{len}: beyond the device's {capacity} bytes")));
    }
    Ok(())
}

/// One bit per page.
#[derive(Debug, Clone, Default)]
pub struct PageBits(Vec<u64>);

impl PageBits {
    pub fn new(pages: u64) -> PageBits {
        PageBits(vec![0; pages.div_ceil(64) as usize])
    }
    pub fn get(&self, p: u64) -> bool {
        self.0[(p / 64) as usize] >> (p % 64) & 1 == 1
    }
    /// Set bit `p` to `v`; returns the old value.
    pub fn set(&mut self, p: u64, v: bool) -> bool {
        let w = &mut self.0[(p / 64) as usize];
        let old = *w >> (p % 64) & 1 == 1;
        if v {
            *w |= 1 << (p % 64);
        } else {
            *w &= !(1 << (p % 64));
        }
        old
    }
    /// Whether any bit in `[from, to)` is set.
    pub fn any(&self, from: u64, to: u64) -> bool {
        (from..to).any(|p| self.get(p))
    }
    pub fn count(&self) -> u64 {
        self.0.iter().map(|w| w.count_ones() as u64).sum()
    }
}

/// Local memory as the "backend" of the all-local runs: costs nothing, holds nothing (the
/// paging runtime never evicts with a budget of the whole working set).
pub struct LocalMemory {
    pub capacity_bytes: u64,
}

impl SwapDevice for LocalMemory {
    fn kind(&self) -> &'static str {
        "local"
    }
    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }
    fn write(&mut self, _: u64, _: &[u8], _: u64) -> Result<u64> {
        Err(Error::Request("local memory has no swap space: the budget must hold the whole working set".into()))
    }
    fn read(&mut self, _: u64, _: &mut [u8], _: u64) -> Result<u64> {
        Err(Error::Request("local memory has no swap space".into()))
    }
    fn discard(&mut self, _: u64, _: u64, now_ns: u64) -> Result<u64> {
        Ok(now_ns)
    }
    fn stats(&mut self) -> serde_json::Value {
        serde_json::json!({"kind": "local"})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_and_checks() {
        let mut b = PageBits::new(130);
        assert!(!b.set(129, true));
        assert!(b.get(129) && b.any(100, 130) && !b.any(0, 129));
        assert!(b.set(129, false));
        assert_eq!(b.count(), 0);
        assert!(check(8192, 4096, 4096).is_ok());
        assert!(check(8192, 4096, 8192).is_err());
        assert!(check(8192, 1, 4096).is_err());
    }
}
