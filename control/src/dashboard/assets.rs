//! The dashboard's files, embedded at compile time (`build.rs` lists every file under
//! `control/ui/`), served on the API listener: `GET /` is `index.html`, `GET /ui/<path>` the
//! file at `<path>`. Each file's ETag is a hash of its content; text files are gzipped once,
//! the first time the assets are used, and served so to clients that accept gzip.

use std::io::Write as _;
use std::sync::LazyLock;

use bytes::Bytes;

use crate::http::{HttpError, Response};

/// Every embedded file: (path under `ui/`, content), sorted by path.
static FILES: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));

/// The assets, hashed and compressed on first use.
static ASSETS: LazyLock<Assets> = LazyLock::new(|| Assets::new(FILES));

/// `Cache-Control` of `index.html`: always revalidated, so a new binary's pages show at once.
const INDEX_CACHE: &str = "no-cache";
/// `Cache-Control` of the other files (revalidated with the ETag after five minutes).
const ASSET_CACHE: &str = "max-age=300";

/// One file, ready to serve.
#[derive(Debug)]
struct Asset {
    path: &'static str,
    content_type: &'static str,
    cache_control: &'static str,
    /// The content as embedded.
    identity: Bytes,
    /// `"<hash>"`.
    etag: String,
    /// The gzipped content and its ETag, for text smaller gzipped.
    gzip: Option<(Bytes, String)>,
}

/// The embedded dashboard.
#[derive(Debug)]
pub struct Assets {
    files: Vec<Asset>,
}

/// The content type of a file, by its extension; `None` for a file not served.
pub fn content_type(path: &str) -> Option<&'static str> {
    let extension = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match extension.as_str() {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" => "application/json",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => return None,
    })
}

fn is_text(content_type: &str) -> bool {
    content_type.starts_with("text/")
        || content_type == "image/svg+xml"
        || content_type == "application/json"
}

fn gzip(content: &[u8]) -> Option<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(content).ok()?;
    encoder.finish().ok()
}

