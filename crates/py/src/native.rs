//! The `NativeDevice` class's state: the device it holds, and the personality checks that its
//! methods (device.rs) and its personality sub-objects (fdp.rs, zns.rs, ocssd.rs) share.

use pyo3::prelude::*;
use ssdlab_core::config::Personality;
use ssdlab_core::ftl::conventional::Conventional;

use crate::errors::NvmeError;

/// An emulated device (see ssdlab.Device for the documented API).
#[pyclass(module = "ssdlab._native")]
pub struct NativeDevice {
    pub(crate) dev: ssdlab_core::Device,
}

/// The name of a personality as configs spell it.
pub(crate) fn personality_name(p: Personality) -> String {
    match serde_json::to_value(p) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{p:?}"),
    }
}

impl NativeDevice {
    /// The device's personality, or an NvmeError naming it when `want` is another one.
    pub(crate) fn require(&self, want: Personality, what: &str) -> PyResult<()> {
        let have = self.dev.config().personality;
        if have == want {
            return Ok(());
        }
        Err(NvmeError::new_err(format!(
            "{what}: this device's personality is {:?} (set personality = {:?} in the config)",
            personality_name(have),
            personality_name(want)
        )))
    }

    /// The conventional FTL (FDP lives there), or an NvmeError naming the personality.
    pub(crate) fn conventional(&self) -> PyResult<&Conventional> {
        self.require(Personality::Conventional, "FDP and FTL commands need a conventional device")?;
        Ok(self.dev.ftl())
    }
}
