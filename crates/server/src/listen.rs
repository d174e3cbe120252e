//! The listener settings every front-end shares ([`ListenOptions`]) and the errors of the
//! serving path ([`ServeError`]).
//!
//! A front-end's options hold `pub listen: ListenOptions` and only their protocol's own fields;
//! [`ListenOptions::check`] is the one validation of the listener's limits (the core runs the
//! same check on its [`Options`] when it binds) and [`ListenOptions::apply`] fills the core's
//! [`Options`] from them. Durations are `Duration`s here: a command line's "0 seconds: never"
//! becomes `None` where the seconds are read ([`never_if_zero`]), and nowhere else.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Options, DEFAULT_EVICT_IDLE_AFTER, DEFAULT_HANDSHAKE_TIMEOUT, MAX_CONNECTIONS_LIMIT};

/// Why a server could not be set up, or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// `--listen` is not HOST:PORT, or is not loopback without TLS or `allow_remote` (the
    /// loopback rule, [`crate::check_listen`]).
    #[error("{0}")]
    Address(String),
    /// The address is fine but the socket could not be bound (in use, no permission).
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    /// The TLS certificate or key could not be loaded.
    #[error("{0}")]
    Tls(String),
    /// A setting out of its range; the message names the command-line flag.
    #[error("{0}")]
    BadOption(String),
    /// The server failed while running or stopping (its runtime, signal handlers, or the
    /// protocol's shutdown work such as writing metrics).
    #[error("{0}")]
    Failed(String),
}

impl From<std::io::Error> for ServeError {
    fn from(e: std::io::Error) -> Self {
        ServeError::Failed(e.to_string())
    }
}

/// Longest timeout a command line may give (about 31 years): `Duration` arithmetic on it
/// cannot overflow.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(1_000_000_000);

/// Where and how a server listens, and how it limits its connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ListenOptions {
    /// HOST:PORT (port 0 picks a free port; "localhost:PORT" is 127.0.0.1).
    pub address: String,
    /// Non-loopback addresses without TLS (the explicit, documented opt-in).
    pub allow_remote: bool,
    /// PEM certificate chain and private key, for a protocol with TLS (NBD); None: no TLS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Clients served at once, 1..=[`MAX_CONNECTIONS_LIMIT`].
    pub max_connections: usize,
    /// The whole handshake (from accept until the protocol says it is established).
    pub handshake_timeout: Duration,
    /// After the handshake: cut a connection with no byte read or written for this long
    /// (None: never).
    pub idle_timeout: Option<Duration>,
    /// When every slot is taken: a connection idle at least this long gives its slot to a new
    /// client (None: never; new clients are then refused).
    pub evict_idle_after: Option<Duration>,
}

impl Default for ListenOptions {
    /// Loopback, a free port, the core's limits: 16 connections, the default handshake
    /// deadline and idle eviction, no idle timeout.
    fn default() -> Self {
        ListenOptions {
            address: "127.0.0.1:0".into(),
            allow_remote: false,
            tls: None,
            max_connections: 16,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            idle_timeout: None,
            evict_idle_after: Some(DEFAULT_EVICT_IDLE_AFTER),
        }
    }
}

impl ListenOptions {
    /// The defaults on `address` with at most `max_connections` clients.
    pub fn on(address: &str, max_connections: usize) -> ListenOptions {
        ListenOptions { address: address.into(), max_connections, ..ListenOptions::default() }
    }

    /// Refuse limits that leave the server unusable (the address and the loopback rule are
    /// checked when the server binds).
    pub fn check(&self) -> Result<(), ServeError> {
        check_limits(self.max_connections, self.handshake_timeout, None, self.idle_timeout, self.evict_idle_after)
    }

    /// `core` with this listener's settings; the rest (name, TLS mode, request timeout,
    /// signals, stats, ...) as `core` has them.
    pub fn apply(&self, core: Options) -> Options {
        Options {
            listen: self.address.clone(),
            allow_remote: self.allow_remote,
            tls: self.tls.clone(),
            max_connections: self.max_connections,
            handshake_timeout: self.handshake_timeout,
            idle_timeout: self.idle_timeout,
            evict_idle_after: self.evict_idle_after,
            ..core
        }
    }

    /// The port of `address` as written ("" if it has none), for `stats settings` and logs.
    pub fn port(&self) -> &str {
        self.address.rsplit(':').next().unwrap_or("")
    }
}

/// The one check of the connection limits, for [`ListenOptions::check`] and the core's bind.
/// `Some(0)` for an optional duration is refused: "never" is `None`.
pub(crate) fn check_limits(
    max_connections: usize,
    handshake_timeout: Duration,
    request_timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    evict_idle_after: Option<Duration>,
) -> Result<(), ServeError> {
    let bad = |m: String| Err(ServeError::BadOption(m));
    if max_connections == 0 || max_connections > MAX_CONNECTIONS_LIMIT {
        return bad(format!("--max-connections {max_connections}: must be in 1..={MAX_CONNECTIONS_LIMIT}"));
    }
    if handshake_timeout.is_zero() {
        return bad("--handshake-timeout must be more than 0 seconds".into());
    }
    for (flag, d) in [("--idle-timeout", idle_timeout), ("--request-timeout", request_timeout), ("--evict-idle-after", evict_idle_after)] {
        if d.is_some_and(|d| d.is_zero()) {
            return bad(format!("{flag} must be more than 0 seconds (or off)"));
        }
    }
    for (flag, d) in [
        ("--handshake-timeout", Some(handshake_timeout)),
        ("--idle-timeout", idle_timeout),
        ("--request-timeout", request_timeout),
        ("--evict-idle-after", evict_idle_after),
    ] {
        if d.is_some_and(|d| d > MAX_TIMEOUT) {
            return bad(format!("{flag}: at most {} seconds", MAX_TIMEOUT.as_secs()));
        }
    }
    Ok(())
}