fn etag_of(content: &[u8]) -> String {
    let hash = crate::files::sha256(content);
    let hex: String = hash.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// Whether an `If-None-Match` header names `etag` (or is `*`); weak tags compare as strong
/// ones, as RFC 9110 §13.1.2 has a GET compare them.
pub fn none_match(header: &str, etag: &str) -> bool {
    header
        .split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

/// Whether an `Accept-Encoding` header accepts gzip (a `q=0` refuses it).
pub fn accepts_gzip(header: &str) -> bool {
    header.split(',').any(|item| {
        let mut parts = item.split(';').map(str::trim);
        let coding = parts.next().unwrap_or("");
        if !coding.eq_ignore_ascii_case("gzip") && coding != "*" {
            return false;
        }
        let refused = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        !refused
    })
}

impl Assets {
    fn new(files: &'static [(&'static str, &'static [u8])]) -> Self {
        let files = files
            .iter()
            .filter_map(|&(path, content)| {
                let content_type = content_type(path)?;
                let etag = etag_of(content);
                let gzip = is_text(content_type)
                    .then(|| gzip(content))
                    .flatten()
                    .filter(|packed| packed.len() < content.len())
                    .map(|packed| {
                        let tag = format!("{}-gz\"", etag.trim_end_matches('"'));
                        (Bytes::from(packed), tag)
                    });
                Some(Asset {
                    path,
                    content_type,
                    cache_control: if path == "index.html" {
                        INDEX_CACHE
                    } else {
                        ASSET_CACHE
                    },
                    identity: Bytes::from_static(content),
                    etag,
                    gzip,
                })
            })
            .collect();
        Self { files }
    }

    /// The embedded assets.
    pub fn embedded() -> &'static Self {
        &ASSETS
    }

    /// The paths served (under `/ui/`), sorted.
    pub fn paths(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.files.iter().map(|a| a.path)
    }

    fn find(&self, path: &str) -> Option<&Asset> {
        self.files
            .binary_search_by(|a| a.path.cmp(path))
            .ok()
            .and_then(|i| self.files.get(i))
    }

    /// The answer to a request for `path` (outside `/api/`): `None` when no asset is there
    /// (the caller answers 404), else the file, a 304 or a 405.
    pub fn serve(
        &self,
        method: &str,
        path: &str,
        if_none_match: Option<&str>,
        accept_encoding: Option<&str>,
    ) -> Option<Response> {
        let name = if path == "/" {
            "index.html"
        } else {
            path.strip_prefix("/ui/")?
        };
        let asset = self.find(name)?;
        if method != "GET" && method != "HEAD" {
            let mut e = HttpError::new(
                405,
                "method_not_allowed",
                format!("{method} is not allowed on {path}"),
            );
            e.allow = Some("GET, HEAD".into());
            return Some(e.into_response());
        }
        let gzipped = asset
            .gzip
            .as_ref()
            .filter(|_| accept_encoding.is_some_and(accepts_gzip));
        let (body, etag) = match gzipped {
            Some((body, etag)) => (body.clone(), etag.as_str()),
            None => (asset.identity.clone(), asset.etag.as_str()),
        };
        let not_modified = if_none_match.is_some_and(|h| {
            none_match(h, &asset.etag)
                || asset
                    .gzip
                    .as_ref()
                    .is_some_and(|(_, tag)| none_match(h, tag))
        });
        let mut response = if not_modified {
            crate::http::respond(304, asset.content_type, Bytes::new())
        } else if method == "HEAD" {
            let mut r = crate::http::respond(200, asset.content_type, Bytes::new());
            r.headers_mut().insert(
                http::header::CONTENT_LENGTH,
                http::HeaderValue::from(body.len()),
            );
            r
        } else {
            crate::http::respond(200, asset.content_type, body)
        };
        let headers = response.headers_mut();
        if not_modified {
            headers.remove(http::header::CONTENT_TYPE);
        }
        if let Ok(value) = http::HeaderValue::from_str(etag) {
            headers.insert(http::header::ETAG, value);
        }
        headers.insert(
            http::header::CACHE_CONTROL,
            http::HeaderValue::from_static(asset.cache_control),
        );
        if asset.gzip.is_some() {
            headers.insert(
                http::header::VARY,
                http::HeaderValue::from_static("Accept-Encoding"),
            );
        }
        if gzipped.is_some() && !not_modified {
            headers.insert(
                http::header::CONTENT_ENCODING,
                http::HeaderValue::from_static("gzip"),
            );
        }
        Some(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static SAMPLE: &[(&str, &[u8])] = &[
        (
            "app.js",
            b"console.log('kudurru kudurru kudurru kudurru kudurru kudurru');\n",
        ),
        (
            "index.html",
            b"<!doctype html><title>kudurru</title><p>kudurru kudurru kudurru kudurru kudurru</p>",
        ),
        ("logo.png", b"\x89PNG\r\n\x1a\n"),
        ("notes.exe", b"MZ"),
    ];

    #[test]
    fn index_and_ui_paths_are_served_with_their_types() {
        let assets = Assets::new(SAMPLE);
        assert_eq!(
            assets.paths().collect::<Vec<_>>(),
            ["app.js", "index.html", "logo.png"]
        );
        let r = assets.serve("GET", "/", None, None).unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
        assert_eq!(r.headers()["cache-control"], "no-cache");
        let r = assets.serve("GET", "/ui/app.js", None, None).unwrap();
        assert_eq!(
            r.headers()["content-type"],
            "text/javascript; charset=utf-8"
        );
        assert_eq!(r.headers()["cache-control"], "max-age=300");
        assert!(assets.serve("GET", "/ui/notes.exe", None, None).is_none());
        assert!(
            assets
                .serve("GET", "/ui/../Cargo.toml", None, None)
                .is_none()
        );
        assert!(assets.serve("GET", "/index.html", None, None).is_none());
        assert_eq!(assets.serve("POST", "/", None, None).unwrap().status(), 405);
    }

    #[test]
    fn rfc9110_13_1_2_if_none_match_gives_304_and_gzip_has_its_own_tag() {
        let assets = Assets::new(SAMPLE);
        let plain = assets.serve("GET", "/ui/app.js", None, None).unwrap();
        let tag = plain.headers()["etag"].to_str().unwrap().to_owned();
        let r = assets.serve("GET", "/ui/app.js", Some(&tag), None).unwrap();
        assert_eq!(r.status(), 304);
        let r = assets
            .serve("GET", "/ui/app.js", Some(&format!("W/{tag}, \"x\"")), None)
            .unwrap();
        assert_eq!(r.status(), 304);
        let zipped = assets
            .serve("GET", "/ui/app.js", None, Some("br, gzip"))
            .unwrap();
        assert_eq!(zipped.headers()["content-encoding"], "gzip");
        assert_ne!(zipped.headers()["etag"], tag.as_str());
        let r = assets
            .serve("GET", "/ui/app.js", None, Some("gzip;q=0"))
            .unwrap();
        assert!(r.headers().get("content-encoding").is_none());
        let png = assets
            .serve("GET", "/ui/logo.png", None, Some("gzip"))
            .unwrap();
        assert!(png.headers().get("content-encoding").is_none());
    }
}
