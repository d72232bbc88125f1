//! TLS client configurations for encrypted upstreams (`upstream.tls.*`): the system roots or
//! the configured CA, SPKI pins, session resumption, one configuration per ALPN, built once
//! per [`UpstreamTls`] value and shared by every core.
//!
//! ```text
//! client_config(tls, alpn) ─▶ process-wide cache (by the value of `tls`, and alpn)
//!   miss ─▶ roots: caFile's certificates, else the system's (loaded once per process)
//!        ─▶ verifier: webpki verification, then the SPKI pins of the server's name
//!        ─▶ resumption: one session store per `tls` value, shared by every ALPN and core
//! ```
//!
//! Every core shares one configuration (and so one session store): a connection opened by core 3
//! after core 1's handshake with the same upstream resumes core 1's session (TLS 1.3 tickets;
//! TLS 1.2 session IDs or tickets). The store takes a lock, on handshakes only.
//!
//! No 0-RTT (early data) over DoT or DoH on HTTP/2: a reused, pipelined connection makes a
//! handshake rare, so 0-RTT would save one round trip per reconnect, while early data can be
//! replayed by anyone on the path (RFC 8446 §8): a replayed DNS query changes nothing at the
//! upstream, but its reply shows an observer that the same query was asked again, and servers
//! (Unbound among them) commonly do not accept early data on TCP, which costs a retry in full.
//! DoQ and DoH3 decide for themselves (RFC 9250 §4.5 allows 0-RTT for DoQ).
//!
//! Verification: webpki against the roots, for the name the upstream URL gives (`#name`, else
//! its host, else its IP address); then, when `upstream.tls.pins` has pins for that name, one
//! certificate of the chain the server presented must have a SubjectPublicKeyInfo whose SHA-256
//! is among them (RFC 7858 §4.2, RFC 7469's pin form). A mismatch fails the handshake with an
//! error that names the server and the key it presented.

use std::fmt;
use std::sync::{Arc, LazyLock, Mutex};

use base64::Engine;
use kudurru_core::{UpstreamSpec, UpstreamTls};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientSessionMemoryCache, Resumption, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, OtherError, RootCertStore,
    SignatureScheme,
};
use sha2::{Digest, Sha256};

/// Which protocol a connection negotiates (its ALPN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Alpn {
    /// DNS over TLS: `dot` (RFC 7858 registers it).
    Dot,
    /// DNS over HTTPS on HTTP/2: `h2`.
    H2,
    /// DNS over QUIC: `doq` (RFC 9250 §4.1.1).
    Doq,
    /// DNS over HTTPS on HTTP/3: `h3`.
    H3,
}

impl Alpn {
    /// The protocol identifier sent in the ClientHello.
    pub fn id(self) -> &'static [u8] {
        match self {
            Self::Dot => b"dot",
            Self::H2 => b"h2",
            Self::Doq => b"doq",
            Self::H3 => b"h3",
        }
    }
}

/// Session tickets kept per `upstream.tls` value (every core and upstream share them): enough
/// for a few tickets of each of a few dozen upstreams.
const SESSION_CACHE: usize = 256;

/// Distinct `upstream.tls` values whose configurations are kept: a reload that changes the CA
/// or the pins adds one; the oldest goes first (its connections keep their own `Arc`s).
const CONFIGS_KEPT: usize = 8;

/// The configurations built so far: per `upstream.tls` value, its session store and one
/// configuration per ALPN.
struct Built {
    tls: UpstreamTls,
    sessions: Arc<ClientSessionMemoryCache>,
    configs: Vec<(Alpn, Arc<ClientConfig>)>,
}

static CACHE: Mutex<Vec<Built>> = Mutex::new(Vec::new());

/// The system's roots, loaded once per process (the file reads take milliseconds).
static SYSTEM_ROOTS: LazyLock<Arc<RootCertStore>> = LazyLock::new(|| {
    let loaded = rustls_native_certs::load_native_certs();
    for error in &loaded.errors {
        tracing::warn!(%error, "loading the system's TLS roots");
    }
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(loaded.certs);
    tracing::debug!(added, ignored, "system TLS roots for encrypted upstreams");
    Arc::new(roots)
});

/// The client configuration for `alpn` under `tls`: built on first use, then shared.
pub fn client_config(tls: &Arc<UpstreamTls>, alpn: Alpn) -> Result<Arc<ClientConfig>, String> {
    // A poisoned lock only means another thread panicked while building; the list is intact.
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let position = match cache.iter().position(|built| built.tls == **tls) {
        Some(position) => position,
        None => {
            if cache.len() >= CONFIGS_KEPT {
                cache.remove(0);
            }
            cache.push(Built {
                tls: (**tls).clone(),
                sessions: Arc::new(ClientSessionMemoryCache::new(SESSION_CACHE)),
                configs: Vec::new(),
            });
            cache.len() - 1
        }
    };
    let built = &mut cache[position];
    if let Some((_, config)) = built.configs.iter().find(|(a, _)| *a == alpn) {
        return Ok(config.clone());
    }
    let config = Arc::new(build(tls, alpn, built.sessions.clone())?);
    built.configs.push((alpn, config.clone()));
    Ok(config)
}

