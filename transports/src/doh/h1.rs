//! DNS over HTTPS on HTTP/1.1 (RFC 8484, RFC 9112): requests in order, one at a time, each
//! within `tcp.idleTimeout`; a pipeline drop closes the connection without a response. When the
//! core drains for shutdown, the response in progress carries `Connection: close` and an idle
//! connection is closed.

use std::time::Instant;

use futures_lite::io::{AsyncRead, AsyncWrite};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use kudurru_core::doh::{self, Request, RequestError, Status};

use super::endpoint::{Endpoint, LINGER_TIME, Reply, date};
use crate::deadline::until;
use crate::metrics::{CoreMetrics, Transport};

/// Serves one HTTP/1.1 connection: requests in order, one at a time.
pub(super) async fn serve<S>(endpoint: &Endpoint, mut stream: S)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buffer: Vec<u8> = Vec::with_capacity(4096);
    loop {
        let idle = endpoint.worker.context().settings().tcp_idle_timeout;
        let deadline = Instant::now() + idle;
        // The head, read within the idle timeout.
        let head = loop {
            match doh::parse_http1_head(&buffer, &endpoint.path) {
                Ok(Some(head)) => break head,
                Ok(None) => {}
                Err(e) => {
                    let status = Status::from(e);
                    endpoint.rejected(status);
                    if respond_http1(
                        &mut stream,
                        deadline,
                        error_response(status, false, endpoint.alt_svc.as_deref()),
                    )
                    .await
                    {
                        linger(&mut stream).await;
                    }
                    return;
                }
            }
            let buffer_empty = buffer.is_empty();
            // Between requests, a drain for shutdown closes the connection.
            let read = futures_lite::future::or(
                async { Some(read_more(&mut stream, &mut buffer, deadline).await) },
                async {
                    if !buffer_empty {
                        std::future::pending::<()>().await;
                    }
                    endpoint.admission().drained().await;
                    None
                },
            )
            .await;
            let Some(read) = read else {
                linger(&mut stream).await;
                return;
            };
            if let Err(ended) = read {
                if ended == Ended::TimedOut {
                    CoreMetrics::bump(&endpoint.worker.context().metrics.tcp_timeouts);
                }
                return;
            }
        };
        endpoint.worker.context().metrics.query(Transport::Doh);
        // A POST without a length or chunking has a body whose end we cannot know; a chunked
        // body is read (and its end known) only for a POST.
        let post = matches!(head.request, Ok(Request::Post));
        let framed = if post {
            head.content_length.is_some() || head.chunked
        } else {
            !head.chunked
        };
        let mut consumed = head.len;
        let reply = match head.request {
            Err(e) => Reply::Error(Status::from(e)),
            Ok(Request::Get(message)) => endpoint.resolve(&message, head.client_id).await,
            Ok(Request::Post) if head.chunked => {
                let body_deadline = Instant::now() + idle;
                loop {
                    match doh::chunked_body(&buffer[head.len..]) {
                        Ok(Some((message, len))) => {
                            consumed += len;
                            break endpoint.resolve(&message, head.client_id).await;
                        }
                        Ok(None) => {}
                        Err(e) => break Reply::Error(e.into()),
                    }
                    if read_more(&mut stream, &mut buffer, body_deadline)
                        .await
                        .is_err()
                    {
                        break Reply::Error(Status::TIMEOUT);
                    }
                }
            }
            Ok(Request::Post) => match head.content_length {
                None => Reply::Error(Status::LENGTH_REQUIRED),
                Some(len) if doh::check_length(len).is_err() => {
                    Reply::Error(RequestError::TooLarge.into())
                }
                Some(len) => {
                    let body_deadline = Instant::now() + idle;
                    let mut complete = true;
                    while buffer.len() < head.len + len {
                        if read_more(&mut stream, &mut buffer, body_deadline)
                            .await
                            .is_err()
                        {
                            complete = false;
                            break;
                        }
                    }
                    if complete {
                        consumed += len;
                        endpoint
                            .resolve(&buffer[head.len..head.len + len], head.client_id)
                            .await
                    } else {
                        Reply::Error(Status::TIMEOUT)
                    }
                }
            },
        };
        // Another request can follow only once this one's body was read to its end: unread
        // bytes cannot be skipped safely.
        let body_read = if head.chunked {
            consumed > head.len
        } else {
            consumed == head.len + head.content_length.unwrap_or(0)
        };
        // The response in progress when the core drains for shutdown is the last.
        let keep_alive =
            head.keep_alive && framed && body_read && !endpoint.admission().is_draining();
        let response = match reply {
            Reply::Answer(out) => answer_response(&out, keep_alive, endpoint.alt_svc.as_deref()),
            Reply::Error(status) => {
                endpoint.rejected(status);
                error_response(status, keep_alive, endpoint.alt_svc.as_deref())
            }
            // Drop: close without a response.
            Reply::Abort => return,
        };
        if !respond_http1(&mut stream, Instant::now() + idle, response).await {
            return;
        }
        if !keep_alive {
            linger(&mut stream).await;
            return;
        }
        buffer.drain(..consumed.min(buffer.len()));
    }
}

