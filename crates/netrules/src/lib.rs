//! The rules every ssdlab listener keeps, whether it runs on the async server core
//! (crates/server) or is a blocking loop of its own (the UIO device's NET peer listener):
//! the **loopback rule** ([`check_listen`]), **rate-limited logs** ([`log::RateLog`]) and the
//! **lock-poisoning policy** ([`lock`], [`lock_store`]).
//! Nothing here needs an async runtime or TLS, so a case-study crate can use them without
//! importing the server core.

#![forbid(unsafe_code)]

pub mod log;

use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};

pub use log::RateLog;

/// Parse `listen` and apply the loopback rule: loopback addresses always; others only with
/// TLS or the explicit `allow_remote` opt-in. "localhost:PORT" means 127.0.0.1.
pub fn check_listen(listen: &str, tls: bool, tls_supported: bool, allow_remote: bool) -> Result<SocketAddr, String> {
    let text = match listen.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => listen.to_string(),
    };
    let addr: SocketAddr =
        text.parse().map_err(|_| format!("--listen {listen:?}: expected HOST:PORT with a numeric address, e.g. 127.0.0.1:10809"))?;
    if addr.ip().is_loopback() || tls || allow_remote {
        return Ok(addr);
    }
    let how = if tls_supported { "TLS (--tls-cert and --tls-key) or --allow-remote" } else { "--allow-remote (this protocol has no TLS)" };
    Err(format!(
        "--listen {addr}: a non-loopback address needs {how}; without TLS the traffic is unencrypted and unauthenticated, so anyone who can reach the port can use the device"
    ))
}

/// Lock state that changes in whole steps: counters, registries, logs, and stores whose every
/// method leaves them consistent at each return. A panic elsewhere (one connection's bug) cannot
/// leave such state half-changed, so a poisoned lock is taken as is and the server goes on
/// serving its other clients.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Lock a store that a panic inside one of its updates could leave half-changed (an index
/// repointed but its counts not). A poisoned lock is never served from: the call panics with
/// `what` named, so the request fails loudly instead of answering from a broken store (a device
/// with `--data` recovers its state from the flash when restarted).
pub fn lock_store<'a, T>(m: &'a Mutex<T>, what: &str) -> MutexGuard<'a, T> {
    m.lock().unwrap_or_else(|_| panic!("{what}: an earlier panic may have left it half-changed; not serving from it (restart the process)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_rule() {
        assert!(check_listen("127.0.0.1:0", false, true, false).is_ok());
        assert!(check_listen("[::1]:0", false, true, false).is_ok());
        assert!(check_listen("localhost:80", false, true, false).unwrap().ip().is_loopback());
        let e = check_listen("0.0.0.0:2222", false, false, false).unwrap_err();
        assert!(e.contains("--allow-remote") && e.contains("no TLS"), "{e}");
        let e = check_listen("0.0.0.0:2222", false, true, false).unwrap_err();
        assert!(e.contains("--tls-cert"), "{e}");
        assert!(check_listen("0.0.0.0:2222", true, true, false).is_ok());
        assert!(check_listen("0.0.0.0:2222", false, false, true).is_ok());
        assert!(check_listen("nonsense", false, true, false).unwrap_err().contains("HOST:PORT"));
    }

    #[test]
    fn a_poisoned_lock_is_taken_for_bookkeeping_and_refused_for_a_store() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("a connection's bug");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*lock(&m), 1);
        let e = std::panic::catch_unwind(|| *lock_store(&m, "the UTL")).unwrap_err();
        let text = e.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains("the UTL") && text.contains("half-changed"), "{text}");
    }
}