/// Checks that `tls` gives usable client configurations (the CA file's certificates parse and
/// are usable as roots, the pins' names are server names): the control thread calls it before
/// publishing, so a bad file is a configuration error.
pub fn check(tls: &UpstreamTls) -> Result<(), String> {
    if let Some(pem) = &tls.ca_pem {
        let roots = ca_roots(pem)?;
        verifier(Arc::new(roots), Vec::new())?;
    }
    for (name, _) in &tls.pins {
        ServerName::try_from(&**name)
            .map_err(|e| format!("the pinned name {name:?} is no server name: {e}"))?;
    }
    Ok(())
}

/// The name the certificate of `spec` must carry: the URL's `#name`, else its host name, else
/// its IP address.
pub fn server_name(spec: &UpstreamSpec) -> Result<ServerName<'static>, String> {
    match spec.tls_name.as_deref().or(spec.host.as_deref()) {
        Some(name) => ServerName::try_from(name.to_owned())
            .map_err(|e| format!("the TLS name {name:?} of {spec} is no server name: {e}")),
        None => Ok(ServerName::IpAddress(spec.addr.ip().into())),
    }
}

/// Whether `error` (from a handshake) is the server's certificate or key being refused
/// (verification or a pin): counted as a TLS failure, apart from network errors.
pub fn is_certificate_error(error: &std::io::Error) -> bool {
    error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|e| {
            matches!(
                e,
                rustls::Error::InvalidCertificate(_)
                    | rustls::Error::NoCertificatesPresented
                    | rustls::Error::AlertReceived(rustls::AlertDescription::BadCertificate)
            )
        })
}

/// What went wrong in a handshake, for the log: a pin mismatch says which name and key; other
/// errors as rustls and the socket put them.
pub fn describe(error: &std::io::Error) -> String {
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(e) => describe_rustls(e),
        None => error.to_string(),
    }
}

fn describe_rustls(error: &rustls::Error) -> String {
    match error {
        rustls::Error::InvalidCertificate(CertificateError::Other(other)) => {
            format!("invalid peer certificate: {other}")
        }
        other => other.to_string(),
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of the CA file, as roots.
fn ca_roots(pem: &[u8]) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for (n, cert) in CertificateDer::pem_slice_iter(pem).enumerate() {
        let cert = cert.map_err(|e| format!("certificate {} is unreadable: {e}", n + 1))?;
        roots
            .add(cert)
            .map_err(|e| format!("certificate {} is no usable CA: {e}", n + 1))?;
    }
    if roots.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(roots)
}

fn verifier(
    roots: Arc<RootCertStore>,
    pins: Vec<(Arc<str>, [u8; 32])>,
) -> Result<Arc<PinningVerifier>, String> {
    let inner = WebPkiServerVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| format!("no usable roots: {e}"))?;
    Ok(Arc::new(PinningVerifier { inner, pins }))
}

fn build(
    tls: &UpstreamTls,
    alpn: Alpn,
    sessions: Arc<ClientSessionMemoryCache>,
) -> Result<ClientConfig, String> {
    let roots = match &tls.ca_pem {
        Some(pem) => Arc::new(ca_roots(pem).map_err(|e| format!("upstream.tls.caFile: {e}"))?),
        None => SYSTEM_ROOTS.clone(),
    };
    let verifier = verifier(roots, tls.pins.clone())?;
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.id().to_vec()];
    config.resumption = Resumption::store(sessions);
    // See the module documentation: no early data over TCP.
    config.enable_early_data = false;
    Ok(config)
}

/// webpki verification, then the SPKI pins of the server's name.
struct PinningVerifier {
    inner: Arc<WebPkiServerVerifier>,
    pins: Vec<(Arc<str>, [u8; 32])>,
}

impl fmt::Debug for PinningVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinningVerifier")
            .field("pins", &self.pins.len())
            .finish_non_exhaustive()
    }
}

/// A certificate that verified but whose key is not among its name's pins.
#[derive(Debug, thiserror::Error)]
#[error(
    "SPKI pin mismatch for {name}: the server's key sha256/{presented} is not among the \
     upstream.tls.pins for {name}"
)]
struct PinMismatch {
    name: String,
    presented: String,
}

/// The SHA-256 of the SubjectPublicKeyInfo of `cert` (`None`: it does not parse).
fn spki_sha256(cert: &CertificateDer<'_>) -> Option<[u8; 32]> {
    let parsed = webpki::EndEntityCert::try_from(cert).ok()?;
    Some(Sha256::digest(parsed.subject_public_key_info().as_ref()).into())
}

fn name_text(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(dns) => dns.as_ref().trim_end_matches('.').to_ascii_lowercase(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        _ => format!("{name:?}"),
    }
}

