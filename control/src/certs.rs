//! Certificates for the encrypted listeners (DNS over TLS, HTTPS, QUIC and HTTP/3): a PEM pair
//! loaded into rustls (and, through it, quinn) server configurations, the files watched and re-read when they change, and a
//! self-signed pair for local use (`kudurru cert generate`).
//!
//! ```text
//! tls.certFile ─┐ (watch::FileWatcher: notify + poll + sha256)
//! tls.keyFile ──┴▶ load both ─┬ valid: swap the TlsConfig (next handshake uses it) + log
//!                             └ invalid: log why, keep serving the old pair
//! ```
//! TLS 1.3 and 1.2 (RFC 8310 §9 asks for at least 1.2; RFC 8484 §5 and RFC 9113 §9.2 ask
//! HTTP/2 for 1.2 or later; QUIC is 1.3 only), ALPN `dot` (RFC 7858 §3.2) for DoT, `h2`,
//! `http/1.1` for DoH, `doq` for DoQ and `h3` for DoH3 (set by `TlsServers::new`), session
//! resumption by stateful cache and TLS 1.3 tickets. `ring` is the only crypto provider.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kudurru_transports::TlsServers;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::files::sha256;
use crate::watch::{FileWatcher, WatchError};

/// Why a certificate pair could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertError {
    /// A file could not be read or parsed as PEM.
    #[error("{}: {message}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The certificate file holds no certificate.
    #[error("{}: no CERTIFICATE block", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// rustls refused the pair (for example, the key does not match the certificate).
    #[error("certificate {} with key {}: {source}", cert.display(), key.display())]
    Invalid {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        source: rustls::Error,
    },
    /// A generated pair could not be written.
    #[error("{}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A self-signed pair could not be generated.
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// The server configurations of every encrypted transport for the pair in `cert` and `key`.
pub fn server_configs(cert: &Path, key: &Path) -> Result<TlsServers, CertError> {
    TlsServers::new(&server_config(cert, key)?).map_err(|source| CertError::Invalid {
        cert: cert.to_owned(),
        key: key.to_owned(),
        source,
    })
}

/// The server configuration for the pair in `cert` and `key` (ALPN set per transport later).
fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, CertError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|e| CertError::Pem {
            path: path.to_owned(),
            message: e.to_string(),
        })
    };
    server_config_from_pem(&read(cert)?, &read(key)?, cert, key)
}

/// The server configuration for a PEM certificate chain and key already read from `cert` and
/// `key` (the names are for errors).
pub fn server_config_from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert: &Path,
    key: &Path,
) -> Result<rustls::ServerConfig, CertError> {
    let pem_error = |path: &Path, e: rustls::pki_types::pem::Error| CertError::Pem {
        path: path.to_owned(),
        message: e.to_string(),
    };
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(cert, e))?;
    if chain.is_empty() {
        return Err(CertError::NoCertificate {
            path: cert.to_owned(),
        });
    }
    let private_key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| pem_error(key, e))?;
    let invalid = |source| CertError::Invalid {
        cert: cert.to_owned(),
        key: key.to_owned(),
        source,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(invalid)?
        .with_no_client_auth()
        .with_single_cert(chain, private_key)
        .map_err(invalid)?;
    config.ticketer = rustls::crypto::ring::Ticketer::new().map_err(invalid)?;
    Ok(config)
}

/// A self-signed certificate and its key, PEM, for `names` (DNS names or IP addresses).
pub fn generate(names: &[String]) -> Result<(String, String), CertError> {
    let pair = rcgen::generate_simple_self_signed(names.to_vec())?;
    Ok((pair.cert.pem(), pair.signing_key.serialize_pem()))
}

/// The HTTP API's server configuration for the pair in `cert` and `key` (ALPN `http/1.1`).
pub fn api_server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, CertError> {
    let mut config = server_config(cert, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Re-reads the pair now (what SIGHUP does besides the file watch).
pub type Reload = Arc<dyn Fn() + Send + Sync>;

/// Re-reads `cert` and `key` whenever either changes and hands a valid pair to `install`; an
/// invalid pair is logged and the old one keeps serving. `what` names the listeners in logs.
/// Returns the re-read itself, for SIGHUP.
pub fn watch<T: Send + Sync + 'static>(
    watcher: &mut FileWatcher,
    what: &'static str,
    cert: &Path,
    key: &Path,
    load: fn(&Path, &Path) -> Result<T, CertError>,
    install: impl Fn(T) + Send + Sync + 'static,
) -> Result<Reload, WatchError> {
    let reload = {
        let (cert, key) = (cert.to_owned(), key.to_owned());
        Arc::new(move || match load(&cert, &key) {
            Ok(config) => {
                install(config);
                tracing::info!(listeners = what, cert = %cert.display(), "TLS certificate reloaded");
            }
            Err(e) => {
                tracing::error!(listeners = what, error = %e, "TLS certificate not reloaded; the previous one stays in use");
            }
        })
    };
    let hash = |path: &Path| std::fs::read(path).ok().map(|b| sha256(&b));
    let (on_cert, on_key) = (reload.clone(), reload.clone());
    watcher.follow(cert, hash(cert), move || on_cert())?;
    watcher.follow(key, hash(key), move || on_key())?;
    Ok(reload)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let (cert, key) = generate(&["localhost".into(), "127.0.0.1".into()]).unwrap();
        let (c, k) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        (c, k)
    }

    #[test]
    fn a_generated_pair_loads_with_alpn_per_transport() {
        let dir = tempdir("load");
        let (cert, key) = write_pair(&dir, "a");
        let configs = server_configs(&cert, &key).unwrap();
        assert_eq!(configs.dot.alpn_protocols, vec![b"dot".to_vec()]);
        assert_eq!(
            configs.https.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_pairs_are_refused_with_the_file_named() {
        let dir = tempdir("bad");
        let (cert_a, _) = write_pair(&dir, "a");
        let (_, key_b) = write_pair(&dir, "b");
        let mismatch = server_config(&cert_a, &key_b).unwrap_err();
        assert!(matches!(mismatch, CertError::Invalid { .. }), "{mismatch}");
        let empty = dir.join("empty.crt");
        std::fs::write(&empty, "not pem\n").unwrap();
        let e = server_config(&empty, &key_b).unwrap_err();
        assert!(matches!(e, CertError::NoCertificate { .. }), "{e}");
        assert!(e.to_string().contains("empty.crt"), "{e}");
        let e = server_config(&dir.join("missing.crt"), &key_b).unwrap_err();
        assert!(e.to_string().contains("missing.crt"), "{e}");
        let e = server_config(&cert_a, &empty).unwrap_err();
        assert!(e.to_string().contains("empty.crt"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempdir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kudurru-certs-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
