//! The API from the command line: `kudurru upstreams` (and the object commands to come) call
//! a running server's API with a token, over HTTP or HTTPS, one request per call.
//!
//! Where: `--api URL`, else the configuration's `api.address` (HTTPS when `api.tlsCert` is
//! set). Who: `--token`, else `KUDURRU_TOKEN`, else the first line of `--token-file`. Trust:
//! `--ca FILE` for a self-signed API certificate, else the system's roots.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// How long connecting, the TLS handshake and the whole exchange may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest response body read.
const MAX_RESPONSE: usize = 16 << 20;

/// Why a call to the API failed before it had an answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// `--api` is not `http://HOST:PORT` or `https://HOST:PORT`.
    #[error("--api {0:?}: expected http://HOST:PORT or https://HOST:PORT")]
    Url(String),
    /// No token was given.
    #[error(
        "no token: pass --token, set KUDURRU_TOKEN or pass --token-file (kudurru token create)"
    )]
    NoToken,
    /// The token file or the CA file could not be read.
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The API could not be reached, or the exchange broke or timed out.
    #[error("{url}: {message}")]
    Connect {
        /// The API's URL.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The API's answer is not JSON.
    #[error("{url}: the answer is not JSON: {message}")]
    NotJson {
        /// The API's URL.
        url: String,
        /// serde_json's message.
        message: String,
    },
}

/// A configured API client.
pub struct ApiClient {
    url: String,
    host: String,
    port: u16,
    tls: Option<rustls::ClientConfig>,
    token: String,
}

/// An answer: status and JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The JSON body (`Null` when empty).
    pub body: serde_json::Value,
}

impl ApiClient {
    /// A client for the API at `url` with `token`, trusting `ca` (PEM) or the system's roots.
    pub fn new(url: &str, token: String, ca: Option<&Path>) -> Result<Self, ClientError> {
        let bad = || ClientError::Url(url.to_owned());
        let (https, rest) = match url.split_once("://") {
            Some(("http", rest)) => (false, rest),
            Some(("https", rest)) => (true, rest),
            _ => return Err(bad()),
        };
        let authority = rest.trim_end_matches('/');
        let (host, port) = authority.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if host.is_empty() {
            return Err(bad());
        }
        let tls = https.then(|| client_config(ca)).transpose()?;
        Ok(Self {
            url: format!("{}://{authority}", if https { "https" } else { "http" }),
            host,
            port,
            tls,
            token,
        })
    }

    /// The API's base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// One request: `method` on `path` (starting `/api/v1/`), with an optional JSON body.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Answer, ClientError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| self.connect_error(e))?;
        runtime.block_on(async {
            tokio::time::timeout(TIMEOUT, self.exchange(method, path, body))
                .await
                .unwrap_or_else(|_| Err(self.connect_error("timed out")))
        })
    }

    async fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Answer, ClientError> {
        let response = self.head(method, path, body, None).await?;
        self.answer(response).await
    }

    /// A streamed GET of `path` asking for `accept`: each chunk of a 200 body goes to
    /// `on_chunk` as it arrives, until the body ends or `on_chunk` returns false; `None` then.
    /// Any other status is read whole and returned. Only connecting and the response head are
    /// bounded in time: a stream (a tail) may last as long as the server keeps it open.
    pub fn stream(
        &self,
        path: &str,
        accept: &str,
        on_chunk: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Option<Answer>, ClientError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| self.connect_error(e))?;
        runtime.block_on(async {
            let head = tokio::time::timeout(TIMEOUT, self.head("GET", path, None, Some(accept)))
                .await
                .unwrap_or_else(|_| Err(self.connect_error("timed out")))?;
            if head.status() != http::StatusCode::OK {
                return self.answer(head).await.map(Some);
            }
            let mut body = head.into_body();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| self.connect_error(e))?;
                if let Some(data) = frame.data_ref()
                    && !on_chunk(data)
                {
                    break;
                }
            }
            Ok(None)
        })
    }

    /// Connects, sends the request (with `body` as JSON, `accept` as `Accept`) and reads the
    /// response head.
    async fn head(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
        accept: Option<&str>,
    ) -> Result<http::Response<hyper::body::Incoming>, ClientError> {
        let stream = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| self.connect_error(e))?;
        let mut request = self.request(method, path, body)?;
        if let Some(accept) = accept {
            let value = http::HeaderValue::from_str(accept).map_err(|e| self.connect_error(e))?;
            request.headers_mut().insert(http::header::ACCEPT, value);
        }
        match &self.tls {
            None => send(TokioIo::new(stream), request).await,
            Some(config) => {
                let name =
                    ServerName::try_from(self.host.clone()).map_err(|e| self.connect_error(e))?;
                let connector = tokio_rustls::TlsConnector::from(Arc::new(config.clone()));
                let stream = connector
                    .connect(name, stream)
                    .await
                    .map_err(|e| self.connect_error(e))?;
                send(TokioIo::new(stream), request).await
            }
        }
        .map_err(|e| self.connect_error(e))
    }

    /// A whole response as an [`Answer`].
    async fn answer(
        &self,
        response: http::Response<hyper::body::Incoming>,
    ) -> Result<Answer, ClientError> {
        let status = response.status().as_u16();
        let bytes = Limited::new(response.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map_err(|e| self.connect_error(e))?
            .to_bytes();
        let body = if bytes.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&bytes).map_err(|e| ClientError::NotJson {
                url: self.url.clone(),
                message: e.to_string(),
            })?
        };
        Ok(Answer { status, body })
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<http::Request<Full<Bytes>>, ClientError> {
        let mut builder = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, format!("{}:{}", self.host, self.port))
            .header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            );
        let bytes = match body {
            Some(value) => {
                builder = builder.header(http::header::CONTENT_TYPE, "application/json");
                Bytes::from(serde_json::to_vec(value).unwrap_or_default())
            }
            None => Bytes::new(),
        };
        builder
            .body(Full::new(bytes))
            .map_err(|e| self.connect_error(e))
    }

    fn connect_error(&self, e: impl std::fmt::Display) -> ClientError {
        ClientError::Connect {
            url: self.url.clone(),
            message: e.to_string(),
        }
    }
}