/// A command line's seconds for `flag` as an optional duration: 0 means never (None).
/// Negative, non-finite or more than [`MAX_TIMEOUT`] seconds is refused.
pub fn never_if_zero(flag: &str, secs: f64) -> Result<Option<Duration>, ServeError> {
    if !(0.0..=MAX_TIMEOUT.as_secs_f64()).contains(&secs) {
        return Err(ServeError::BadOption(format!("{flag} {secs}: seconds, 0 or more (0: never), at most {}", MAX_TIMEOUT.as_secs())));
    }
    let d = (secs > 0.0).then(|| Duration::from_secs_f64(secs));
    // Rounding to a Duration keeps the bound that lets deadline arithmetic skip overflow checks.
    debug_assert!(d.is_none_or(|d| d <= MAX_TIMEOUT), "{flag}: {d:?} beyond MAX_TIMEOUT");
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_are_checked_in_one_place() {
        assert!(ListenOptions::default().check().is_ok());
        for (o, flag) in [
            (ListenOptions { max_connections: 0, ..ListenOptions::default() }, "--max-connections 0"),
            (ListenOptions { max_connections: MAX_CONNECTIONS_LIMIT + 1, ..ListenOptions::default() }, "--max-connections"),
            (ListenOptions { handshake_timeout: Duration::ZERO, ..ListenOptions::default() }, "--handshake-timeout"),
            (ListenOptions { idle_timeout: Some(Duration::ZERO), ..ListenOptions::default() }, "--idle-timeout"),
            (ListenOptions { evict_idle_after: Some(Duration::ZERO), ..ListenOptions::default() }, "--evict-idle-after"),
        ] {
            let e = o.check().unwrap_err();
            assert!(matches!(e, ServeError::BadOption(_)), "{e:?}");
            assert!(e.to_string().contains(flag), "{e} should name {flag}");
        }
    }

    #[test]
    fn a_request_timeout_beyond_the_longest_is_refused_like_the_others() {
        let long = Some(MAX_TIMEOUT + Duration::from_secs(1));
        let e = check_limits(1, DEFAULT_HANDSHAKE_TIMEOUT, long, None, None).unwrap_err();
        assert!(e.to_string().starts_with("--request-timeout"), "{e}");
        assert!(check_limits(1, DEFAULT_HANDSHAKE_TIMEOUT, Some(MAX_TIMEOUT), None, None).is_ok());
    }

    #[test]
    fn zero_seconds_is_never_and_bad_seconds_are_refused() {
        assert_eq!(never_if_zero("--idle-timeout", 0.0).unwrap(), None);
        assert_eq!(never_if_zero("--idle-timeout", 1.5).unwrap(), Some(Duration::from_millis(1500)));
        for s in [-1.0, f64::NAN, f64::INFINITY, 2e9] {
            let e = never_if_zero("--idle-timeout", s).unwrap_err();
            assert!(e.to_string().starts_with("--idle-timeout"), "{e}");
        }
    }

    #[test]
    fn apply_fills_the_listener_fields_and_keeps_the_protocols() {
        let l = ListenOptions {
            address: "127.0.0.1:7".into(),
            allow_remote: true,
            max_connections: 3,
            idle_timeout: Some(Duration::from_secs(9)),
            evict_idle_after: None,
            ..ListenOptions::default()
        };
        let core = l.apply(Options { name: "x".into(), tls_supported: false, ..Options::default() });
        assert_eq!((core.listen.as_str(), core.allow_remote, core.max_connections), ("127.0.0.1:7", true, 3));
        assert_eq!((core.idle_timeout, core.evict_idle_after), (Some(Duration::from_secs(9)), None));
        assert_eq!((core.name.as_str(), core.tls_supported), ("x", false));
        assert_eq!(l.port(), "7");
    }

    #[test]
    fn a_serialized_front_end_option_set_reads_back_with_defaults() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Front {
            #[serde(flatten)]
            listen: ListenOptions,
            own: u32,
        }
        let f = Front { listen: ListenOptions::on("127.0.0.1:9", 4), own: 1 };
        let text = serde_json::to_string(&f).unwrap();
        assert_eq!(serde_json::from_str::<Front>(&text).unwrap(), f);
        let partial: Front = serde_json::from_str(r#"{"address": "127.0.0.1:5", "own": 2}"#).unwrap();
        assert_eq!(partial.listen, ListenOptions { address: "127.0.0.1:5".into(), ..ListenOptions::default() });
    }
}
