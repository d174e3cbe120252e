//! `ssdlab._native`: the PyO3 layer over ssdlab-core and the front-end crates. The Python
//! package (python/ssdlab) wraps it in the user-facing API; python/ssdlab/_native.pyi
//! declares what it exports (tests/test_stubs.py checks the two agree).
//!
//! One file per concern: errors (exception classes), convert (typed conversions: dicts in,
//! dicts out), config (validation, presets, defaults), progress (bars, Ctrl-C, run results),
//! native (the NativeDevice class's state and personality checks), device (its common host
//! interface) with its personality sub-objects fdp, zns and ocssd,
//! analytic (GC models), the front-ends nbd, spi and cache, and the case studies vssd, flac,
//! lsm (the lsm-deletion store and `ssdlab kv serve`), rmml (dpuswap) and uio (uio-kv).

/// Large allocations (the FTL's maps, the cache's hash tables) on huge pages.
#[global_allocator]
static ALLOC: ssdlab_core::media::mem::HugeAlloc = ssdlab_core::media::mem::HugeAlloc;

mod analytic;
mod cache;
mod config;
mod convert;
mod device;
mod errors;
mod fdp;
mod flac;
mod lsm;
mod native;
mod nbd;
mod nvme;
mod ocssd;
mod progress;
mod rmml;
mod serving;
mod spi;
mod uio;
mod vssd;
mod zns;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<native::NativeDevice>()?;
    m.add_class::<fdp::Fdp>()?;
    m.add_class::<zns::Zns>()?;
    m.add_class::<ocssd::Ocssd>()?;
    config::register(m)?;
    analytic::register(m)?;
    nbd::register(m)?;
    nvme::register(m)?;
    spi::register(m)?;
    cache::register(m)?;
    vssd::register(m)?;
    flac::register(m)?;
    lsm::register(m)?;
    rmml::register(m)?;
    uio::register(m)?;
    Ok(())
}