impl ServerCertVerifier for PinningVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        if self.pins.is_empty() {
            return Ok(verified);
        }
        let name = name_text(server_name);
        let mut pins = self
            .pins
            .iter()
            .filter(|(pinned, _)| **pinned == *name)
            .map(|(_, pin)| pin)
            .peekable();
        if pins.peek().is_none() {
            return Ok(verified);
        }
        let pins: Vec<&[u8; 32]> = pins.collect();
        let chain = std::iter::once(end_entity).chain(intermediates);
        let mut presented = None;
        for cert in chain {
            let Some(digest) = spki_sha256(cert) else {
                continue;
            };
            if pins.contains(&&digest) {
                return Ok(verified);
            }
            presented.get_or_insert(digest);
        }
        let presented = presented
            .map(|d| base64::engine::general_purpose::STANDARD.encode(d))
            .unwrap_or_else(|| "(unreadable)".into());
        tracing::warn!(server = %name, key = %presented, "SPKI pin mismatch: refused");
        Err(rustls::Error::InvalidCertificate(CertificateError::Other(
            OtherError(Arc::new(PinMismatch { name, presented })),
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Pki {
        ca_pem: String,
        ca: rcgen::Issuer<'static, rcgen::KeyPair>,
    }

    fn pki() -> Pki {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).expect("a CA");
        Pki {
            ca_pem: cert.pem(),
            ca: rcgen::Issuer::new(params, key),
        }
    }

    /// A leaf for `name` signed by `pki`, and its SPKI SHA-256.
    fn leaf(pki: &Pki, name: &str) -> (CertificateDer<'static>, [u8; 32]) {
        let key = rcgen::KeyPair::generate().expect("a key");
        let params = rcgen::CertificateParams::new(vec![name.to_owned()]).expect("params");
        let cert = params.signed_by(&key, &pki.ca).expect("a leaf");
        let spki: [u8; 32] =
            Sha256::digest(rcgen::PublicKeyData::subject_public_key_info(&key)).into();
        (cert.der().clone(), spki)
    }

    fn tls(pki: &Pki, pins: Vec<(Arc<str>, [u8; 32])>) -> Arc<UpstreamTls> {
        Arc::new(UpstreamTls {
            ca_pem: Some(Arc::from(pki.ca_pem.as_bytes())),
            pins,
            padding: false,
        })
    }

    fn verify(tls: &UpstreamTls, cert: &CertificateDer<'_>, name: &str) -> Result<(), String> {
        let roots = ca_roots(tls.ca_pem.as_deref().expect("a CA")).expect("roots");
        verifier(Arc::new(roots), tls.pins.clone())
            .expect("a verifier")
            .verify_server_cert(
                cert,
                &[],
                &ServerName::try_from(name).expect("a name"),
                &[],
                UnixTime::now(),
            )
            .map(|_| ())
            .map_err(|e| describe_rustls(&e))
    }

    #[test]
    fn configurations_are_shared_per_value_and_alpn() {
        let pki = pki();
        let a = client_config(&tls(&pki, Vec::new()), Alpn::Dot).expect("a config");
        let b = client_config(&tls(&pki, Vec::new()), Alpn::Dot).expect("a config");
        let h2 = client_config(&tls(&pki, Vec::new()), Alpn::H2).expect("a config");
        assert!(
            Arc::ptr_eq(&a, &b),
            "the same value shares one configuration"
        );
        assert!(!Arc::ptr_eq(&a, &h2));
        assert_eq!(h2.alpn_protocols, vec![b"h2".to_vec()]);
        assert!(!a.enable_early_data);
    }

    #[test]
    fn check_refuses_a_ca_file_that_does_not_parse() {
        let bad = UpstreamTls {
            ca_pem: Some(Arc::from(
                &b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"[..],
            )),
            ..UpstreamTls::default()
        };
        let error = check(&bad).expect_err("a bad CA");
        assert!(error.contains("certificate 1"), "{error}");
        assert!(check(&tls(&pki(), Vec::new())).is_ok());
    }

    #[test]
    fn rfc7858_4_2_pins_are_checked_after_verification() {
        let pki = pki();
        let (cert, spki) = leaf(&pki, "dot.example");
        let other = [7u8; 32];
        let name: Arc<str> = Arc::from("dot.example");
        let right = tls(&pki, vec![(name.clone(), spki)]);
        verify(&right, &cert, "dot.example").expect("the right pin");
        let wrong = tls(&pki, vec![(name, other)]);
        let error = verify(&wrong, &cert, "dot.example").expect_err("a wrong pin");
        assert!(
            error.contains("SPKI pin mismatch for dot.example"),
            "{error}"
        );
        // Pins of another name do not apply; verification still does.
        let elsewhere = vec![(Arc::from("other.example"), other)];
        let config = tls(&pki, elsewhere);
        verify(&config, &cert, "dot.example").expect("no pins for this name");
        let error = verify(&config, &cert, "wrong.example").expect_err("wrong name");
        assert!(!error.contains("pin"), "{error}");
        // Another CA: refused before any pin is looked at.
        let stranger = tls(&self::pki(), vec![]);
        assert!(verify(&stranger, &cert, "dot.example").is_err());
    }
}
