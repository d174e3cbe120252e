//! ssdlab's NBD server: any NBD client (qemu-img/qemu-io, nbdinfo, nbdcopy, fio's nbd engine,
//! QEMU guests) uses an emulated SSD, or any other [`Disk`], as a disk. See docs/nbd.md.

pub mod backend;
pub mod client;
pub mod disk;
#[doc(hidden)]
pub mod fuzzing;
pub mod proto;
pub mod server;

pub use backend::{Backend, BackendOptions};
pub use disk::{BackendError, Disk, DiskResult};
pub use server::{serve, Export, Latency, NbdOptions, Server};

use ssdlab_core::config::Config;

/// The exports a device gets by default: the whole device as "ssdlab" and, with
/// `per_handle` on an FDP device, one export per placement handle of the namespace (reclaim group 0; each an
/// equal slice of the LBA space, written through its handle).
pub fn default_exports(cfg: &Config, logical: u64, per_handle: bool) -> Vec<Export> {
    let mut out = vec![Export {
        name: "ssdlab".into(),
        offset: 0,
        size: logical,
        placement: None,
        read_only: false,
        description: format!("ssdlab emulated SSD ({} preset)", cfg.preset),
    }];
    if per_handle && cfg.fdp.enabled {
        let a = cfg.fdp.active();
        // The namespace's placement handles (all handles by default), in reclaim group 0.
        let list: Vec<u32> =
            if cfg.fdp.namespace_handles.is_empty() { (0..a.handles).collect() } else { cfg.fdp.namespace_handles.clone() };
        let n = list.len() as u64;
        let sector = cfg.geometry.sector_bytes as u64;
        let slice = logical / n / sector * sector;
        for (ph, &ruh) in list.iter().enumerate() {
            let ph = ph as u64;
            out.push(Export {
                name: format!("handle{ph}"),
                offset: ph * slice,
                size: slice,
                placement: Some(ph as u16),
                read_only: false,
                description: format!(
                    "FDP placement handle {ph} (reclaim unit handle {ruh}, {:?}): bytes {}..{} of the device",
                    a.handle_type(ruh),
                    ph * slice,
                    (ph + 1) * slice
                ),
            });
        }
    }
    out
}
