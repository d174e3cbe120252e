//! The rules every ssdlab listener keeps, whether it runs on the async server core
//! (crates/server) or is a blocking loop of its own (the UIO device's NET peer listener):
//! the **loopback rule** ([`check_listen`]) and **rate-limited logs** ([`log::RateLog`]).
//! Nothing here needs an async runtime or TLS, so a case-study crate can use them without
//! importing the server core.

pub mod log;

use std::net::SocketAddr;

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
}
