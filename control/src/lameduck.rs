//! `kudurru lameduck`: tells a running server to enter (or leave) lameduck through its ops
//! listener, then waits, so a pre-stop hook keeps the node draining until load balancers have
//! taken it out of rotation.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use kudurru_core::upstream::parse_host_port;

use crate::cli::LameduckArgs;

/// Why `kudurru lameduck` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LameduckError {
    /// `--ops-address` is not an address.
    #[error("--ops-address `{0}`: expected IP:PORT")]
    Address(String),
    /// The ops listener could not be reached, or did not answer HTTP.
    #[error("cannot reach the ops listener at {address}: {source}")]
    Unreachable {
        /// The address tried.
        address: std::net::SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The server refused (a non-loopback peer gets 403).
    #[error("{method} /lameduck answered {status}: {body}")]
    Refused {
        /// `POST` or `DELETE`.
        method: &'static str,
        /// The status.
        status: u16,
        /// The body it sent.
        body: String,
    },
}

/// Sends the request, waits `args.duration` after entering, and returns the server's state text.
pub fn run(args: &LameduckArgs) -> Result<String, LameduckError> {
    let address = parse_host_port(&args.ops_address, 8081)
        .ok_or_else(|| LameduckError::Address(args.ops_address.clone()))?;
    let method = if args.cancel { "DELETE" } else { "POST" };
    let (status, body) = request(address, method, "/lameduck")
        .map_err(|source| LameduckError::Unreachable { address, source })?;
    if status != 200 {
        return Err(LameduckError::Refused {
            method,
            status,
            body: body.trim().to_owned(),
        });
    }
    if !args.cancel && !args.duration.is_zero() {
        eprintln!(
            "kudurru lameduck: in lameduck; waiting {}",
            humantime::format_duration(args.duration)
        );
        std::thread::sleep(args.duration);
    }
    Ok(body.trim().to_owned())
}

/// One HTTP/1.1 request with `Connection: close`: the status code and body.
fn request(addr: std::net::SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP response");
    let (head, body) = response.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    Ok((status, body.to_owned()))
}
