//! The listener options every serving function takes from Python (`ssdlab.serving.listener_options`
//! builds them from the command line): read here, in one place, into the server core's
//! [`ListenOptions`]. This is where a command line's "0 seconds: never" becomes `None`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::PyResult;
use serde::Deserialize;
use ssdlab_server::{never_if_zero, ListenOptions};

use crate::errors::ConfigError;

/// The listener's keys of a serving function's `options` dict (flattened into each
/// function's options). An absent key, or None, keeps the front-end's default.
#[derive(Deserialize)]
pub(crate) struct ListenArgs {
    /// HOST:PORT.
    pub(crate) listen: String,
    #[serde(default)]
    allow_remote: bool,
    /// PEM files, both or neither (NBD only).
    #[serde(default)]
    tls_cert: Option<PathBuf>,
    #[serde(default)]
    tls_key: Option<PathBuf>,
    #[serde(default)]
    max_connections: Option<usize>,
    /// Seconds (0: the default).
    #[serde(default)]
    handshake_timeout_s: Option<f64>,
    /// Seconds (0: never).
    #[serde(default)]
    idle_timeout_s: Option<f64>,
    /// Seconds (0: never).
    #[serde(default)]
    evict_idle_after_s: Option<f64>,
}

impl ListenArgs {
    /// The listener settings: these arguments over the front-end's `defaults`. Seconds out of
    /// range and TLS files without their pair are a ValueError naming the flag.
    pub(crate) fn over(self, defaults: ListenOptions) -> PyResult<ListenOptions> {
        let secs = |flag: &str, s: f64| never_if_zero(flag, s).map_err(|e| PyValueError::new_err(e.to_string()));
        let tls = match (self.tls_cert, self.tls_key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => defaults.tls,
            _ => return Err(PyValueError::new_err("TLS needs both --tls-cert and --tls-key")),
        };
        let handshake_timeout = match self.handshake_timeout_s {
            Some(s) => secs("--handshake-timeout", s)?.unwrap_or(defaults.handshake_timeout),
            None => defaults.handshake_timeout,
        };
        let idle_timeout = match self.idle_timeout_s {
            Some(s) => secs("--idle-timeout", s)?,
            None => defaults.idle_timeout,
        };
        let evict_idle_after = match self.evict_idle_after_s {
            Some(s) => secs("--evict-idle-after", s)?,
            None => defaults.evict_idle_after,
        };
        Ok(ListenOptions {
            address: self.listen,
            allow_remote: self.allow_remote,
            tls,
            max_connections: self.max_connections.unwrap_or(defaults.max_connections),
            handshake_timeout,
            idle_timeout,
            evict_idle_after,
        })
    }
}

/// Keys of an options dict that no field took (collected with `#[serde(flatten)]`, which
/// cannot be combined with `deny_unknown_fields`): a ConfigError naming them.
pub(crate) fn deny_unknown(what: &str, rest: &BTreeMap<String, serde_json::Value>) -> PyResult<()> {
    match rest.keys().next() {
        None => Ok(()),
        Some(k) => Err(ConfigError::new_err(format!("{what}: unknown field `{k}`"))),
    }
}
