//! TLS (rustls, TLS 1.2 and 1.3) from PEM files.

use std::path::Path;
use std::sync::Arc;

/// Build a TLS server configuration from a PEM certificate chain and private key. Errors name
/// the file and what was wrong with it.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let open = |p: &Path| std::fs::File::open(p).map(std::io::BufReader::new).map_err(|e| format!("{}: {e}", p.display()));
    let certs: Vec<_> = rustls_pemfile::certs(&mut open(cert)?)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: not a PEM certificate file ({e})", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", cert.display()));
    }
    let key_der = rustls_pemfile::private_key(&mut open(key)?)
        .map_err(|e| format!("{}: not a PEM key file ({e})", key.display()))?
        .ok_or_else(|| format!("{}: no PEM private key in it", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map(Arc::new)
        .map_err(|e| format!("TLS certificate {} / key {}: {e}", cert.display(), key.display()))
}