/// Sends `request` on a fresh HTTP/1.1 connection over `io`.
async fn send<I>(
    io: I,
    request: http::Request<Full<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, hyper::Error>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(connection);
    sender.send_request(request).await
}

/// The TLS client configuration: the CA in `ca`, or the system's roots.
fn client_config(ca: Option<&Path>) -> Result<rustls::ClientConfig, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            let file_error = |message: String| ClientError::File {
                path: path.to_owned(),
                message,
            };
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| file_error(e.to_string()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| file_error(e.to_string()))?;
            if certs.is_empty() {
                return Err(file_error("no CERTIFICATE block".into()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| file_error(e.to_string()))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| ClientError::File {
            path: ca.map(Path::to_owned).unwrap_or_default(),
            message: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// The token: `--token`, else `KUDURRU_TOKEN`, else the first line of `--token-file`.
pub fn token(
    flag: Option<&str>,
    env: Option<String>,
    file: Option<&Path>,
) -> Result<String, ClientError> {
    if let Some(token) = flag.map(str::trim).filter(|t| !t.is_empty()) {
        return Ok(token.to_owned());
    }
    if let Some(token) = env.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
        return Ok(token.to_owned());
    }
    let Some(path) = file else {
        return Err(ClientError::NoToken);
    };
    let text = std::fs::read_to_string(path).map_err(|e| ClientError::File {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned)
        .ok_or(ClientError::NoToken)
}

/// `text` with every byte but unreserved ones (RFC 3986 §2.3) as `%XX`, for a query string.
pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_urls_are_http_or_https_with_a_port() {
        let c = ApiClient::new("http://127.0.0.1:8080", "t".into(), None).unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.tls.is_none()),
            ("127.0.0.1", 8080, true)
        );
        let c = ApiClient::new("https://[::1]:8443/", "t".into(), None).unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.tls.is_some()),
            ("::1", 8443, true)
        );
        for bad in [
            "127.0.0.1:8080",
            "ftp://h:1",
            "http://h",
            "http://:80",
            "http://h:x",
        ] {
            assert!(
                matches!(
                    ApiClient::new(bad, "t".into(), None),
                    Err(ClientError::Url(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_token_comes_from_the_flag_the_environment_or_a_file_in_that_order() {
        assert_eq!(token(Some("a"), Some("b".into()), None).unwrap(), "a");
        assert_eq!(token(None, Some(" b\n".into()), None).unwrap(), "b");
        assert!(matches!(token(None, None, None), Err(ClientError::NoToken)));
        let file = std::env::temp_dir().join(format!("kudurru-token-{}", std::process::id()));
        std::fs::write(&file, "\nkdr_x_y\n").unwrap();
        assert_eq!(token(None, None, Some(&file)).unwrap(), "kdr_x_y");
        std::fs::remove_file(&file).unwrap();
    }
}
