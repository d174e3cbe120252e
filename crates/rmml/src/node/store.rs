//! A node's memory: regions allocated on request, bounded by the node's capacity.

use std::collections::HashMap;

use super::NodeStat;
use crate::error::Error;

/// Why a store refused a request (sent over the wire as a status code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The handle names no region of this node's life (never allocated, freed, or from before
    /// a restart).
    UnknownRegion(u64),
    NoSpace {
        asked: u64,
        free: u64,
    },
    OutOfRange {
        region: u64,
        offset: u64,
        len: u64,
        size: u64,
    },
    BadRequest(String),
}

impl Refusal {
    pub fn code(&self) -> u8 {
        match self {
            Refusal::UnknownRegion(_) => 1,
            Refusal::NoSpace { .. } => 2,
            Refusal::OutOfRange { .. } => 3,
            Refusal::BadRequest(_) => 4,
        }
    }
    pub fn message(&self) -> String {
        match self {
            Refusal::UnknownRegion(r) => format!("unknown region {r:#x} (freed, never allocated, or from before a restart)"),
            Refusal::NoSpace { asked, free } => format!("no space: asked {asked} bytes, {free} free"),
            Refusal::OutOfRange { region, offset, len, size } => {
                format!("region {region:#x}: bytes {offset}+{len} outside its {size} bytes")
            }
            Refusal::BadRequest(m) => m.clone(),
        }
    }
    /// The crate error a client reports for a refusal with status `code` and text `msg`.
    pub fn error_of(code: u8, msg: String, node: usize, addr: &str) -> Error {
        match code {
            1 => Error::Lost(format!("node {node} ({addr}): {msg}")),
            2 => Error::NoSpace(format!("node {node} ({addr}): {msg}")),
            _ => Error::Node { node, addr: addr.to_string(), msg },
        }
    }
    pub fn into_error(self, node: usize, addr: &str) -> Error {
        Refusal::error_of(self.code(), self.message(), node, addr)
    }
}

pub struct Store {
    instance: u32,
    capacity_bytes: u64,
    used_bytes: u64,
    next: u32,
    regions: HashMap<u64, Vec<u8>>,
}

impl Store {
    pub fn new(capacity_bytes: u64, instance: u32) -> Store {
        Store { instance, capacity_bytes, used_bytes: 0, next: 0, regions: HashMap::new() }
    }

    pub fn stat(&self) -> NodeStat {
        NodeStat {
            instance: self.instance,
            capacity_bytes: self.capacity_bytes,
            used_bytes: self.used_bytes,
            regions: self.regions.len() as u64,
        }
    }

    pub fn alloc(&mut self, len: u64) -> Result<u64, Refusal> {
        if len == 0 || len > super::MAX_IO_BYTES as u64 {
            return Err(Refusal::BadRequest(format!("region of {len} bytes: expected 1..={}", super::MAX_IO_BYTES)));
        }
        let free = self.capacity_bytes - self.used_bytes;
        if len > free {
            return Err(Refusal::NoSpace { asked: len, free });
        }
        self.next = self.next.checked_add(1).ok_or_else(|| Refusal::BadRequest("region numbers exhausted".into()))?;
        let handle = (self.instance as u64) << 32 | self.next as u64;
        // Zeroed allocations come from fresh anonymous pages: memory is taken only when written.
        self.regions.insert(handle, vec![0; len as usize]);
        self.used_bytes += len;
        Ok(handle)
    }

    pub fn free(&mut self, region: u64) -> Result<(), Refusal> {
        let r = self.regions.remove(&region).ok_or(Refusal::UnknownRegion(region))?;
        self.used_bytes -= r.len() as u64;
        Ok(())
    }

    fn range(&self, region: u64, offset: u64, len: usize) -> Result<(&Vec<u8>, usize), Refusal> {
        let r = self.regions.get(&region).ok_or(Refusal::UnknownRegion(region))?;
        let end = offset.checked_add(len as u64).filter(|&e| e <= r.len() as u64);
        match end {
            Some(_) => Ok((r, offset as usize)),
            None => Err(Refusal::OutOfRange { region, offset, len: len as u64, size: r.len() as u64 }),
        }
    }

    pub fn write(&mut self, region: u64, offset: u64, data: &[u8]) -> Result<(), Refusal> {
        let (_, at) = self.range(region, offset, data.len())?;
        let r = self.regions.get_mut(&region).expect("checked by range");
        r[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Whether `len` bytes at `offset` of `region` can be read or written.
    pub fn check(&self, region: u64, offset: u64, len: usize) -> Result<(), Refusal> {
        self.range(region, offset, len).map(|_| ())
    }

    pub fn read(&self, region: u64, offset: u64, out: &mut [u8]) -> Result<(), Refusal> {
        let (r, at) = self.range(region, offset, out.len())?;
        out.copy_from_slice(&r[at..at + out.len()]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_and_handles() {
        let mut s = Store::new(10_000, 7);
        let a = s.alloc(6000).unwrap();
        assert_eq!(a >> 32, 7);
        assert!(matches!(s.alloc(5000), Err(Refusal::NoSpace { free: 4000, .. })));
        s.write(a, 100, b"hello").unwrap();
        let mut out = [0u8; 5];
        s.read(a, 100, &mut out).unwrap();
        assert_eq!(&out, b"hello");
        assert!(matches!(s.read(a, 5999, &mut out), Err(Refusal::OutOfRange { .. })));
        s.free(a).unwrap();
        assert_eq!(s.stat().used_bytes, 0);
        assert_eq!(s.free(a), Err(Refusal::UnknownRegion(a)));
        // A restarted node (new instance) refuses the old handle.
        let s2 = Store::new(10_000, 8);
        assert!(matches!(s2.read(a, 0, &mut out), Err(Refusal::UnknownRegion(_))));
    }
}
