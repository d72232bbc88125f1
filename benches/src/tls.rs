//! The TLS client side of encrypted targets: rustls with the `ring` provider, TLS 1.3 and 1.2,
//! the certificate verified against `--ca FILE` or the system's trust store, or not at all with
//! `--insecure` (signatures are still checked, the chain and name are not).

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// What a TLS flow connects with.
#[derive(Debug, Clone)]
pub struct TlsClient {
    /// The configuration every connection shares (and its session cache, for resumption).
    pub config: Arc<rustls::ClientConfig>,
    /// The name the certificate is verified for, sent as SNI.
    pub server_name: ServerName<'static>,
}

/// How the server's certificate is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verify {
    /// Against the system's trust store (`/etc/ssl/certs` and friends).
    System,
    /// Against the certificates in this PEM file only.
    Ca(std::path::PathBuf),
    /// Not at all (`--insecure`).
    Insecure,
}

/// Why no client configuration could be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The `--ca` file could not be read or holds no certificate.
    #[error("--ca {path}: {reason}")]
    Ca {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The system trust store is empty or unreadable.
    #[error("no system CA certificates found ({0}); pass --ca FILE or --insecure")]
    SystemRoots(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A client configuration offering `alpn`.
pub fn client_config(
    verify: &Verify,
    alpn: &[&[u8]],
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let mut config = match verify {
        Verify::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(
                provider.signature_verification_algorithms,
            )))
            .with_no_client_auth(),
        Verify::Ca(path) => builder
            .with_root_certificates(roots_from(path)?)
            .with_no_client_auth(),
        Verify::System => {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = rustls::RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map_or_else(|| "the store is empty".to_owned(), ToString::to_string);
                return Err(TlsError::SystemRoots(why));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

fn roots_from(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let error = |reason: String| TlsError::Ca {
        path: path.display().to_string(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(e.to_string()))?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(error("no usable CERTIFICATE block".into()));
    }
    Ok(roots)
}

/// The server name to verify and send as SNI (an IP address is verified as one, without SNI).
pub fn server_name(name: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(name.to_owned())
        .map_err(|e| format!("`{name}` is not a TLS server name: {e}"))
}

/// `--insecure`: any certificate chain for any name, but handshake signatures must verify.
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