/// Most bytes read and discarded after the last response on a closing connection: enough for
/// a client that sends a body of several megabytes without waiting for `100 Continue` to see
/// its early 413 (stopping at 128 KiB reset such a client under load before it read the
/// response); [`LINGER_TIME`] bounds the wait whatever the amount.
const LINGER_BYTES: usize = 16 * 1024 * 1024;

/// Closes our side (TLS close_notify), then reads and discards what the client still sends, for
/// a bounded time and amount: closing with unread bytes makes the kernel send a reset, which
/// can destroy the response before the client reads it (a rejected body in flight).
async fn linger<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) {
    let deadline = Instant::now() + LINGER_TIME;
    if until(deadline, stream.close()).await.is_none() {
        return;
    }
    let (mut sink, mut discarded) = (Vec::new(), 0);
    while discarded < LINGER_BYTES && read_more(stream, &mut sink, deadline).await.is_ok() {
        discarded += sink.len();
        sink.clear();
    }
}

/// Why a read got no more bytes.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// EOF or an error.
    Closed,
    /// The deadline passed.
    TimedOut,
}

/// Reads more bytes into `buffer` before `deadline`.
async fn read_more<S: AsyncRead + Unpin>(
    stream: &mut S,
    buffer: &mut Vec<u8>,
    deadline: Instant,
) -> Result<(), Ended> {
    let mut chunk = [0u8; 4096];
    match until(deadline, stream.read(&mut chunk)).await {
        Some(Ok(0)) | Some(Err(_)) => Err(Ended::Closed),
        None => Err(Ended::TimedOut),
        Some(Ok(n)) => {
            buffer.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

/// The `alt-svc` header line of an HTTP/1.1 response, if any.
fn alt_svc_line(alt_svc: Option<&str>) -> String {
    alt_svc.map_or_else(String::new, |value| format!("alt-svc: {value}\r\n"))
}

fn answer_response(out: &[u8], keep_alive: bool, alt_svc: Option<&str>) -> Vec<u8> {
    let mut response = format!(
        "HTTP/1.1 200 OK\r\ndate: {}\r\ncontent-type: {}\r\ncontent-length: {}\r\ncache-control: max-age={}\r\n{}{}\r\n",
        date(),
        doh::MEDIA_TYPE,
        out.len(),
        doh::max_age(out),
        alt_svc_line(alt_svc),
        if keep_alive { "" } else { "connection: close\r\n" },
    )
    .into_bytes();
    response.extend_from_slice(out);
    response
}

fn error_response(status: Status, keep_alive: bool, alt_svc: Option<&str>) -> Vec<u8> {
    let body = status.body();
    let mut response = format!(
        "HTTP/1.1 {} {}\r\ndate: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}{}{}\r\n",
        status.code,
        status.phrase(),
        date(),
        body.len(),
        alt_svc_line(alt_svc),
        if status.code == 405 {
            "allow: GET, POST\r\n"
        } else {
            ""
        },
        if keep_alive {
            ""
        } else {
            "connection: close\r\n"
        },
    )
    .into_bytes();
    response.extend_from_slice(&body);
    response
}

/// Writes and flushes one response before `deadline`; `false` when that failed.
async fn respond_http1<S: AsyncWrite + Unpin>(
    stream: &mut S,
    deadline: Instant,
    response: Vec<u8>,
) -> bool {
    let write = async {
        stream.write_all(&response).await?;
        stream.flush().await
    };
    matches!(until(deadline, write).await, Some(Ok(())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_responses_carry_their_status_and_a_json_body() {
        let response =
            String::from_utf8(error_response(RequestError::Method.into(), true, None)).unwrap();
        assert!(
            response.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{response}"
        );
        assert!(response.contains("allow: GET, POST\r\n"));
        assert!(!response.contains("connection: close"));
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["status"], 405);
        assert_eq!(json["error"], "only GET and POST are allowed");
    }
}
